"""The data keys of an encrypted journal: where they live, and how they die.

Every *owner* has its own data keys (DEKs): a named user of an agent
(``<ns>/<agent>/<user>``), or one session of the anonymous user
(``<ns>/<agent>/~/<session>``), in the encoded segments of the thread prefix. Its key
object, ``@keyring/threads/<owner>.key`` on the keyring store (the journal's own by
default), is JSON holding the DEKs wrapped by the provider's key-encryption key
(KEK), never in the clear::

    {"format": 1, "owner": "...", "keys": [{"id", "kek", "wrapped", "created_at"}],
     "erased": ["<dek id>", ...], "erased_at": 0.0}

:meth:`Keyring.shred` moves every DEK id to ``erased`` and drops its wrapped bytes:
whatever the DEK encrypted, wherever a copy is, can no longer be decrypted, and
readers say *erased* (not *corrupt*, not *missing*). :meth:`Keyring.rotate` rewraps
the DEKs with the provider's current KEK; no record is rewritten. A key object it
cannot rotate (one that does not decode, names ids of a form no writer makes, names
another owner, or whose DEKs do not unwrap) is left as it is, the others are rotated
(one planted object must not keep every owner listed after it unrotated), and then
``KeyRotationIncompleteError`` names it.

A key object serves only the owner its path names: its DEKs are wrapped with that
owner as the provider's context, and an object whose ``owner`` field names another
owner (a copy of someone else's key object, by anyone who can write the keyring
store) is refused, never unwrapped and never rewrapped by a rotation.

A :class:`Keyring` caches the DEKs it unwrapped, and another process may change them:
a writer reads its owner's key object once, when it first encrypts, so that it never
takes a DEK that is listed as erased (a new one is made, as for an owner who comes
back after erasure); a reader meeting a DEK id the cache does not know (that new
one) reads the key object once before failing.

:class:`ThreadCipher` is one thread's view: it loads the owner's keys once (reads are
synchronous after that, so the codec stays pure) and binds every ciphertext to its
place: the thread prefix, the object's kind and its version or digest.
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING, TypeVar

import msgspec

from journal import crypto
from journal.errors import (
    EncryptionError,
    ErasedError,
    KeyRotationIncompleteError,
    KeyUnavailableError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from journal.keys import ANONYMOUS_SEGMENT
from journal.lazy import lazy_logger

if TYPE_CHECKING:
    from collections.abc import Callable

    from journal.crypto import KeyProvider
    from journal.store import ObjectStore

__all__ = [
    "KEYRING_DIR",
    "SLOT_KEYRING_DIR",
    "KeyObject",
    "Keyring",
    "OwnerKeys",
    "ThreadCipher",
    "owner_of",
]

KEYRING_DIR = "@keyring/threads/"
"""Where key objects live on the keyring store (no encoded id holds an ``@``)."""
SLOT_KEYRING_DIR = "@keyring/slots/"
"""Where the snapshot-mode stores' key objects live on their keyring store."""
_SUFFIX = ".key"
_UPDATE_ATTEMPTS = 16
_T = TypeVar("_T")

logger = lazy_logger("journal")


def owner_of(prefix: str) -> str:
    """The owner of a thread's data keys, from its prefix's encoded segments."""
    parts = prefix.split("/")
    if len(parts) >= 4 and parts[2] == ANONYMOUS_SEGMENT:
        return "/".join(parts[:4])
    return "/".join(parts[:3])


class WrappedKey(msgspec.Struct, frozen=True):
    """One data key as stored: wrapped by the KEK ``kek``."""

    id: str
    kek: str
    wrapped: str
    created_at: float


class KeyObject(msgspec.Struct, frozen=True):
    """An owner's key object (JSON)."""

    format: int
    owner: str
    keys: list[WrappedKey] = []
    erased: list[str] = []
    erased_at: float = 0.0


_decoder = msgspec.json.Decoder(KeyObject)


def _malformed_id(obj: KeyObject) -> str | None:
    """The first id ``obj`` names that no writer makes (None: they all have a form).

    DEK ids are the keyring's own (:func:`crypto.is_data_key_id`, as every version
    of :meth:`Keyring.current` made them). KEK ids are the provider's, and a KMS has
    its own (ARNs, aliases), so they are held only to being printable: any id
    reaches errors, warnings and the CLI's output, where control characters could
    forge lines.
    """
    for entry in obj.keys:
        if not crypto.is_data_key_id(entry.id):
            return entry.id
        if not entry.kek.isprintable():
            return entry.kek
    for ident in obj.erased:
        if not crypto.is_data_key_id(ident):
            return ident
    return None


def _misplaced(owner: str, obj: KeyObject) -> KeyUnavailableError | None:
    """Why ``obj``, read at ``owner``'s path, may not serve ``owner`` (None: it may).

    Both are the owner as the path writes it (encoded segments, a long id in its
    hashed form), so they are compared as they are: the field is clear JSON that
    anyone who can write the keyring store can change, and a key object copied
    from another owner's path still names that owner.
    """
    if obj.owner == owner:
        return None
    return KeyUnavailableError(
        owner,
        "",
        f"its key object names the owner {obj.owner!r}, not the owner its path "
        "names (a key object copied or altered by hand); it is not used",
    )


class OwnerKeys(msgspec.Struct):
    """An owner's keys as loaded: usable DEKs, erased ids, or why none are usable.

    Attributes:
        owner: The owner.
        keys: Unwrapped DEKs by id.
        erased: Ids of destroyed DEKs.
        erased_at: When the last erasure happened (0.0: never).
        error: Why the keys cannot be used (no provider, wrong KEK, no key object).
        current: The id of the DEK new data is encrypted with ("" when none).
    """

    owner: str
    keys: dict[str, bytes] = msgspec.field(default_factory=dict)
    erased: frozenset[str] = frozenset()
    erased_at: float = 0.0
    error: EncryptionError | None = None
    current: str = ""

    @property
    def status(self) -> str:
        """``"ok"``, ``"erased"`` (every key destroyed), or ``"unavailable"``."""
        if self.error is not None:
            return "unavailable"
        if (self.erased or self.erased_at) and not self.keys:
            # Without ids when the shred replaced a key object that did not decode.
            return "erased"
        return "ok"

    def key(self, key_id: str, what: str = "") -> bytes:
        """The DEK ``key_id``.

        Raises:
            ErasedError: It was destroyed.
            KeyUnavailableError: It cannot be had.
        """
        found = self.keys.get(key_id)
        if found is not None:
            return found
        if key_id in self.erased or (self.erased_at and not self.keys):
            raise ErasedError(self.owner, self.erased_at, what)
        if isinstance(self.error, KeyUnavailableError) and not self.error.key_id:
            # Name the data key the object asks for, when nothing else named one.
            raise KeyUnavailableError(self.owner, key_id, self.error.detail)
        if self.error is not None:
            raise self.error
        raise KeyUnavailableError(
            self.owner, key_id, "the owner's key object does not hold this data key"
        )


class Keyring:
    """The key objects of one journal, with the unwrapped DEKs cached.

    Args:
        store: The keyring store.
        provider: The KEK provider; None reads key objects only for their status
            (erased or not): nothing can be decrypted.
        clock: Wall clock (seconds).
        directory: Where its key objects live on ``store`` (threads by default;
            the snapshot-mode stores keep theirs in :data:`SLOT_KEYRING_DIR`).
    """

    def __init__(
        self,
        store: ObjectStore,
        provider: KeyProvider | None,
        clock: Callable[[], float] = time.time,
        directory: str = KEYRING_DIR,
    ) -> None:
        self.store = store
        self.provider = provider
        self.clock = clock
        self.directory = directory
        self._cache: dict[str, OwnerKeys] = {}

    def object_key(self, owner: str) -> str:
        """The keyring store key of ``owner``'s key object."""
        return f"{self.directory}{owner}{_SUFFIX}"

    async def _read(
        self, owner: str, *, checked: bool = True
    ) -> tuple[KeyObject, str] | None:
        """``owner``'s key object and its etag; None when it has none.

        Args:
            owner: The owner.
            checked: Refuse an object naming an id of a form no writer makes
                (:func:`_malformed_id`); only a shred, which drops such ids, reads
                one.

        Raises:
            KeyUnavailableError: It does not decode, or (``checked``) names a
                malformed id; the error's ``key_id`` is empty, as the error prints
                it raw, and the id is shown escaped in its detail.
        """
        try:
            data, etag = await self.store.read(self.object_key(owner))
        except ObjectNotFoundError:
            return None
        try:
            obj = _decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise KeyUnavailableError(
                owner, "", f"its key object does not decode: {exc}"
            ) from None
        except RecursionError:
            # Nesting in a field the decoder skips, beyond Python's recursion limit.
            raise KeyUnavailableError(
                owner, "", "its key object does not decode: JSON nested too deep"
            ) from None
        malformed = _malformed_id(obj) if checked else None
        if malformed is not None:
            raise KeyUnavailableError(
                owner, "", f"its key object names a malformed key id {malformed!r}"
            )
        return obj, etag

    async def load(self, owner: str) -> OwnerKeys:
        """The owner's keys; cached once they are usable or erased."""
        cached = self._cache.get(owner)
        if cached is not None:
            return cached
        return await self._fetch(owner)

    async def reload(self, owner: str, key_id: str) -> OwnerKeys:
        """The owner's keys, read again unless the cached ones know ``key_id``.

        A DEK id that the cached keys neither hold nor list as erased was made
        after they were read, by another process (for an owner who came back after
        erasure): one read of the key object tells.
        """
        cached = self._cache.get(owner)
        if cached is not None and (key_id in cached.keys or key_id in cached.erased):
            return cached  # another operation of this process read it already
        return await self._fetch(owner)

    async def _fetch(self, owner: str) -> OwnerKeys:
        found = await self._read(owner)
        if found is None:
            self._cache.pop(owner, None)
            return OwnerKeys(
                owner,
                error=KeyUnavailableError(owner, "", "it has no key object"),
            )
        return await self._adopt(owner, found[0])

    async def _adopt(self, owner: str, obj: KeyObject) -> OwnerKeys:
        """The keys ``obj`` holds, cached when usable (the cache follows the read)."""
        misplaced = _misplaced(owner, obj)
        if misplaced is not None:
            self._cache.pop(owner, None)
            return OwnerKeys(owner, error=misplaced)
        cached = self._cache.get(owner)
        if cached is not None and all(k.id in cached.keys for k in obj.keys):
            # Erased or rewrapped since, nothing new: the DEKs unwrapped already
            # serve (a KMS is not asked again), and only those still held are kept.
            keys = OwnerKeys(
                cached.owner,
                {k.id: cached.keys[k.id] for k in obj.keys},
                frozenset(obj.erased),
                obj.erased_at,
                current=obj.keys[-1].id if obj.keys else "",
            )
        else:
            keys = await self._unwrap(owner, obj)
        if cached is not None and not cached.keys.keys() <= keys.keys.keys():
            crypto.forget_keys()  # a DEK destroyed elsewhere leaves this process too
        if keys.error is None:
            self._cache[owner] = keys
        else:
            self._cache.pop(owner, None)
        return keys

    async def _unwrap(self, owner: str, obj: KeyObject) -> OwnerKeys:
        """The DEKs of ``obj``, read at ``owner``'s path, unwrapped for ``owner``."""
        out = OwnerKeys(owner, erased=frozenset(obj.erased), erased_at=obj.erased_at)
        if not obj.keys:
            return out
        if self.provider is None:
            out.error = KeyUnavailableError(
                owner,
                obj.keys[-1].id,
                "the journal was opened without encryption (no key provider)",
            )
            return out
        # The owner asked for, whose path the object was read from, not the
        # object's own field: a DEK wrapped for another owner then never unwraps
        # here, whatever the field says.
        context = owner.encode()
        for wrapped in obj.keys:
            try:
                raw = base64.b64decode(wrapped.wrapped, validate=True)
                out.keys[wrapped.id] = await self.provider.unwrap(
                    wrapped.kek, raw, context
                )
            except LookupError:
                out.error = KeyUnavailableError(
                    owner,
                    wrapped.kek,
                    f"the key provider does not hold this key-encryption key "
                    f"(data key {wrapped.id})",
                )
            except (ValueError, binascii.Error):
                out.error = KeyUnavailableError(
                    owner,
                    wrapped.kek,
                    f"data key {wrapped.id} does not unwrap with this key-encryption "
                    "key (a wrong key, or an altered key object)",
                )
            if out.error is not None:
                out.keys.clear()
                return out
        out.current = obj.keys[-1].id
        return out

    async def current(self, owner: str, *, refresh: bool = False) -> tuple[str, bytes]:
        """The DEK new data of ``owner`` is encrypted with; created when it has none.

        An erased owner gets a new DEK: what it writes from now on is readable, what
        was erased stays erased. A DEK that the key object lists as erased is never
        returned.

        Args:
            owner: The owner.
            refresh: Read the key object even when the owner's keys are cached
                (another process may have shredded them since): one read, and no
                unwrapping unless it holds a DEK not unwrapped yet.

        Raises:
            KeyUnavailableError: No provider, or the existing keys do not unwrap.
        """
        if self.provider is None:
            raise KeyUnavailableError(owner, "", "no key provider to encrypt with")
        cached = self._cache.get(owner)
        if (
            not refresh
            and cached is not None
            and cached.current
            and cached.current not in cached.erased
        ):
            return cached.current, cached.keys[cached.current]
        for _ in range(_UPDATE_ATTEMPTS):
            found = await self._read(owner)
            if found is not None:
                # The keys of this very read: reading again would leave a window
                # in which a shred (another process's erase) leaves none.
                loaded = await self._adopt(owner, found[0])
                if loaded.error is not None:
                    raise loaded.error
                if loaded.current and loaded.current not in loaded.erased:
                    return loaded.current, loaded.keys[loaded.current]
            dek = crypto.generate_key()
            ident = "d-" + crypto.generate_key()[:8].hex()
            kek, wrapped = await self.provider.wrap(dek, owner.encode())
            entry = WrappedKey(
                ident, kek, base64.b64encode(wrapped).decode(), self.clock()
            )
            try:
                if found is None:
                    obj = KeyObject(1, owner, [entry])
                    await self.store.create(
                        self.object_key(owner), msgspec.json.encode(obj)
                    )
                else:
                    obj = msgspec.structs.replace(found[0], keys=[entry])
                    await self.store.replace(
                        self.object_key(owner),
                        msgspec.json.encode(obj),
                        if_match=found[1],
                    )
            except (ObjectExistsError, PreconditionFailedError, ObjectNotFoundError):
                continue  # another writer made one first: use theirs
            self._cache[owner] = OwnerKeys(
                owner,
                {ident: dek},
                frozenset(obj.erased),
                obj.erased_at,
                current=ident,
            )
            return ident, dek
        raise KeyUnavailableError(owner, "", "its key object kept changing")

    async def shred(self, owner: str) -> bool:
        """Destroy every DEK of ``owner`` (crypto-shredding); True if it had any.

        The key object stays, holding the destroyed ids, so that readers of any
        copy of the data report it erased. An id of a form no writer makes (planted
        by hand) does not stop the shred: no stored object can name it, so it is
        dropped rather than listed as erased. Nor does a key object that does not
        decode (torn, or altered by hand): whatever keys it held go with it, and
        an erased object without ids takes its place.
        """
        for _ in range(_UPDATE_ATTEMPTS):
            self._cache.pop(owner, None)
            # Unchecked: refusing a malformed id here would keep the owner's real
            # DEKs alive, which is worse than any id.
            try:
                found = await self._read(owner, checked=False)
                undecodable = False
            except KeyUnavailableError:
                found, undecodable = await self._undecodable(owner), True
            if found is None or not (found[0].keys or undecodable):
                return False
            obj, etag = found
            erased = KeyObject(
                obj.format,
                obj.owner,
                [],
                [
                    ident
                    for ident in (*obj.erased, *(k.id for k in obj.keys))
                    if crypto.is_data_key_id(ident)
                ],
                self.clock(),
            )
            try:
                await self.store.replace(
                    self.object_key(owner), msgspec.json.encode(erased), if_match=etag
                )
            except (PreconditionFailedError, ObjectNotFoundError):
                continue
            self._cache.pop(owner, None)
            crypto.forget_keys()
            return True
        raise KeyUnavailableError(owner, "", "its key object kept changing")

    async def _undecodable(self, owner: str) -> tuple[KeyObject, str] | None:
        """``owner``'s key object that does not decode: an empty one, and its etag.

        What a shred replaces (under the etag of the bytes read) with an erased
        object; None when it is gone.
        """
        try:
            _, etag = await self.store.read(self.object_key(owner))
        except ObjectNotFoundError:
            return None
        return KeyObject(1, owner), etag

    async def owners(self) -> list[str]:
        """Every owner with a key object."""
        base = self.directory
        keys = await self.store.list(base)
        return [
            k[len(base) : -len(_SUFFIX)]
            for k in keys
            if k.startswith(base) and k.endswith(_SUFFIX)
        ]

    async def rotate(self) -> int:
        """Rewrap every DEK not wrapped by the provider's current KEK.

        A key object that cannot be rotated is left as it is, and the others are
        rotated: one whose ``owner`` field differs from the owner its path names,
        one that does not decode or names a malformed id, one whose DEKs do not
        unwrap with any KEK the provider holds, and one that kept changing under
        the rotation. Each is also logged as a warning on the ``journal`` logger;
        once the others are done, :class:`KeyRotationIncompleteError` names them
        all. Retiring the older KEKs makes such an object useless (and locks out an
        owner whose DEKs only an older KEK still wraps).

        Returns:
            How many key objects were rewritten.

        Raises:
            KeyUnavailableError: There is no key provider.
            KeyRotationIncompleteError: Key objects were left as they were (with
                how many others were rewritten).
        """
        if self.provider is None:
            raise KeyUnavailableError("the keyring", "", "no key provider")
        provider = self.provider
        rewritten = 0
        skipped: list[tuple[str, str]] = []
        for owner in await self.owners():
            try:
                if await self._rotate_owner(owner, provider):
                    rewritten += 1
            except _UnrotatableError as exc:
                # Raised once the others are done: anyone who can write the keyring
                # store can plant such an object, and it must not keep every owner
                # after it unrotated. The path comes from the store's listing:
                # shown escaped.
                path = self.object_key(owner)
                logger.warning("KEK rotation left %r as it was: %s", path, exc)
                skipped.append((path, str(exc)))
        if skipped:
            raise KeyRotationIncompleteError(rewritten, skipped)
        return rewritten

    async def _rotate_owner(self, owner: str, provider: KeyProvider) -> bool:
        """Rewrap ``owner``'s DEKs with the current KEK; True if its object changed.

        Raises:
            _UnrotatableError: Its key object cannot be rotated (why). A provider
                or store failure (every object would fail alike) passes through.
        """
        for _ in range(_UPDATE_ATTEMPTS):
            try:
                found = await self._read(owner)
            except KeyUnavailableError as exc:
                raise _UnrotatableError(exc.detail) from None
            if found is None:
                return False
            obj, etag = found
            misplaced = _misplaced(owner, obj)
            if misplaced is not None:
                # Rewrapping it would keep another owner's DEK (an erased one,
                # maybe) alive under the new KEK; left wrapped by the KEK it had,
                # it dies when that KEK is retired.
                raise _UnrotatableError(misplaced.detail)
            if all(k.kek == provider.key_id for k in obj.keys):
                return False
            keys = await self._unwrap(owner, obj)
            if keys.error is not None:
                raise _UnrotatableError(_why(keys.error))
            entries = []
            for old in obj.keys:
                kek, wrapped = await provider.wrap(keys.keys[old.id], owner.encode())
                entries.append(
                    WrappedKey(
                        old.id,
                        kek,
                        base64.b64encode(wrapped).decode(),
                        old.created_at,
                    )
                )
            try:
                await self.store.replace(
                    self.object_key(owner),
                    msgspec.json.encode(msgspec.structs.replace(obj, keys=entries)),
                    if_match=etag,
                )
            except (PreconditionFailedError, ObjectNotFoundError):
                continue
            return True
        raise _UnrotatableError(
            f"its key object kept changing ({_UPDATE_ATTEMPTS} attempts)"
        )


class _UnrotatableError(Exception):
    """Why a key object cannot be rotated.

    A fault of that object, not of the provider or the store, so the rotation goes
    on with the others.
    """


def _why(error: EncryptionError) -> str:
    """``error``'s reason, without the owner (the warning names the path)."""
    if not isinstance(error, KeyUnavailableError):
        return str(error)
    if not error.key_id:
        return error.detail
    # The KEK that does not unwrap is what the operator needs to know; ids were
    # checked printable on reading, and are shown escaped all the same.
    return f"{error.detail}; key-encryption key {error.key_id!r}"


def _aad(kind: bytes, prefix: str, name: str) -> bytes:
    return b"\0".join((b"agent-journal/1", kind, prefix.encode(), name.encode()))


class ThreadCipher:
    """One thread's encryption: its owner's keys, bound to the thread's objects.

    Call :meth:`load` (reading) or :meth:`writable` (writing) before the
    synchronous methods.

    Args:
        keyring: The journal's keyring.
        prefix: The thread prefix.
    """

    def __init__(self, keyring: Keyring, prefix: str) -> None:
        self.keyring = keyring
        self.prefix = prefix
        self.owner = owner_of(prefix)
        self.keys: OwnerKeys | None = None
        self._current: tuple[str, bytes] | None = None
        self._reloaded: set[str] = set()

    async def load(self) -> OwnerKeys:
        """Load the owner's keys, once: a thread's log lives for one operation.

        A failure is kept too, so that reading a thousand records whose key is
        unavailable reads the key object once (:meth:`writable` loads afresh).
        """
        if self.keys is None:
            self.keys = await self.keyring.load(self.owner)
        return self.keys

    async def opening(self, call: Callable[[], _T]) -> _T:
        """``call()``, which decrypts with these keys (:meth:`load` came first).

        When it needs a DEK the loaded keys neither hold nor list as erased (made
        by another process since they were read), the owner's key object is read
        again and ``call()`` runs once more: once for each such DEK id, so that a
        thousand records under an id the key object does not hold read it once.

        Raises:
            KeyUnavailableError: The DEK cannot be had, even after that read
                (whatever else ``call()`` raises passes through).
        """
        try:
            return call()
        except KeyUnavailableError as exc:
            if not await self._reload(exc.key_id):
                raise
        return call()

    async def _reload(self, key_id: str) -> bool:
        """Read the key object again for ``key_id``; True if it now names it."""
        keys = self.keys
        if (
            keys is None
            or keys.error is not None  # a KEK or key object problem: kept (load)
            or key_id in keys.keys
            or key_id in keys.erased
            or key_id in self._reloaded
        ):
            return False
        self._reloaded.add(key_id)
        self.keys = keys = await self.keyring.reload(self.owner, key_id)
        return key_id in keys.keys or key_id in keys.erased

    async def writable(self) -> None:
        """Make sure there is a DEK to encrypt with (creating the owner's first).

        The first call reads the owner's key object, even when its keys are cached:
        a DEK destroyed by another process since is not used, a new one is made.
        The DEK taken then serves every later call: a writer's log reads the key
        object once, not once a commit.
        """
        if self._current is None:
            self._current = await self.keyring.current(self.owner, refresh=True)
            self.keys = await self.keyring.load(self.owner)

    def _key(self, key_id: str, what: str) -> bytes:
        if self.keys is None:
            raise KeyUnavailableError(self.owner, key_id, "keys were not loaded")
        return self.keys.key(key_id, what)

    def record_encrypter(self, version: int) -> tuple[str, Callable[[bytes], bytes]]:
        """The DEK id and the encrypt function of the record at ``version``."""
        assert self._current is not None  # noqa: S101 - writable() came first
        ident, key = self._current
        aad = _aad(b"record", self.prefix, str(version))
        return ident, lambda plain: crypto.aead_seal(key, plain, aad)

    def open_record(self, version: int, key_id: str, ciphertext: bytes) -> bytes:
        """Decrypt the record at ``version`` (a ``codec.parse_record`` opener).

        Raises:
            ErasedError: Its DEK was destroyed.
            KeyUnavailableError: Its DEK cannot be had.
            ValueError: It does not decrypt (altered or moved), or names a
                malformed data key id (not :func:`crypto.is_data_key_id`), which
                ``codec.parse_record`` reports as a corrupt record.
        """
        if not crypto.is_data_key_id(key_id):
            # Chosen by whoever can write the store: shown escaped, never raw,
            # and damage to the record rather than a key not to be had.
            raise ValueError(f"names a malformed data key id {key_id!r}")
        key = self._key(key_id, f"version {version} of {self.prefix}")
        return crypto.aead_open(
            key, ciphertext, _aad(b"record", self.prefix, str(version))
        )

    def seal(self, magic: bytes, name: str, plaintext: bytes) -> bytes:
        """Encrypt an object (blob, checkpoint) stored under ``name``."""
        assert self._current is not None  # noqa: S101 - writable() came first
        ident, key = self._current
        return crypto.seal_container(
            magic, ident, key, plaintext, _aad(magic, self.prefix, name)
        )

    def open(self, magic: bytes, name: str, data: bytes) -> bytes:
        """Decrypt an object stored under ``name``.

        Raises:
            ErasedError: Its DEK was destroyed.
            KeyUnavailableError: Its DEK cannot be had.
            ValueError: It is truncated or does not decrypt.
        """
        key = self._key(crypto.container_key_id(data), f"{name} of {self.prefix}")
        return crypto.open_container(data, key, _aad(magic, self.prefix, name))
