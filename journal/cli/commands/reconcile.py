"""``reconcile``: an operator's verdict on each uncertain tool call, without a model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import events as ev
from journal.cli.commands.leases import wait_for_lease
from journal.cli.commands.threads import existing_head
from journal.cli.errors import CommandError, usage_error
from journal.cli.progress import NO_PROGRESS
from journal.cli.reports import ReconciledCall, ReconcileReport
from journal.runtime.uncertain import reconcile_events

if TYPE_CHECKING:
    from journal.cli.options import ReconcileOptions
    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey
    from projections.agent_state import AgentState

__all__ = ["check_verdicts", "reconcile_thread"]


def check_verdicts(key: ThreadKey, state: AgentState, given: set[str]) -> None:
    """Refuse verdicts that do not name exactly the uncertain calls of ``state``.

    Raises:
        CommandError: Some uncertain call has no verdict, or a verdict names a
            call that is not uncertain (exit 2, naming them).
    """
    pending = set(state.tool_context.pending_calls)
    if not pending:
        raise usage_error(f"{key} has no uncertain tool calls; nothing to reconcile")
    missing, unknown = sorted(pending - given), sorted(given - pending)
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing a verdict for {', '.join(missing)}")
        if unknown:
            parts.append(f"not uncertain: {', '.join(unknown)}")
        raise usage_error(
            f"reconcile names exactly the uncertain calls of {key} "
            f"({', '.join(sorted(pending))}): {'; '.join(parts)}; nothing written"
        )


async def reconcile_thread(
    journal: Journal, options: ReconcileOptions, progress: Progress = NO_PROGRESS
) -> ReconcileReport:
    """``reconcile``: commit a ``ToolCallReconciled`` for each uncertain call.

    The verdicts are checked against the thread read without the lease first, so
    a refused request writes nothing. Then the lease is taken (its fence record
    also marks a run the last writer left unfinished interrupted) and one record
    carries every verdict: a ``ToolCallReconciled`` and the tool-result message
    the model will see, per call (the runtime's own reconciliation events).

    Raises:
        CommandError: The thread does not exist, or the verdicts do not name
            exactly the uncertain calls (exit 2).
        LeaseHeldError: A live writer holds the lease after the wait.
    """
    key = options.key
    head = await existing_head(journal, key, options.root)
    given = set(options.outcomes) | set(options.errors)
    # Only the pending calls are read: the messages need not be loaded.
    state = await journal.load(key, at_version=head, messages=False)
    check_verdicts(key, state, given)
    blocks = {
        **{
            call_id: ev.ToolResultBlock(call_id, text)
            for call_id, text in options.outcomes.items()
        },
        **{
            call_id: ev.ToolResultBlock(call_id, text, is_error=True)
            for call_id, text in options.errors.items()
        },
    }
    await wait_for_lease(journal, key, options.wait, progress)
    async with journal.writer(key, options.holder, wait=options.wait) as writer:
        fence = writer.version
        try:
            events = reconcile_events(key, writer.state, blocks, options.reason)
        except ValueError as exc:  # the set changed between our read and the lease
            raise CommandError(f"{exc}; nothing but the fence written") from None
        pending = writer.state.tool_context.pending_calls
        calls = [
            ReconciledCall(
                call_id,
                pending[call_id].name,
                pending[call_id].run_id or "",
                block.output if isinstance(block.output, str) else str(block.output),
                block.is_error,
            )
            for call_id, block in blocks.items()
        ]
        record = await writer.append(events)
    return ReconcileReport(key, fence, record.version, options.reason, calls)
