"""Encryption at rest: AES-256-GCM envelopes and key providers (``crypto`` extra).

``Journal.open(url, encryption=provider)`` encrypts what writers store with per-owner
*data keys* (DEKs): one per user of an agent, and one per session of the anonymous
user. Each DEK is stored only *wrapped* (encrypted) by a key-encryption key (KEK) that
a :class:`KeyProvider` holds: a local key file (:class:`KeyFile`, the embedded
default), an environment variable (:class:`EnvKey`), or a cloud KMS behind the same
two calls. Rotating the KEK rewraps the DEKs and rewrites no history; destroying an
owner's DEKs (crypto-shredding) makes every copy of their data unreadable at once.
``docs/ENCRYPTION.md`` describes the formats and what stays in the clear.

This module is pure (no I/O beyond reading a key file or the environment when asked):
the AEAD primitives, the stored container of encrypted objects, and the providers.
``cryptography`` is imported on first use; without it the calls raise
:class:`~journal.errors.EncryptionError` naming the extra to install.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import os
import struct
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from journal.errors import EncryptionError

if TYPE_CHECKING:
    # Names of struct fields too (TC004): these structs are built, never
    # decoded into, so msgspec never resolves their annotations.
    from collections.abc import Iterator
    from pathlib import Path

    from journal.store import ObjectStore  # noqa: TC004

__all__ = [
    "DATA_KEY_SIZE",
    "NONCE_SIZE",
    "Encryption",
    "EnvKey",
    "KeyFile",
    "KeyProvider",
    "StaticKeys",
    "aead_open",
    "aead_seal",
    "container_key_id",
    "forget_keys",
    "generate_key",
    "is_container",
    "is_data_key_id",
    "is_kek_id",
    "kek_id",
    "open_container",
    "require_crypto",
    "seal_container",
]

DATA_KEY_SIZE = 32
"""Bytes of every key: AES-256."""
NONCE_SIZE = 12
"""Bytes of an AES-GCM nonce (random per encryption)."""
TAG_SIZE = 16

BLOB_MAGIC = b"AJEB"
"""An encrypted blob (message chunk or large event payload)."""
CHECKPOINT_MAGIC = b"AJEC"
"""An encrypted checkpoint."""
STATE_MAGIC = b"AJES"
"""An encrypted snapshot-mode state slot."""

_ID_LEN = struct.Struct(">B")
_INSTALL = (
    "encryption needs the cryptography package: pip install 'agent-journal[crypto]'"
)


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise EncryptionError(_INSTALL) from None
    return AESGCM


@functools.lru_cache(maxsize=1024)
def _cipher(key: bytes) -> Any:
    # Building the cipher object costs more than encrypting a record: one per key.
    return _aesgcm()(key)


def forget_keys() -> None:
    """Drop the cipher objects built for keys so far (after a key was destroyed)."""
    _cipher.cache_clear()


def require_crypto() -> None:
    """Fail early, naming the extra, when ``cryptography`` is not installed.

    Raises:
        EncryptionError: It is not.
    """
    _aesgcm()


def generate_key() -> bytes:
    """A new random 256-bit key."""
    return os.urandom(DATA_KEY_SIZE)


def kek_id(key: bytes) -> str:
    """A key's public id: a short digest, from which nothing about the key follows."""
    return "k-" + hashlib.sha256(b"agent-journal key id\0" + key).hexdigest()[:16]


_HEX_DIGITS = frozenset("0123456789abcdef")
_ID_DIGITS = 16


def _is_id(text: str, prefix: str) -> bool:
    return (
        len(text) == len(prefix) + _ID_DIGITS
        and text.startswith(prefix)
        and _HEX_DIGITS.issuperset(text[len(prefix) :])
    )


def is_data_key_id(text: str) -> bool:
    """Whether ``text`` has the form of a data key id: ``d-`` and 16 hex digits.

    The keyring makes every data key id so (8 random bytes in lowercase hex). Ids
    read from storage are chosen by whoever can write it: any other form is damage,
    and is shown only escaped (``repr``), never raw.
    """
    return _is_id(text, "d-")


def is_kek_id(text: str) -> bool:
    """Whether ``text`` has the form of a :func:`kek_id`: ``k-`` and 16 hex digits.

    The form of this module's providers (:class:`StaticKeys`, :class:`KeyFile`,
    :class:`EnvKey`); another :class:`KeyProvider` (a KMS) has ids of its own.
    """
    return _is_id(text, "k-")


def aead_seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """Encrypt with AES-256-GCM under a fresh random nonce: ``nonce || ct || tag``."""
    nonce = os.urandom(NONCE_SIZE)
    out: bytes = _cipher(key).encrypt(nonce, plaintext, aad)
    return nonce + out


def aead_open(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    """Decrypt what :func:`aead_seal` gave.

    Raises:
        ValueError: The tag does not verify: another key, other associated data
            (another object's place), or altered bytes.
    """
    from cryptography.exceptions import InvalidTag

    if len(sealed) < NONCE_SIZE + TAG_SIZE:
        raise ValueError(f"ciphertext is truncated ({len(sealed)} bytes)")
    try:
        out: bytes = _cipher(key).decrypt(sealed[:NONCE_SIZE], sealed[NONCE_SIZE:], aad)
    except InvalidTag:
        raise ValueError(
            "does not decrypt: altered, moved from another place, or another key"
        ) from None
    return out


# --- the stored container of encrypted objects ------------------------------------
#
#   0   4   magic (BLOB_MAGIC, CHECKPOINT_MAGIC, STATE_MAGIC)
#   4   1   key id length N
#   5   N   the data key's id (ASCII)
#   5+N     nonce (12) || ciphertext || tag (16)


def is_container(data: bytes | memoryview, magic: bytes) -> bool:
    """Whether stored bytes are an encrypted container of kind ``magic``."""
    return data[:4] == magic


def seal_container(
    magic: bytes, key_id: str, key: bytes, plaintext: bytes, aad: bytes
) -> bytes:
    """Encrypt ``plaintext`` into a container naming the data key ``key_id``.

    Raises:
        ValueError: ``key_id`` is not a data key id (:func:`is_data_key_id`):
            readers would refuse the container.
    """
    if not is_data_key_id(key_id):
        raise ValueError(f"malformed data key id {key_id!r}")
    ident = key_id.encode("ascii")
    return b"".join(
        (magic, _ID_LEN.pack(len(ident)), ident, aead_seal(key, plaintext, aad))
    )


def container_key_id(data: bytes) -> str:
    """The data key id a container names.

    Raises:
        ValueError: The container is truncated, or names a malformed id (not
            :func:`is_data_key_id`: the bytes were altered).
    """
    if len(data) < 5:
        raise ValueError("encrypted object is truncated")
    (length,) = _ID_LEN.unpack_from(data, 4)
    if len(data) < 5 + length + NONCE_SIZE + TAG_SIZE:
        raise ValueError("encrypted object is truncated")
    ident = data[5 : 5 + length].decode("ascii", "backslashreplace")
    if not is_data_key_id(ident):
        # The id ends up in warnings, errors and the CLI's output: control
        # characters in it could forge lines there, so it is shown escaped.
        raise ValueError(f"encrypted object names a malformed data key id {ident!r}")
    return ident


def open_container(data: bytes, key: bytes, aad: bytes) -> bytes:
    """Decrypt a container with the data key it names.

    Raises:
        ValueError: It is truncated or does not decrypt.
    """
    (length,) = _ID_LEN.unpack_from(data, 4)
    return aead_open(key, data[5 + length :], aad)


# --- key providers -----------------------------------------------------------------


@runtime_checkable
class KeyProvider(Protocol):
    """Holds the key-encryption keys (KEKs) that wrap the data keys.

    The seam for a cloud KMS: ``wrap`` is ``Encrypt`` (or ``GenerateDataKey``'s
    wrapping half) under the current key, ``unwrap`` is ``Decrypt`` under the key id
    recorded at wrapping time. ``context`` is the owner the data key belongs to; a
    provider must bind it (AES-GCM associated data, KMS encryption context) so that a
    wrapped key moved to another owner's key object does not unwrap. Both are
    coroutines, so a provider may call the network.
    """

    @property
    def key_id(self) -> str:
        """The id of the KEK new data keys are wrapped with."""
        ...

    async def wrap(self, data_key: bytes, context: bytes) -> tuple[str, bytes]:
        """Wrap ``data_key`` with the current KEK: ``(kek id, wrapped bytes)``."""
        ...

    async def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        """The data key that ``wrapped`` holds.

        Raises:
            LookupError: The provider does not hold the KEK ``key_id``.
            ValueError: The wrapped bytes do not unwrap with it (another key of the
                same id, altered bytes, or another ``context``).
        """
        ...


class StaticKeys:
    """A provider over KEKs held in memory: the base of the file and environment ones.

    Args:
        keys: The KEKs (32 bytes each); their ids are :func:`kek_id` of each.
        current: The index in ``keys`` of the one that wraps new data keys.

    Raises:
        ValueError: No key, or one that is not 32 bytes.
    """

    def __init__(self, keys: list[bytes], current: int = 0) -> None:
        if not keys:
            raise ValueError("a key provider needs at least one key")
        for key in keys:
            if len(key) != DATA_KEY_SIZE:
                raise ValueError(
                    f"a key-encryption key must be {DATA_KEY_SIZE} bytes, "
                    f"not {len(key)}"
                )
        self._keys = {kek_id(k): k for k in keys}
        self._current = kek_id(keys[current])

    @property
    def key_id(self) -> str:
        """The id of the KEK that wraps new data keys."""
        return self._current

    @property
    def key_ids(self) -> list[str]:
        """The ids of every KEK held (the current one and older ones)."""
        return list(self._keys)

    async def wrap(self, data_key: bytes, context: bytes) -> tuple[str, bytes]:
        """Wrap ``data_key`` with the current KEK (AES-GCM, ``context`` bound)."""
        key = self._keys[self._current]
        return self._current, aead_seal(key, data_key, b"agent-journal dek\0" + context)

    async def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        """The data key ``wrapped`` holds (see :class:`KeyProvider`)."""
        key = self._keys.get(key_id)
        if key is None:
            if not is_kek_id(key_id):
                # Not an id this provider could have written: the key object was
                # altered (ValueError), and the id is shown escaped.
                raise ValueError(f"malformed key-encryption key id {key_id!r}")
            raise LookupError(f"the key provider does not hold key {key_id}")
        return aead_open(key, wrapped, b"agent-journal dek\0" + context)


def _decode_key(text: object, where: str) -> bytes:
    # A key file is JSON: its value may be any JSON type, not only a string.
    if not isinstance(text, str):
        raise ValueError(f"{where} is not a base64 string")
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where} is not base64") from None
    if len(key) != DATA_KEY_SIZE:
        raise ValueError(f"{where} holds {len(key)} bytes, not {DATA_KEY_SIZE}")
    return key


def _fsync_directory(path: Path) -> None:
    """Make the entries just created or renamed in a directory durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class KeyFile(StaticKeys):
    """KEKs in a local JSON file: the embedded default provider.

    The file is ``{"current": "<key id>", "keys": {"<key id>": "<base64 key>"}}``,
    created by :meth:`create` with mode 0600. :meth:`rotate` adds a key and makes it
    current (older keys stay, to unwrap what they wrapped until
    ``Journal.rotate_keys`` has rewrapped everything); :meth:`retire` removes one.
    Each of them writes the whole file anew, mode 0600, and puts it in place in one
    step: a reader sees the old file or the new one.

    Args:
        path: The key file.

    Raises:
        ValueError: The file does not parse, or holds a malformed key.
        OSError: It cannot be read.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from pathlib import Path  # key files only: a cold start does without it

        self.path = Path(path)
        keys, current = self._read(self.path)
        super().__init__(keys, keys.index(current))

    @staticmethod
    def _read(path: Path) -> tuple[list[bytes], bytes]:
        import json  # key files only: the module stays out of a cold start

        try:
            doc = json.loads(path.read_text("utf-8"))
        # RecursionError: JSON nested deeper than the parser goes.
        except (ValueError, RecursionError):
            raise ValueError(f"key file {path} is not a key file (not JSON)") from None
        if not isinstance(doc, dict) or "keys" not in doc or "current" not in doc:
            raise ValueError(
                f'key file {path} is not a key file (not an object with "current" '
                'and "keys")'
            )
        entries, current_id = doc["keys"], doc["current"]
        if not isinstance(entries, dict):
            raise ValueError(
                f'key file {path} is not a key file ("keys" is not an object of '
                "key ids to keys)"
            )
        if not isinstance(current_id, str):
            raise ValueError(
                f'key file {path} is not a key file ("current" is not a key id)'
            )
        keys: list[bytes] = []
        current = b""
        for ident, text in entries.items():
            key = _decode_key(text, f"key {ident} in {path}")
            if kek_id(key) != ident:
                raise ValueError(f"key {ident} in {path} does not match its id")
            keys.append(key)
            if ident == current_id:
                current = key
        if not current:
            raise ValueError(f"key file {path} names no current key {current_id!r}")
        return keys, current

    @staticmethod
    def _write(path: Path, keys: list[bytes], current: bytes, *, new: bool) -> None:
        """Write the key file whole: a new one (``new``) or over the existing one.

        The bytes go to a temporary file of a unique name in the same directory,
        created exclusively and without following symlinks (so a leftover or
        planted file or symlink there never receives the key, nor lends its mode),
        made 0600 whatever the umask, and synced before it takes the key file's
        name: linked (which fails on any existing entry, a symlink included) when
        ``new``, renamed over it otherwise. The directory is synced after, so the
        new name survives a crash.

        Raises:
            FileExistsError: ``new`` and something exists at ``path``.
        """
        import json
        import tempfile

        doc = {
            "current": kek_id(current),
            "keys": {kek_id(k): base64.b64encode(k).decode() for k in keys},
        }
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
        )
        renamed = False
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                os.fchmod(f.fileno(), 0o600)  # mkstemp's 0600 less the umask
                json.dump(doc, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            if new:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    # Another create won (or something sits at the path): that
                    # key file, and the KEK in it, is kept.
                    raise FileExistsError(f"key file {path} exists") from None
            else:
                os.replace(tmp, path)
                renamed = True
        finally:
            if not renamed:  # a failure, or a link: the key file has its own name
                os.unlink(tmp)
        _fsync_directory(path.parent)

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> KeyFile:
        """Write a new key file holding one fresh key, and open it.

        Raises:
            FileExistsError: The file exists (a key file is never overwritten), or
                was created by someone else while this ran.
        """
        from pathlib import Path

        target = Path(path)
        if target.exists():  # early and cheap; _write's link is what guarantees it
            raise FileExistsError(f"key file {target} exists")
        key = generate_key()
        cls._write(target, [key], key, new=True)
        return cls(target)

    @staticmethod
    @contextlib.contextmanager
    def _updating(path: Path) -> Iterator[None]:
        """Hold the key file's update lock (``.<name>.lock`` beside it).

        A rotation or retirement reads the file, then writes it whole: two at once
        (two processes, or threads) would each write what it read, and the first
        one's key would be lost, with whatever it came to wrap.
        """
        import fcntl

        lock = path.parent / f".{path.name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # lets go of the lock

    @classmethod
    def rotate(cls, path: str | os.PathLike[str]) -> str:
        """Add a fresh key to the file and make it current; return its id."""
        from pathlib import Path

        target = Path(path)
        with cls._updating(target):
            keys, _ = cls._read(target)
            key = generate_key()
            cls._write(target, [*keys, key], key, new=False)
        return kek_id(key)

    @classmethod
    def retire(cls, path: str | os.PathLike[str], key_id: str) -> None:
        """Remove a key that is not current (after rewrapping what it wrapped).

        Raises:
            ValueError: ``key_id`` is the current key, or not in the file.
        """
        from pathlib import Path

        target = Path(path)
        with cls._updating(target):
            keys, current = cls._read(target)
            if kek_id(current) == key_id:
                raise ValueError(f"key {key_id} is current: rotate before retiring it")
            kept = [k for k in keys if kek_id(k) != key_id]
            if len(kept) == len(keys):
                raise ValueError(f"key {key_id} is not in {target}")
            cls._write(target, kept, current, new=False)


class EnvKey(StaticKeys):
    """A KEK from an environment variable (base64 of 32 bytes).

    Args:
        variable: The variable holding the current KEK.
        previous: A variable with older KEKs, comma-separated, still accepted for
            unwrapping during a rotation (optional).

    Raises:
        ValueError: The variable is unset or malformed (its value is never shown).
    """

    def __init__(
        self,
        variable: str = "AGENT_JOURNAL_KEK",
        previous: str = "AGENT_JOURNAL_KEK_PREVIOUS",
    ) -> None:
        text = os.environ.get(variable)
        if not text:
            raise ValueError(f"environment variable {variable} is not set")
        keys = [_decode_key(text, f"environment variable {variable}")]
        keys.extend(
            _decode_key(part, f"environment variable {previous}")
            for part in os.environ.get(previous, "").split(",")
            if part.strip()
        )
        super().__init__(keys, 0)


class Encryption(msgspec.Struct, frozen=True):
    """What ``Journal.open(encryption=...)`` takes beyond a bare provider.

    Attributes:
        provider: Holds the KEKs.
        keyring: Where the wrapped data keys live; None: the journal's own store,
            under ``@keyring/``. On a versioned bucket, or one that is backed up,
            give a separate unversioned store: a shredded key must not survive as
            an old object version (see ``docs/ENCRYPTION.md``).
    """

    provider: KeyProvider
    keyring: ObjectStore | None = None
