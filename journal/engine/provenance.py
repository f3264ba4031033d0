"""Which record added each message of a writer's context, for checkpoint log spans.

A checkpoint on a store that reads records in bulk names a chunk by the records that
added its messages (:class:`journal.checkpoint.LogSpan`) instead of copying them
into a blob. To do that the writer must know, for every message of its context, the
record it came from and its place among the messages that record added, and it must
be sure the span holds nothing else: every record between two of the chunk's
messages was seen to add none. :class:`Provenance` keeps exactly that, from the
records the writer replayed, read back through a span, or committed itself.

Messages are known by identity, not by id or value: a message object in the context
is the one the fold appended, so an entry can only describe that message. An entry
holds its message, which keeps the object (and its ``id()``) alive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.checkpoint import LogSpan
from journal.events import message_added

if TYPE_CHECKING:
    from collections.abc import Sequence

    from journal import codec
    from journal.events import Msg

__all__ = ["Provenance"]

_PRUNE_SLACK = 1024
"""Entries beyond twice the context's length (plus this) trigger a prune."""


class Provenance:
    """Where each message of one writer's context came from.

    Not thread-safe; used on the writer's event loop only.
    """

    def __init__(self) -> None:
        self._where: dict[int, tuple[Msg, int, int]] = {}
        self._added: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._where)

    def observe(self, version: int, messages: Sequence[Msg]) -> None:
        """Record that ``version`` added exactly ``messages`` (in order)."""
        where = self._where
        for ordinal, message in enumerate(messages):
            where[id(message)] = (message, version, ordinal)
        self._added[version] = len(messages)

    def observe_fold(
        self,
        record: codec.Record,
        before: list[Msg],
        length: int,
        after: list[Msg],
    ) -> None:
        """Record what folding ``record`` appended, when it only appended.

        ``before`` and ``length`` are the context list and its length before the
        fold, ``after`` the context list after it. A record that replaced the
        context (a compaction, a clear, a state replacement) is not observed, so no
        span reaches across it.
        """
        if after is not before:
            return
        added = after[length:]
        expected = 0
        for event in record.events:
            if message_added(event) is not None:
                expected += 1
        if len(added) == expected:
            self.observe(record.version, added)

    def span(
        self, messages: Sequence[Msg], digest: str, min_density: float = 0.0
    ) -> LogSpan | None:
        """The span of records that added exactly ``messages``, if this knows one.

        None too when its records add fewer than ``min_density`` messages each on
        average (a span costs a decode per record to read back).
        """
        if not messages:
            return None
        where, added = self._where, self._added
        entry = where.get(id(messages[0]))
        if entry is None or entry[0] is not messages[0]:
            return None
        _, first, skip = entry
        version, ordinal = first, skip
        for message in messages[1:]:
            entry = where.get(id(message))
            if entry is None or entry[0] is not message:
                return None
            _, v, o = entry
            if v == version:
                if o != ordinal + 1:
                    return None
            else:
                if o != 0 or v < version or added.get(version) != ordinal + 1:
                    return None
                # Every record in between must be known to add nothing.
                for between in range(version + 1, v):
                    if added.get(between) != 0:
                        return None
            version, ordinal = v, o
        if len(messages) < min_density * (version - first + 1):
            return None
        return LogSpan(first, skip, version, len(messages), digest)

    def forget_before(self, version: int) -> None:
        """Drop what came from records below ``version`` (retention removed them)."""
        self._where = {k: e for k, e in self._where.items() if e[1] >= version}
        self._added = {v: n for v, n in self._added.items() if v >= version}

    def prune(self, context: Sequence[Msg], after: int) -> None:
        """Drop messages no longer in ``context`` (the state at version ``after``).

        Messages of later versions are kept: the context has moved on since. Runs
        only when the entries clearly outnumber the context (after compactions), so
        that its cost stays off the common path.
        """
        if len(self._where) <= 2 * len(context) + _PRUNE_SLACK:
            return
        alive = {id(m) for m in context}
        self._where = {
            k: e for k, e in self._where.items() if k in alive or e[1] > after
        }
