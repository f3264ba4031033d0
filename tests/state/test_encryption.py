"""Encrypted snapshot-mode stores: the state contract, no plaintext, erasure."""

from __future__ import annotations

import pytest

from journal.crypto import Encryption, StaticKeys, generate_key
from journal.errors import CorruptRecordError, ErasedError, KeyUnavailableError
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
    loaded = await store.load("alice", "s1", "main")
    assert loaded is not None
    assert loaded[0].summary == MARKER

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
