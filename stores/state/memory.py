"""In-memory snapshot-mode state store."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from journal.errors import StaleStateError
from stores.state.base import AgentStateStoreBase
from stores.state.slots import SlotBytes

if TYPE_CHECKING:
    from stores.state.slots import SlotKey, StateEncoder

__all__ = ["InMemoryAgentStateStore"]


class InMemoryAgentStateStore(AgentStateStoreBase):
    """Keeps every slot in a dict of this process.

    Everything is lost when the process exits, and nothing is shared with other
    processes. Each operation runs without awaiting in between its read and its write,
    so it is atomic under asyncio concurrency (and a lock makes it safe from several
    threads too). States are stored serialized, so neither the caller's object nor a
    loaded one aliases what the store holds.
    """

    def __init__(self) -> None:
        # user segment -> session id -> entry -> (version, state JSON)
        self._slots: dict[str, dict[str, dict[str, tuple[int, bytes]]]] = {}
        self._lock = threading.Lock()

    async def _write(
        self, slot: SlotKey, encode: StateEncoder, expected_version: int | None
    ) -> int:
        with self._lock:
            sessions = self._slots.get(slot.user, {})
            current = sessions.get(slot.session_id, {}).get(slot.entry)
            version = 0 if current is None else current[0]
            if expected_version is not None and expected_version != version:
                raise StaleStateError(slot.label, expected_version, version)
            new = version + 1
            blob = encode(new)
            entries = self._slots.setdefault(slot.user, {}).setdefault(
                slot.session_id, {}
            )
            entries[slot.entry] = (new, blob)
            return new

    async def _read(self, slot: SlotKey) -> SlotBytes | None:
        with self._lock:
            current = self._slots.get(slot.user, {}).get(slot.session_id, {})
            found = current.get(slot.entry)
        if found is None:
            return None
        version, blob = found
        return SlotBytes(blob, version)

    async def _delete(self, slot: SlotKey) -> bool:
        with self._lock:
            sessions = self._slots.get(slot.user)
            if sessions is None:
                return False
            entries = sessions.get(slot.session_id)
            if entries is None or entries.pop(slot.entry, None) is None:
                return False
            if not entries:
                del sessions[slot.session_id]
            if not sessions:
                del self._slots[slot.user]
            return True

    async def _list_sessions(self, user_id: str | None, user: str) -> list[str]:
        with self._lock:
            return sorted(self._slots.get(user, {}))
