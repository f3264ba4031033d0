"""The snapshot-mode contract: one pytest suite for every :class:`AgentStateStore`.

Subclass :class:`AgentStateStoreContract` and override its ``state_store`` fixture
(a fresh, empty store per test; close it in the fixture's teardown)::

    class TestMyStateStore(AgentStateStoreContract):
        @pytest.fixture
        async def state_store(self, tmp_path):
            store = MyStateStore(tmp_path)
            yield store
            await store.aclose()

The suite checks what :class:`stores.state.base.AgentStateStore` promises: exact
round trips, versions 1, 2, 3, ..., compare-and-swap that writes nothing on a
mismatch, listing, deletion, the isolation of users (the anonymous one included) and
of ids that a naive encoding would let collide or escape, and races between many
concurrent writers in which exactly one writer wins each version.
"""

# ruff: noqa: S101

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from journal.errors import InvalidKeyError, StaleStateError
from journal.events import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from journal.keys import ThreadKey
from projections.agent_state import (
    AgentState,
    PendingToolCall,
    PermissionContext,
    PlanModeContext,
    TasksContext,
    ToolContext,
    Verification,
)

if TYPE_CHECKING:
    from stores.state.base import AgentStateStore

__all__ = ["AgentStateStoreContract", "full_state"]

ENTRY = ThreadKey("assistant", "s1").state_entry()
"""A realistic entry name: the one an Agent uses (it contains ``/``)."""

_RACERS = 50
_WRITERS = 20

HOSTILE_IDS = (
    "..",
    ".",
    "/",
    "%2F",
    "%2f",
    "a/../b",
    "../../etc/passwd",
    "\\",
    "..\\..",
    "~",
    "%",
    "%%",
    "%7E",
    ":",
    "{a}",
    "a:b",
    "*",
    "?",
    " ",
    "e\u0301",
    "\u00e9",
    "\U0001f600",
)
"""Ids that must each get their own slot and never escape the store's namespace."""


def full_state(tag: str = "state", *, messages: int = 0) -> AgentState:
    """A state that uses every field and every kind of content block.

    Args:
        tag: Makes the state distinguishable from others (in its summary and ids).
        messages: Extra plain messages appended after the fixed ones.
    """
    context = [
        Msg(role="system", content="You are a careful assistant.", id=f"{tag}-m0"),
        Msg(
            role="user",
            content="Read /etc/hosts, please.",
            name="alice",
            id=f"{tag}-m1",
        ),
        Msg(
            role="assistant",
            content=[
                ThinkingBlock(text="I should use the read_file tool."),
                TextBlock(text="Reading it now."),
                ToolUseBlock(
                    id="call-1", name="read_file", input={"path": "/etc/hosts"}
                ),
            ],
            metadata={"model": "scripted", "usage": {"in": 12, "out": 7}},
            id=f"{tag}-m2",
        ),
        Msg(
            role="tool",
            content=[
                ToolResultBlock(tool_use_id="call-1", output="127.0.0.1 localhost"),
                ToolResultBlock(
                    tool_use_id="call-2", output={"error": "denied"}, is_error=True
                ),
            ],
            id=f"{tag}-m3",
        ),
        Msg(
            role="assistant",
            content='Done: \u00e9\u00e0\u00fc \U0001f600 "q" \\ \u2028',
            id=f"{tag}-m4",
        ),
    ]
    context += [
        Msg(role="user", content=f"{tag} message {i}", id=f"{tag}-x{i}")
        for i in range(messages)
    ]
    return AgentState(
        session_id="s1",
        thread_id="main",
        user_id="alice",
        context=context,
        summary=f"summary of {tag}",
        permission_context=PermissionContext(
            mode="accept_edits",
            rules={"read_file": "allow", "shell": "ask", "rm": "deny"},
        ),
        plan_mode_context=PlanModeContext(active=True, plan_file="plans/p.md"),
        tasks_context=TasksContext(
            todos=[
                {"content": "read hosts", "status": "completed"},
                {"content": "answer", "status": "in_progress", "priority": 2},
            ],
            revision=3,
            goal="answer the question",
            requirements=["r1", "r2"],
            decisions={"r1": "met"},
            evidence={"r1": ["call-1"]},
            verifications=[Verification(passed=True, detail="looked right")],
        ),
        tool_context=ToolContext(
            active_groups=["files", "web"],
            pending_calls={
                "call-3": PendingToolCall(
                    call_id="call-3",
                    name="fetch",
                    input={"url": "https://example.com"},
                    run_id="run-1",
                    version=7,
                )
            },
        ),
        shutdown_interrupted=True,
        active_run_id="run-1",
        version=0,
    )


def _same(a: AgentState, b: AgentState) -> bool:
    """Equal in every field except ``version``."""
    return msgspec.structs.replace(a, version=0) == msgspec.structs.replace(
        b, version=0
    )


def _marked(tag: str) -> AgentState:
    return AgentState(session_id=tag, summary=tag)


async def _summary(
    store: AgentStateStore, user: str | None, session: str, entry: str
) -> str | None:
    found = await store.load(user, session, entry)
    assert found is not None, f"slot {(user, session, entry)!r} is missing"
    return found[0].summary


class AgentStateStoreContract:
    """The behaviour every snapshot-mode state store must show.

    Bind it by overriding the ``state_store`` fixture with a fresh, empty store.
    """

    @pytest.fixture
    async def state_store(self) -> AgentStateStore:
        """The store under test: every binding must override this fixture.

        Raises:
            NotImplementedError: The suite was run without a binding.
        """
        raise NotImplementedError(
            "bind AgentStateStoreContract by overriding its state_store fixture"
        )

    # --- round trips and versions --------------------------------------------------

    async def test_load_of_absent_slot_is_none(
        self, state_store: AgentStateStore
    ) -> None:
        assert await state_store.load("alice", "s1", ENTRY) is None
        assert await state_store.load(None, "s1", ENTRY) is None
        assert await state_store.list_sessions("alice") == []
        assert await state_store.list_sessions(None) == []

    async def test_round_trip_is_exact(self, state_store: AgentStateStore) -> None:
        state = full_state()
        assert await state_store.save("alice", "s1", ENTRY, state) == 1
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        loaded, version = found
        assert version == 1
        assert loaded.version == 1
        assert type(loaded) is AgentState
        assert _same(loaded, state)
        assert loaded == msgspec.structs.replace(state, version=1)
        blocks = loaded.context[2].content
        assert isinstance(blocks, list)
        assert [type(b) for b in blocks] == [ThinkingBlock, TextBlock, ToolUseBlock]
        assert loaded.tool_context.pending_calls["call-3"].input == {
            "url": "https://example.com"
        }

    async def test_save_leaves_the_callers_state_alone(
        self, state_store: AgentStateStore
    ) -> None:
        state = full_state()
        state.version = 41
        before = state.copy()
        await state_store.save("alice", "s1", ENTRY, state)
        assert state == before
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == 1  # the slot's version, not the one the caller had

    async def test_loaded_states_do_not_alias_the_store(
        self, state_store: AgentStateStore
    ) -> None:
        state = full_state()
        await state_store.save("alice", "s1", ENTRY, state)
        state.context.clear()
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        found[0].context.clear()
        found[0].summary = "changed"
        again = await state_store.load("alice", "s1", ENTRY)
        assert again is not None
        assert _same(again[0], full_state())

    async def test_versions_count_up_from_one(
        self, state_store: AgentStateStore
    ) -> None:
        for expected in (1, 2, 3):
            state = full_state(f"v{expected}", messages=expected)
            assert await state_store.save("alice", "s1", ENTRY, state) == expected
            found = await state_store.load("alice", "s1", ENTRY)
            assert found is not None
            assert found[1] == expected
            assert found[0].version == expected
            assert _same(found[0], state)

    async def test_an_empty_state_round_trips(
        self, state_store: AgentStateStore
    ) -> None:
        await state_store.save(None, "s", "e", AgentState())
        found = await state_store.load(None, "s", "e")
        assert found == (AgentState(version=1), 1)

    async def test_a_large_state_round_trips(
        self, state_store: AgentStateStore
    ) -> None:
        state = full_state("big", messages=300)
        state.context.append(Msg(role="tool", content="x" * 200_000))
        await state_store.save("alice", "s1", ENTRY, state)
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        assert _same(found[0], state)

    # --- compare-and-swap ----------------------------------------------------------

    async def test_expected_zero_creates_the_slot(
        self, state_store: AgentStateStore
    ) -> None:
        assert (
            await state_store.save(
                "alice", "s1", ENTRY, full_state(), expected_version=0
            )
            == 1
        )

    async def test_compare_and_swap_succeeds_on_the_current_version(
        self, state_store: AgentStateStore
    ) -> None:
        v = await state_store.save(
            "alice", "s1", ENTRY, _marked("a"), expected_version=0
        )
        v = await state_store.save(
            "alice", "s1", ENTRY, _marked("b"), expected_version=v
        )
        v = await state_store.save(
            "alice", "s1", ENTRY, _marked("c"), expected_version=v
        )
        assert v == 3
        assert await _summary(state_store, "alice", "s1", ENTRY) == "c"

    @pytest.mark.parametrize("expected", [0, 1, 3, 4, 100])
    async def test_a_mismatch_raises_and_writes_nothing(
        self, state_store: AgentStateStore, expected: int
    ) -> None:
        await state_store.save("alice", "s1", ENTRY, _marked("one"))
        await state_store.save("alice", "s1", ENTRY, _marked("two"))
        with pytest.raises(StaleStateError) as caught:
            await state_store.save(
                "alice", "s1", ENTRY, _marked("intruder"), expected_version=expected
            )
        assert caught.value.expected == expected
        assert caught.value.actual == 2
        assert "s1" in str(caught.value)
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == 2
        assert found[0].summary == "two"
        # And the next writer still gets the next version.
        assert (
            await state_store.save(
                "alice", "s1", ENTRY, _marked("three"), expected_version=2
            )
            == 3
        )

    @pytest.mark.parametrize("expected", [1, 2])
    async def test_a_mismatch_on_an_absent_slot_creates_nothing(
        self, state_store: AgentStateStore, expected: int
    ) -> None:
        with pytest.raises(StaleStateError) as caught:
            await state_store.save(
                "alice", "s1", ENTRY, _marked("x"), expected_version=expected
            )
        assert (caught.value.expected, caught.value.actual) == (expected, 0)
        assert await state_store.load("alice", "s1", ENTRY) is None
        assert await state_store.list_sessions("alice") == []

    async def test_stale_state_error_is_a_conflict(
        self, state_store: AgentStateStore
    ) -> None:
        from journal.errors import ConflictError, JournalError

        await state_store.save("alice", "s1", ENTRY, _marked("a"))
        with pytest.raises(ConflictError):
            await state_store.save(
                "alice", "s1", ENTRY, _marked("b"), expected_version=0
            )
        with pytest.raises(JournalError):
            await state_store.save(
                "alice", "s1", ENTRY, _marked("b"), expected_version=5
            )

    @pytest.mark.parametrize(
        ("bad", "error"),
        [(-1, ValueError), ("1", TypeError), (1.0, TypeError), (True, TypeError)],
    )
    async def test_a_bad_expected_version_is_refused(
        self, state_store: AgentStateStore, bad: Any, error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            await state_store.save(
                "alice", "s1", ENTRY, _marked("a"), expected_version=bad
            )
        assert await state_store.load("alice", "s1", ENTRY) is None

    async def test_only_agent_states_are_saved(
        self, state_store: AgentStateStore
    ) -> None:
        with pytest.raises(TypeError):
            await state_store.save("alice", "s1", ENTRY, {"context": []})  # type: ignore[arg-type]

    # --- delete and list -----------------------------------------------------------

    async def test_delete(self, state_store: AgentStateStore) -> None:
        await state_store.save("alice", "s1", ENTRY, _marked("a"))
        await state_store.save("alice", "s1", ENTRY, _marked("b"))
        await state_store.save("alice", "s1", "other", _marked("keep"))
        assert await state_store.delete("alice", "s1", ENTRY) is True
        assert await state_store.delete("alice", "s1", ENTRY) is False
        assert await state_store.load("alice", "s1", ENTRY) is None
        assert await _summary(state_store, "alice", "s1", "other") == "keep"
        # A deleted slot starts over, and counts as absent for compare-and-swap.
        assert (
            await state_store.save(
                "alice", "s1", ENTRY, _marked("c"), expected_version=0
            )
            == 1
        )

    async def test_delete_of_what_never_existed(
        self, state_store: AgentStateStore
    ) -> None:
        assert await state_store.delete("nobody", "s1", ENTRY) is False
        assert await state_store.delete(None, "s1", ENTRY) is False
        await state_store.save("alice", "s1", ENTRY, _marked("a"))
        assert await state_store.delete("alice", "s1", "other-entry") is False
        assert await state_store.delete("alice", "s2", ENTRY) is False
        assert await state_store.list_sessions("alice") == ["s1"]

    async def test_list_sessions(self, state_store: AgentStateStore) -> None:
        for session in ("s2", "s10", "s1", "a b", "Z"):
            await state_store.save("alice", session, ENTRY, _marked(session))
        await state_store.save("alice", "s1", "second-entry", _marked("again"))
        await state_store.save("alice", "s1", ENTRY, _marked("s1 again"))
        await state_store.save("bob", "bob-only", ENTRY, _marked("bob"))
        await state_store.save(None, "anon-only", ENTRY, _marked("anon"))
        await state_store.save("~", "tilde-only", ENTRY, _marked("tilde"))
        alice = await state_store.list_sessions("alice")
        assert alice == sorted(["s2", "s10", "s1", "a b", "Z"])
        assert await state_store.list_sessions("bob") == ["bob-only"]
        assert await state_store.list_sessions(None) == ["anon-only"]
        assert await state_store.list_sessions("~") == ["tilde-only"]
        assert await state_store.list_sessions("carol") == []

    async def test_a_session_is_listed_while_it_holds_a_slot(
        self, state_store: AgentStateStore
    ) -> None:
        await state_store.save("alice", "s1", "e1", _marked("1"))
        await state_store.save("alice", "s1", "e2", _marked("2"))
        await state_store.save("alice", "s2", "e1", _marked("3"))
        assert await state_store.delete("alice", "s1", "e1")
        assert await state_store.list_sessions("alice") == ["s1", "s2"]
        assert await state_store.delete("alice", "s1", "e2")
        assert await state_store.list_sessions("alice") == ["s2"]
        assert await state_store.delete("alice", "s2", "e1")
        assert await state_store.list_sessions("alice") == []
        await state_store.save("alice", "s1", "e1", _marked("back"))
        assert await state_store.list_sessions("alice") == ["s1"]

    async def test_a_failed_save_lists_nothing(
        self, state_store: AgentStateStore
    ) -> None:
        with pytest.raises(StaleStateError):
            await state_store.save(
                "alice", "s9", ENTRY, _marked("x"), expected_version=3
            )
        assert await state_store.list_sessions("alice") == []

    # --- isolation -----------------------------------------------------------------

    async def test_users_never_see_each_other(
        self, state_store: AgentStateStore
    ) -> None:
        users: list[str | None] = ["alice", "bob", None, "~", "Alice"]
        for user in users:
            await state_store.save(user, "shared", ENTRY, _marked(f"of {user!r}"))
        for user in users:
            assert await _summary(state_store, user, "shared", ENTRY) == f"of {user!r}"
            assert await state_store.list_sessions(user) == ["shared"]
        assert await state_store.delete("bob", "shared", ENTRY)
        assert await state_store.load("bob", "shared", ENTRY) is None
        for user in ("alice", None, "~"):
            assert await _summary(state_store, user, "shared", ENTRY) == f"of {user!r}"

    async def test_versions_are_per_slot(self, state_store: AgentStateStore) -> None:
        assert await state_store.save("alice", "s1", ENTRY, _marked("a")) == 1
        assert await state_store.save("alice", "s1", ENTRY, _marked("a")) == 2
        assert await state_store.save("bob", "s1", ENTRY, _marked("b")) == 1
        assert await state_store.save(None, "s1", ENTRY, _marked("n")) == 1
        assert await state_store.save("alice", "s2", ENTRY, _marked("c")) == 1
        assert await state_store.save("alice", "s1", "other", _marked("d")) == 1
        with pytest.raises(StaleStateError):
            await state_store.save("bob", "s1", ENTRY, _marked("b"), expected_version=2)

    async def test_the_anonymous_user_is_nobody_else(
        self, state_store: AgentStateStore
    ) -> None:
        await state_store.save(None, "s1", ENTRY, _marked("anonymous"))
        for named in ("~", "%7E", "None", "null", "anonymous", "-", "_"):
            assert await state_store.load(named, "s1", ENTRY) is None
            assert await state_store.list_sessions(named) == []
            await state_store.save(named, "s1", ENTRY, _marked(named))
        assert await _summary(state_store, None, "s1", ENTRY) == "anonymous"
        assert await state_store.list_sessions(None) == ["s1"]
        assert await state_store.delete("~", "s1", ENTRY)
        assert await _summary(state_store, None, "s1", ENTRY) == "anonymous"

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            (("a:b", "c", "e"), ("a", "b:c", "e")),
            (("a/b", "c", "e"), ("a", "b/c", "e")),
            (("a", "b/c", "e"), ("a", "b", "c/e")),
            (("a", "b:c", "e"), ("a", "b", "c:e")),
            (("a", "b", "c.json"), ("a", "b.c", "json")),
            (("a%2Fb", "c", "e"), ("a/b", "c", "e")),
            (("a", "s%3Ax", "e"), ("a", "s:x", "e")),
            (("a", "s", "e%2F"), ("a", "s", "e/")),
            (("a.b", "s", "e"), ("a%2Eb", "s", "e")),
            (("u", "s", "e.lock"), ("u", "s", "e")),
            (("u", "s", "e.tmp"), ("u", "s", ".e")),
            (("u", "entries", "x"), ("u", "s", "entries")),
            (("u", "sessions", "x"), ("u", "slot", "sessions")),
            (("a{b}", "s", "e"), ("a", "{b}s", "e")),
            (("x" * 256, "s", "e"), ("x" * 255 + "y", "s", "e")),
            (("%" * 256, "s", "e"), ("%" * 255 + "/", "s", "e")),
            (("u", "\u00e9" * 256, "e"), ("u", "\u00e9" * 255 + "e", "e")),
            (("u", "s", "/" * 256), ("u", "s", "/" * 255 + ".")),
        ],
    )
    async def test_ids_never_collide(
        self,
        state_store: AgentStateStore,
        first: tuple[str, str, str],
        second: tuple[str, str, str],
    ) -> None:
        await state_store.save(*first, _marked("first"))
        await state_store.save(*second, _marked("second"))
        assert await _summary(state_store, *first) == "first"
        assert await _summary(state_store, *second) == "second"
        for user, session, _ in (first, second):
            assert session in await state_store.list_sessions(user)
        assert await state_store.delete(*first)
        assert await state_store.load(*first) is None
        assert await _summary(state_store, *second) == "second"

    async def test_hostile_ids_are_isolated(self, state_store: AgentStateStore) -> None:
        for hostile in HOSTILE_IDS:
            await state_store.save(hostile, "s", "e", _marked(f"user {hostile}"))
            await state_store.save("u", hostile, "e", _marked(f"session {hostile}"))
            await state_store.save("u", "s", hostile, _marked(f"entry {hostile}"))
        await state_store.save("u", "s", "e", _marked("plain"))
        for hostile in HOSTILE_IDS:
            assert await _summary(state_store, hostile, "s", "e") == f"user {hostile}"
            assert await _summary(state_store, "u", hostile, "e") == (
                f"session {hostile}"
            )
            assert await _summary(state_store, "u", "s", hostile) == f"entry {hostile}"
            assert await state_store.list_sessions(hostile) == ["s"]
        assert await _summary(state_store, "u", "s", "e") == "plain"
        assert await state_store.list_sessions("u") == sorted({*HOSTILE_IDS, "s"})
        assert await state_store.list_sessions(None) == []

    async def test_longest_ids_round_trip(self, state_store: AgentStateStore) -> None:
        user, session, entry = ("\u00fc" * 256, "/" * 256, "\U0001f600" * 256)
        await state_store.save(user, session, entry, full_state())
        found = await state_store.load(user, session, entry)
        assert found is not None
        assert _same(found[0], full_state())
        assert await state_store.list_sessions(user) == [session]

    @pytest.mark.parametrize(
        "bad",
        ["", "x" * 257, "a\x00b", "a\nb", "\x7f", "tab\there", "\ud800", 7, b"bytes"],
    )
    async def test_invalid_ids_are_refused(
        self, state_store: AgentStateStore, bad: Any
    ) -> None:
        with pytest.raises(InvalidKeyError):
            await state_store.save(bad, "s", "e", _marked("x"))
        with pytest.raises(InvalidKeyError):
            await state_store.save("u", bad, "e", _marked("x"))
        with pytest.raises(InvalidKeyError):
            await state_store.save("u", "s", bad, _marked("x"))
        with pytest.raises(InvalidKeyError):
            await state_store.load("u", bad, "e")
        with pytest.raises(InvalidKeyError):
            await state_store.delete("u", "s", bad)
        with pytest.raises(InvalidKeyError):
            await state_store.list_sessions(bad)
        assert await state_store.list_sessions("u") == []

    async def test_a_missing_session_is_an_invalid_key(
        self, state_store: AgentStateStore
    ) -> None:
        with pytest.raises(InvalidKeyError):
            await state_store.save("u", None, "e", _marked("x"))  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError):
            await state_store.load("u", "s", None)  # type: ignore[arg-type]

    # --- concurrency ---------------------------------------------------------------

    async def test_racing_compare_and_swap_has_one_winner(
        self, state_store: AgentStateStore
    ) -> None:
        await state_store.save("alice", "s1", ENTRY, _marked("base"))
        results = await asyncio.gather(
            *(
                state_store.save(
                    "alice", "s1", ENTRY, _marked(f"racer {i}"), expected_version=1
                )
                for i in range(_RACERS)
            ),
            return_exceptions=True,
        )
        winners = [i for i, r in enumerate(results) if r == 2]
        losers = [r for r in results if isinstance(r, StaleStateError)]
        assert len(winners) == 1, results
        assert len(losers) == _RACERS - 1, [
            r for r in results if not isinstance(r, StaleStateError)
        ]
        assert all((r.expected, r.actual) == (1, 2) for r in losers)
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == 2
        assert found[0].summary == f"racer {winners[0]}"

    async def test_racing_creates_have_one_winner(
        self, state_store: AgentStateStore
    ) -> None:
        results = await asyncio.gather(
            *(
                state_store.save(
                    None, "new", ENTRY, _marked(f"creator {i}"), expected_version=0
                )
                for i in range(_RACERS)
            ),
            return_exceptions=True,
        )
        assert sorted(r for r in results if isinstance(r, int)) == [1], results
        assert sum(isinstance(r, StaleStateError) for r in results) == _RACERS - 1
        assert await state_store.list_sessions(None) == ["new"]

    async def test_read_modify_write_loses_nothing(
        self, state_store: AgentStateStore
    ) -> None:
        async def append_one(i: int) -> int:
            conflicts = 0
            while True:
                found = await state_store.load("alice", "s1", ENTRY)
                state, version = found if found is not None else (AgentState(), 0)
                state.context.append(Msg(role="user", content=f"m{i}", id=f"m{i}"))
                try:
                    await state_store.save(
                        "alice", "s1", ENTRY, state, expected_version=version
                    )
                except StaleStateError:
                    conflicts += 1
                    await asyncio.sleep(0)
                    continue
                return conflicts

        await asyncio.gather(*(append_one(i) for i in range(_WRITERS)))
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        state, version = found
        assert version == _WRITERS
        assert sorted(m.id for m in state.context) == sorted(
            f"m{i}" for i in range(_WRITERS)
        )

    async def test_unconditional_saves_each_get_a_version(
        self, state_store: AgentStateStore
    ) -> None:
        versions = await asyncio.gather(
            *(
                state_store.save("alice", "s1", ENTRY, _marked(f"w{i}"))
                for i in range(_WRITERS)
            )
        )
        assert sorted(versions) == list(range(1, _WRITERS + 1))
        found = await state_store.load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == _WRITERS
        assert found[0].summary == f"w{versions.index(_WRITERS)}"

    async def test_concurrent_users_with_one_session_id_stay_apart(
        self, state_store: AgentStateStore
    ) -> None:
        users: list[str | None] = [f"user{i}" for i in range(10)] + [None]

        async def work(user: str | None) -> None:
            version = 0
            for step in range(3):
                version = await state_store.save(
                    user,
                    "same-session",
                    ENTRY,
                    _marked(f"{user}:{step}"),
                    expected_version=version,
                )

        await asyncio.gather(*(work(u) for u in users))
        for user in users:
            found = await state_store.load(user, "same-session", ENTRY)
            assert found is not None
            assert (found[0].summary, found[1]) == (f"{user}:2", 3)

    # --- lifecycle -----------------------------------------------------------------

    async def test_aclose_twice_is_harmless(self, state_store: AgentStateStore) -> None:
        await state_store.save("alice", "s1", ENTRY, _marked("a"))
        await state_store.aclose()
        await state_store.aclose()

    async def test_is_an_agent_state_store(self, state_store: AgentStateStore) -> None:
        from stores.state.base import AgentStateStore as Protocol

        assert isinstance(state_store, Protocol)
