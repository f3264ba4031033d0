"""Signed seals: an Ed25519 signature binding a thread's chain head (``crypto`` extra).

The hash chain detects a flipped byte, but whoever can write the storage can rewrite
a whole chain consistently with this project's own codec. A seal closes that gap: a
writer holding a signing key signs ``(thread, version, hash)`` at every checkpoint and
on demand, and stores it as ``<thread>/seals/<version>.seal`` (JSON). ``verify`` with
the public key (``trust``) then fails on any history whose record at a seal's version
does not have the sealed hash, on a seal signed by another key or moved from another
thread, and on a thread that has no valid seal at all (deleting every seal is a
rewrite too). Printing the latest seal (``agent-journal seal``) and keeping it
elsewhere makes a truncation to before the newest seals detectable as well: pass it
back as ``anchor``.

Seals are objects beside the log, not events in it, so that an auditor holding only
the public key can check them on an encrypted journal: the seal, the chain hashes and
the record framing are all in the clear (see ``docs/ENCRYPTION.md``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from typing import TYPE_CHECKING, Any, cast

import msgspec

from journal.errors import EncryptionError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "Seal",
    "Signer",
    "decode_seal",
    "encode_seal",
    "load_public_key",
    "load_signing_key",
    "public_key_id",
    "public_key_text",
    "seal_check",
]

SEAL_FORMAT = 1
_CONTEXT = b"agent-journal seal 1\n"
_PREFIX = "ed25519:"


class Seal(msgspec.Struct, frozen=True):
    """One signed seal.

    Attributes:
        format: 1.
        thread: The sealed thread's prefix (its encoded ids, as stored).
        version: The sealed version.
        hash: Hex SHA-256 of the record at ``version`` (the chain head sealed).
        sealed_at: When it was signed (wall clock seconds; informational).
        key: The public key's id (:func:`public_key_id`).
        signature: Base64 Ed25519 signature of :meth:`message`.
    """

    format: int
    thread: str
    version: int
    hash: str
    sealed_at: float
    key: str
    signature: str

    def message(self) -> bytes:
        """The bytes the signature covers."""
        return _message(self.thread, self.version, self.hash, self.sealed_at)


def _message(thread: str, version: int, head: str, sealed_at: float) -> bytes:
    return _CONTEXT + msgspec.json.encode([thread, version, head, sealed_at])


_decoder = msgspec.json.Decoder(Seal)


def encode_seal(seal: Seal) -> bytes:
    """A seal's JSON."""
    return msgspec.json.encode(seal)


def decode_seal(data: bytes | str) -> Seal:
    """Parse a seal's JSON.

    Raises:
        ValueError: It is not a seal.
    """
    try:
        seal = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a seal: {exc}") from None
    if seal.format != SEAL_FORMAT:
        raise ValueError(f"seal has unknown format {seal.format}")
    return seal


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise EncryptionError(
            "seals need the cryptography package: pip install 'agent-journal[crypto]'"
        ) from None
    return ed25519


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_id(key: Ed25519PublicKey) -> str:
    """A public key's short id: the first 8 bytes of SHA-256 of it, hex."""
    return "ed25519-" + hashlib.sha256(_raw_public(key)).hexdigest()[:16]


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as ``ed25519:<base64>``, which :func:`load_public_key` reads."""
    return _PREFIX + base64.b64encode(_raw_public(key)).decode()


def load_signing_key(source: str | os.PathLike[str] | bytes) -> Ed25519PrivateKey:
    """An Ed25519 private key: raw 32 bytes, PEM bytes, or a path to a PEM file.

    Raises:
        ValueError: It is not an Ed25519 private key (the key is never shown).
    """
    from cryptography.hazmat.primitives import serialization

    ed25519 = _ed25519()
    if isinstance(source, bytes):
        data = source
    else:
        from pathlib import Path  # a key from a file only

        data = Path(source).read_bytes()
    if len(data) == 32:
        private: Ed25519PrivateKey = ed25519.Ed25519PrivateKey.from_private_bytes(data)
        return private
    try:
        loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ValueError("not a PEM private key") from None
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise ValueError("the signing key is not an Ed25519 key")
    return cast("Ed25519PrivateKey", loaded)


def load_public_key(source: str | os.PathLike[str] | bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from ``ed25519:<base64>``, 64 hex digits, or a PEM file.

    Raises:
        ValueError: None of those, or not an Ed25519 key.
    """
    from cryptography.hazmat.primitives import serialization

    ed25519 = _ed25519()
    raw: bytes | None = None
    if isinstance(source, bytes):
        raw = source if len(source) == 32 else None
        pem = source if raw is None else b""
    else:
        text = os.fspath(source).strip()
        if text.startswith(_PREFIX):
            try:
                raw = base64.b64decode(text[len(_PREFIX) :], validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"{text!r} is not base64 after {_PREFIX}") from None
        elif len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text):
            raw = bytes.fromhex(text)
        else:
            from pathlib import Path

            path = Path(text)
            if not path.is_file():
                raise ValueError(
                    f"{text!r} is no public key: give ed25519:<base64>, 64 hex "
                    "digits, or a PEM file"
                )
            pem = path.read_bytes()
    if raw is not None:
        if len(raw) != 32:
            raise ValueError(f"an Ed25519 public key is 32 bytes, not {len(raw)}")
        public: Ed25519PublicKey = ed25519.Ed25519PublicKey.from_public_bytes(raw)
        return public
    try:
        loaded = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise ValueError("not a PEM public key") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise ValueError("the public key is not an Ed25519 key")
    return cast("Ed25519PublicKey", loaded)


class Signer:
    """Signs seals with an Ed25519 private key.

    Args:
        key: The private key, or what :func:`load_signing_key` reads.
    """

    def __init__(self, key: Ed25519PrivateKey | str | os.PathLike[str] | bytes) -> None:
        if isinstance(key, str | bytes | os.PathLike):
            key = load_signing_key(key)
        self._key = key
        self.public_key = key.public_key()
        self.key_id = public_key_id(self.public_key)

    def sign(self, thread: str, version: int, head: bytes, sealed_at: float) -> Seal:
        """The seal of ``thread`` at ``version`` whose record hash is ``head``."""
        hex_head = head.hex()
        signature = self._key.sign(_message(thread, version, hex_head, sealed_at))
        return Seal(
            SEAL_FORMAT,
            thread,
            version,
            hex_head,
            sealed_at,
            self.key_id,
            base64.b64encode(signature).decode(),
        )


def seal_check(seal: Seal, trusted: Ed25519PublicKey, thread: str) -> str | None:
    """Why ``seal`` is not a valid seal of ``thread`` by ``trusted`` (None: it is)."""
    from cryptography.exceptions import InvalidSignature

    if seal.thread != thread:
        return f"it seals another thread ({seal.thread}): replayed from elsewhere"
    try:
        signature = base64.b64decode(seal.signature, validate=True)
        trusted.verify(signature, seal.message())
    except (InvalidSignature, binascii.Error, ValueError):
        return "its signature does not verify with the trusted key (forged or altered)"
    return None
