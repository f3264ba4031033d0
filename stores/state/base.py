"""The snapshot-mode contract: one serialized ``AgentState`` per slot.

A *slot* is addressed by ``(user_id, session_id, entry)``; it holds one state and its
*version*. Versions start at 1 and grow by one per save. Saves take an optional
``expected_version`` for compare-and-swap (0: the slot must be absent).

Every store here keys the anonymous user (``user_id=None``) apart from every named
user, and encodes ids (:func:`journal.keys.encode_segment`) so that no two
``(user, session, entry)`` triples share a slot. ``SlotKey`` does that planning, with
no I/O, for every backend.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from journal.keys import ANONYMOUS_SEGMENT, check_id, encode_segment
from journal.policy import ConflictPolicy

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

    from projections.agent_state import AgentState

__all__ = [
    "AgentStateStore",
    "AgentStateStoreBase",
    "ConflictPolicy",
    "SlotKey",
    "check_expected_version",
    "check_id",
    "user_segment",
    "utc_now",
    "with_version",
]


@runtime_checkable
class AgentStateStore(Protocol):
    """Snapshot-mode storage of ``AgentState``: one state per slot, versioned.

    All methods are coroutines. Implementations must be safe to call concurrently
    from many tasks of one event loop; the backends that share storage (JSON file,
    Redis, SQL) are also safe across processes.
    """

    async def save(
        self,
        user_id: str | None,
        session_id: str,
        entry: str,
        state: AgentState,
        *,
        expected_version: int | None = None,
    ) -> int:
        """Store ``state`` in the slot, atomically, as its next version.

        The caller's ``state`` is not modified (its ``version`` field is ignored).

        Args:
            user_id: The user, or None for the anonymous user.
            session_id: The session.
            entry: The slot within the session, e.g. ``ThreadKey.state_entry()``.
            state: The state to store.
            expected_version: None writes unconditionally. An int is compare-and-swap:
                the slot's current version must equal it (0: the slot must be absent).

        Returns:
            The slot's new version: 1 for a new slot, else the previous version + 1.

        Raises:
            StaleStateError: ``expected_version`` is not the slot's version; nothing
                was written.
            InvalidKeyError: An id is empty, too long, not a string, or contains a
                control character.
            StorageError: The backend failed (``transient`` when a retry may help).
        """
        ...

    async def load(
        self, user_id: str | None, session_id: str, entry: str
    ) -> tuple[AgentState, int] | None:
        """Read the slot.

        Returns:
            ``(state, version)``, where ``state.version == version``; None when the
            slot does not exist.

        Raises:
            InvalidKeyError: An id is not acceptable.
            StorageError: The backend failed.
        """
        ...

    async def delete(self, user_id: str | None, session_id: str, entry: str) -> bool:
        """Remove the slot. A later save starts again at version 1.

        Returns:
            True if the slot existed.

        Raises:
            InvalidKeyError: An id is not acceptable.
            StorageError: The backend failed.
        """
        ...

    async def list_sessions(self, user_id: str | None) -> list[str]:
        """The sessions of ``user_id`` holding at least one slot.

        Returns:
            Session ids, each once, sorted; only this user's (the anonymous user's
            when ``user_id`` is None).

        Raises:
            InvalidKeyError: ``user_id`` is not acceptable.
            StorageError: The backend failed.
        """
        ...

    async def aclose(self) -> None:
        """Release connections the store opened itself. Safe to call twice."""
        ...


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


def with_version(state: AgentState, version: int) -> AgentState:
    """A shallow copy of ``state`` whose ``version`` is ``version``."""
    return msgspec.structs.replace(state, version=version)


def _check_state(state: object) -> None:
    from projections.agent_state import AgentState

    if not isinstance(state, AgentState):
        raise TypeError(f"state must be an AgentState, not {type(state).__name__}")


class AgentStateStoreBase(abc.ABC, AgentStateStore):
    """A helper base for implementations: validates arguments, then delegates.

    Subclasses implement the ``_save`` / ``_load`` / ``_delete`` / ``_list_sessions``
    hooks with already-validated :class:`SlotKey` values, and may override
    :meth:`aclose`. The store is also an async context manager that closes itself.
    """

    async def save(
        self,
        user_id: str | None,
        session_id: str,
        entry: str,
        state: AgentState,
        *,
        expected_version: int | None = None,
    ) -> int:
        slot = SlotKey.of(user_id, session_id, entry)
        _check_state(state)
        return await self._save(slot, state, check_expected_version(expected_version))

    async def load(
        self, user_id: str | None, session_id: str, entry: str
    ) -> tuple[AgentState, int] | None:
        return await self._load(SlotKey.of(user_id, session_id, entry))

    async def delete(self, user_id: str | None, session_id: str, entry: str) -> bool:
        return await self._delete(SlotKey.of(user_id, session_id, entry))

    async def list_sessions(self, user_id: str | None) -> list[str]:
        return await self._list_sessions(user_id, user_segment(user_id))

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def _save(
        self, slot: SlotKey, state: AgentState, expected_version: int | None
    ) -> int:
        """Store ``state`` as the slot's next version (see :meth:`save`)."""

    @abc.abstractmethod
    async def _load(self, slot: SlotKey) -> tuple[AgentState, int] | None:
        """Read the slot (see :meth:`load`)."""

    @abc.abstractmethod
    async def _delete(self, slot: SlotKey) -> bool:
        """Remove the slot (see :meth:`delete`)."""

    @abc.abstractmethod
    async def _list_sessions(self, user_id: str | None, user: str) -> list[str]:
        """The user's sessions with a slot, sorted (``user`` is its segment)."""
