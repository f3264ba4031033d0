"""``log``: a thread's records and events in a range of versions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.commands.threads import existing_head
from journal.cli.errors import usage_error
from journal.cli.reports import LogReport

if TYPE_CHECKING:
    from journal.cli.options import LogOptions
    from journal.engine import Journal

__all__ = ["show_log"]


async def show_log(journal: Journal, options: LogOptions) -> LogReport:
    """``log``: the records from ``start`` (1) to ``stop`` (head), or the last ``tail``.

    Raises:
        CommandError: The thread does not exist, or both bounds are given and
            ``start`` is after ``stop`` (exit 2).
    """
    key = options.key
    head = await existing_head(journal, key, options.root)
    start = options.start if options.start is not None else 1
    stop = options.stop if options.stop is not None else head
    if options.tail is not None:
        start = max(start, stop - options.tail + 1)
    if start > stop and options.start is not None and options.stop is not None:
        raise usage_error(f"--from {start} is after --to {stop}")
    records = [r async for r in journal.records(key, max(start, 1), stop + 1)]
    return LogReport(key, head, records)
