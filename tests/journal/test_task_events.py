"""Task events: old logs and checkpoints read the same; state changes become events."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from journal import (
    AgentStateReplaced,
    EvidenceBound,
    Journal,
    ObjectVersionSet,
    RequirementDecided,
    RequirementProposed,
    TaskBegun,
    ThreadKey,
    TodosWritten,
    VerificationCheck,
    VerificationRecorded,
    codec,
)
from journal.cli import main
from journal.cli.describe import describe_event
from journal.engine.diff import diff_states
from journal.runtime import tasks
from projections.agent_state import AgentState, decode_state
from projections.tasks import TasksContext, Verification

# --- the shapes written before the task API ---------------------------------------


class OldTaskBegun(msgspec.Struct, tag="TaskBegun", tag_field="type"):
    goal: str
    requirements: list[str]


class OldRequirementDecided(msgspec.Struct, tag="RequirementDecided", tag_field="type"):
    requirement: str
    decision: str
    note: str = ""


class OldEvidenceBound(msgspec.Struct, tag="EvidenceBound", tag_field="type"):
    requirement: str
    evidence: str


class OldVerificationRecorded(
    msgspec.Struct, tag="VerificationRecorded", tag_field="type"
):
    passed: bool
    detail: str = ""


class OldVerification(msgspec.Struct):
    passed: bool
    detail: str = ""


class OldTasksContext(msgspec.Struct):
    todos: list[Any] = msgspec.field(default_factory=list)
    revision: int = 0
    goal: str | None = None
    requirements: list[str] = msgspec.field(default_factory=list)
    decisions: dict[str, str] = msgspec.field(default_factory=dict)
    evidence: dict[str, list[str]] = msgspec.field(default_factory=dict)
    verifications: list[OldVerification] = msgspec.field(default_factory=list)


class OldState(msgspec.Struct):
    session_id: str | None = None
    tasks_context: OldTasksContext = msgspec.field(default_factory=OldTasksContext)
    version: int = 0


def old_event(event: msgspec.Struct) -> object:
    name = type(event).__struct_config__.tag
    envelope = codec.Envelope(name, 1, True, msgspec.Raw(msgspec.msgpack.encode(event)))
    return codec.decode_event(envelope)


def test_old_task_events_decode_and_fold_the_same():
    old = [
        OldTaskBegun("ship", ["tests pass"]),
        OldRequirementDecided("tests pass", "met", "ok"),
        OldEvidenceBound("tests pass", "ci #4"),
        OldVerificationRecorded(True, "green"),
    ]
    decoded = [old_event(e) for e in old]
    assert decoded == [
        TaskBegun("ship", ["tests pass"]),
        RequirementDecided("tests pass", "met", "ok"),
        EvidenceBound("tests pass", "ci #4"),
        VerificationRecorded(True, "green"),
    ]
    j = Journal.open("memory://old-task-events")
    k = ThreadKey("a", "s")

    async def run() -> TasksContext:
        async with j.writer(k) as w:
            await w.append(decoded)
        return (await j.load(k)).tasks_context

    t = asyncio.run(run())
    assert (t.goal, t.requirements, t.decisions, t.evidence) == (
        "ship",
        ["tests pass"],
        {"tests pass": "met"},
        {"tests pass": ["ci #4"]},
    )
    assert [(v.passed, v.detail) for v in t.verifications] == [(True, "green")]
    view = tasks.task_view(AgentState(tasks_context=t))
    assert view.requirements[0].status == "met"


def test_an_old_checkpoint_state_decodes_with_the_same_task_fields():
    old = OldState(
        "s",
        OldTasksContext(
            todos=[{"content": "x", "done": False}],
            revision=3,
            goal="ship",
            requirements=["a", "b"],
            decisions={"a": "met"},
            evidence={"a": ["ci"]},
            verifications=[OldVerification(False, "red")],
        ),
        9,
    )
    state = decode_state(msgspec.msgpack.encode(old))
    t = state.tasks_context
    assert (t.todos, t.revision, t.goal, t.requirements, t.decisions, t.evidence) == (
        [{"content": "x", "done": False}],
        3,
        "ship",
        ["a", "b"],
        {"a": "met"},
        {"a": ["ci"]},
    )
    assert [(v.passed, v.detail, v.verifier) for v in t.verifications] == [
        (False, "red", "")
    ]
    view = tasks.task_view(state)
    assert [(r.text, r.status) for r in view.requirements] == [
        ("a", "met"),
        ("b", "confirmed"),
    ]
    assert [(e.evidence, e.stale) for e in view.evidence] == [("ci", False)]


# --- state changes as events -------------------------------------------------------


def started() -> AgentState:
    state = AgentState(session_id="s")
    state.tasks_context = TasksContext(goal="ship", requirements=["tests pass"])
    return state


def test_diff_turns_task_changes_into_their_events():
    old = started()
    new = old.copy()
    t = new.tasks_context
    t.requirements.append("docs")
    t.decisions["tests pass"] = "confirmed"
    t.evidence["tests pass"] = ["ci"]
    t.object_versions["build"] = 4
    t.todos = [{"content": "c", "status": "pending"}]
    t.revision = 1
    assert diff_states(old, new) == [
        TodosWritten([{"content": "c", "status": "pending"}], 1),
        RequirementProposed("docs"),
        ObjectVersionSet("build", 4),
        RequirementDecided("tests pass", "confirmed"),
        EvidenceBound("tests pass", "ci"),
    ]


def test_diff_begins_a_new_task():
    old = started()
    new = old.copy()
    new.tasks_context = TasksContext(goal="next", requirements=["r"], task_id="t2")
    assert diff_states(old, new) == [TaskBegun("next", ["r"], "t2")]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda t: t.evidence_items.clear() or t.evidence.clear(), "evidence"),
        (lambda t: t.verifications.clear(), "verification"),
        (lambda t: setattr(t.verifications[0], "passed", True), "verification"),
        (lambda t: t.verifications.append(t.verifications[0]), "run_verification"),
        (lambda t: setattr(t, "revision", 1), "revision"),
    ],
)
def test_diff_refuses_to_rewrite_task_history(change, match):
    old = started()
    old.tasks_context.evidence = {"tests pass": ["ci"]}
    old.tasks_context.verifications = [Verification(False)]
    old.tasks_context.revision = 2
    new = old.copy()
    change(new.tasks_context)
    with pytest.raises(ValueError, match=match):
        diff_states(old, new)


def test_diff_falls_back_to_a_whole_state_for_what_has_no_event():
    old = started()
    new = old.copy()
    new.tasks_context.requirements = []  # a removal: no event says it
    assert diff_states(old, new) is None


async def test_update_commits_task_events_that_replay_to_the_mutated_state(tmp_path):
    j = Journal.open(tmp_path / "j", fsync=False)
    k = ThreadKey("a", "s")
    async with j.writer(k) as w:
        await w.append(tasks.begin_task(w.state, "ship", ["tests pass"]))

        def mutate(state: AgentState) -> None:
            state.tasks_context.requirements.append("docs")
            state.tasks_context.evidence["tests pass"] = ["ci"]

        rec = await w.update("tool edit", mutate)
        assert rec is not None
        assert not any(isinstance(e, AgentStateReplaced) for e in rec.events)
        live = w.state
    loaded = await j.load(k)
    assert msgspec.json.encode(loaded) == msgspec.json.encode(live)
    assert tasks.task_view(loaded).requirements[1].status == "proposed"


# --- audit -------------------------------------------------------------------------


def test_describe_shows_the_new_fields():
    assert describe_event(TaskBegun("ship", ["a"], "t1")) == (
        "task t1: ship (1 requirements): a"
    )
    assert describe_event(RequirementProposed("docs", "n", "tool")) == (
        "docs by tool (n)"
    )
    assert describe_event(EvidenceBound("a", "ci", "build", 4, "app")) == (
        "a: ci [build @ 4] by app"
    )
    assert describe_event(ObjectVersionSet("build", 5)) == "build @ 5"
    text = describe_event(
        VerificationRecorded(
            True, "ok", "ci", [VerificationCheck("unit", True)], {"build": 4}
        )
    )
    assert text == "passed by ci, 1/1 checks passed, saw build @ 4: ok"


def test_cli_diff_shows_the_task_events(tmp_path, capsys):
    root = tmp_path / "j"
    k = ThreadKey("bot", "s1", "alice")

    async def write() -> None:
        j = Journal.open(root, fsync=False)
        async with j.writer(k) as w:
            await w.append(tasks.begin_task(w.state, "ship", ["tests pass"], "t1"))
            await w.append(
                tasks.bind_evidence(w.state, "tests pass", "ci", "build", 4)
                + tasks.propose_requirement(w.state, "docs", by="tool")
            )

    asyncio.run(write())
    argv = ["--root", str(root), "diff", "--agent", "bot", "--session", "s1"]
    assert main([*argv, "--user", "alice"]) == 0
    out = capsys.readouterr().out
    assert "EvidenceBound" in out
    assert "tests pass: ci [build @ 4]" in out
    assert "RequirementProposed" in out
    assert "tasks_context.proposals.docs" in out
