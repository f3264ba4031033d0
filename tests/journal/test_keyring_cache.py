"""Key objects changed by another process, seen by a long-lived journal's keyring.

Each journal caches the data keys it unwrapped. Two ``Journal`` objects over one
``MemoryStore`` stand for two processes: they share the stored objects (copies of
the bytes) and nothing else, each with its own keyring and cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.crypto import Encryption, StaticKeys, generate_key
from journal.errors import ErasedError, KeyUnavailableError
from stores.memory import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

KEYRING = "@keyring/threads/"
BIG = "payload " * 20000  # over the blob threshold: stored as a blob


class KeyringStore(MemoryStore):
    """A memory store counting reads of key objects, with a hook to run after one.

    ``hook`` runs once, right after the next key object read (its bytes are
    already taken: what the hook changes, that reader does not see).
    """

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], Awaitable[object]] | None = None
        self.key_reads = 0

    async def read(self, key: str) -> tuple[bytes, str]:
        if key.startswith(KEYRING):
            self.key_reads += 1  # found or not
        found = await super().read(key)
        if self.hook is not None and key.startswith(KEYRING):
            hook, self.hook = self.hook, None
            await hook()
        return found


def alice(session: str) -> ThreadKey:
    return ThreadKey("agent", session, user_id="alice")


async def say(journal: Journal, key: ThreadKey, text: str) -> int:
    async with journal.writer(key) as w:
        return (await w.append([MessageAppended(Msg("user", text))])).version


async def test_shred_landing_while_a_writer_takes_its_key():
    """A shred right after the writer read the key object: no bare KeyError.

    The writer took the key before the shred, so what it commits is erased with
    the rest (docs/ENCRYPTION.md: stop the owner's writers before erasing).
    """
    provider = StaticKeys([generate_key()])
    store = KeyringStore()
    admin = Journal(store, encryption=provider)
    app = Journal(store, encryption=provider)
    await say(admin, alice("s0"), "before")
    shredded: list[str] = []

    async def shred() -> None:
        shredded.extend(await admin.shred(user_id="alice"))

    store.hook = shred
    version = await say(app, alice("s1"), "during")
    assert shredded == ["default/agent/alice"]
    assert version == 2  # acknowledged: ThreadCreated + fence, then the message
    with pytest.raises(ErasedError):
        await Journal(store, encryption=provider).load(alice("s1"))


async def test_writer_started_after_an_erasure_elsewhere_uses_a_new_key():
    """A long-lived journal's cached key was destroyed by another one's erase."""
    provider = StaticKeys([generate_key()])
    store = KeyringStore()
    app = Journal(store, encryption=provider)
    admin = Journal(store, encryption=provider)
    await say(app, alice("s1"), "before")  # the app holds alice's key now
    assert await admin.erase(user_id="alice") == [alice("s1")]
    reads = store.key_reads
    texts = [f"after {i}" for i in range(5)]
    async with app.writer(alice("s2")) as w:
        for text in texts:
            await w.append([MessageAppended(Msg("user", text))])
    # The writer read the key object once, not once a commit.
    assert store.key_reads == reads + 1
    for reader in (Journal(store, encryption=provider), app):
        state = await reader.load(alice("s2"))
        assert [m.content for m in state.context] == texts


@pytest.mark.parametrize("checkpoint", [False, True])
async def test_reader_meets_the_new_key_of_an_owner_back_after_erasure(checkpoint):
    """A long-lived reader's cache predates the key another process made."""
    provider = StaticKeys([generate_key()])
    store = KeyringStore()
    admin = Journal(store, encryption=provider)
    server = Journal(store, encryption=provider)
    await say(admin, alice("s1"), "old")
    assert (await server.load(alice("s1"))).context[0].content == "old"
    await admin.erase(user_id="alice")
    async with admin.writer(alice("s2")) as w:  # alice comes back: a new key
        await w.append([MessageAppended(Msg("user", "new"))])
        await w.append([MessageAppended(Msg("user", BIG))])
        if checkpoint:  # then the checkpoint is what a load decrypts first
            await w.checkpoint()
    reads = store.key_reads
    for _ in range(2):
        state = await server.load(alice("s2"))
        assert state.context[0].content == "new"
        assert state.context[-1].content == BIG
        # The unknown key id cost one read of the key object, once.
        assert store.key_reads == reads + 1


async def test_a_key_the_key_object_does_not_hold_fails_after_one_read():
    """Records under a key id that no key object holds: re-read once, then fail."""
    provider = StaticKeys([generate_key()])
    store = KeyringStore()
    server = Journal(store, encryption=provider)
    await say(server, alice("s1"), "known")  # the server holds alice's key
    # Another keyring made alice a key of its own: the shared one never had it.
    rogue = Journal(store, encryption=Encryption(provider, keyring=MemoryStore()))
    async with rogue.writer(alice("s2")) as w:
        for i in range(5):
            await w.append([MessageAppended(Msg("user", f"unknown {i}"))])
    for _ in range(2):
        reads = store.key_reads
        with pytest.raises(KeyUnavailableError, match="does not hold") as caught:
            await server.load(alice("s2"))
        assert caught.value.key_id.startswith("d-")
        assert store.key_reads == reads + 1  # not once a record


async def test_a_long_id_thread_of_an_owner_back_after_erasure_is_listed():
    """A thread whose path hashes a long id is named by decrypting its first
    record: with the new key of an owner back after an erasure done elsewhere."""
    provider = StaticKeys([generate_key()])
    store = KeyringStore()
    admin = Journal(store, encryption=provider)
    server = Journal(store, encryption=provider)
    first = ThreadKey("agent", "L" * 200, user_id="alice")
    await say(admin, first, "old")
    assert [k async for k in server.threads(user_id="alice")] == [first]
    await admin.erase(user_id="alice")
    back = ThreadKey("agent", "M" * 200, user_id="alice")
    await say(admin, back, "new")
    assert [k async for k in server.threads(user_id="alice")] == [back]


async def test_a_writer_does_not_build_on_a_thread_shredded_elsewhere():
    """The shred is done, the objects not yet deleted: a process whose cache still
    holds the destroyed key must not rebuild the thread from it and append to it
    under a new key (a thread nobody else can read any more). Its writer fails
    with ErasedError and writes nothing."""
    provider = StaticKeys([generate_key()])
    store = KeyringStore()
    admin = Journal(store, encryption=provider)
    server = Journal(store, encryption=provider)
    head = await say(server, alice("s1"), "before")
    assert await admin.shred(user_id="alice")
    with pytest.raises(ErasedError):
        await say(server, alice("s1"), "after")
    assert await admin.head(alice("s1")) == head
