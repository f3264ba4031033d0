"""``ls``: the threads under the root, with their head and last activity."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.commands.threads import map_bounded, select_threads
from journal.cli.progress import NO_PROGRESS
from journal.cli.reports import LsReport, ThreadSummary
from journal.errors import JournalError

if TYPE_CHECKING:
    from journal.cli.options import LsOptions
    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = ["list_threads", "summarize_thread"]


async def summarize_thread(journal: Journal, key: ThreadKey) -> ThreadSummary:
    """The head, record count and last activity of ``key``.

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
        return ThreadSummary(key, head, count, error=str(exc))
    return ThreadSummary(key, head, count, last_activity)


async def list_threads(
    journal: Journal, options: LsOptions, progress: Progress = NO_PROGRESS
) -> LsReport:
    """``ls``: a summary of every thread matching the filter.

    Raises:
        InvalidKeyError: A filter id is not valid.
    """
    keys = await select_threads(journal, options.filter)
    threads = await map_bounded(
        keys, lambda key: summarize_thread(journal, key), progress, "reading threads"
    )
    return LsReport(options.root, threads)
