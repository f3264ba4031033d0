"""``export``: every record of a thread, handed one by one to a sink."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from journal.cli.commands.threads import existing_head
from journal.cli.reports import ExportReport

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from journal.cli.options import ExportOptions
    from journal.codec import Record
    from journal.engine import Journal

__all__ = ["RecordSink", "export_records"]

RecordSink: TypeAlias = "Callable[[Record], object]"
"""Takes one record (what it returns is ignored)."""


async def export_records(
    journal: Journal,
    options: ExportOptions,
    open_sink: Callable[[], AbstractContextManager[RecordSink]],
) -> ExportReport:
    """``export``: stream the records, in order, into the sink ``open_sink`` opens.

    The sink is opened only once the thread is known to exist, and records are
    never held all at once, so a thread of any length streams.

    Raises:
        CommandError: The thread does not exist (or the sink cannot be written).
    """
    await existing_head(journal, options.key, options.root)
    count = 0
    with open_sink() as write:
        async for record in journal.records(options.key):
            write(record)
            count += 1
    return ExportReport(options.key, count, options.output)
