"""``recover``: mark a run left unfinished interrupted; list what is uncertain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import events as ev
from journal.cli.commands.leases import read_lease_view, wait_for_lease
from journal.cli.commands.threads import existing_head
from journal.cli.progress import NO_PROGRESS
from journal.cli.reports import RecoverReport, UncertainCall
from projections.audit import RunLedger
from projections.base import fold

if TYPE_CHECKING:
    from journal.cli.options import RecoverOptions
    from journal.cli.progress import Progress
    from journal.codec import Record
    from journal.engine import Journal
    from projections.audit import RunEntry

__all__ = ["recover_thread"]


def _ledger(records: list[Record]) -> dict[str, RunEntry]:
    ledger: dict[str, RunEntry] = fold(RunLedger(), {}, records)
    return RunLedger.finish(ledger)


async def recover_thread(
    journal: Journal, options: RecoverOptions, progress: Progress = NO_PROGRESS
) -> RecoverReport:
    """``recover``: mark an unfinished run interrupted, then read the run ledger.

    Everything is read first, without the lease: a thread whose runs all
    finished needs no recovery, and nothing is written then. Otherwise the lease
    is taken (waiting up to ``options.wait`` seconds for a live holder, with
    progress) and released; acquiring commits the fence record, which marks the
    unfinished run interrupted (by recovery). A read that fails fails before
    anything is written. No tool is ever re-run.

    Raises:
        CommandError: The thread does not exist.
        LeaseHeldError: Another holder's lease is still live after the wait.
    """
    key = options.key
    head = await existing_head(journal, key, options.root)
    lease = await read_lease_view(journal, key)
    records = [r async for r in journal.records(key, 1, head + 1)]
    # Only the open run is read: the messages need not be loaded.
    state = await journal.load(key, at_version=head, messages=False)
    fence = 0
    epoch = lease.epoch if lease is not None else 0
    interrupted: list[str] = []
    recovered = state.active_run_id is not None
    if recovered:
        await wait_for_lease(journal, key, options.wait, progress)
        async with journal.writer(key, options.holder, wait=options.wait) as writer:
            fence, epoch, base = writer.version, writer.epoch, writer.base_version
        records += [r async for r in journal.records(key, base + 1, fence + 1)]
        interrupted = [
            e.run_id
            for e in records[-1].events
            if isinstance(e, ev.RunInterrupted) and e.by == "recovery"
        ]
        head = base
    ledger = _ledger(records)
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
    return RecoverReport(
        key,
        head,
        fence,
        epoch,
        interrupted,
        runs,
        uncertain,
        recovered=recovered,
        lease=lease,
    )
