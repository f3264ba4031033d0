"""``log``: a thread's records and events, filtered by version, run and event type."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from journal import events as ev
from journal.cli.commands.threads import existing_head
from journal.cli.describe import event_type_name
from journal.cli.errors import usage_error
from journal.cli.reports import LogReport

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from journal.cli.options import LogOptions
    from journal.codec import Record
    from journal.engine import Journal

__all__ = ["RunFilter", "follow_log", "show_log"]


def _call_ids(event: object) -> set[str]:
    # The tool calls an event is about: its own call id, or a result block's.
    call_id = getattr(event, "call_id", None)
    if isinstance(call_id, str):
        return {call_id}
    if isinstance(event, ev.MessageAppended) and not isinstance(
        event.message.content, str
    ):
        return {
            b.tool_use_id
            for b in event.message.content
            if isinstance(b, ev.ToolResultBlock)
        }
    return set()


class RunFilter:
    """Which events belong to one run, fed the records in order.

    A record committed by the run (its ``run_id``) belongs whole. From other
    records, the events naming the run (``RunInterrupted`` in a recovery's fence)
    and those about its tool calls (a later ``ToolCallReconciled`` and its
    result message) belong too, so the run's story is complete.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.calls: set[str] = set()

    def events(self, record: Record) -> list[object]:
        """The events of ``record`` that belong to the run (often none)."""
        own = record.run_id == self.run_id
        kept: list[object] = []
        for event in record.events:
            if isinstance(event, ev.ToolCallRequested) and (
                own or event.run_id == self.run_id
            ):
                self.calls.add(event.call_id)
            if (
                own
                or getattr(event, "run_id", None) == self.run_id
                or _call_ids(event) & self.calls
            ):
                kept.append(event)
        return kept


def _filtered(
    records: Iterable[Record], run: RunFilter | None, types: tuple[str, ...]
) -> list[Record]:
    out: list[Record] = []
    for record in records:
        events = run.events(record) if run is not None else list(record.events)
        if types:
            events = [e for e in events if event_type_name(e) in types]
        if not (run is not None or types):
            out.append(record)
        elif events:
            out.append(msgspec.structs.replace(record, events=events))
    return out


def _check_types(types: tuple[str, ...]) -> None:
    from journal.codec import is_registered

    unknown = [t for t in types if not is_registered(t)]
    if unknown:
        raise usage_error(
            f"--type {', '.join(unknown)}: not an event type this reader knows "
            "(names as `log` prints them, e.g. ToolCallRequested)"
        )


async def show_log(
    journal: Journal, options: LogOptions, run: RunFilter | None = None
) -> LogReport:
    """``log``: the records from ``start`` (1) to ``stop`` (head), or the last ``tail``.

    With ``run_id`` or ``types``, only the matching records, each with only its
    matching events (``tail`` then counts matching records).

    Raises:
        CommandError: The thread does not exist, an event type is unknown, or
            both bounds are given and ``start`` is after ``stop`` (exit 2).
    """
    key = options.key
    if run is None and options.run_id is not None:
        run = RunFilter(options.run_id)
    _check_types(options.types)
    head = await existing_head(journal, key, options.root)
    start = options.start if options.start is not None else 1
    stop = options.stop if options.stop is not None else head
    if start > stop and options.start is not None and options.stop is not None:
        raise usage_error(f"--from {start} is after --to {stop}")
    if run is None and not options.types:
        if options.tail is not None:
            start = max(start, stop - options.tail + 1)
        records = [r async for r in journal.records(key, max(start, 1), stop + 1)]
    else:
        # A run's calls are learned from its requests, so read from the start.
        read = [r async for r in journal.records(key, 1, stop + 1)]
        records = [r for r in _filtered(read, run, options.types) if r.version >= start]
        if options.tail is not None:
            records = records[len(records) - options.tail :] if options.tail else []
    return LogReport(key, head, records, options.run_id, options.types)


async def follow_log(
    journal: Journal,
    options: LogOptions,
    emit: Callable[[LogReport], object],
) -> int:
    """``log --follow``: emit the log, then each batch of new records as it lands.

    Polls the head every ``options.poll`` seconds until cancelled (Ctrl-C), or
    until ``options.limit`` records were emitted.

    Returns:
        The number of records emitted.

    Raises:
        CommandError: As :func:`show_log`.
    """
    # One filter for the whole session: it learns the run's calls as it reads.
    run = RunFilter(options.run_id) if options.run_id is not None else None
    first = await show_log(journal, options, run)
    limit = options.limit
    records = first.records if limit is None else first.records[:limit]
    emit(LogReport(first.key, first.head, records, first.run_id, first.types))
    shown, seen = len(records), first.head
    import asyncio  # following waits on the loop; a one-shot read runs without one

    while limit is None or shown < limit:
        await asyncio.sleep(options.poll)
        head = await journal.head(options.key)
        if head <= seen:
            continue
        new = [r async for r in journal.records(options.key, seen + 1, head + 1)]
        seen = head
        batch = _filtered(new, run, options.types)
        if limit is not None:
            batch = batch[: limit - shown]
        if batch:
            emit(
                LogReport(options.key, head, batch, options.run_id, options.types, True)
            )
            shown += len(batch)
    return shown
