"""Explicit run ids: each must be new to its thread's log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import events as ev
from journal.errors import DuplicateRunError

if TYPE_CHECKING:
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = ["RunIds"]

_KEEP = 1024
"""How many threads' run ids are cached (the oldest is dropped first)."""


class RunIds:
    """The run ids seen in threads' logs, scanned incrementally and cached."""

    def __init__(self) -> None:
        self._seen: dict[ThreadKey, tuple[int, set[str]]] = {}

    async def check(
        self, journal: Journal, key: ThreadKey, run_id: str, head: int
    ) -> None:
        """Raise DuplicateRunError if ``run_id`` is in the thread's log.

        Args:
            journal: The journal holding the thread.
            key: The thread.
            run_id: The explicit run id.
            head: The thread's head version (records after the cached scan are read).

        Raises:
            DuplicateRunError: A record or a ``RunStarted`` carries ``run_id``.
        """
        scanned, seen = self._seen.get(key, (0, set()))
        if scanned < head:
            async for record in journal.records(key, scanned + 1, head + 1):
                if record.run_id:
                    seen.add(record.run_id)
                seen.update(
                    e.run_id for e in record.events if isinstance(e, ev.RunStarted)
                )
            self._seen[key] = (head, seen)
            if len(self._seen) > _KEEP:
                self._seen.pop(next(iter(self._seen)))
        if run_id in seen:
            raise DuplicateRunError(
                f"run id {run_id!r} is already in the log of {key} (head {head}); "
                "give every execution a new run id"
            )
