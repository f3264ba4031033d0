"""``ls``: the threads under the root, their head, last activity and attention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.commands.leases import read_lease_view
from journal.cli.commands.root import check_root
from journal.cli.commands.threads import map_bounded, select_threads
from journal.cli.progress import NO_PROGRESS
from journal.cli.reports import LsReport, ThreadSummary
from journal.errors import JournalError

if TYPE_CHECKING:
    from journal.cli.options import LsOptions
    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = ["attention", "list_threads", "summarize_thread"]


async def attention(journal: Journal, key: ThreadKey) -> list[str]:
    """What about ``key`` needs an operator, by a cheap check (not ``verify``).

    Loads the state without its messages (newest checkpoint and tail) and reads
    the lease: a run left unfinished with no live writer, tool calls whose
    outcome is unknown, a damaged lease, a skipped checkpoint (its file missing,
    damaged or not this log's), or a record that fails to load. A checkpoint's
    message chunks are not read (on a long thread, most of a load's work):
    ``verify`` checks them.
    """
    notes: list[str] = []
    try:
        lease = await read_lease_view(journal, key)
        state, warnings = await journal.load_with_warnings(key, messages=False)
    except JournalError as exc:
        return [f"damaged: {exc}"]
    live = lease is not None and lease.live
    run = state.active_run_id
    if run is not None and not live:
        notes.append(f"unfinished run {run}")
    uncertain = [
        p.call_id
        for p in state.tool_context.pending_calls.values()
        if not (live and p.run_id == run)
    ]
    if uncertain:
        noun = "call" if len(uncertain) == 1 else "calls"
        notes.append(f"{len(uncertain)} uncertain {noun} ({', '.join(uncertain)})")
    if lease is not None and lease.damage is not None:
        notes.append("damaged lease")
    if warnings:
        notes.append(f"{len(warnings)} checkpoint skipped")
    return notes


async def summarize_thread(journal: Journal, key: ThreadKey) -> ThreadSummary:
    """The head, record count, last activity and attention notes of ``key``.

    An error reading the thread is kept in the summary rather than raised.
    """
    head = count = 0
    try:
        head = count = await journal.head(key)
        last_activity = 0.0
        if head:
            # Records are numbered with no gaps from the first one kept.
            count = head - await journal.first_version(key) + 1
            async for record in journal.records(key, head, head + 1):
                last_activity = record.committed_at
    except JournalError as exc:
        return ThreadSummary(
            key, head, count, error=str(exc), attention=[f"damaged: {exc}"]
        )
    notes = await attention(journal, key) if head else []
    return ThreadSummary(key, head, count, last_activity, attention=notes)


async def list_threads(
    journal: Journal, options: LsOptions, progress: Progress = NO_PROGRESS
) -> LsReport:
    """``ls``: a summary of every thread matching the filter.

    Raises:
        InvalidKeyError: A filter id is not valid.
        CommandError: The root is not a journal (exit 2).
    """
    await check_root(journal, options.root)
    keys = await select_threads(journal, options.filter)
    threads = await map_bounded(
        keys, lambda key: summarize_thread(journal, key), progress, "reading threads"
    )
    if options.attention:
        threads = [t for t in threads if t.attention]
    return LsReport(options.root, threads, options.attention)
