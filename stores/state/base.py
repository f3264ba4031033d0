"""The shared base of the snapshot-mode stores: typed API on top, bytes underneath.

:class:`AgentStateStoreBase` validates arguments, turns states into bytes and back
through :mod:`stores.state.adapter`, and delegates storage to four byte-level hooks
that each backend implements: read a slot's bytes and version, compare-and-swap a
slot's bytes, delete a slot, list a user's sessions.

The names the backends and their callers used from here before the split
(``AgentStateStore``, ``SlotKey``, ``with_version``, ...) are still importable from
this module.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from journal.errors import KeyUnavailableError
from journal.policy import ConflictPolicy
from stores.state import adapter
from stores.state.adapter import with_version
from stores.state.encryption import (
    KEY_CHECK_INTERVAL,
    SlotCipher,
    is_sealed,
    slot_owner,
)
from stores.state.protocol import AgentStateStore
from stores.state.slots import (
    SlotKey,
    check_expected_version,
    check_id,
    user_segment,
    utc_now,
)

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

    from journal.crypto import Encryption
    from projections.agent_state import AgentState
    from stores.state.slots import SlotBytes, StateEncoder

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


class AgentStateStoreBase(abc.ABC, AgentStateStore):
    """A helper base for implementations: validates, encodes and decodes, delegates.

    Subclasses implement the byte-level hooks ``_read`` / ``_write`` / ``_delete`` /
    ``_list_sessions`` with already-validated :class:`SlotKey` values, and may
    override :meth:`aclose`. They never see an ``AgentState``. The store is also an
    async context manager that closes itself.

    :meth:`use_encryption` makes it encrypt every state it saves (see
    :mod:`stores.state.encryption`); :meth:`shred` and :meth:`rotate_keys` then
    destroy an owner's data keys and rewrap them all with the current KEK.
    """

    cipher: SlotCipher | None = None

    def use_encryption(
        self, encryption: Encryption, *, key_check_interval: float = KEY_CHECK_INTERVAL
    ) -> Self:
        """Encrypt what this store saves from now on (plain slots still load).

        Args:
            encryption: The provider and the keyring store.
            key_check_interval: A save reads its owner's key object when this
                store has not for this long (seconds; 0: every save), so a shred
                done by another process reaches its saves within it (see
                :mod:`stores.state.encryption`).

        Returns:
            The store itself.

        Raises:
            ValueError: ``encryption`` has no keyring store, or
                ``key_check_interval`` is negative.
        """
        self.cipher = SlotCipher(encryption, key_check_interval=key_check_interval)
        return self

    async def shred(self, user_id: str | None, session_id: str | None = None) -> bool:
        """Destroy the data keys of a user, or of one anonymous session.

        Their slots (and every copy of them) then load as ``ErasedError``; delete
        them with :meth:`delete` as a second step.

        Raises:
            ValueError: The store is not encrypted.
        """
        if self.cipher is None:
            raise ValueError("shred needs a store with use_encryption(...)")
        return await self.cipher.shred(user_id, session_id)

    async def rotate_keys(self) -> int:
        """Rewrap every data key of this store's slots with the current KEK.

        The counterpart of ``Journal.rotate_keys`` for the key objects under
        ``@keyring/slots/`` of the keyring store, which the journal's rotation
        does not touch: run both before retiring the older KEKs
        (``KeyFile.retire``), or the slots whose keys they still wrap stop
        loading. No slot is rewritten: only the key objects. A key object that
        cannot be rotated is left as it is, as ``Journal.rotate_keys`` leaves it.

        Returns:
            How many key objects were rewritten.

        Raises:
            ValueError: The store is not encrypted.
            KeyRotationIncompleteError: Key objects were left as they were; deal
                with them before retiring the older KEKs.
        """
        if self.cipher is None:
            raise ValueError("rotate_keys needs a store with use_encryption(...)")
        return await self.cipher.rotate()

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
        encode = adapter.state_encoder(adapter.check_state(state))
        if self.cipher is not None:
            encode = await self._encrypting(slot, encode, self.cipher)
        return await self._write(slot, encode, check_expected_version(expected_version))

    @staticmethod
    async def _encrypting(
        slot: SlotKey, encode: StateEncoder, cipher: SlotCipher
    ) -> StateEncoder:
        # Backends call the encoder synchronously (inside locks, once the version
        # is known): the data key is fetched first, the encryption itself is sync.
        seal = await cipher.sealer(slot)

        def encrypted(version: int) -> bytes:
            return seal(encode(version))

        return encrypted

    async def load(
        self, user_id: str | None, session_id: str, entry: str
    ) -> tuple[AgentState, int] | None:
        slot = SlotKey.of(user_id, session_id, entry)
        found = await self._read(slot)
        if found is None:
            return None
        data = found.data
        if self.cipher is not None:
            data = await self.cipher.open(slot, data)
        elif is_sealed(data):
            raise KeyUnavailableError(
                slot_owner(slot), "", f"{slot.label} is encrypted; use_encryption(...)"
            )
        state = adapter.decode_state(
            data, found.version, label=slot.label, origin=found.origin
        )
        return state, found.version

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
    async def _read(self, slot: SlotKey) -> SlotBytes | None:
        """The slot's bytes and version; None when the slot does not exist.

        Raises:
            CorruptRecordError: The backend's own framing around the bytes (not
                the state inside) is unreadable.
            StorageError: The backend failed.
        """

    @abc.abstractmethod
    async def _write(
        self, slot: SlotKey, encode: StateEncoder, expected_version: int | None
    ) -> int:
        """Store ``encode(new version)`` as the slot's next version, atomically.

        Args:
            slot: The slot.
            encode: Gives the bytes to store for a version (see
                :data:`~stores.state.slots.StateEncoder`).
            expected_version: None writes unconditionally; an int is the version
                the slot must be at (0: absent).

        Returns:
            The slot's new version.

        Raises:
            StaleStateError: The slot is not at ``expected_version``; nothing was
                written.
            StorageError: The backend failed.
        """

    @abc.abstractmethod
    async def _delete(self, slot: SlotKey) -> bool:
        """Remove the slot (see :meth:`delete`)."""

    @abc.abstractmethod
    async def _list_sessions(self, user_id: str | None, user: str) -> list[str]:
        """The user's sessions with a slot, sorted (``user`` is its segment)."""
