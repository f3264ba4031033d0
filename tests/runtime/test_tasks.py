"""The task-context API: each rule refuses what it must, and commits replay alike."""

from __future__ import annotations

import msgspec
import pytest

from journal import (
    EvidenceBound,
    Journal,
    ObjectVersionSet,
    RequirementDecided,
    RequirementProposed,
    TaskBegun,
    TaskError,
    TodoRevisionError,
    TodosWritten,
    VerificationCheck,
    VerificationRecorded,
)
from journal.runtime import tasks
from projections.agent_state import AgentState, AgentStateProjection
from projections.tasks import TASK_EVENTS, requirement_status
from tests.runtime._support import all_events, fresh_url, key


class _Rec:
    """The one record attribute the fold reads."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.run_id = None


def fold(state: AgentState, events: list[object]) -> AgentState:
    projection = AgentStateProjection()
    for event in events:
        state = projection.apply(state, _Rec(state.version + 1), event)  # type: ignore[arg-type]
    return state


def begun(*requirements: str, task_id: str | None = "t1") -> AgentState:
    return fold(
        AgentState(), tasks.begin_task(AgentState(), "ship", requirements, task_id)
    )


class Verifier:
    name = "ci"

    def __init__(self, result: tasks.VerificationResult) -> None:
        self.result = result
        self.seen: list[tasks.TaskView] = []

    async def __call__(self, task: tasks.TaskView) -> tasks.VerificationResult:
        self.seen.append(task)
        return self.result


# --- requirements ---------------------------------------------------------------


def test_begun_requirements_are_confirmed_and_proposals_are_not():
    state = begun("tests pass")
    events = tasks.propose_requirement(state, "docs updated", "spotted", by="todo_tool")
    assert events == [RequirementProposed("docs updated", "spotted", "todo_tool")]
    state = fold(state, events)
    view = tasks.task_view(state)
    assert [(r.text, r.status) for r in view.requirements] == [
        ("tests pass", "confirmed"),
        ("docs updated", "proposed"),
    ]
    assert view.requirements[1].proposed_by == "todo_tool"
    state = fold(
        state, tasks.decide_requirement(state, "docs updated", "rejected", by="app")
    )
    assert requirement_status(state.tasks_context, "docs updated") == "rejected"


def test_a_decision_on_an_unknown_requirement_is_refused():
    state = begun("tests pass")
    with pytest.raises(
        TaskError, match=r"task 't1', requirement 'typo'.*no such"
    ) as info:
        tasks.decide_requirement(state, "typo", "confirmed")
    assert info.value.requirement == "typo"
    assert info.value.task_id == "t1"


def test_an_invalid_decision_is_refused():
    state = begun("tests pass")
    with pytest.raises(TaskError, match="invalid decision 'met'"):
        tasks.decide_requirement(state, "tests pass", "met")


def test_nothing_is_decided_before_a_task_begins():
    with pytest.raises(TaskError, match="no task has begun"):
        tasks.propose_requirement(AgentState(), "x")
    with pytest.raises(TaskError, match="no task has begun"):
        tasks.decide_requirement(AgentState(), "x", "confirmed")


def test_a_requirement_cannot_be_proposed_twice():
    state = begun("tests pass")
    with pytest.raises(TaskError, match=r"already a requirement \(confirmed\)"):
        tasks.propose_requirement(state, "tests pass")


def test_begin_task_refuses_repeated_or_empty_requirements():
    with pytest.raises(TaskError, match="given twice"):
        tasks.begin_task(AgentState(), "g", ["a", "a"])
    with pytest.raises(TaskError, match="requirement must not be empty"):
        tasks.begin_task(AgentState(), "g", [" "])
    with pytest.raises(TypeError):
        tasks.begin_task(AgentState(), "g", "abc")


# --- evidence -------------------------------------------------------------------


def test_evidence_goes_stale_when_its_object_version_changes():
    state = begun("tests pass")
    state = fold(
        state,
        tasks.bind_evidence(state, "tests pass", "pytest green", "src/app.py", "v1"),
    )
    [item] = tasks.task_view(state).evidence
    assert (item.object_version, item.stale) == ("v1", False)
    state = fold(state, tasks.set_object_version(state, "src/app.py", "v1"))
    assert not tasks.task_view(state).evidence[0].stale
    assert tasks.set_object_version(state, "src/app.py", "v1") == []
    state = fold(state, tasks.set_object_version(state, "src/app.py", "v2"))
    [item] = tasks.task_view(state).evidence
    assert (item.stale, item.current_version) == (True, "v2")
    assert "stale: now v2" in tasks.render_task(state)
    # Evidence of the old version is refused once the new one is known.
    with pytest.raises(TaskError, match="at version 'v2', not 'v1'"):
        tasks.bind_evidence(state, "tests pass", "again", "src/app.py", "v1")


def test_evidence_needs_both_object_and_version_and_a_live_requirement():
    state = begun("tests pass")
    with pytest.raises(TaskError, match="both object_id and object_version"):
        tasks.bind_evidence(state, "tests pass", "e", object_id="f")
    with pytest.raises(TaskError, match="no such requirement"):
        tasks.bind_evidence(state, "nope", "e")
    with pytest.raises(TypeError, match="str or an int"):
        tasks.bind_evidence(state, "tests pass", "e", "f", True)  # type: ignore[arg-type]
    state = fold(state, tasks.decide_requirement(state, "tests pass", "rejected"))
    with pytest.raises(TaskError, match="rejected"):
        tasks.bind_evidence(state, "tests pass", "e")


# --- todos ----------------------------------------------------------------------


def test_a_stale_todo_revision_is_refused():
    state = AgentState()
    todo = {"content": "write tests", "status": "pending"}
    first = tasks.write_todos(state, [todo], expected_revision=0)
    assert first == [TodosWritten([todo], 1)]
    state = fold(state, first)
    second = tasks.write_todos(state, [{**todo, "status": "completed"}], 1)
    state = fold(state, second)
    assert state.tasks_context.revision == 2
    with pytest.raises(
        TodoRevisionError, match="revision 1, but the current revision is 2"
    ):
        tasks.write_todos(state, [todo], expected_revision=1)


@pytest.mark.parametrize(
    ("todo", "match"),
    [
        ("write tests", "must be a dict"),
        ({"content": "", "status": "pending"}, "content must be a non-empty str"),
        ({"content": "x", "status": "done"}, "status is 'done'"),
        ({"content": "x", "status": "pending", 1: "a"}, "JSON"),
        ({"content": "x", "status": "pending", "at": object()}, "JSON"),
    ],
)
def test_a_bad_todo_item_is_refused(todo, match):
    with pytest.raises(TaskError, match=rf"todos\[0\].*{match}|{match}"):
        tasks.write_todos(AgentState(), [todo])


def test_all_todos_done_confirms_and_verifies_nothing():
    state = begun()
    state = fold(state, tasks.propose_requirement(state, "docs", by="tool"))
    state = fold(
        state, tasks.write_todos(state, [{"content": "docs", "status": "completed"}])
    )
    view = tasks.task_view(state)
    assert view.requirements[0].status == "proposed"
    assert view.last_verification is None
    assert "Verification: none recorded" in tasks.render_task(state)


# --- verification ---------------------------------------------------------------


async def test_verification_comes_only_from_run_verification():
    state = begun("tests pass")
    state = fold(state, tasks.bind_evidence(state, "tests pass", "ci run", "build", 7))
    # Evidence on a confirmed requirement is not a verification.
    assert tasks.task_view(state).last_verification is None
    verifier = Verifier(
        tasks.VerificationResult(
            passed=True, detail="all green", checks=(VerificationCheck("unit", True),)
        )
    )
    events = await tasks.run_verification(state, verifier)
    assert events == [
        VerificationRecorded(
            True, "all green", "ci", [VerificationCheck("unit", True)], {"build": 7}
        )
    ]
    assert verifier.seen[0].requirements[0].evidence[0].object_version == 7
    state = fold(state, events)
    last = tasks.task_view(state).last_verification
    assert last is not None
    assert (last.passed, last.stale) == (True, False)
    state = fold(state, tasks.set_object_version(state, "build", 8))
    last = tasks.task_view(state).last_verification
    assert last is not None
    assert last.stale
    assert "(stale: objects changed since)" in tasks.render_task(state)


async def test_a_verifier_contradicting_its_checks_is_refused():
    state = begun("tests pass")
    verifier = Verifier(
        tasks.VerificationResult(
            passed=True, checks=(VerificationCheck("lint", False),)
        )
    )
    with pytest.raises(TaskError, match="check 'lint' failed"):
        await tasks.run_verification(state, verifier)


async def test_run_verification_needs_a_task_and_a_result():
    with pytest.raises(TaskError, match="no task has begun"):
        await tasks.run_verification(
            AgentState(), Verifier(tasks.VerificationResult(passed=True))
        )

    async def wrong(task: tasks.TaskView) -> object:
        return True

    with pytest.raises(TypeError, match="not a VerificationResult"):
        await tasks.run_verification(begun(), wrong)  # type: ignore[arg-type]


# --- the model's view -----------------------------------------------------------


def test_render_task_is_empty_without_task_or_todos():
    assert tasks.render_task(AgentState()) == ""


def test_render_task_shows_statuses_as_they_are():
    state = begun("tests pass")
    state = fold(state, tasks.propose_requirement(state, "docs", by="tool"))
    state = fold(
        state,
        tasks.write_todos(state, [{"content": "write docs", "status": "in_progress"}]),
    )
    text = tasks.render_task(state)
    assert text.splitlines() == [
        "Task (t1): ship",
        "Requirements:",
        "- [confirmed] tests pass",
        "- [proposed] docs (proposed by tool)",
        "Verification: none recorded",
        "Todos (revision 1):",
        "- [in_progress] write docs",
    ]


# --- committed through a journal ------------------------------------------------


async def test_replay_after_commit_gives_the_same_tasks_context():
    j = Journal.open(fresh_url())
    k = key()
    async with j.writer(k) as w:
        steps = [
            lambda s: tasks.begin_task(s, "ship", ["tests pass"], task_id="t1"),
            lambda s: tasks.propose_requirement(s, "docs", "n", by="tool"),
            lambda s: tasks.decide_requirement(s, "docs", "confirmed", by="app"),
            lambda s: tasks.bind_evidence(s, "docs", "README", "README.md", "abc"),
            lambda s: tasks.write_todos(s, [{"content": "a", "status": "pending"}], 0),
            lambda s: tasks.set_object_version(s, "README.md", "def"),
        ]
        for step in steps:
            await w.append(step(w.state), expected_version=w.version)
        verifier = Verifier(tasks.VerificationResult(passed=False, detail="stale docs"))
        await w.append(await tasks.run_verification(w.state, verifier))
        live = w.state.tasks_context
        await w.checkpoint()
    loaded = await j.load(k)
    assert msgspec.json.encode(loaded.tasks_context) == msgspec.json.encode(live)
    assert tasks.task_view(loaded).evidence[0].stale
    task_events = [e for _, e in await all_events(j, k) if isinstance(e, TASK_EVENTS)]
    assert [type(e).__name__ for e in task_events] == [
        "TaskBegun",
        "RequirementProposed",
        "RequirementDecided",
        "EvidenceBound",
        "TodosWritten",
        "ObjectVersionSet",
        "VerificationRecorded",
    ]
    # A fresh replay from version 1 (no checkpoint) agrees too.
    full = Journal.open(fresh_url())
    async with full.writer(k) as w2:
        await w2.append(task_events)
    replayed = await full.load(k)
    assert msgspec.json.encode(replayed.tasks_context) == msgspec.json.encode(live)


def test_the_event_types_are_those_the_functions_return():
    state = begun("r")
    assert isinstance(tasks.begin_task(state, "g")[0], TaskBegun)
    assert isinstance(
        tasks.decide_requirement(state, "r", "rejected")[0], RequirementDecided
    )
    assert isinstance(tasks.bind_evidence(state, "r", "e")[0], EvidenceBound)
    assert isinstance(tasks.set_object_version(state, "o", 1)[0], ObjectVersionSet)
    assert tasks.decide_requirement(state, "r", "confirmed") == [
        RequirementDecided("r", "confirmed")
    ]
