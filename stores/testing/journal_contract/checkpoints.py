"""Checkpoints: checkpoint plus tail equals a full replay, and loads read only the tail.

The replay property draws sequences of events (every event type the projection folds,
plus compactions and tool completions that depend on the state so far), manual
checkpoints and reopened writers, under any automatic checkpoint interval.
"""

# ruff: noqa: S101

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import (
    ContextCleared,
    ContextCompacted,
    EvidenceBound,
    MessageAppended,
    Msg,
    ObjectStore,
    PermissionModeSet,
    PermissionRuleRemoved,
    PermissionRuleSet,
    PlanModeEntered,
    PlanModeExited,
    RequirementDecided,
    RunCompleted,
    RunInterrupted,
    RunStarted,
    SummarySet,
    TaskBegun,
    TextBlock,
    ThinkingBlock,
    TodosWritten,
    ToolCallCompleted,
    ToolCallRequested,
    ToolGroupActivated,
    ToolGroupDeactivated,
    ToolResultBlock,
    ToolUseBlock,
    VerificationRecorded,
)
from journal.chunk_index import INDEX_MIN_REFS
from journal.layout import ThreadLayout, version_of
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    RecordingStore,
    all_records,
    chunk_ending_ids,
    encoded,
    new_key,
    replay,
    say,
)

if TYPE_CHECKING:
    from projections import AgentState

__all__ = ["CheckpointContract"]


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


class CheckpointContract(JournalFixtures):
    """A checkpoint plus its tail loads to the state a full replay gives."""

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
        """Loading never lists the log at or below the checkpoint.

        Nor reads it, but on a store that reads its log in bulk: there the
        checkpoint names the records holding its messages, and only the tail
        is replayed.
        """
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            for i in range(12):
                await w.append([say(f"m{i}")])
            checkpoint = await w.checkpoint()
            for i in range(3):
                await w.append([say(f"tail {i}")])
            live = w.state.copy()
        layout = ThreadLayout.of(key)
        cut = layout.record_key(checkpoint)

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
                if c[0] == "read" and c[1].startswith(layout.log_dir)
            ]
            assert read_versions
            versions = [v for v in read_versions if v is not None]
            assert versions == read_versions
            if store.reads_log_in_bulk:
                # Each record once: the spans', then the tail's.
                below = [v for v in versions if v <= checkpoint]
                assert below == sorted(set(below)), read_versions
            else:
                assert all(v > checkpoint for v in versions), read_versions

    async def test_a_long_chunk_list_goes_through_index_blobs(
        self, journal: JournalFactory
    ) -> None:
        """Checkpoints of a context of many chunks name them through index blobs.

        Each message here ends a chunk, so a hundred messages make a hundred
        chunks: past ``INDEX_MIN_REFS`` of them the checkpoint stores groups of
        chunk references as index blobs under ``indexes/``, which every store
        must keep and read back like the chunks.
        """
        key = new_key()
        j = journal(checkpoint_every=0)
        checkpoints: list[int] = []
        async with j.writer(key) as w:
            for n, message_id in enumerate(chunk_ending_ids(INDEX_MIN_REFS + 36), 1):
                await w.append([MessageAppended(Msg("user", f"m{n}", id=message_id))])
                if n in (INDEX_MIN_REFS, INDEX_MIN_REFS + 36):
                    checkpoints.append(await w.checkpoint())
            live = w.state.copy()
        assert await j.store.list(ThreadLayout.of(key).index_dir)
        state, warnings = await journal().load_with_warnings(key)
        assert warnings == []
        assert encoded(state) == encoded(live)
        past = await journal().load(key, at_version=checkpoints[0])
        assert [m.text for m in past.context] == [
            m.text for m in live.context[:INDEX_MIN_REFS]
        ]
        report = await journal().verify(key)
        assert report.ok, report.problems
        assert report.warnings == []
        assert report.checkpoints == 2
