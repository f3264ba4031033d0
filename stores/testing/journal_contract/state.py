"""State changes: ``update``, ``save_state`` and ``clear_context``.

``update`` commits the specific events a change maps to, or one
``AgentStateReplaced`` when there are none, and never rewrites facts only events may
change; ``save_state`` refuses a stale state; ``clear_context`` keeps everything but
the messages and summary.
"""

# ruff: noqa: S101

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from journal import (
    AgentStateReplaced,
    ContextCleared,
    MessageAppended,
    Msg,
    PermissionModeSet,
    PermissionRuleSet,
    PlanModeEntered,
    RequirementDecided,
    StaleStateError,
    SummarySet,
    TaskBegun,
    TodosWritten,
    ToolCallRequested,
    ToolGroupActivated,
)
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    all_records,
    batch_ids,
    encoded,
    new_key,
    say,
    texts,
)

if TYPE_CHECKING:
    from projections import AgentState

__all__ = ["StateContract"]


class StateContract(JournalFixtures):
    """Changing the state as a whole: update, save_state, clear_context."""

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
