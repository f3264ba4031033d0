"""``verify``: checksums, hash chain, epochs and checkpoints of threads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.commands.threads import existing_head, map_bounded, select_threads
from journal.cli.progress import NO_PROGRESS
from journal.cli.reports import VerifyThreadsReport
from journal.engine import Finding, VerifyReport
from journal.errors import JournalError

if TYPE_CHECKING:
    from journal.cli.options import VerifyOptions
    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = ["verify_one", "verify_threads"]


async def verify_one(journal: Journal, key: ThreadKey) -> VerifyReport:
    """The engine's report on ``key``; a check that cannot finish is a problem."""
    try:
        return await journal.verify(key)
    except JournalError as exc:
        report = VerifyReport(key)
        report.problems.append(Finding(None, f"verify could not finish: {exc}"))
        return report


async def verify_threads(
    journal: Journal, options: VerifyOptions, progress: Progress = NO_PROGRESS
) -> VerifyThreadsReport:
    """``verify``: the thread the filter names, else every thread matching it.

    Raises:
        CommandError: The one thread named does not exist.
        InvalidKeyError: A filter id is not valid.
    """
    if options.filter.names_one_thread:
        key = options.filter.key()
        await existing_head(journal, key, options.root)
        keys = [key]
    else:
        keys = await select_threads(journal, options.filter)
    reports = await map_bounded(
        keys, lambda key: verify_one(journal, key), progress, "verifying threads"
    )
    return VerifyThreadsReport(options.root, reports)
