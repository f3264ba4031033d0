"""``runs`` and ``history``: the run ledger and the whole transcript of a thread."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import events as ev
from journal.cli.commands.leases import read_lease_view
from journal.cli.commands.threads import existing_head
from journal.cli.errors import CommandError
from journal.cli.reports import HistoryReport, RunsReport, RunView
from projections.audit import HistoryProjection, RunLedger
from projections.base import fold

if TYPE_CHECKING:
    from journal.cli.options import HistoryOptions, RunsOptions
    from journal.codec import Record
    from journal.engine import Journal
    from journal.keys import ThreadKey
    from projections.audit import HistoryEntry, RunEntry

__all__ = ["run_views", "show_history", "show_runs"]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def run_views(records: list[Record], *, live: bool) -> list[RunView]:
    """The runs of ``records`` (a thread from version 1), oldest first.

    Args:
        records: The thread's records, in order.
        live: Whether a writer holds the lease: its open run is then running,
            not unfinished, and its calls pending rather than uncertain.
    """
    ledger: dict[str, RunEntry] = fold(RunLedger(), {}, records)
    if not live:
        RunLedger.finish(ledger)
    started: dict[str, ev.RunStarted] = {
        e.run_id: e for r in records for e in r.events if isinstance(e, ev.RunStarted)
    }
    views = []
    for entry in ledger.values():
        event = started.get(entry.run_id)

        # The ledger's own fields win once it carries them; the event says the
        # same until then.
        def pick(
            name: str, entry: RunEntry = entry, event: object = event
        ) -> str | None:
            return _text(getattr(entry, name, None)) or _text(
                getattr(event, name, None)
            )

        views.append(
            RunView(
                entry,
                pick("turn_id"),
                pick("parent_run_id"),
                pick("parent_thread"),
            )
        )
    return sorted(views, key=lambda v: (v.entry.started_at, v.run_id))


async def _records(
    journal: Journal, key: ThreadKey, root: str
) -> tuple[int, list[Record]]:
    head = await existing_head(journal, key, root)
    return head, [r async for r in journal.records(key, 1, head + 1)]


async def show_runs(journal: Journal, options: RunsOptions) -> RunsReport:
    """``runs``: every run of the thread, its outcome and its tool calls.

    Raises:
        CommandError: The thread, or the run asked for, does not exist.
    """
    lease = await read_lease_view(journal, options.key)
    head, records = await _records(journal, options.key, options.root)
    runs = run_views(records, live=lease is not None and lease.live)
    if options.run_id is not None:
        runs = [r for r in runs if r.run_id == options.run_id]
        if not runs:
            raise CommandError(f"{options.key} has no run {options.run_id!r}")
    return RunsReport(options.key, head, runs, lease)


async def show_history(journal: Journal, options: HistoryOptions) -> HistoryReport:
    """``history``: every message ever appended, marked where it left the context.

    Raises:
        CommandError: The thread does not exist.
    """
    head, records = await _records(journal, options.key, options.root)
    entries: list[HistoryEntry] = fold(HistoryProjection(), [], records)
    return HistoryReport(options.key, head, entries)
