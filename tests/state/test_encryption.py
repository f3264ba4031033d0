"""Encrypted snapshot-mode stores: the state contract, no plaintext, erasure."""

from __future__ import annotations

import json
import logging

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.crypto import Encryption, KeyFile, StaticKeys, generate_key
from journal.errors import (
    CorruptRecordError,
    ErasedError,
    KeyRotationIncompleteError,
    KeyUnavailableError,
)
from stores.local import LocalStore
from stores.memory import MemoryStore
from stores.state import InMemoryAgentStateStore, JsonFileAgentStateStore
from stores.state.encryption import SlotCipher
from stores.state.slots import SlotKey
from stores.testing.state_contract import AgentStateStoreContract, full_state

MARKER = "heron-basalt-5519"


def encryption(keyring=None):
    return Encryption(StaticKeys([generate_key()]), keyring=keyring or MemoryStore())


class TestEncryptedInMemoryStore(AgentStateStoreContract):
    @pytest.fixture
    async def state_store(self):
        store = InMemoryAgentStateStore().use_encryption(encryption())
        yield store
        await store.aclose()


class TestEncryptedJsonFileStore(AgentStateStoreContract):
    @pytest.fixture
    async def state_store(self, tmp_path):
        store = JsonFileAgentStateStore(tmp_path / "state", fsync=False)
        store.use_encryption(encryption(LocalStore(tmp_path / "keys", fsync=False)))
        yield store
        await store.aclose()


def marked_state():
    state = full_state()
    state.summary = MARKER
    return state


async def test_no_plaintext_in_state_files_and_erasure(tmp_path):
    enc = encryption(LocalStore(tmp_path / "keys", fsync=False))
    store = JsonFileAgentStateStore(tmp_path / "state", fsync=False).use_encryption(enc)
    for user in ("alice", "bob", None):
        await store.save(user, "s1", "main", marked_state())
    stored = b"".join(
        p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file()
    )
    assert MARKER.encode() not in stored
    await assert_reads_the_marker(store)

    plain = JsonFileAgentStateStore(tmp_path / "state", fsync=False)
    with pytest.raises(KeyUnavailableError):
        await plain.load("alice", "s1", "main")

    assert await store.shred("alice")
    with pytest.raises(ErasedError):
        await store.load("alice", "s1", "main")
    loaded = await store.load("bob", "s1", "main")
    assert loaded is not None
    assert loaded[0].summary == MARKER
    assert await store.shred(None, "s1")
    with pytest.raises(ErasedError):
        await store.load(None, "s1", "main")
    assert await store.delete("alice", "s1", "main")


async def test_a_slot_copied_to_another_slot_does_not_decrypt():
    cipher = SlotCipher(encryption())
    seal = await cipher.sealer(SlotKey.of("alice", "s1", "a"))
    stored = seal(b"{}")
    assert await cipher.open(SlotKey.of("alice", "s1", "a"), stored) == b"{}"
    with pytest.raises(CorruptRecordError):
        await cipher.open(SlotKey.of("alice", "s1", "b"), stored)


class _CountingStore(MemoryStore):
    """A keyring store that counts the reads of key objects."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def read(self, key):
        self.reads += 1
        return await super().read(key)


class _Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def two_processes(tmp_path, keyring=None):
    """Two stores over one state directory, each with its own keyring over one
    key store and one KEK: what two processes sharing a deployment have."""
    provider = StaticKeys([generate_key()])
    keys = keyring or MemoryStore()
    stores = []
    for _ in range(2):
        store = JsonFileAgentStateStore(tmp_path / "state", fsync=False)
        stores.append(store.use_encryption(Encryption(provider, keyring=keys)))
    return stores


async def assert_reads_the_marker(store: JsonFileAgentStateStore) -> None:
    """``store`` loads alice's slot, and it is the marked state last saved."""
    loaded = await store.load("alice", "s1", "main")
    assert loaded is not None
    assert loaded[0].summary == MARKER


async def test_a_save_after_a_shred_elsewhere_takes_a_new_key(tmp_path):
    # Process A keeps saving alice's slot; process B erases alice (shred, then
    # delete). A's next save, once its key check is due, must not use the
    # destroyed key: it would be acknowledged and read by nobody.
    a, b = two_processes(tmp_path)
    clock = _Clock()
    assert a.cipher is not None
    a.cipher.clock = clock
    await a.save("alice", "s1", "main", marked_state())
    assert await b.shred("alice")
    assert await b.delete("alice", "s1", "main")
    clock.now += 3600.0
    await a.save("alice", "s1", "main", marked_state())
    await assert_reads_the_marker(b)


async def test_a_first_save_after_loads_reads_the_key_object(tmp_path):
    # A's keys were cached by a load, before the shred: its first save checks.
    a, b = two_processes(tmp_path)
    await b.save("alice", "s1", "main", marked_state())
    assert await a.load("alice", "s1", "main") is not None
    assert await b.shred("alice")
    await a.save("alice", "s1", "main", marked_state())
    await assert_reads_the_marker(b)


async def test_saves_between_key_checks_do_not_read_the_key_object(tmp_path):
    keys = _CountingStore()
    a, _ = two_processes(tmp_path, keys)
    assert a.cipher is not None
    a.cipher.clock = _Clock()
    await a.save("alice", "s1", "main", marked_state())
    before = keys.reads
    for _ in range(20):
        await a.save("alice", "s1", "main", marked_state())
    assert keys.reads == before


async def test_a_key_check_interval_of_zero_checks_at_every_save(tmp_path):
    provider = StaticKeys([generate_key()])
    keys = MemoryStore()
    a, b = (
        JsonFileAgentStateStore(tmp_path / "state", fsync=False).use_encryption(
            Encryption(provider, keyring=keys), key_check_interval=interval
        )
        for interval in (0, 3600)
    )
    await a.save("alice", "s1", "main", marked_state())
    assert await b.shred("alice")
    await a.save("alice", "s1", "main", marked_state())
    await assert_reads_the_marker(b)
    with pytest.raises(ValueError, match="key_check_interval"):
        InMemoryAgentStateStore().use_encryption(
            Encryption(provider, keyring=keys), key_check_interval=-1
        )


async def test_a_load_meets_the_new_key_of_an_owner_back_after_erasure(tmp_path):
    # A cached alice's first key; B erased alice and alice came back through B
    # with a new key. A reads the key object once to learn it.
    a, b = two_processes(tmp_path)
    await a.save("alice", "s1", "main", marked_state())
    assert await b.shred("alice")
    await b.save("alice", "s1", "main", marked_state())
    await assert_reads_the_marker(a)


async def test_a_key_id_nobody_holds_is_still_unavailable(tmp_path):
    a, _ = two_processes(tmp_path)
    await a.save("alice", "s1", "main", marked_state())
    cipher = SlotCipher(encryption())
    seal = await cipher.sealer(SlotKey.of("alice", "s1", "other"))
    assert a.cipher is not None
    with pytest.raises(KeyUnavailableError):
        await a.cipher.open(SlotKey.of("alice", "s1", "other"), seal(b"{}"))


async def test_a_sealed_slot_nested_too_deeply_is_corrupt():
    cipher = SlotCipher(encryption())
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(CorruptRecordError):
        await cipher.open(
            SlotKey.of("alice", "s1", "a"), b'{"encrypted": "AJES1", "x": ' + deep
        )


async def test_slot_keys_are_rotated_and_the_old_kek_retired(tmp_path, caplog):
    # The rotation steps of docs/ENCRYPTION.md on a deployment whose journal and
    # state store share the key file and the keyring store.
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)

    def state_store() -> JsonFileAgentStateStore:
        keyring = LocalStore(tmp_path / "keys", fsync=False)
        enc = Encryption(KeyFile(kek), keyring=keyring)
        return JsonFileAgentStateStore(tmp_path / "state", fsync=False).use_encryption(
            enc
        )

    def journal() -> Journal:
        keyring = LocalStore(tmp_path / "keys", fsync=False)
        return Journal(
            MemoryStore(), encryption=Encryption(KeyFile(kek), keyring=keyring)
        )

    store = state_store()
    for user in ("alice", None):
        await store.save(user, "s1", "main", marked_state())
    async with journal().writer(ThreadKey("agent", "s1", user_id="bob")) as w:
        await w.append([MessageAppended(Msg("user", MARKER))])
    slots = tmp_path / "keys/@keyring/slots"
    # Another owner's key object copied in by hand: left as it is, reported.
    (slots / "mallory.key").write_bytes((slots / "alice.key").read_bytes())

    old = KeyFile(kek).key_id
    new = KeyFile.rotate(kek)
    assert await journal().rotate_keys() == 1  # bob's: the journal's only
    with caplog.at_level(logging.WARNING, logger="journal"):
        with pytest.raises(KeyRotationIncompleteError) as raised:
            await state_store().rotate_keys()
        assert raised.value.rewritten == 2  # alice's, ~/s1's
        assert "mallory" in str(raised.value)
    assert [r.getMessage() for r in caplog.records if "mallory" in r.getMessage()]
    (slots / "mallory.key").unlink()  # dealt with, as the error asks
    assert await state_store().rotate_keys() == 0
    for path in (slots / "alice.key", slots / "~/s1.key"):
        assert json.loads(path.read_text())["keys"][0]["kek"] == new
    KeyFile.retire(kek, old)

    store = state_store()
    for user in ("alice", None):
        loaded = await store.load(user, "s1", "main")
        assert loaded is not None
        assert loaded[0].summary == MARKER


async def test_rotating_a_plain_state_store_is_refused():
    with pytest.raises(ValueError, match="use_encryption"):
        await InMemoryAgentStateStore().rotate_keys()
