"""The projection protocol: a pure fold of a thread's events into a read model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterable

    from journal.codec import Record
    from journal.keys import ThreadKey

__all__ = ["Projection", "fold"]

S = TypeVar("S")


class Projection(Protocol[S]):
    """A read model folded from a thread's events.

    Implementations must be pure: ``apply`` depends only on its arguments, so a
    checkpoint plus the tail replays to exactly the state a full replay gives. ``apply``
    may mutate and return ``state`` (the fold owns it) or return a new value.
    """

    name: str

    def initial(self, key: ThreadKey) -> S:
        """The state of the empty thread (version 0)."""
        ...

    def apply(self, state: S, record: Record, event: object) -> S:
        """Fold one event of ``record`` into ``state``."""
        ...


def fold(projection: Projection[S], state: S, records: Iterable[Record]) -> S:
    """Apply every event of ``records`` to ``state``, in order."""
    apply = projection.apply
    for record in records:
        for event in record.events:
            state = apply(state, record, event)
    return state
