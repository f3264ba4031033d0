"""An encrypted record naming a malformed data key id is a corrupt record.

A record names its data key in bytes whoever can write the store chooses. Control
characters there must not reach errors or the CLI's output raw
(``"\\n\\x1b[32mALL OK"`` would forge a line of ``verify``): ``open_record``
refuses an id not of the keyring's form (a ``ValueError`` showing it with
``repr``), which ``codec.parse_record`` reports as a ``CorruptRecordError``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg
from journal import codec as codec_module
from journal.cli import main
from journal.crypto import StaticKeys, generate_key
from journal.errors import CorruptRecordError, KeyUnavailableError
from journal.keyring import Keyring, ThreadCipher
from stores.memory import MemoryStore
from tests.journal._keyrings import FORGED, KEY, THREAD, assert_escaped, journal_of

if TYPE_CHECKING:
    from pathlib import Path


async def fill(journal: Journal) -> None:
    async with journal.writer(KEY) as w:
        for i in range(3):
            await w.append([MessageAppended(Msg("user", f"message {i}"))])


def forge_record_key_id(path: Path, key_id: str) -> None:
    """Make the encrypted record at ``path`` name the data key ``key_id``.

    The frame, checksum and hash are made again, as someone who can write the
    store can: only the key id is wrong.
    """
    stored, _ = codec_module._unframe(
        codec_module.RECORD_EMAGIC, path.read_bytes(), 32, "record"
    )
    outer = codec_module._encrypted_decoder.decode(stored)
    body = codec_module._encoder.encode(
        codec_module.EncryptedBody(
            outer.format,
            outer.version,
            outer.epoch,
            outer.prev_hash,
            key_id,
            outer.ciphertext,
        )
    )
    digest = hashlib.sha256(outer.prev_hash + body).digest()
    path.write_bytes(codec_module._frame(codec_module.RECORD_EMAGIC, body, digest))


async def test_open_record_refuses_a_malformed_key_id():
    cipher = ThreadCipher(Keyring(MemoryStore(), StaticKeys([generate_key()])), THREAD)
    await cipher.writable()
    ident, encrypt = cipher.record_encrypter(1)
    assert cipher.open_record(1, ident, encrypt(b"body")) == b"body"
    for forged in (FORGED, "", "d-0123456789ABCDEF", "k-0123456789abcdef"):
        with pytest.raises(ValueError, match="malformed data key id") as caught:
            cipher.open_record(1, forged, encrypt(b"body"))
        assert not isinstance(caught.value, KeyUnavailableError)
        assert repr(forged) in str(caught.value)
    # A well-formed id the owner's key object does not hold is a key not to be
    # had, not damage.
    with pytest.raises(KeyUnavailableError, match="d-0123456789abcdef"):
        cipher.open_record(1, "d-0123456789abcdef", encrypt(b"body"))


async def test_a_forged_record_key_id_is_a_corrupt_record_shown_escaped(tmp_path):
    provider = StaticKeys([generate_key()])
    await fill(journal_of(tmp_path, provider))
    last = max((tmp_path / THREAD / "log").glob("*.rec"))
    forge_record_key_id(last, FORGED)
    with pytest.raises(CorruptRecordError) as caught:
        await journal_of(tmp_path, provider).load(KEY)
    assert caught.value.version == int(last.stem)
    assert "malformed data key id" in str(caught.value)
    assert_escaped(str(caught.value))


def test_verify_prints_a_forged_record_key_id_escaped(tmp_path, monkeypatch, capsys):
    key = generate_key()
    asyncio.run(fill(journal_of(tmp_path, StaticKeys([key]))))
    forge_record_key_id(max((tmp_path / THREAD / "log").glob("*.rec")), FORGED)
    monkeypatch.setenv("AGENT_JOURNAL_KEK", base64.b64encode(key).decode())
    code = main(["--root", str(tmp_path), "verify"])
    out = capsys.readouterr().out
    assert code == 1
    assert "malformed data key id" in out
    assert_escaped(out)
