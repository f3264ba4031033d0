"""A checkpoint asked for is durable when the call returns: the one that is stored.

Checkpoints are derived data written without a sync; ``Writer.checkpoint()`` and
``Journal.checkpoint()`` promise more. The version they checkpoint may hold one
already (the writer's own background checkpoint, another process's, or one torn
by an earlier power cut), which an exclusive create keeps: what must be made
durable is that file and everything it names, which need not be what the caller
computed. A store that remembers what was created unsynced and never flushed
stands in for a power cut here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import Journal, MessageAppended, Msg, ThreadKey, codec
from journal.checkpoint import ChunkEncoder
from journal.engine.checkpoints import Snapshot, expand_refs, store_checkpoint
from journal.engine.log import ThreadLog
from journal.layout import ThreadLayout
from projections.agent_state import encode_state
from stores.memory import MemoryStore
from stores.testing.journal_contract.base import chunk_ending_ids

if TYPE_CHECKING:
    from collections.abc import Sequence

KEY = ThreadKey("agent", "durable", "main")
LAYOUT = ThreadLayout.of(KEY)


class UnsyncedStore(MemoryStore):
    """A memory store that tells which derived objects were never flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.unsynced: set[str] = set()

    async def create_derived(self, key: str, data: bytes) -> bool:
        created = await super().create_derived(key, data)
        if created:
            self.unsynced.add(key)
        return created

    async def create_many_derived(
        self, items: Sequence[tuple[str, bytes]]
    ) -> list[bool]:
        created = await super().create_many_derived(items)
        self.unsynced.update(k for (k, _), c in zip(items, created, strict=True) if c)
        return created

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        self.unsynced.discard(key)  # replace is durable
        return await super().replace(key, data, if_match=if_match)

    async def flush(self, keys: Sequence[str]) -> None:
        self.unsynced.difference_update(keys)
        await super().flush(keys)


async def _thread(j: Journal, messages: int) -> list[str]:
    """One message a record, each ending a chunk: a list long enough for indexes."""
    ids = chunk_ending_ids(messages)
    async with j.writer(KEY) as w:
        for n, mid in enumerate(ids, 1):
            await w.append([MessageAppended(Msg("user", f"message {n}", id=mid))])
    return ids


async def _unflushed_names(store: UnsyncedStore, version: int) -> list[str]:
    """The checkpoint at ``version`` and what it names, if not flushed."""
    log = ThreadLog(store, KEY)
    body = codec.decode_checkpoint(await log.read_checkpoint(version))
    chunks, indexes = await expand_refs(log, body.chunks, body.message_count)
    keys = [LAYOUT.checkpoint_key(version)]
    keys += [LAYOUT.blob_key(c) for c in chunks if not c.startswith("@")]
    keys += [LAYOUT.index_key(d) for d in indexes]
    return [k for k in keys if k in store.unsynced]


async def test_a_durable_checkpoint_flushes_the_one_stored_at_its_version():
    """Fails when it flushes what it computed: the stored list's indexes stay
    unsynced (a background checkpoint at the same version past the span limit,
    with other log spans turned into blobs, packs into other index blobs)."""
    store = UnsyncedStore()
    j = Journal(store, checkpoint_every=0, log_spans="never")
    await _thread(j, 150)
    log = ThreadLog(store, KEY)
    loaded = await j.load(KEY)
    (last,) = [r async for r in j.records(KEY, start=loaded.version)]
    state = encode_state(loaded.without_context())
    # Another chunk list at the same version, written first and not synced: the
    # context in reverse groups into other index blobs.
    other = Snapshot(
        loaded.version, bytes.fromhex(last.hash), state, loaded.context[::-1]
    )
    await store_checkpoint(log, other, ChunkEncoder(), set(), lambda: 1.0)
    stored = codec.decode_checkpoint(await log.read_checkpoint(loaded.version))
    assert any(ref.startswith("#") for ref in stored.chunks)
    ours = Snapshot(loaded.version, bytes.fromhex(last.hash), state, loaded.context)
    await store_checkpoint(log, ours, ChunkEncoder(), set(), lambda: 2.0, durable=True)
    # The file kept is the first one, and everything it names is now durable.
    kept = await log.read_checkpoint(loaded.version)
    assert codec.decode_checkpoint(kept).created_at == 1.0
    assert await _unflushed_names(store, loaded.version) == []


async def test_a_durable_checkpoint_replaces_an_unreadable_one_at_its_version():
    """Fails when the exclusive create keeps the torn file: the checkpoint the
    call returns is then unusable."""
    store = UnsyncedStore()
    j = Journal(store, checkpoint_every=0)
    ids = await _thread(j, 100)
    head = await j.head(KEY)
    # What a power cut can leave of an unsynced checkpoint: its first bytes.
    torn = codec.encode_checkpoint(
        codec.CheckpointBody(1, head, bytes(32), 0.0, b"", [], 0)
    )[:10]
    await store.create(LAYOUT.checkpoint_key(head), torn)
    assert await j.checkpoint(KEY) == head
    assert await _unflushed_names(store, head) == []
    state, warnings = await j.load_with_warnings(KEY)
    assert warnings == []
    assert [m.id for m in state.context] == ids
    report = await j.verify(KEY)
    assert report.ok, report.problems
    assert report.warnings == []


async def test_checkpointing_a_head_already_checkpointed_makes_it_durable():
    """Fails when ``Journal.checkpoint()`` returns at once because the newest
    checkpoint is at the head: that one was written in the background, unsynced."""
    store = UnsyncedStore()
    j = Journal(store, checkpoint_every=0, log_spans="never")
    await _thread(j, 120)
    writer = await j.acquire(KEY)
    head = await writer.checkpoint()
    await writer.close()
    assert await j.head(KEY) == head
    # As if written in the background: nothing of it flushed.
    store.unsynced.update(await store.list(LAYOUT.checkpoint_dir))
    store.unsynced.update(await store.list(LAYOUT.blob_dir))
    store.unsynced.update(await store.list(LAYOUT.index_dir))
    assert await _unflushed_names(store, head)
    assert await j.checkpoint(KEY) == head
    assert await _unflushed_names(store, head) == []
