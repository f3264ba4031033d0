"""Key objects changed by another process, seen by a long-lived journal's keyring.

Each journal caches the data keys it unwrapped. Two ``Journal`` objects over one
``MemoryStore`` stand for two processes: they share the stored objects (copies of
the bytes) and nothing else, each with its own keyring and cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.crypto import StaticKeys, generate_key
from journal.errors import ErasedError
from stores.memory import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

KEYRING = "@keyring/threads/"


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
