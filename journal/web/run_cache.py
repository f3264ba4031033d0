"""The run trees of the threads whose timelines were shown last, kept by head.

A timeline page shows a window of a thread's records, but the status of its runs
needs every record (the run ledger is a fold of the whole log). An operator reading
a long thread clicks through its pages, runs and calls at one head: each of those
pages reads only its window once the run tree at that head is kept here. A head
that moved means a new tree. Only a few threads are kept, as each tree holds every
tool call's input and output.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from journal.web.runs import call_requests, run_tree

if TYPE_CHECKING:
    from collections.abc import Collection

    from journal.engine import Journal
    from journal.keys import ThreadKey
    from journal.web.runs import RunNode

__all__ = ["RUN_CACHE_THREADS", "RunCache", "RunsAt"]

RUN_CACHE_THREADS = 4
"""Threads a :class:`RunCache` keeps, the most recently shown."""


@dataclass(frozen=True, slots=True)
class RunsAt:
    """A thread's runs at one head.

    Attributes:
        head: The head they were read at.
        first: The first version kept (retention may have removed those before).
        roots: The runs with no parent in this thread, in the order they started.
        runs: Every run by id (calls outside a run are under ``""``).
        requests: Each tool call id's requests, ``(version, run id)``.
    """

    head: int
    first: int
    roots: list[RunNode]
    runs: dict[str, RunNode]
    requests: dict[str, list[tuple[int, str]]]


class RunCache:
    """:class:`RunsAt` of the last few threads shown, each at its head.

    Args:
        size: How many threads to keep.
    """

    def __init__(self, size: int = RUN_CACHE_THREADS) -> None:
        self._size = size
        self._known: OrderedDict[ThreadKey, RunsAt] = OrderedDict()

    async def get(
        self, journal: Journal, key: ThreadKey, head: int, own_names: Collection[str]
    ) -> RunsAt:
        """The runs of ``key`` at ``head``: kept, or read from all its records.

        Raises:
            CorruptRecordError: A record fails a check (nothing is kept).
        """
        known = self._known.get(key)
        if known is not None and known.head == head:
            self._known.move_to_end(key)
            return known
        records = [r async for r in journal.records(key, 1, head + 1)]
        roots, runs = run_tree(records, own_names)
        fresh = RunsAt(
            head,
            records[0].version if records else 1,
            roots,
            runs,
            call_requests(records),
        )
        self._known[key] = fresh
        self._known.move_to_end(key)
        while len(self._known) > self._size:
            self._known.popitem(last=False)
        return fresh
