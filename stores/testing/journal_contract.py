"""The journal contract: one pytest suite for the engine on every object store.

Subclass :class:`JournalContract` and override its ``journal_url`` fixture (and, if
the backend needs them, ``storage_options``) to run the whole suite on a backend::

    class TestLocalJournal(JournalContract):
        @pytest.fixture
        async def journal_url(self, tmp_path):
            return str(tmp_path / "journal")

Every test opens its journals through the ``journal`` fixture, a factory that returns
a *fresh* :class:`~journal.Journal` (with a fresh store object) on the same storage
each time it is called, so a second journal stands in for another process. Tests work
on threads with fresh, unique ids, so bindings may share one root or bucket between
tests.

What the suite covers: append and reload; records, their order and hash chain; time
travel; version conflicts; idempotent ``batch_id`` retries (also after a lost
acknowledgement); the lease (held, waited for, taken over by the same holder);
fencing of a superseded writer, including a lower-epoch commit that lands between a
takeover's lease swap and its fence; checkpoint plus tail replay equal to a full
replay (a hypothesis property); ``update``, ``save_state`` and ``clear_context``;
large payloads as blobs; unknown event types and upcasters; listing threads; and
that loading after a checkpoint never lists or reads the log before it.
"""

# ruff: noqa: S101

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import (
    AgentStateReplaced,
    ContextCleared,
    ContextCompacted,
    CorruptRecordError,
    Event,
    EvidenceBound,
    FencedError,
    Journal,
    LeaseAcquired,
    LeaseHeldError,
    MessageAppended,
    Msg,
    ObjectStore,
    PermissionModeSet,
    PermissionRuleRemoved,
    PermissionRuleSet,
    PlanModeEntered,
    PlanModeExited,
    Record,
    RequirementDecided,
    RunCompleted,
    RunInterrupted,
    RunStarted,
    StaleStateError,
    StorageError,
    SummarySet,
    TaskBegun,
    TextBlock,
    ThinkingBlock,
    ThreadCreated,
    ThreadKey,
    TodosWritten,
    ToolCallCompleted,
    ToolCallRequested,
    ToolGroupActivated,
    ToolGroupDeactivated,
    ToolResultBlock,
    ToolUseBlock,
    UnknownEvent,
    UnknownEventError,
    VerificationRecorded,
    VersionConflictError,
    register_event,
    register_upcaster,
    unregister_event,
)
from journal.codec import BLOB_THRESHOLD
from journal.engine.lease import acquire_lease, read_lease
from journal.engine.log import ThreadLog
from journal.layout import version_of
from projections import AgentState, AgentStateProjection, fold

if TYPE_CHECKING:
    import builtins
    from collections.abc import (
        AsyncIterator,
        Awaitable,
        Callable,
        Iterator,
        Mapping,
        Sequence,
    )

    from journal.events import Role

__all__ = ["JournalContract", "JournalFactory", "RecordingStore"]

_GENESIS = "00" * 32


# --- helpers ----------------------------------------------------------------------


class RecordingStore(ObjectStore):
    """A proxy store that records every call and can run hooks around ``create``.

    Attributes:
        inner: The store that does the work.
        calls: ``(operation, key or prefix, start_after)`` per call, in order;
            ``read_many`` is recorded as one ``read`` per key.
        before_create: Awaited with the key before each ``create`` is passed on.
        after_create: Awaited with the key after each ``create`` succeeded (it may
            raise, to simulate a reply lost after the write landed).
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        before_create: Callable[[str], Awaitable[None]] | None = None,
        after_create: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.inner = inner
        self.url = inner.url
        self.writable = inner.writable
        self.calls: list[tuple[str, str, str | None]] = []
        self.before_create = before_create
        self.after_create = after_create

    async def create(self, key: str, data: bytes) -> str:
        """Record, run the hooks and pass on."""
        self.calls.append(("create", key, None))
        if self.before_create is not None:
            await self.before_create(key)
        etag = await self.inner.create(key, data)
        if self.after_create is not None:
            await self.after_create(key)
        return etag

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        """Record and pass on."""
        self.calls.append(("replace", key, None))
        return await self.inner.replace(key, data, if_match=if_match)

    async def read(self, key: str) -> tuple[bytes, str]:
        """Record and pass on."""
        self.calls.append(("read", key, None))
        return await self.inner.read(key)

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        """Record one ``read`` per key and pass on."""
        self.calls.extend(("read", key, None) for key in keys)
        return await self.inner.read_many(keys, concurrency=concurrency)

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        """Record and pass on."""
        self.calls.append(("list", prefix, start_after))
        return await self.inner.list(prefix, start_after=start_after)

    async def delete(self, key: str) -> bool:
        """Record and pass on."""
        self.calls.append(("delete", key, None))
        return await self.inner.delete(key)

    async def children(self, prefix: str) -> builtins.list[str]:
        """Record and pass on."""
        self.calls.append(("children", prefix, None))
        return await self.inner.children(prefix)

    async def leftovers(self, prefix: str) -> builtins.list[str]:
        """Pass on."""
        return await self.inner.leftovers(prefix)

    async def aclose(self) -> None:
        """Close the inner store."""
        await self.inner.aclose()


class JournalFactory:
    """Opens fresh journals on one storage location (the ``journal`` fixture).

    Each call opens a new store object, as another process would; every journal
    opened is closed when the test ends.
    """

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = dict(options)
        # A journal option among the storage options: every journal opened uses it.
        self.compression: str | None = self.options.pop("compression", None)
        self._opened: list[Journal] = []

    def __call__(
        self,
        *,
        checkpoint_every: int = 100,
        blob_threshold: int = BLOB_THRESHOLD,
        clock: Callable[[], float] | None = None,
        wrap: Callable[[ObjectStore], ObjectStore] | None = None,
    ) -> Journal:
        """Open a journal.

        Args:
            checkpoint_every: Automatic checkpoint interval (0: off).
            blob_threshold: Encoded events larger than this become blobs.
            clock: The journal's wall clock (default ``time.time``).
            wrap: Wraps the fresh store (a proxy such as :class:`RecordingStore`).
        """
        store = Journal.open(self.url, **self.options).store
        if wrap is not None:
            store = wrap(store)
        journal = Journal(
            store,
            checkpoint_every=checkpoint_every,
            blob_threshold=blob_threshold,
            clock=clock or time.time,
            compression=self.compression,
        )
        self._opened.append(journal)
        return journal

    async def aclose(self) -> None:
        """Close every journal opened."""
        for journal in self._opened:
            with contextlib.suppress(Exception):
                await journal.aclose()
        self._opened.clear()


def new_key(**ids: str | None) -> ThreadKey:
    """A thread key with a fresh session id (other ids as given)."""
    args: dict[str, Any] = {
        "agent_id": "contract-agent",
        "session_id": f"s-{uuid.uuid4().hex}",
    }
    args.update(ids)
    return ThreadKey(**args)


def say(text: str, role: Role = "user") -> MessageAppended:
    """A ``MessageAppended`` event with a plain-text message."""
    return MessageAppended(Msg(role, text))


def encoded(state: msgspec.Struct) -> bytes:
    """A state's canonical bytes, for equality checks."""
    return msgspec.msgpack.encode(state)


def empty_state(key: ThreadKey) -> AgentState:
    """The state of a thread with no records."""
    return AgentStateProjection(str(key)).initial(key)


async def all_records(journal: Journal, key: ThreadKey) -> list[Record]:
    """Every record of the thread, in order."""
    return [r async for r in journal.records(key)]


def replay(key: ThreadKey, records: Sequence[Record]) -> AgentState:
    """The state a full replay of ``records`` gives (no checkpoint)."""
    projection = AgentStateProjection(str(key))
    return fold(projection, projection.initial(key), records)


def batch_ids(records: Sequence[Record]) -> list[str]:
    """The records' batch ids, in order."""
    return [r.batch_id for r in records]


def texts(state: AgentState) -> list[str]:
    """The text of every message in the state's context."""
    return [m.text for m in state.context]


@contextlib.contextmanager
def forgotten(type_name: str) -> Iterator[None]:
    """Make this process a reader that does not know ``type_name`` (then restore)."""
    info = unregister_event(type_name)
    try:
        yield
    finally:
        register_event(
            info.cls, name=info.name, required=info.required, schema=info.schema
        )


def _unique(name: str) -> str:
    return f"Contract{name}{uuid.uuid4().hex}"


# --- strategies for the replay property ---------------------------------------------

_ID_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12
)
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | _ID_TEXT,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_ID_TEXT, inner, max_size=3)
    ),
    max_leaves=6,
)
_RUNS = st.sampled_from(["run-1", "run-2", "run-3"])
_CALLS = st.sampled_from(["call-1", "call-2", "call-3", "call-4"])
_TOOLS = st.sampled_from(["read_file", "write_file", "bash", "search"])
_GROUPS = st.sampled_from(["files", "web", "shell"])
_REQS = st.sampled_from(["req-a", "req-b", "req-c"])
_BLOCKS = st.one_of(
    st.builds(TextBlock, _ID_TEXT),
    st.builds(ToolUseBlock, _CALLS, _TOOLS, _JSON),
    st.builds(ToolResultBlock, _CALLS, _JSON, st.booleans()),
    st.builds(ThinkingBlock, _ID_TEXT),
)
_MESSAGES = st.builds(
    Msg,
    role=st.sampled_from(["user", "assistant", "system", "tool"]),
    content=_ID_TEXT | st.lists(_BLOCKS, max_size=3),
    name=st.none() | _ID_TEXT,
    id=st.uuids().map(lambda u: u.hex),
    metadata=st.dictionaries(_ID_TEXT, _JSON, max_size=2),
)


class _Compact(msgspec.Struct, frozen=True):
    """Compact the messages at these positions (modulo the context's length)."""

    picks: tuple[int, ...]
    summary: str


class _Complete(msgspec.Struct, frozen=True):
    """Complete the pending tool call at this position (modulo their number)."""

    pick: int
    output: Any
    is_error: bool


_EVENTS: st.SearchStrategy[object] = st.one_of(
    st.builds(MessageAppended, _MESSAGES),
    st.builds(MessageAppended, _MESSAGES),
    st.builds(SummarySet, st.none() | _ID_TEXT),
    st.builds(ContextCleared, _ID_TEXT),
    st.builds(_Compact, st.lists(st.integers(0, 50), max_size=3).map(tuple), _ID_TEXT),
    st.builds(PermissionRuleSet, _TOOLS, st.sampled_from(["allow", "deny", "ask"])),
    st.builds(PermissionRuleRemoved, _TOOLS),
    st.builds(PermissionModeSet, st.sampled_from(["default", "accept_edits", "plan"])),
    st.builds(PlanModeEntered, st.none() | _ID_TEXT),
    st.builds(PlanModeExited),
    st.builds(
        TodosWritten,
        st.lists(st.fixed_dictionaries({"content": _ID_TEXT, "done": st.booleans()})),
        st.integers(0, 100),
    ),
    st.builds(ToolGroupActivated, _GROUPS),
    st.builds(ToolGroupDeactivated, _GROUPS),
    st.builds(ToolCallRequested, _CALLS, _TOOLS, _JSON, st.none() | _RUNS),
    st.builds(ToolCallCompleted, _CALLS, _JSON, st.booleans()),
    st.builds(_Complete, st.integers(0, 10), _JSON, st.booleans()),
    st.builds(TaskBegun, _ID_TEXT, st.lists(_REQS, max_size=3)),
    st.builds(RequirementDecided, _REQS, st.sampled_from(["met", "unmet"]), _ID_TEXT),
    st.builds(EvidenceBound, _REQS, _ID_TEXT),
    st.builds(VerificationRecorded, st.booleans(), _ID_TEXT),
    st.builds(RunStarted, _RUNS, st.none() | _ID_TEXT),
    st.builds(RunCompleted, _RUNS),
    st.builds(
        RunInterrupted,
        _RUNS,
        _ID_TEXT,
        st.sampled_from(["user", "shutdown", "recovery"]),
    ),
)
_OPS: st.SearchStrategy[object] = st.one_of(
    st.lists(_EVENTS, min_size=1, max_size=3).map(tuple),
    st.lists(_EVENTS, min_size=1, max_size=3).map(tuple),
    st.lists(_EVENTS, min_size=1, max_size=3).map(tuple),
    st.just("checkpoint"),
    st.just("reopen"),
)


def _resolve(spec: object, state: AgentState) -> object | None:
    """Turn a state-dependent spec into an event (None: nothing to do)."""
    if isinstance(spec, _Compact):
        ids = [m.id for m in state.context]
        if not ids:
            return None
        return ContextCompacted(
            spec.summary, sorted({ids[p % len(ids)] for p in spec.picks})
        )
    if isinstance(spec, _Complete):
        pending = sorted(state.tool_context.pending_calls)
        if not pending:
            return None
        return ToolCallCompleted(
            pending[spec.pick % len(pending)], spec.output, spec.is_error
        )
    return spec


# --- the suite ------------------------------------------------------------------------


class JournalContract:
    """The behaviour of the journal engine on a backend; bind ``journal_url``.

    Example:
        ``class TestMemoryJournal(JournalContract)`` with a fixture
        ``async def journal_url(self): return f"memory://{uuid.uuid4().hex}"``.
    """

    @pytest.fixture
    async def journal_url(self) -> str:
        """The URL of the storage under test: every binding must override this.

        Raises:
            NotImplementedError: The suite was run without a binding.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must override the 'journal_url' fixture"
        )

    @pytest.fixture
    def storage_options(self) -> dict[str, Any]:
        """Options passed to ``Journal.open`` with the URL (none by default).

        ``compression`` among them is passed to every ``Journal`` opened.
        """
        return {}

    @pytest.fixture
    async def journal(
        self, journal_url: str, storage_options: dict[str, Any]
    ) -> AsyncIterator[JournalFactory]:
        """A factory of fresh journals on the storage under test."""
        factory = JournalFactory(journal_url, storage_options)
        yield factory
        await factory.aclose()

    # --- append and read --------------------------------------------------------

    async def test_append_then_reload_with_a_new_journal(
        self, journal: JournalFactory
    ) -> None:
        """A second journal object sees exactly what the writer committed."""
        key = new_key(user_id="alice")
        j = journal()
        async with j.writer(key, holder="node-a") as w:
            assert w.version == 1  # the fence record (with ThreadCreated)
            rec = await w.append([say("hello"), say("hi there", "assistant")])
            assert rec.version == 2
            assert w.version == 2
            await w.append([PermissionRuleSet("bash", "deny")])
            live = w.state.copy()
        other = journal()
        assert await other.head(key) == 3
        state = await other.load(key)
        assert encoded(state) == encoded(live)
        assert state.version == 3
        assert texts(state) == ["hello", "hi there"]
        assert state.permission_context.rules == {"bash": "deny"}
        assert (state.session_id, state.user_id, state.thread_id) == (
            key.session_id,
            "alice",
            "main",
        )
        report = await other.verify(key)
        assert report.ok, report.problems
        assert report.head == 3

    async def test_empty_thread(self, journal: JournalFactory) -> None:
        """A thread never written has head 0, the empty state and no records."""
        key = new_key()
        j = journal()
        assert await j.head(key) == 0
        assert encoded(await j.load(key)) == encoded(empty_state(key))
        assert await all_records(j, key) == []
        report = await j.verify(key)
        assert report.ok
        assert report.head == 0

    async def test_records_content_order_and_hash_chain(
        self, journal: JournalFactory
    ) -> None:
        """records() yields every commit in order, its events intact, chained."""
        key = new_key()
        j = journal()
        appended: list[list[object]] = [
            [say("one")],
            [RunStarted("run-1"), ToolCallRequested("c1", "bash", {"cmd": "ls"})],
            [ToolCallCompleted("c1", ["a", "b"]), RunCompleted("run-1")],
            [TodosWritten([{"content": "x", "done": False}], 1)],
        ]
        async with j.writer(key, holder="node-a") as w:
            acked = [
                await w.append(events, run_id="run-1" if i else None)
                for i, events in enumerate(appended)
            ]
        records = await all_records(journal(), key)
        assert [r.version for r in records] == [1, 2, 3, 4, 5]
        fence = records[0]
        assert isinstance(fence.events[0], ThreadCreated)
        assert fence.events[0].session_id == key.session_id
        assert fence.events[1] == LeaseAcquired(fence.epoch, "node-a")
        for record, events, ack in zip(records[1:], appended, acked, strict=True):
            assert record.events == events
            assert (record.version, record.batch_id, record.hash) == (
                ack.version,
                ack.batch_id,
                ack.hash,
            )
            assert record.epoch == fence.epoch
            assert record.writer == "node-a"
        assert records[1].run_id is None
        assert records[2].run_id == "run-1"
        assert records[0].prev_hash == _GENESIS
        for before, after in itertools.pairwise(records):
            assert after.prev_hash == before.hash
        assert len({r.hash for r in records}) == len(records)
        assert len({r.batch_id for r in records}) == len(records)
        # Ranges: start <= version < stop.
        j2 = journal()
        assert [r.version async for r in j2.records(key, start=2, stop=4)] == [2, 3]
        assert [r.version async for r in j2.records(key, start=4)] == [4, 5]
        assert [r.version async for r in j2.records(key, start=9)] == []

    async def test_time_travel_every_version(self, journal: JournalFactory) -> None:
        """load(at_version=N) is the state right after version N, for every N."""
        key = new_key()
        j = journal(checkpoint_every=3)
        expected: dict[int, bytes] = {0: encoded(empty_state(key))}
        for round_ in range(3):
            async with j.writer(key, holder=f"node-{round_}") as w:
                expected[w.version] = encoded(w.state)
                for i in range(4):
                    await w.append([say(f"r{round_} m{i}")])
                    expected[w.version] = encoded(w.state)
                await w.append([SummarySet(f"summary {round_}")])
                expected[w.version] = encoded(w.state)
                if round_ == 1:
                    await w.clear_context("time travel")
                    expected[w.version] = encoded(w.state)
                    await w.checkpoint()
        head = await j.head(key)
        assert sorted(expected) == list(range(head + 1))
        reader = journal()
        for version in range(head + 1):
            state, warnings = await reader.load_with_warnings(key, at_version=version)
            assert warnings == []
            assert state.version == version
            assert encoded(state) == expected[version], version
        assert encoded(await reader.load(key)) == expected[head]
        with pytest.raises(ValueError, match="version"):
            await reader.load(key, at_version=head + 1)
        with pytest.raises(ValueError, match="at_version"):
            await reader.load(key, at_version=-1)

    # --- version checks and idempotency ------------------------------------------

    async def test_expected_version_mismatch_writes_nothing(
        self, journal: JournalFactory
    ) -> None:
        """A stale expected_version raises VersionConflictError and commits nothing."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            rec = await w.append([say("one")], expected_version=w.version)
            before = await all_records(j, key)
            for stale in (rec.version - 1, rec.version + 1, 0):
                with pytest.raises(VersionConflictError) as info:
                    await w.append([say("never")], expected_version=stale)
                assert info.value.expected == stale
                assert info.value.actual == rec.version
                assert str(key) in str(info.value)
            assert w.version == rec.version
            assert await j.head(key) == rec.version
            assert batch_ids(await all_records(j, key)) == batch_ids(before)
            # The writer is still usable.
            rec2 = await w.append([say("two")], expected_version=rec.version)
            assert rec2.version == rec.version + 1
        state = await journal().load(key)
        assert texts(state) == ["one", "two"]
        assert (await journal().verify(key)).ok

    async def test_batch_id_retry_is_idempotent(self, journal: JournalFactory) -> None:
        """The same batch_id and events return the first record and write nothing."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            events: list[object] = [say("exactly once"), ToolGroupActivated("files")]
            first = await w.append(events, batch_id="batch-1")
            again = await w.append(list(events), batch_id="batch-1")
            assert again.version == first.version
            assert again.hash == first.hash
            assert again.batch_id == "batch-1"
            assert w.version == first.version
            await w.append([say("later")], batch_id="batch-2")
            # A retry after later commits still finds the original.
            late = await w.append(list(events), batch_id="batch-1")
            assert late.version == first.version
            with pytest.raises(ValueError, match="batch-1"):
                await w.append([say("something else")], batch_id="batch-1")
            head = w.version
        records = await all_records(journal(), key)
        assert len(records) == head
        assert batch_ids(records).count("batch-1") == 1
        assert texts(await journal().load(key)) == ["exactly once", "later"]

    @pytest.mark.parametrize("transient", [False, True])
    async def test_batch_id_retry_after_a_lost_acknowledgement(
        self, journal: JournalFactory, transient: bool
    ) -> None:
        """A commit whose reply was lost is recognised, never duplicated."""
        key = new_key()
        lose_next = [False]

        async def lose_reply(store_key: str) -> None:
            if lose_next[0] and "/log/" in store_key:
                lose_next[0] = False
                raise StorageError("the reply was lost", transient=transient)

        j = journal(wrap=lambda s: RecordingStore(s, after_create=lose_reply))
        landed: list[object] = [say("landed")]
        second: list[object] = [say("second")]
        async with j.writer(key) as w:
            base = w.version
            lose_next[0] = True
            if transient:
                # The writer retries by itself and finds its own record.
                rec = await w.append(landed, batch_id="b-lost")
            else:
                with pytest.raises(StorageError):
                    await w.append(landed, batch_id="b-lost")
                rec = await w.append(landed, batch_id="b-lost")
            assert rec.version == base + 1
            assert w.version == base + 1
            # The same batch id with other events is refused, even after a loss.
            lose_next[0] = True
            if transient:
                await w.append(second, batch_id="b-2")
            else:
                with pytest.raises(StorageError):
                    await w.append(second, batch_id="b-2")
            with pytest.raises(ValueError, match="b-2"):
                await w.append([say("not the second")], batch_id="b-2")
            rec3 = await w.append([say("third")])
            assert rec3.version == base + 3
        records = await all_records(journal(), key)
        assert batch_ids(records).count("b-lost") == 1
        assert batch_ids(records).count("b-2") == 1
        assert texts(await journal().load(key)) == ["landed", "second", "third"]
        assert (await journal().verify(key)).ok

    # --- the lease ------------------------------------------------------------------

    async def test_lease_held_by_another_holder(self, journal: JournalFactory) -> None:
        """A second holder gets LeaseHeldError naming the holder and epoch."""
        key = new_key()
        j1, j2 = journal(), journal()
        async with j1.writer(key, holder="node-a") as w:
            await w.append([say("mine")])
            with pytest.raises(LeaseHeldError) as info:
                async with j2.writer(key, holder="node-b"):
                    pytest.fail("the lease was granted twice")
            assert info.value.holder == "node-a"
            assert info.value.epoch == w.epoch
            assert "node-a" in str(info.value)
            assert str(key) in str(info.value)
            assert info.value.expires_at > time.time()
            # Nothing was written by the refused writer.
            assert await j2.head(key) == w.version
            await w.append([say("still mine")])
        assert texts(await journal().load(key)) == ["mine", "still mine"]

    async def test_wait_succeeds_after_the_holder_closes(
        self, journal: JournalFactory
    ) -> None:
        """wait= polls until the holder releases, then takes the next epoch."""
        key = new_key()
        j1, j2 = journal(), journal()
        first = await j1.acquire(key, holder="node-a")
        await first.append([say("from a")])
        waiter = asyncio.create_task(j2.acquire(key, holder="node-b", wait=30.0))
        await asyncio.sleep(0.05)
        assert not waiter.done()  # node-a's lease is live for 30 s
        await first.close()
        second = await waiter
        try:
            assert second.epoch == first.epoch + 1
            assert second.base_version == first.version
            assert texts(second.state) == ["from a"]
            await second.append([say("from b")])
        finally:
            await second.close()
        records = await all_records(journal(), key)
        assert [r.epoch for r in records] == sorted(r.epoch for r in records)
        assert texts(await journal().load(key)) == ["from a", "from b"]

    async def test_same_holder_takes_over_its_own_lease(
        self, journal: JournalFactory
    ) -> None:
        """A restarted holder takes over its unexpired lease; the old one is fenced."""
        key = new_key()
        j1, j2 = journal(), journal()
        old = await j1.acquire(key, holder="node-a")
        try:
            await old.append([say("before restart")])
            async with j2.writer(key, holder="node-a") as new:
                assert new.epoch == old.epoch + 1
                assert texts(new.state) == ["before restart"]
                with pytest.raises(FencedError):
                    await old.append([say("zombie")])
                await new.append([say("after restart")])
        finally:
            await old.close()
        state = await journal().load(key)
        assert texts(state) == ["before restart", "after restart"]

    async def test_closing_a_superseded_writer_keeps_the_new_lease(
        self, journal: JournalFactory
    ) -> None:
        """An old writer's close never releases the lease its successor holds."""
        key = new_key()
        j1, j2, j3 = journal(), journal(), journal()
        old = await j1.acquire(key, holder="node-a")
        new = await j2.acquire(key, holder="node-a")
        try:
            await old.close()  # never appended: it does not know it was fenced
            with pytest.raises(LeaseHeldError) as info:
                await j3.acquire(key, holder="node-c")
            assert info.value.epoch == new.epoch
            await new.append([say("still the owner")])
        finally:
            await new.close()
        lease, _ = await read_lease(j3.store, ThreadLog(j3.store, key).lease_key)
        assert lease is not None
        assert lease.epoch == new.epoch

    async def test_racing_acquires_grant_one_lease(
        self, journal: JournalFactory
    ) -> None:
        """Of many holders racing for a new thread's lease, exactly one wins."""
        key = new_key()
        holders = [f"node-{i}" for i in range(8)]
        results = await asyncio.gather(
            *(journal().acquire(key, holder=h) for h in holders),
            return_exceptions=True,
        )
        winners = [r for r in results if not isinstance(r, BaseException)]
        try:
            assert len(winners) == 1, results
            losers = [r for r in results if isinstance(r, BaseException)]
            assert all(isinstance(e, LeaseHeldError) for e in losers), losers
            assert {e.holder for e in losers if isinstance(e, LeaseHeldError)} == {
                winners[0].holder
            }
            await winners[0].append([say("the only writer")])
        finally:
            for w in winners:
                await w.close()
        records = await all_records(journal(), key)
        assert len(records) == 2
        assert (await journal().verify(key)).ok

    async def test_concurrent_appends_on_one_writer(
        self, journal: JournalFactory
    ) -> None:
        """Appends issued concurrently on one writer commit one after another."""
        key = new_key()
        async with journal().writer(key) as w:
            acked = await asyncio.gather(
                *(w.append([say(f"m{i}")], batch_id=f"b{i}") for i in range(20))
            )
            head = w.version
        assert sorted(r.version for r in acked) == list(range(2, head + 1))
        records = await all_records(journal(), key)
        for rec in acked:
            assert records[rec.version - 1].batch_id == rec.batch_id
        assert sorted(texts(await journal().load(key))) == sorted(
            f"m{i}" for i in range(20)
        )

    # --- fencing --------------------------------------------------------------------

    async def test_fenced_writer_never_lands(self, journal: JournalFactory) -> None:
        """After a takeover the old writer's appends raise FencedError and vanish."""
        key = new_key()
        j_old = journal()
        # The new node's clock is far ahead: the old lease looks expired to it.
        j_new = journal(clock=lambda: time.time() + 3600)
        old = await j_old.acquire(key, holder="node-a")
        try:
            await old.append([say("acknowledged")], batch_id="old-1")
            async with j_new.writer(key, holder="node-b") as new:
                assert new.epoch > old.epoch
                for attempt in range(3):
                    with pytest.raises(FencedError) as info:
                        await old.append(
                            [say(f"zombie {attempt}")], batch_id=f"zombie-{attempt}"
                        )
                    assert info.value.epoch == old.epoch
                    assert str(key) in str(info.value)
                assert old.fenced
                with pytest.raises(FencedError):
                    await old.checkpoint()
                head = new.version
                assert await j_new.head(key) == head
                await new.append([say("from the new writer")])
            with pytest.raises(FencedError):
                await old.append([say("zombie again")])
        finally:
            await old.close()
        records = await all_records(journal(), key)
        assert not any(b.startswith("zombie") for b in batch_ids(records))
        assert "old-1" in batch_ids(records)
        assert texts(await journal().load(key)) == [
            "acknowledged",
            "from the new writer",
        ]
        assert [r.epoch for r in records] == sorted(r.epoch for r in records)
        report = await journal().verify(key)
        assert report.ok, report.problems

    async def test_first_fenced_append_reports_the_newer_epoch(
        self, journal: JournalFactory
    ) -> None:
        """The append that collides with the fence names both epochs."""
        key = new_key()
        old = await journal().acquire(key, holder="node-a")
        try:
            new = await journal().acquire(key, holder="node-a")
            try:
                with pytest.raises(FencedError) as info:
                    await old.append([say("zombie")])
                assert info.value.epoch == old.epoch
                assert info.value.current_epoch == new.epoch
            finally:
                await new.close()
        finally:
            await old.close()

    async def test_lower_epoch_commit_before_the_fence_is_applied(
        self, journal: JournalFactory
    ) -> None:
        """A commit landing between a takeover's lease swap and its fence is kept.

        The new writer finds its fence slot taken by the old epoch: a valid commit by
        a writer that was still alive. It applies it and fences after it; the old
        writer's next append is fenced.
        """
        key = new_key()
        j_old = journal()
        old = await j_old.acquire(key, holder="node-a")
        interleaved: list[Record] = []

        async def old_commits_first(store_key: str) -> None:
            if not interleaved and "/log/" in store_key:
                interleaved.append(
                    await old.append([say("raced the fence")], batch_id="old-race")
                )

        j_new = journal(
            clock=lambda: time.time() + 3600,
            wrap=lambda s: RecordingStore(s, before_create=old_commits_first),
        )
        try:
            await old.append([say("before")], batch_id="old-0")
            base = old.version
            async with j_new.writer(key, holder="node-b") as new:
                assert interleaved
                assert interleaved[0].version == base + 1
                assert new.base_version == base
                assert new.version == base + 2  # the old commit, then the fence
                assert texts(new.state) == ["before", "raced the fence"]
                with pytest.raises(FencedError):
                    await old.append([say("too late")], batch_id="old-late")
                await new.append([say("from b")])
                live = new.state.copy()
        finally:
            await old.close()
        records = await all_records(journal(), key)
        assert batch_ids(records)[base] == "old-race"
        assert records[base].epoch == old.epoch
        assert isinstance(records[base + 1].events[0], LeaseAcquired)
        assert "old-late" not in batch_ids(records)
        assert encoded(await journal().load(key)) == encoded(live)
        assert (await journal().verify(key)).ok

    async def test_commit_after_a_bare_lease_swap_is_applied(
        self, journal: JournalFactory
    ) -> None:
        """A lease swapped with no fence yet does not lose the old writer's commits."""
        key = new_key()
        j_old, j_new = journal(), journal(clock=lambda: time.time() + 3600)
        old = await j_old.acquire(key, holder="node-a")
        try:
            await old.append([say("one")])
            # The new node swaps the lease and "crashes" before writing its fence.
            lease = await acquire_lease(
                j_new.store,
                ThreadLog(j_new.store, key).lease_key,
                label=str(key),
                holder="node-b",
                ttl=30.0,
                wait=0.0,
                clock=j_new.clock,
            )
            assert lease.record.epoch == old.epoch + 1
            landed = await old.append([say("after the swap")])
            async with j_new.writer(key, holder="node-b") as new:
                assert new.epoch == old.epoch + 2
                assert new.base_version == landed.version
                assert texts(new.state) == ["one", "after the swap"]
                with pytest.raises(FencedError):
                    await old.append([say("fenced")])
        finally:
            await old.close()
        state = await journal().load(key)
        assert texts(state) == ["one", "after the swap"]
        assert (await journal().verify(key)).ok

    @pytest.mark.parametrize("damage", ["deleted", "garbled"])
    async def test_a_lost_lease_object_never_lowers_the_epoch(
        self, journal: JournalFactory, damage: str
    ) -> None:
        """With LEASE gone or unreadable, the next fence still outranks the log.

        Otherwise the new fence would look like an older writer's commit: the old
        writer would apply it and write on, and fence the new lease holder.
        """
        key = new_key()
        j = journal()
        for holder in ("node-a", "node-b", "node-c"):
            async with j.writer(key, holder=holder) as w:
                await w.append([say(holder)])
        old = await journal(clock=lambda: time.time() + 3600).acquire(
            key, holder="node-old"
        )
        try:
            top = old.epoch
            lease_key = ThreadLog(j.store, key).lease_key
            if damage == "deleted":
                assert await j.store.delete(lease_key)
            else:
                await j.store.replace(lease_key, b"\x00not a lease", if_match=None)
            async with journal().writer(key, holder="node-new") as new:
                assert new.epoch > top
                with pytest.raises(FencedError):
                    await old.append([say("zombie")])
                await new.append([say("node-new")])
        finally:
            await old.close()
        records = await all_records(journal(), key)
        assert [r.epoch for r in records] == sorted(r.epoch for r in records)
        assert texts(await journal().load(key)) == [
            "node-a",
            "node-b",
            "node-c",
            "node-new",
        ]
        report = await journal().verify(key)
        assert report.ok, [str(p) for p in report.problems]

    async def test_writer_whose_renewals_fail_stops_appending(
        self, journal: JournalFactory
    ) -> None:
        """A writer that cannot renew stops before its lease could expire."""
        key = new_key()
        failing = [False]

        async def fail_lease_writes(store_key: str) -> None:
            if failing[0] and store_key.endswith("/LEASE"):
                raise StorageError("the lease cannot be written", transient=True)

        class LeaseFailingStore(RecordingStore):
            async def replace(
                self, key: str, data: bytes, *, if_match: str | None
            ) -> str:
                await fail_lease_writes(key)
                return await super().replace(key, data, if_match=if_match)

        j = journal(wrap=LeaseFailingStore)
        w = await j.acquire(key, holder="node-a", lease_ttl=0.4)
        acked: list[str] = []

        async def append_until_refused() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                rec = await w.append([say(f"m{len(acked)}")])
                acked.append(rec.batch_id)
                await asyncio.sleep(0.02)

        try:
            failing[0] = True
            with pytest.raises(FencedError) as info:
                await append_until_refused()
            assert info.value.current_epoch is None
            with pytest.raises(FencedError):
                await w.append([say("after")], batch_id="after")
        finally:
            failing[0] = False
            await w.close()
        # Once the lease expires another holder takes over and sees every ack.
        async with journal().writer(key, holder="node-b", wait=30.0) as w2:
            assert w2.epoch > w.epoch
        records = await all_records(journal(), key)
        batches = batch_ids(records)
        assert all(b in batches for b in acked)
        assert "after" not in batches

    async def test_takeover_records_an_unfinished_run(
        self, journal: JournalFactory
    ) -> None:
        """The next writer records RunInterrupted(by="recovery") in its fence."""
        key = new_key()
        w = await journal().acquire(key, holder="node-a")
        await w.append([RunStarted("run-1")], run_id="run-1")
        await w.append([ToolCallRequested("c1", "bash", {"cmd": "deploy"})])
        # node-a dies without finishing the run; a restart of the same holder.
        async with journal().writer(key, holder="node-a") as new:
            assert new.state.shutdown_interrupted
            assert new.state.active_run_id is None
            assert list(new.state.tool_context.pending_calls) == ["c1"]
        await w.close()
        records = await all_records(journal(), key)
        fence = records[3]
        assert RunInterrupted("run-1", reason="recovered", by="recovery") in (
            fence.events
        )
        state = await journal().load(key)
        assert state.shutdown_interrupted
        assert list(state.tool_context.pending_calls) == ["c1"]

    # --- checkpoints ----------------------------------------------------------------

    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        # The fixture only opens journals and every example uses a fresh thread;
        # every binding runs this one method, which is what differing_executors
        # flags, and there is no example database to confuse.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        ops=st.lists(_OPS, min_size=1, max_size=14),
        every=st.integers(0, 6),
        probe=st.integers(0, 10**6),
    )
    async def test_checkpoint_plus_tail_equals_full_replay(
        self, journal: JournalFactory, ops: list[object], every: int, probe: int
    ) -> None:
        """For any events and checkpoint policy, load equals a full replay."""
        key = new_key()
        j = journal(checkpoint_every=every)
        w = await j.acquire(key, holder="prop")
        try:
            for op in ops:
                if op == "checkpoint":
                    await w.checkpoint()
                elif op == "reopen":
                    await w.close()
                    w = await j.acquire(key, holder="prop")
                else:
                    assert isinstance(op, tuple)
                    events = [e for s in op if (e := _resolve(s, w.state)) is not None]
                    if events:
                        await w.append(events)
            live = w.state.copy()
        finally:
            await w.close()
        plain = journal(checkpoint_every=0)
        records = await all_records(plain, key)
        assert [r.version for r in records] == list(range(1, len(records) + 1))
        full = replay(key, records)
        assert encoded(full) == encoded(live)
        state, warnings = await journal().load_with_warnings(key)
        assert warnings == []
        assert encoded(state) == encoded(full)
        at = probe % (len(records) + 1)
        past = await journal().load(key, at_version=at)
        assert encoded(past) == encoded(replay(key, records[:at]))
        report = await plain.verify(key)
        assert report.ok, report.problems

    async def test_checkpoint_at_the_head(self, journal: JournalFactory) -> None:
        """A checkpoint with no tail after it loads to the same state."""
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            for i in range(5):
                await w.append([say(f"m{i}"), PermissionModeSet(f"mode-{i}")])
            assert await w.checkpoint() == w.version
            live = w.state.copy()
        state, warnings = await journal().load_with_warnings(key)
        assert warnings == []
        assert encoded(state) == encoded(live)
        report = await journal().verify(key)
        assert report.ok
        assert report.checkpoints == 1

    async def test_load_after_a_checkpoint_reads_only_the_tail(
        self, journal: JournalFactory
    ) -> None:
        """Loading never lists or reads the log at or below the checkpoint."""
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            for i in range(12):
                await w.append([say(f"m{i}")])
            checkpoint = await w.checkpoint()
            for i in range(3):
                await w.append([say(f"tail {i}")])
            live = w.state.copy()
        log = ThreadLog(j.store, key)
        cut = log.record_key(checkpoint)

        async def load_counting(at_version: int | None) -> RecordingStore:
            counting: list[RecordingStore] = []

            def wrap(store: ObjectStore) -> ObjectStore:
                counting.append(RecordingStore(store))
                return counting[0]

            reader = journal(wrap=wrap)
            state = await reader.load(key, at_version=at_version)
            if at_version is None:
                assert encoded(state) == encoded(live)
            assert await reader.head(key) == live.version
            return counting[0]

        for at_version in (None, checkpoint + 1, live.version):
            store = await load_counting(at_version)
            log_lists = [c for c in store.calls if c[0] == "list" and "/log/" in c[1]]
            assert log_lists, store.calls
            for _, _, start_after in log_lists:
                assert start_after is not None
                assert start_after >= cut
            read_versions = [
                version_of(c[1])
                for c in store.calls
                if c[0] == "read" and c[1].startswith(log.log_dir)
            ]
            assert read_versions
            assert all(v is not None and v > checkpoint for v in read_versions), (
                read_versions
            )

    # --- state changes --------------------------------------------------------------

    async def test_update_commits_specific_events(
        self, journal: JournalFactory
    ) -> None:
        """A change with specific events is committed as those events."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            await w.append([say("hello")])

            def set_summary(state: AgentState) -> None:
                state.summary = "a summary"

            rec = await w.update("summarise", set_summary)
            assert rec is not None
            assert rec.events == [SummarySet("a summary")]

            def more(state: AgentState) -> AgentState:
                state.permission_context.rules["bash"] = "ask"
                state.context.append(Msg("assistant", "added", id="m-added"))
                state.tool_context.active_groups.append("web")
                return state

            rec = await w.update("several", more)
            assert rec is not None
            kinds = sorted(type(e).__name__ for e in rec.events)
            assert kinds == [
                "MessageAppended",
                "PermissionRuleSet",
                "ToolGroupActivated",
            ]
            assert await w.update("nothing", lambda s: s) is None
            live = w.state.copy()
        assert not any(
            isinstance(e, AgentStateReplaced)
            for r in await all_records(journal(), key)
            for e in r.events
        )
        state = await journal().load(key)
        assert encoded(state) == encoded(live)
        assert state.summary == "a summary"
        assert texts(state) == ["hello", "added"]

    async def test_update_without_specific_events_replaces_the_state(
        self, journal: JournalFactory
    ) -> None:
        """Other changes commit one AgentStateReplaced; reload gives the new state."""
        key = new_key()
        j = journal(checkpoint_every=0)
        body = "x" * 2000
        async with j.writer(key) as w:
            for i in range(30):
                await w.append([say(f"{i} {body}")])
            mutated: list[AgentState] = []

            def rework(state: AgentState) -> AgentState:
                new = state.copy()
                new.tasks_context.goal = "ship it"
                new.tasks_context.requirements = ["tests pass"]
                new.context.reverse()
                mutated.append(new.copy())
                return new

            rec = await w.update("rework", rework)
            assert rec is not None
            assert len(rec.events) == 1
            assert isinstance(rec.events[0], AgentStateReplaced)
            assert rec.events[0].reason == "rework"
            # Message bodies are stored by reference, not inline in the record.
            assert rec.size < 30 * len(body) // 4
            live = w.state.copy()
        expected = mutated[0]
        expected.version = live.version
        assert encoded(live) == encoded(expected)
        state = await journal().load(key)
        assert encoded(state) == encoded(expected)
        records = await all_records(journal(), key)
        replaced = records[-1].events[0]
        assert isinstance(replaced, AgentStateReplaced)
        assert [m.text for m in replaced.messages] == texts(expected)
        assert (await journal().verify(key)).ok

    async def test_update_cannot_rewrite_log_facts(
        self, journal: JournalFactory
    ) -> None:
        """Pending tool calls change only through events; such a mutation fails."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            await w.append([ToolCallRequested("c1", "bash", {"cmd": "rm"})])
            head = w.version

            def drop_call(state: AgentState) -> None:
                state.tool_context.pending_calls.clear()

            with pytest.raises(ValueError, match="pending"):
                await w.update("cheat", drop_call)
            assert w.version == head
        assert await journal().head(key) == head

    async def test_save_state(self, journal: JournalFactory) -> None:
        """save_state commits a current state and refuses a stale one."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            await w.append([say("one")])
        state = await j.load(key)
        state.summary = "saved summary"
        state.plan_mode_context.active = True
        rec = await j.save_state(key, state)
        assert rec is not None
        saved = await journal().load(key)
        assert saved.summary == "saved summary"
        assert saved.plan_mode_context.active
        assert texts(saved) == ["one"]
        # A state loaded before a later commit is stale.
        stale = await j.load(key)
        async with j.writer(key) as w:
            await w.append([say("two")])
        head = await j.head(key)
        before = await all_records(j, key)
        stale.summary = "lost update"
        with pytest.raises(StaleStateError) as info:
            await j.save_state(key, stale)
        assert info.value.expected == stale.version
        assert info.value.actual == head
        assert await j.head(key) == head
        assert batch_ids(await all_records(j, key)) == batch_ids(before)
        assert (await journal().load(key)).summary == "saved summary"

    async def test_clear_context_keeps_the_rest(self, journal: JournalFactory) -> None:
        """Clearing drops messages and summary only; the history stays in the log."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            await w.append(
                [
                    say("first"),
                    say("second", "assistant"),
                    SummarySet("so far"),
                    PermissionRuleSet("bash", "allow"),
                    PermissionModeSet("accept_edits"),
                    PlanModeEntered("plan.md"),
                    TodosWritten([{"content": "t", "done": False}], 3),
                    TaskBegun("goal", ["r1"]),
                    RequirementDecided("r1", "met"),
                    ToolGroupActivated("files"),
                ]
            )
            before = w.state.copy()
            rec = await w.clear_context("new topic")
            assert rec.events == [ContextCleared("new topic")]
            live = w.state.copy()
        state = await journal().load(key)
        assert encoded(state) == encoded(live)
        assert state.context == []
        assert state.summary is None
        assert encoded(state.permission_context) == encoded(before.permission_context)
        assert encoded(state.plan_mode_context) == encoded(before.plan_mode_context)
        assert encoded(state.tasks_context) == encoded(before.tasks_context)
        assert encoded(state.tool_context) == encoded(before.tool_context)
        history = [
            e.message.text
            for r in await all_records(journal(), key)
            for e in r.events
            if isinstance(e, MessageAppended)
        ]
        assert history == ["first", "second"]

    # --- payloads, unknown events, upcasters ------------------------------------------

    async def test_large_payloads_are_blobs(self, journal: JournalFactory) -> None:
        """Events above the threshold are stored once under blobs/ and read back."""
        key = new_key()
        j = journal(checkpoint_every=0)
        big = "".join(f"{i:08d}" for i in range(80 * 1024 // 8))  # 80 KiB
        events: list[object] = [say(big), ToolCallCompleted("c1", {"out": big})]
        async with j.writer(key) as w:
            rec = await w.append(events)
            await w.append([say("small")])
        log = ThreadLog(j.store, key)
        blobs = await j.store.list(log.blob_dir)
        assert len(blobs) == 2
        assert all(b.startswith(f"{key.prefix}/blobs/") for b in blobs)
        raw, _ = await j.store.read(log.record_key(rec.version))
        assert len(raw) < 16 * 1024
        reader = journal(checkpoint_every=0)
        assert texts(await reader.load(key)) == [big, "small"]
        records = await all_records(reader, key)
        assert records[rec.version - 1].events == events
        assert (await reader.verify(key)).ok

    async def test_missing_blob_fails_closed(self, journal: JournalFactory) -> None:
        """A record whose blob is gone raises CorruptRecordError naming it."""
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            rec = await w.append([say("y" * (BLOB_THRESHOLD + 10))])
            await w.append([say("after")])
        log = ThreadLog(j.store, key)
        (blob,) = await j.store.list(log.blob_dir)
        assert await j.store.delete(blob)
        reader = journal(checkpoint_every=0)
        with pytest.raises(CorruptRecordError) as info:
            await reader.load(key)
        assert info.value.version == rec.version
        assert str(key) in str(info.value)
        with pytest.raises(CorruptRecordError):
            await all_records(reader, key)
        report = await reader.verify(key)
        assert not report.ok
        assert any(p.version == rec.version for p in report.problems)

    async def test_unknown_optional_event_is_skipped_and_kept(
        self, journal: JournalFactory
    ) -> None:
        """An optional event type a reader lacks is skipped, reported and kept."""
        name = _unique("Optional")

        class Optional(Event, frozen=True):
            note: str

        register_event(Optional, name=name, required=False)
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            await w.append([say("before")])
            rec = await w.append([Optional("from a newer writer"), say("with it")])
            await w.append([say("after")])
        known = await j.load(key)
        log = ThreadLog(j.store, key)
        raw_before, _ = await j.store.read(log.record_key(rec.version))
        with forgotten(name):
            reader = journal(checkpoint_every=0)
            state = await reader.load(key)
            assert encoded(state) == encoded(known)
            records = await all_records(reader, key)
            unknown = records[rec.version - 1].events[0]
            assert isinstance(unknown, UnknownEvent)
            assert (unknown.type, unknown.required) == (name, False)
            report = await reader.verify(key)
            assert report.ok, report.problems
            assert any(
                f.version == rec.version and name in f.message for f in report.warnings
            )
            # An older writer goes on writing; the unknown record stays byte for byte.
            async with reader.writer(key) as w:
                await w.append([say("by an older writer")])
            raw_after, _ = await reader.store.read(log.record_key(rec.version))
            assert raw_after == raw_before
        state = await journal().load(key)
        assert texts(state) == ["before", "with it", "after", "by an older writer"]

    async def test_unknown_required_event_fails_closed(
        self, journal: JournalFactory
    ) -> None:
        """A required event type a reader lacks stops load and writers, never lost."""
        name = _unique("Required")

        class Required(Event, frozen=True):
            value: int

        register_event(Required, name=name, required=True)
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            await w.append([say("before")])
            rec = await w.append([Required(42)])
            await w.append([say("after")])
        head = await j.head(key)
        with forgotten(name):
            reader = journal(checkpoint_every=0)
            with pytest.raises(UnknownEventError) as info:
                await reader.load(key)
            assert info.value.version == rec.version
            assert info.value.type_name == name
            assert str(key) in str(info.value)
            # The state before the unknown record can still be had.
            past = await reader.load(key, at_version=rec.version - 1)
            assert texts(past) == ["before"]
            records = await all_records(reader, key)
            assert isinstance(records[rec.version - 1].events[0], UnknownEvent)
            report = await reader.verify(key)
            found = [*report.problems, *report.warnings]
            assert any(f.version == rec.version and name in f.message for f in found)
            with pytest.raises(UnknownEventError):
                await reader.acquire(key, holder="old-reader")
            assert await reader.head(key) == head
        # The failed writer released the lease; a reader that knows the type writes.
        async with journal().writer(key, holder="new-reader") as w:
            assert w.base_version == head
            await w.append([say("known again")])
        assert texts(await journal().load(key)) == ["before", "after", "known again"]

    async def test_upcaster_upgrades_old_schema(self, journal: JournalFactory) -> None:
        """A record written at schema 1 decodes as the registered schema 2."""
        name = _unique("Upcast")

        class NoteV1(Event, frozen=True):
            text: str

        class NoteV2(Event, frozen=True):
            text: str
            length: int

        register_event(NoteV1, name=name, required=False, schema=1)
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            old = await w.append([NoteV1("hello")])
        # A newer release: the type is now NoteV2 at schema 2, with an upcaster.
        unregister_event(name)
        register_event(NoteV2, name=name, required=False, schema=2)
        register_upcaster(name, 1, lambda f: {**f, "length": len(f["text"])})
        async with journal().writer(key) as w:
            new = await w.append([NoteV2("hi", 2)])
        records = await all_records(journal(), key)
        assert records[old.version - 1].events == [NoteV2("hello", 5)]
        assert records[new.version - 1].events == [NoteV2("hi", 2)]
        assert (await journal().verify(key)).ok

    # --- listing ----------------------------------------------------------------------

    async def test_threads_listing_and_filters(self, journal: JournalFactory) -> None:
        """threads() lists every thread once; filters select by id, anonymous apart."""
        ns = f"ns-{uuid.uuid4().hex[:12]}"
        keys = [
            ThreadKey("agent-a", "s1", None, "main", ns),
            ThreadKey("agent-a", "s1", "~", "main", ns),
            ThreadKey("agent-a", "s2", "alice", "main", ns),
            ThreadKey("agent-a", "s2", "alice", "side", ns),
            ThreadKey("agent-b", "s1", "bob", "main", ns),
            ThreadKey("agent-b", "s3", None, "main", ns),
        ]
        j = journal()
        for key in keys:
            async with j.writer(key) as w:
                await w.append([say(str(key))])

        async def listed(**filters: Any) -> set[ThreadKey]:
            return {k async for k in journal().threads(**filters)}

        assert await listed(namespace=ns) == set(keys)
        assert len([k async for k in journal().threads(namespace=ns)]) == len(keys)
        assert await listed(namespace=ns, user_id=None) == {
            k for k in keys if k.user_id is None
        }
        assert await listed(namespace=ns, user_id="~") == {
            k for k in keys if k.user_id == "~"
        }
        assert await listed(namespace=ns, user_id="alice") == set(keys[2:4])
        assert await listed(namespace=ns, agent_id="agent-b") == set(keys[4:])
        assert await listed(namespace=ns, session_id="s1") == {
            keys[0],
            keys[1],
            keys[4],
        }
        assert await listed(namespace=ns, agent_id="agent-a", session_id="s2") == set(
            keys[2:4]
        )
        assert await listed(namespace=ns, agent_id="nobody") == set()
        assert set(keys) <= await listed()
        for key in keys:
            assert texts(await journal().load(key)) == [str(key)]
