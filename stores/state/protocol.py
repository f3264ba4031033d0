"""The snapshot-mode contract: ``AgentStateStore``, one serialized state per slot.

A *slot* is addressed by ``(user_id, session_id, entry)``; it holds one state and its
*version*. Versions start at 1 and grow by one per save. Saves take an optional
``expected_version`` for compare-and-swap (0: the slot must be absent).

This module names ``AgentState`` only for type checkers: importing the protocol to
type an argument loads no projection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from projections.agent_state import AgentState

__all__ = ["AgentStateStore"]


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
            ValueError: The state nests deeper than a load could decode
                (:data:`stores.state.adapter.MAX_STATE_NESTING` levels); nothing
                was written.
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
