"""``recover``: take a thread's lease and list what a crash left uncertain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import events as ev
from journal.cli.commands.threads import existing_head
from journal.cli.reports import RecoverReport, UncertainCall
from projections.audit import RunLedger
from projections.base import fold

if TYPE_CHECKING:
    from journal.cli.options import RecoverOptions
    from journal.engine import Journal
    from projections.audit import RunEntry

__all__ = ["recover_thread"]


async def recover_thread(journal: Journal, options: RecoverOptions) -> RecoverReport:
    """``recover``: acquire and release the lease, then read the run ledger.

    Acquiring commits the fence record, which marks an unfinished run
    interrupted (by recovery); no tool is ever re-run.

    Raises:
        CommandError: The thread does not exist.
    """
    key = options.key
    await existing_head(journal, key, options.root)
    async with journal.writer(key, options.holder, wait=options.wait) as writer:
        fence, epoch, base = writer.version, writer.epoch, writer.base_version
    records = [r async for r in journal.records(key, 1, fence + 1)]
    ledger: dict[str, RunEntry] = fold(RunLedger(), {}, records)
    RunLedger.finish(ledger)
    interrupted = [
        e.run_id
        for e in records[-1].events
        if isinstance(e, ev.RunInterrupted) and e.by == "recovery"
    ]
    uncertain = [
        UncertainCall(entry.run_id, call)
        for entry in ledger.values()
        for call in entry.tool_calls
        if call.outcome in ("unknown", "pending")
    ]
    # The runs worth an operator's attention: the one this recovery interrupted,
    # any still open, and those with calls whose outcome is unknown.
    flagged = set(interrupted) | {u.run_id for u in uncertain}
    runs = [
        r
        for r in ledger.values()
        if r.run_id in flagged or r.status in ("running", "unfinished")
    ]
    return RecoverReport(key, base, fence, epoch, interrupted, runs, uncertain)
