"""Encryption of snapshot-mode state slots (``store.use_encryption(...)``).

Each slot's bytes become the JSON ``{"encrypted": "AJES1", "data": "<base64>"}``,
where ``data`` is an AES-256-GCM container (:mod:`journal.crypto`) under the data key
of the slot's owner: the named user, or the anonymous user's session, as in journal
mode. The associated data is the slot's address (user, session, entry), so a
ciphertext copied to another slot does not decrypt. It is JSON so that every backend
(JSON files, Redis, SQL text columns) stores it as it stores a plain state. The key
objects live on the keyring store of the :class:`~journal.crypto.Encryption` given,
under ``@keyring/slots/``; :meth:`SlotCipher.shred` destroys an owner's keys and
:meth:`SlotCipher.rotate` rewraps them all with the provider's current KEK.

Another process may shred an owner's keys while this one has them cached. A save
takes the owner's data key from a read of the key object (:meth:`Keyring.current`
with ``refresh``), never a key that read lists as erased, when the store has not read
it for that owner within its ``key_check_interval`` (:data:`KEY_CHECK_INTERVAL`
seconds by default), or at all: a store
that lives for days does not go on saving under a destroyed key, and a busy owner's
saves do not each cost a read of the keyring store. A load meeting a data key id the
cached keys do not know (the new key of an owner back after an erasure done
elsewhere) reads the key object once before failing.

The slot's version is not in the associated data: some backends stamp the version
only inside one server-side step, after the bytes were made. An older ciphertext of
the same slot written back by someone with storage access therefore decrypts: the
slot stores have no history to detect that with (journal mode has the seals).
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from typing import TYPE_CHECKING

import msgspec

from journal import crypto
from journal.errors import CorruptRecordError, KeyUnavailableError
from journal.keyring import SLOT_KEYRING_DIR, Keyring
from journal.keys import ANONYMOUS_SEGMENT

if TYPE_CHECKING:
    from collections.abc import Callable

    from journal.crypto import Encryption
    from stores.state.slots import SlotKey

__all__ = ["KEY_CHECK_INTERVAL", "SlotCipher", "is_sealed", "slot_owner"]

KEY_CHECK_INTERVAL = 10.0
"""Seconds a store saves under an owner's data key before reading its key object again.

A shred done elsewhere reaches a store's saves within this long: a save starting
later takes a new data key. Between checks, saves read nothing but the slot.
"""

_TAG = "AJES1"


class _Sealed(msgspec.Struct):
    encrypted: str
    data: str


_sealed_decoder = msgspec.json.Decoder(_Sealed)


_SEALED = re.compile(rb'\A\s*\{\s*"encrypted"\s*:')


def is_sealed(stored: bytes) -> bool:
    """Whether a slot's stored bytes are an encrypted state (backends re-indent)."""
    return _SEALED.match(stored) is not None


def slot_owner(slot: SlotKey) -> str:
    """Whose data key encrypts ``slot``: its user, or its anonymous session."""
    if slot.user == ANONYMOUS_SEGMENT:
        return f"{ANONYMOUS_SEGMENT}/{slot.session}"
    return slot.user


def _aad(slot: SlotKey) -> bytes:
    return b"\0".join(
        (
            b"agent-journal/1",
            b"slot",
            *(s.encode() for s in (slot.user, slot.session, slot.name)),
        )
    )


class SlotCipher:
    """Encrypts and decrypts the slots of one snapshot-mode store.

    Args:
        encryption: The provider and the keyring store (required here: a state
            store has no object store of its own to keep key objects in).
        key_check_interval: How long (seconds) saves of an owner use its data key
            before the next save reads the key object again; 0 reads it at every
            save.

    Attributes:
        clock: The monotonic clock (seconds) that times the key checks.

    Raises:
        ValueError: ``encryption.keyring`` is None, or ``key_check_interval`` is
            negative.
    """

    def __init__(
        self, encryption: Encryption, *, key_check_interval: float = KEY_CHECK_INTERVAL
    ) -> None:
        if encryption.keyring is None:
            raise ValueError(
                "encrypting a state store needs Encryption(provider, keyring=<an "
                "object store>) to keep its data keys in"
            )
        if not key_check_interval >= 0:  # NaN too
            raise ValueError(
                f"key_check_interval must be >= 0, not {key_check_interval!r}"
            )
        crypto.require_crypto()
        self.keyring = Keyring(
            encryption.keyring, encryption.provider, directory=SLOT_KEYRING_DIR
        )
        self.key_check_interval = key_check_interval
        self.clock: Callable[[], float] = time.monotonic
        # owner -> clock() when a save last read the owner's key object.
        self._checked: dict[str, float] = {}

    async def sealer(self, slot: SlotKey) -> Callable[[bytes], bytes]:
        """A function giving the stored form of the slot's state JSON (sync).

        The data key is the owner's current one, as the key object read by this
        call or by one less than ``key_check_interval`` ago gave it; never one that
        read listed as erased.
        """
        owner = slot_owner(slot)
        now = self.clock()
        checked = self._checked.get(owner)
        # Keys cached by a load, or by a save long ago, may have been shredded by
        # another process since: read the key object before trusting them.
        refresh = checked is None or now - checked >= self.key_check_interval
        key_id, key = await self.keyring.current(owner, refresh=refresh)
        if refresh:
            # The time before the read: the next check is due an interval after
            # what this read could have missed.
            self._checked[owner] = now
        aad = _aad(slot)

        def seal(plain: bytes) -> bytes:
            container = crypto.seal_container(
                crypto.STATE_MAGIC, key_id, key, plain, aad
            )
            return msgspec.json.encode(
                _Sealed(_TAG, base64.b64encode(container).decode())
            )

        return seal

    async def open(self, slot: SlotKey, stored: bytes) -> bytes:
        """A slot's state JSON from its stored form (plain states pass through).

        A data key id that the cached keys do not know has the owner's key object
        read again, once, before this gives up on it.

        Raises:
            ErasedError: The owner's keys were destroyed.
            KeyUnavailableError: They cannot be had, even after that read.
            CorruptRecordError: It does not decrypt.
        """
        if not is_sealed(stored):
            return stored
        try:
            sealed = _sealed_decoder.decode(stored)
            container = base64.b64decode(sealed.data, validate=True)
            key_id = crypto.container_key_id(container)
        # RecursionError: hostile bytes nested deeper than the decoder can skip.
        except (msgspec.DecodeError, binascii.Error, ValueError, RecursionError) as exc:
            raise CorruptRecordError(
                slot.label, None, f"encrypted state: {exc}"
            ) from None
        owner = slot_owner(slot)
        keys = await self.keyring.load(owner)
        try:
            key = keys.key(key_id, slot.label)
        except KeyUnavailableError:
            # A DEK id the cached keys neither hold nor list as erased was made
            # since they were read, by another process (an owner back after an
            # erasure): one read of the key object tells, as ThreadCipher.opening
            # does for threads. A KEK or key object problem (keys.error) is kept.
            if keys.error is not None:
                raise
            keys = await self.keyring.reload(owner, key_id)
            key = keys.key(key_id, slot.label)
        try:
            return crypto.open_container(container, key, _aad(slot))
        except ValueError as exc:
            raise CorruptRecordError(
                slot.label, None, f"encrypted state {exc}"
            ) from None

    async def shred(self, user_id: str | None, session_id: str | None = None) -> bool:
        """Destroy the data keys of a user (or of one anonymous session).

        Returns:
            True if there were keys to destroy.
        """
        from stores.state.slots import SlotKey

        slot = SlotKey.of(user_id, session_id or "-", "-")
        if user_id is None and session_id is None:
            raise ValueError("shredding the anonymous user needs its session_id")
        return await self.keyring.shred(slot_owner(slot))

    async def rotate(self) -> int:
        """Rewrap every slot data key with the provider's current KEK.

        See :meth:`journal.keyring.Keyring.rotate`: only the key objects under
        ``@keyring/slots/`` are rewritten, never a slot.

        Returns:
            How many key objects were rewritten.

        Raises:
            KeyRotationIncompleteError: Key objects were left as they were.
        """
        return await self.keyring.rotate()
