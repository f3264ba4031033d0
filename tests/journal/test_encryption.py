"""Encryption at rest: nothing readable on disk, keys that fail clearly, erasure.

Every test writes a marker text through the public API and looks for it in every
stored byte; the key tests check that errors name the owner and the key id and
never the key itself.
"""

from __future__ import annotations

import base64
import json
import shutil
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey, ToolCallCompleted
from journal.crypto import Encryption, EnvKey, KeyFile, StaticKeys, generate_key
from journal.errors import CorruptRecordError, ErasedError, KeyUnavailableError
from stores.local import LocalStore

if TYPE_CHECKING:
    from pathlib import Path

MARKER = "zebra-quartz-7731"
BIG = MARKER * 6000  # over the blob threshold: stored as a blob


def key_of(user: str | None = "alice", session: str = "s1") -> ThreadKey:
    return ThreadKey("agent", session, user_id=user)


async def fill(journal: Journal, key: ThreadKey, n: int = 12) -> None:
    async with journal.writer(key) as w:
        for i in range(n):
            await w.append([MessageAppended(Msg("user", f"{MARKER} {key} {i}"))])
        await w.append([ToolCallCompleted("c1", BIG)])
        await w.update("summarize", lambda s: setattr(s, "summary", MARKER) or s)
        await w.checkpoint()


def stored_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@pytest.mark.parametrize("segments", [True, False])
@pytest.mark.parametrize("compression", [None, "zstd"])
async def test_no_plaintext_on_disk(tmp_path, segments, compression):
    provider = StaticKeys([generate_key()])
    journal = Journal(
        LocalStore(tmp_path, segments=segments, fsync=False),
        encryption=provider,
        compression=compression,
        checkpoint_every=5,
    )
    key = key_of()
    await fill(journal, key)
    assert len(list((tmp_path).rglob("*.ckpt"))) >= 1
    everything = stored_bytes(tmp_path)
    assert MARKER.encode() not in everything
    state = await journal.load(key)
    assert state.summary == MARKER
    assert state.context[0].content.startswith(MARKER)
    report = await journal.verify(key)
    assert report.ok, report.problems
    assert report.encryption == "on"
    assert report.checkpoints >= 1
    # The control: the same thread in the clear does hold the marker.
    plain_root = tmp_path / "plain"
    await fill(Journal(LocalStore(plain_root, segments=segments, fsync=False)), key)
    assert MARKER.encode() in stored_bytes(plain_root)


async def test_verify_without_keys_checks_structure(tmp_path):
    journal = Journal.open(tmp_path, encryption=StaticKeys([generate_key()]))
    key = key_of()
    await fill(journal, key)
    keyless = Journal.open(tmp_path)
    report = await keyless.verify(key)
    assert report.ok, report.problems
    assert report.encryption == "locked"
    assert report.records == 15
    assert any("content not checked" in str(w) for w in report.warnings)
    with pytest.raises(KeyUnavailableError) as caught:
        await keyless.load(key)
    assert caught.value.owner == "default/agent/alice"
    # A flipped byte in a ciphertext is caught without keys: the chain covers it.
    rec = tmp_path / "default/agent/alice/s1/main/log"
    segment = sorted(rec.glob(".seg-*"))[0]
    data = bytearray(segment.read_bytes())
    at = bytes(data).index(b"AJE1") + 60
    data[at] ^= 1
    segment.write_bytes(bytes(data))
    assert not (await keyless.verify(key)).ok


async def test_verify_reports_a_key_object_that_does_not_decode(tmp_path):
    """A torn key object is a report's finding, not an exception from verify."""
    provider = StaticKeys([generate_key()])
    key = key_of()
    await fill(Journal.open(tmp_path, encryption=provider), key, 3)
    key_object = tmp_path / "@keyring/threads/default/agent/alice.key"
    assert key_object.exists()
    key_object.write_text('{"format": 1,')
    # Without keys: the structure-only check, the key object's state a warning.
    keyless = await Journal.open(tmp_path).verify(key)
    assert keyless.ok, keyless.problems
    assert keyless.encryption == "locked"
    assert any("does not decode" in w.message for w in keyless.warnings)
    # With a provider: what was asked for could not be checked, a problem.
    keyed = await Journal.open(tmp_path, encryption=provider).verify(key)
    assert not keyed.ok
    assert keyed.encryption == "locked"
    assert any("does not decode" in p.message for p in keyed.problems)


async def test_wrong_key_names_owner_and_key_id_never_the_key(tmp_path):
    right, wrong = generate_key(), generate_key()
    await fill(Journal.open(tmp_path, encryption=StaticKeys([right])), key_of())
    journal = Journal.open(tmp_path, encryption=StaticKeys([wrong]))
    with pytest.raises(KeyUnavailableError) as caught:
        await journal.load(key_of())
    text = str(caught.value)
    assert "default/agent/alice" in text
    assert caught.value.key_id.startswith("k-")
    assert caught.value.key_id in text
    for secret in (right, wrong):
        assert base64.b64encode(secret).decode() not in text
        assert secret.hex() not in text
    report = await journal.verify(key_of())
    assert not report.ok  # a configured key that does not fit is a failure


async def test_wrong_key_of_the_same_id_is_refused(tmp_path):
    """A key object altered to claim another KEK: the unwrap fails, not the read."""
    await fill(
        Journal.open(tmp_path, encryption=StaticKeys([generate_key()])), key_of()
    )
    path = tmp_path / "@keyring/threads/default/agent/alice.key"
    doc = json.loads(path.read_text())
    doc["keys"][0]["wrapped"] = base64.b64encode(bytes(60)).decode()
    path.write_text(json.dumps(doc))
    journal = Journal.open(tmp_path, encryption=StaticKeys([generate_key()]))
    with pytest.raises(KeyUnavailableError, match="default/agent/alice"):
        await journal.load(key_of())


async def test_missing_key_object(tmp_path):
    provider = StaticKeys([generate_key()])
    await fill(Journal.open(tmp_path, encryption=provider), key_of())
    (tmp_path / "@keyring/threads/default/agent/alice.key").unlink()
    journal = Journal.open(tmp_path, encryption=provider)
    with pytest.raises(KeyUnavailableError, match="no key object") as caught:
        await journal.load(key_of())
    assert caught.value.owner == "default/agent/alice"
    assert caught.value.key_id.startswith("d-")
    # A writer must not mint a new key over data it cannot read.
    with pytest.raises(KeyUnavailableError):
        async with journal.writer(key_of()):
            pass


async def test_key_file_rotation_rewraps_without_rewriting_history(tmp_path):
    path = tmp_path / "kek.json"
    KeyFile.create(path)
    root = tmp_path / "journal"
    await fill(Journal.open(root, encryption=KeyFile(path)), key_of())
    await fill(Journal.open(root, encryption=KeyFile(path)), key_of("bob"))
    records_before = {
        p: p.read_bytes() for p in root.rglob("*") if p.is_file() and "log" in p.parts
    }
    old = KeyFile(path).key_id
    new = KeyFile.rotate(path)
    assert new != old
    journal = Journal.open(root, encryption=KeyFile(path))
    assert await journal.rotate_keys() == 2
    assert await journal.rotate_keys() == 0
    KeyFile.retire(path, old)
    assert KeyFile(path).key_ids == [new]
    journal = Journal.open(root, encryption=KeyFile(path))
    assert (await journal.load(key_of())).summary == MARKER
    assert (await journal.verify(key_of("bob"))).ok
    for p, data in records_before.items():
        assert p.read_bytes() == data  # no record was rewritten
    with pytest.raises(ValueError, match="not set"):
        EnvKey("AJ_TEST_UNSET_VARIABLE")


async def test_environment_key_provider(tmp_path, monkeypatch):
    key = generate_key()
    monkeypatch.setenv("AGENT_JOURNAL_KEK", base64.b64encode(key).decode())
    await fill(Journal.open(tmp_path, encryption=EnvKey()), key_of())
    old = key
    new = generate_key()
    monkeypatch.setenv("AGENT_JOURNAL_KEK", base64.b64encode(new).decode())
    monkeypatch.setenv("AGENT_JOURNAL_KEK_PREVIOUS", base64.b64encode(old).decode())
    journal = Journal.open(tmp_path, encryption=EnvKey())
    assert await journal.rotate_keys() == 1
    monkeypatch.delenv("AGENT_JOURNAL_KEK_PREVIOUS")
    journal = Journal.open(tmp_path, encryption=EnvKey())
    assert (await journal.load(key_of())).summary == MARKER
    monkeypatch.setenv("AGENT_JOURNAL_KEK", "not base64!")
    with pytest.raises(ValueError, match="AGENT_JOURNAL_KEK is not base64") as caught:
        EnvKey()
    assert "not base64!" not in str(caught.value)


async def test_erasing_one_user_among_many(tmp_path):
    provider = StaticKeys([generate_key()])
    keyring = tmp_path / "keyring"
    root = tmp_path / "journal"
    journal = Journal(
        LocalStore(root, fsync=False),
        encryption=Encryption(provider, keyring=LocalStore(keyring, fsync=False)),
        checkpoint_every=5,
    )
    users = [key_of("alice"), key_of("alice", "s2"), key_of("bob"), key_of(None, "a1")]
    anon2 = key_of(None, "a2")
    for key in [*users, anon2]:
        await fill(journal, key)
    backup = tmp_path / "backup"
    shutil.copytree(root, backup)  # a backup of the data, taken before the erasure

    assert await journal.shred(user_id="alice") == ["default/agent/alice"]
    for key in users[:2]:
        with pytest.raises(ErasedError) as caught:
            await journal.load(key)
        assert caught.value.owner == "default/agent/alice"
        assert not isinstance(caught.value, CorruptRecordError)
        report = await journal.verify(key)
        assert report.ok, report.problems
        assert report.encryption == "erased"
    for key in (key_of("bob"), key_of(None, "a1"), anon2):
        assert (await journal.load(key)).summary == MARKER
        assert (await journal.verify(key)).encryption == "on"

    # One anonymous session is its own owner.
    assert await journal.erase(session_id="a1", user_id=None) == [key_of(None, "a1")]
    assert (await journal.load(anon2)).summary == MARKER

    # The backup is unreadable too: same keyring, keys gone.
    restored = Journal(
        LocalStore(backup, fsync=False),
        encryption=Encryption(provider, keyring=LocalStore(keyring, fsync=False)),
    )
    with pytest.raises(ErasedError):
        await restored.load(key_of("alice"))
    with pytest.raises(ErasedError):
        await restored.load(key_of(None, "a1"))
    assert (await restored.load(key_of("bob"))).summary == MARKER

    # erase = shred, then delete; a user who comes back starts with a new key.
    await journal.erase(user_id="alice")
    assert [k async for k in journal.threads(user_id="alice")] == []
    await fill(journal, key_of("alice", "s9"), 2)
    assert (await journal.load(key_of("alice", "s9"))).summary == MARKER
    with pytest.raises(ErasedError):
        await restored.load(key_of("alice"))


async def test_ciphertexts_cannot_be_moved(tmp_path):
    """Associated data binds each object to its thread and version."""
    provider = StaticKeys([generate_key()])
    journal = Journal(
        LocalStore(tmp_path, segments=False, fsync=False), encryption=provider
    )
    a, b = key_of("alice", "s1"), key_of("alice", "s2")
    await fill(journal, a, 3)
    await fill(journal, b, 3)
    a_log = tmp_path / "default/agent/alice/s1/main"
    b_log = tmp_path / "default/agent/alice/s2/main"
    # Same owner, same key: a blob copied from another thread does not decrypt.
    blob = next((a_log / "blobs").iterdir())
    for target in (b_log / "blobs").iterdir():
        target.write_bytes(blob.read_bytes())
    with pytest.raises(CorruptRecordError):
        await journal.load(b)
    # A record moved to another version (its chain fixed up by hand would still
    # have to pass AES-GCM): refused.
    (a_log / "log/00000000000000000003.rec").write_bytes(
        (a_log / "log/00000000000000000002.rec").read_bytes()
    )
    with pytest.raises(CorruptRecordError, match="version 3"):
        [r async for r in journal.records(a)]


async def test_threads_with_long_ids_are_listed_and_erased(tmp_path):
    """Their real ids are in the (encrypted) first record."""
    provider = StaticKeys([generate_key()])
    journal = Journal.open(tmp_path, encryption=provider)
    long_session = "s" * 200
    key = ThreadKey("agent", long_session, user_id="alice")
    await fill(journal, key, 2)
    assert [k async for k in journal.threads()] == [key]
    assert await journal.erase(user_id="alice") == [key]
    assert [k async for k in journal.threads()] == []
