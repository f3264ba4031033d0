"""Slot addressing and the byte-level vocabulary every snapshot-mode backend shares.

A *slot* is addressed by ``(user_id, session_id, entry)``; it holds one state and its
*version*. Backends never see a state object: they store the bytes a
:data:`StateEncoder` gives them and hand back :class:`SlotBytes`, and
:mod:`stores.state.adapter` turns those into ``AgentState`` and back.

Every store keys the anonymous user (``user_id=None``) apart from every named user,
and encodes ids (:func:`journal.keys.encode_segment`) so that no two
``(user, session, entry)`` triples share a slot. :class:`SlotKey` does that planning,
with no I/O, for every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from journal.keys import ANONYMOUS_SEGMENT, check_id, encode_segment

__all__ = [
    "SlotBytes",
    "SlotKey",
    "StateEncoder",
    "check_expected_version",
    "check_id",
    "user_segment",
    "utc_now",
]

StateEncoder = Callable[[int], bytes]
"""The state being saved, as JSON bytes whose ``version`` field is the argument.

A backend calls it with the version the write will create once it knows it (it may
call it again on a retry with another version); a backend that learns the version
only inside one atomic server-side step stamps its best prediction instead, because a
load always takes the version from the slot, not from the bytes.
"""


def user_segment(user_id: str | None) -> str:
    """The encoded segment of a user: ``~`` for the anonymous user.

    Raises:
        InvalidKeyError: ``user_id`` is not acceptable.
    """
    if user_id is None:
        return ANONYMOUS_SEGMENT
    return encode_segment(check_id(user_id, "user_id"))


@dataclass(frozen=True, slots=True)
class SlotKey:
    """A validated slot address and its collision-free encoded segments.

    Each segment uses only ``[A-Za-z0-9_%-]`` (and ``~`` for the anonymous user), so
    joining segments with any other separator (``/``, ``:``) is unambiguous.

    Attributes:
        user_id: The user, or None for the anonymous user.
        session_id: The session.
        entry: The slot within the session.
        user: The user's segment (``~`` for the anonymous user).
        session: The session's segment.
        name: The entry's segment.
    """

    user_id: str | None
    session_id: str
    entry: str
    user: str
    session: str
    name: str

    @classmethod
    def of(cls, user_id: str | None, session_id: str, entry: str) -> SlotKey:
        """Validate the ids and encode them.

        Raises:
            InvalidKeyError: An id is empty, longer than 256 characters, not a string,
                or contains a control character.
        """
        user = user_segment(user_id)
        session = encode_segment(check_id(session_id, "session_id"))
        name = encode_segment(check_id(entry, "entry"))
        return cls(user_id, session_id, entry, user, session, name)

    @property
    def label(self) -> str:
        """A readable name of the slot for error messages."""
        user = "~" if self.user_id is None else repr(self.user_id)
        return (
            f"state slot user={user} session={self.session_id!r} entry={self.entry!r}"
        )


@dataclass(frozen=True, slots=True)
class SlotBytes:
    """What a backend read from a slot.

    Attributes:
        data: The state's JSON bytes, as a :data:`StateEncoder` produced them (a
            backend may have re-indented them inside its own framing).
        version: The slot's version, which wins over the one inside ``data``.
        origin: Where the bytes came from when that helps a reader of an error
            message (e.g. a file path); None otherwise.
    """

    data: bytes
    version: int
    origin: str | None = None


def check_expected_version(expected_version: int | None) -> int | None:
    """Validate an ``expected_version`` argument.

    Raises:
        TypeError: Not an int (or None); bools are refused.
        ValueError: Negative.
    """
    if expected_version is None:
        return None
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise TypeError(
            "expected_version must be an int or None, "
            f"not {type(expected_version).__name__}"
        )
    if expected_version < 0:
        raise ValueError(f"expected_version must be >= 0, not {expected_version}")
    return expected_version


def utc_now() -> datetime:
    """The current time, timezone-aware UTC (what ``updated_at`` records)."""
    return datetime.now(UTC)
