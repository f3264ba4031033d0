"""The task-context API: validate a change against a state, return its events.

Pure functions (no I/O): each checks the change against ``state.tasks_context`` and
returns the events to commit, or raises before anything could be written. The
caller commits the events with the state's version as the expected version, so a
change validated against an old state cannot land on a newer one.

Who may do what is the caller's to enforce; this module gives each role its own
function. The application begins a task and decides requirements
(:func:`begin_task`, :func:`decide_requirement`); a tool may only propose one
(:func:`propose_requirement`). A verification summary comes only from
:func:`run_verification`, which calls the verification service the application
supplies. Nothing is inferred: all todos completed confirms no requirement, and a
confirmed requirement with evidence is not verified until a verification says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from journal import events as ev
from journal.errors import TaskError, TodoRevisionError
from projections.tasks import requirement_status

if TYPE_CHECKING:
    from collections.abc import Sequence

    from projections.agent_state import AgentState
    from projections.tasks import TasksContext

__all__ = [
    "DECISIONS",
    "TODO_STATUSES",
    "EvidenceView",
    "RequirementView",
    "TaskView",
    "VerificationResult",
    "VerificationView",
    "Verifier",
    "begin_task",
    "bind_evidence",
    "decide_requirement",
    "propose_requirement",
    "render_task",
    "run_verification",
    "set_object_version",
    "task_view",
    "write_todos",
]

DECISIONS = ("confirmed", "rejected")
"""What a trusted caller may decide about a requirement."""

TODO_STATUSES = ("pending", "in_progress", "completed")
"""The status a todo item may have."""

_MAX_TEXT = 10_000


# --- the read-only view ---------------------------------------------------------


class EvidenceView(msgspec.Struct, frozen=True, kw_only=True):
    """One evidence item as the task stands now.

    Attributes:
        requirement: The requirement it supports.
        evidence: What it is.
        object_id: The object it looked at, if any.
        object_version: The object's version when the evidence was taken.
        current_version: The object's current version, if one was set.
        stale: Whether the object has changed since (current version differs).
        by: Who bound it.
    """

    requirement: str
    evidence: str
    object_id: str | None = None
    object_version: ev.ObjectVersion | None = None
    current_version: ev.ObjectVersion | None = None
    stale: bool = False
    by: str = ""


class RequirementView(msgspec.Struct, frozen=True, kw_only=True):
    """A requirement with its status and evidence.

    Attributes:
        text: The requirement.
        status: ``confirmed``, ``proposed``, ``rejected`` (or a decision written
            before the task API, as written).
        proposed_by: Who proposed it ("" when the application gave it).
        note: The proposal's note, or the decision's when it was decided.
        decided_by: Who decided it, if it was decided.
        evidence: Its evidence items, oldest first.
    """

    text: str
    status: str
    proposed_by: str = ""
    note: str = ""
    decided_by: str = ""
    evidence: tuple[EvidenceView, ...] = ()


class VerificationView(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded verification, and whether what it saw has changed since.

    Attributes:
        passed: The verdict.
        detail: Its explanation.
        verifier: The service that gave it.
        checks: The checks it ran.
        evidence_versions: The object versions it saw.
        stale: Whether an object it saw has another current version now.
    """

    passed: bool
    detail: str = ""
    verifier: str = ""
    checks: tuple[ev.VerificationCheck, ...] = ()
    evidence_versions: dict[str, ev.ObjectVersion] = msgspec.field(default_factory=dict)
    stale: bool = False


class TaskView(msgspec.Struct, frozen=True, kw_only=True):
    """A read-only summary of a thread's task context (what a verifier is given).

    Attributes:
        goal: The current task's goal (None: no task began).
        task_id: Its id, if the application gave one.
        requirements: Every requirement with its status and evidence.
        evidence: Every evidence item, oldest first.
        object_versions: The current version of each object set.
        todos: The todo list.
        revision: The todo list's revision.
        verifications: How many verifications the task has.
        last_verification: The newest one, if any.
    """

    goal: str | None = None
    task_id: str | None = None
    requirements: tuple[RequirementView, ...] = ()
    evidence: tuple[EvidenceView, ...] = ()
    object_versions: dict[str, ev.ObjectVersion] = msgspec.field(default_factory=dict)
    todos: tuple[Any, ...] = ()
    revision: int = 0
    verifications: int = 0
    last_verification: VerificationView | None = None


def _evidence_views(tasks: TasksContext) -> list[EvidenceView]:
    views: list[EvidenceView] = []
    items: dict[str, list[EvidenceView]] = {}
    for item in tasks.evidence_items:
        current = (
            tasks.object_versions.get(item.object_id)
            if item.object_id is not None
            else None
        )
        items.setdefault(item.requirement, []).append(
            EvidenceView(
                requirement=item.requirement,
                evidence=item.evidence,
                object_id=item.object_id,
                object_version=item.object_version,
                current_version=current,
                stale=current is not None and current != item.object_version,
                by=item.by,
            )
        )
    # A state checkpointed before evidence items existed has only the texts: those
    # come first (they are older) and name no object.
    for requirement, texts in tasks.evidence.items():
        known = items.get(requirement, [])
        legacy = [
            EvidenceView(requirement=requirement, evidence=text)
            for text in texts[: max(len(texts) - len(known), 0)]
        ]
        views.extend(legacy + known)
    for requirement, known in items.items():
        if requirement not in tasks.evidence:
            views.extend(known)
    return views


def task_view(state: AgentState) -> TaskView:
    """The read-only summary of ``state``'s task context.

    Args:
        state: The thread's state.

    Returns:
        Goal, requirements with status, evidence with stale flags, todos and the
        last verification (with a stale flag of its own).
    """
    tasks = state.tasks_context
    evidence = _evidence_views(tasks)
    requirements = []
    for text in tasks.requirements:
        proposal = tasks.proposals.get(text)
        detail = tasks.decision_details.get(text)
        note = detail.note if detail is not None and detail.note else ""
        if not note and proposal is not None:
            note = proposal.note
        requirements.append(
            RequirementView(
                text=text,
                status=requirement_status(tasks, text),
                proposed_by=proposal.by if proposal is not None else "",
                note=note,
                decided_by=detail.by if detail is not None else "",
                evidence=tuple(e for e in evidence if e.requirement == text),
            )
        )
    last = None
    if tasks.verifications:
        v = tasks.verifications[-1]
        stale = any(
            tasks.object_versions.get(obj, seen) != seen
            for obj, seen in v.evidence_versions.items()
        )
        last = VerificationView(
            passed=v.passed,
            detail=v.detail,
            verifier=v.verifier,
            checks=tuple(v.checks),
            evidence_versions=dict(v.evidence_versions),
            stale=stale,
        )
    return TaskView(
        goal=tasks.goal,
        task_id=tasks.task_id,
        requirements=tuple(requirements),
        evidence=tuple(evidence),
        object_versions=dict(tasks.object_versions),
        todos=tuple(tasks.todos),
        revision=tasks.revision,
        verifications=len(tasks.verifications),
        last_verification=last,
    )


def _todo_line(todo: object) -> str:
    if isinstance(todo, dict) and "content" in todo:
        status = todo.get("status")
        return f"[{status}] {todo['content']}" if status else str(todo["content"])
    if isinstance(todo, str):
        return todo
    return msgspec.json.encode(todo).decode("utf-8")


def render_task(state: AgentState) -> str:
    """The compact text of the task context a model is shown.

    Meant for a transient system message: it is built for each model call and never
    stored. Statuses are shown as they are; nothing is summarized into "done".

    Returns:
        The text, or "" when there is no task and no todos.
    """
    view = task_view(state)
    if view.goal is None and not view.todos:
        return ""
    lines: list[str] = []
    if view.goal is not None:
        ident = f" ({view.task_id})" if view.task_id else ""
        lines.append(f"Task{ident}: {view.goal}")
        if view.requirements:
            lines.append("Requirements:")
        for req in view.requirements:
            who = f" (proposed by {req.proposed_by})" if req.proposed_by else ""
            lines.append(f"- [{req.status}] {req.text}{who}")
            lines.extend(
                f"    evidence: {item.evidence}{_object_text(item)}"
                for item in req.evidence
            )
        last = view.last_verification
        if last is None:
            lines.append("Verification: none recorded")
        else:
            verdict = "passed" if last.passed else "failed"
            by = f" by {last.verifier}" if last.verifier else ""
            detail = f": {last.detail}" if last.detail else ""
            stale = " (stale: objects changed since)" if last.stale else ""
            lines.append(f"Verification: {verdict}{by}{detail}{stale}")
            lines.extend(
                f"    check {c.name}: {'passed' if c.passed else 'failed'}"
                + (f" ({c.detail})" if c.detail else "")
                for c in last.checks
            )
    if view.todos:
        lines.append(f"Todos (revision {view.revision}):")
        lines.extend(f"- {_todo_line(t)}" for t in view.todos)
    return "\n".join(lines)


def _object_text(item: EvidenceView) -> str:
    if item.object_id is None:
        return ""
    text = f" [{item.object_id} @ {item.object_version}"
    if item.stale:
        text += f", stale: now {item.current_version}"
    return text + "]"


# --- changes --------------------------------------------------------------------


def _text(name: str, value: object, *, requirement: str | None = None) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise TaskError(f"{name} must not be empty", requirement=requirement)
    if len(value) > _MAX_TEXT:
        raise TaskError(
            f"{name} is {len(value)} characters, more than {_MAX_TEXT}",
            requirement=requirement,
        )
    return value


def _short(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _current(state: AgentState) -> TasksContext:
    tasks = state.tasks_context
    if tasks.goal is None:
        raise TaskError("no task has begun (begin_task first)")
    return tasks


def _known(tasks: TasksContext, requirement: str) -> None:
    if requirement not in tasks.requirements:
        raise TaskError(
            "no such requirement (the task has "
            + (", ".join(repr(r) for r in tasks.requirements) or "none")
            + ")",
            task_id=tasks.task_id,
            requirement=requirement,
        )


def _version(value: object) -> ev.ObjectVersion:
    # bool is an int to Python, but a version of True is a mistake.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(
            f"an object version must be a str or an int, not {type(value).__name__}"
        )
    return value


def begin_task(
    state: AgentState,
    goal: str,
    requirements: Sequence[str] = (),
    task_id: str | None = None,
) -> list[object]:
    """Begin a task: the application's goal and requirements (all ``confirmed``).

    A new task replaces the current one; its requirements, decisions, evidence and
    verifications stay in the log. Todos and object versions carry over.

    Args:
        state: The thread's state.
        goal: What the task is for.
        requirements: The requirements, distinct and non-empty.
        task_id: An id for the task (optional).

    Returns:
        ``[TaskBegun]``.

    Raises:
        TaskError: An empty goal or requirement, or a repeated requirement.
        TypeError: A value of the wrong type.
    """
    del state  # any state may begin a task; the argument keeps the API uniform
    _text("goal", goal)
    if task_id is not None:
        _text("task_id", task_id)
    if isinstance(requirements, str):
        raise TypeError("requirements must be a sequence of str, not one str")
    reqs = [_text("requirement", r) for r in requirements]
    seen: set[str] = set()
    for r in reqs:
        if r in seen:
            raise TaskError("requirement given twice", task_id=task_id, requirement=r)
        seen.add(r)
    return [ev.TaskBegun(goal, reqs, task_id)]


def propose_requirement(
    state: AgentState, text: str, note: str = "", by: str = ""
) -> list[object]:
    """Propose a requirement for the current task (what a tool may do).

    The requirement is ``proposed`` until a trusted caller decides it.

    Args:
        state: The thread's state.
        text: The requirement.
        note: Why it is proposed.
        by: Who proposes it (a tool's name, say).

    Returns:
        ``[RequirementProposed]``.

    Raises:
        TaskError: No task has begun, the text is empty, or the task already has
            this requirement (whatever its status).
    """
    tasks = _current(state)
    _text("requirement", text)
    _short("note", note)
    _short("by", by)
    if text in tasks.requirements:
        raise TaskError(
            f"already a requirement ({requirement_status(tasks, text)})",
            task_id=tasks.task_id,
            requirement=text,
        )
    return [ev.RequirementProposed(text, note, by)]


def decide_requirement(
    state: AgentState, requirement: str, decision: str, note: str = "", by: str = ""
) -> list[object]:
    """Decide a requirement: ``confirmed`` or ``rejected`` (a trusted caller only).

    Args:
        state: The thread's state.
        requirement: A requirement of the current task.
        decision: ``"confirmed"`` or ``"rejected"``.
        note: Why.
        by: Who decides.

    Returns:
        ``[RequirementDecided]``, or ``[]`` when it already has that decision.

    Raises:
        TaskError: No task has begun, the requirement is not the task's, or the
            decision is not one of :data:`DECISIONS`.
    """
    tasks = _current(state)
    _short("note", note)
    _short("by", by)
    _known(tasks, requirement)
    if decision not in DECISIONS:
        raise TaskError(
            f"invalid decision {decision!r} (one of {', '.join(DECISIONS)})",
            task_id=tasks.task_id,
            requirement=requirement,
        )
    if tasks.decisions.get(requirement) == decision:
        return []
    return [ev.RequirementDecided(requirement, decision, note, by)]


def bind_evidence(
    state: AgentState,
    requirement: str,
    evidence: str,
    object_id: str | None = None,
    object_version: ev.ObjectVersion | None = None,
    by: str = "",
) -> list[object]:
    """Bind evidence to a requirement, with the version of the object it looked at.

    The evidence becomes stale once :func:`set_object_version` gives the object
    another version. Binding evidence verifies nothing by itself.

    Args:
        state: The thread's state.
        requirement: A requirement of the current task that is not rejected.
        evidence: What the evidence is.
        object_id: The object it looked at (a file, a build), with
            ``object_version``.
        object_version: That object's version, with ``object_id``.
        by: Who binds it.

    Returns:
        ``[EvidenceBound]``.

    Raises:
        TaskError: No task has begun, an unknown or rejected requirement, empty
            evidence, only one of ``object_id`` and ``object_version``, or a version
            that is not the object's current one (the evidence would be stale
            from the start).
        TypeError: A value of the wrong type.
    """
    tasks = _current(state)
    _known(tasks, requirement)
    _text("evidence", evidence, requirement=requirement)
    _short("by", by)
    if requirement_status(tasks, requirement) == "rejected":
        raise TaskError(
            "the requirement was rejected; evidence for it would support nothing",
            task_id=tasks.task_id,
            requirement=requirement,
        )
    if (object_id is None) != (object_version is None):
        raise TaskError(
            "evidence names an object with its version: give both object_id and "
            "object_version, or neither",
            task_id=tasks.task_id,
            requirement=requirement,
        )
    if object_id is not None:
        _text("object_id", object_id, requirement=requirement)
        version = _version(object_version)
        current = tasks.object_versions.get(object_id)
        if current is not None and current != version:
            raise TaskError(
                f"object {object_id!r} is at version {current!r}, not "
                f"{version!r}: evidence of an older version is stale already",
                task_id=tasks.task_id,
                requirement=requirement,
            )
    return [ev.EvidenceBound(requirement, evidence, object_id, object_version, by)]


def set_object_version(
    state: AgentState, object_id: str, version: ev.ObjectVersion
) -> list[object]:
    """Record an object's current version (evidence of other versions goes stale).

    Args:
        state: The thread's state.
        object_id: The object.
        version: Its new version.

    Returns:
        ``[ObjectVersionSet]``, or ``[]`` when that is its version already.

    Raises:
        TaskError: An empty object id.
        TypeError: A version that is not a str or an int.
    """
    _text("object_id", object_id)
    _version(version)
    if state.tasks_context.object_versions.get(object_id) == version:
        return []
    return [ev.ObjectVersionSet(object_id, version)]


def _check_todo(index: int, todo: object) -> dict[str, Any]:
    where = f"todos[{index}]"
    if not isinstance(todo, dict):
        raise TaskError(
            f"{where} must be a dict with content and status, not {type(todo).__name__}"
        )
    content = todo.get("content")
    if not isinstance(content, str) or not content.strip():
        raise TaskError(f"{where}.content must be a non-empty str")
    status = todo.get("status")
    if status not in TODO_STATUSES:
        raise TaskError(
            f"{where}.status is {status!r}, not one of {', '.join(TODO_STATUSES)}"
        )
    try:
        # Round-trip through JSON: what is stored must read back the same.
        back = msgspec.json.decode(msgspec.json.encode(todo))
    except (TypeError, msgspec.EncodeError) as exc:
        raise TaskError(f"{where} is not JSON-compatible: {exc}") from None
    if back != todo:
        raise TaskError(
            f"{where} does not read back the same from JSON (keys must be str, "
            "values JSON types)"
        )
    return dict(todo)


def write_todos(
    state: AgentState,
    todos: Sequence[dict[str, Any]],
    expected_revision: int | None = None,
    by: str = "",
) -> list[object]:
    """Replace the todo list; its revision becomes the current one plus one.

    Completing todos completes only todos: it confirms or verifies nothing.

    Args:
        state: The thread's state.
        todos: The new list: dicts with ``content`` (a non-empty str) and ``status``
            (one of :data:`TODO_STATUSES`); other JSON-compatible keys are kept.
        expected_revision: The revision the list was based on; a write against an
            older one is refused.
        by: Who writes it.

    Returns:
        ``[TodosWritten]``.

    Raises:
        TodoRevisionError: ``expected_revision`` is not the current revision.
        TaskError: A todo item that is not valid.
    """
    current = state.tasks_context.revision
    if expected_revision is not None and expected_revision != current:
        raise TodoRevisionError(expected_revision, current)
    if isinstance(todos, str | bytes | dict):
        raise TypeError(f"todos must be a list of dicts, not {type(todos).__name__}")
    items = [_check_todo(i, t) for i, t in enumerate(todos)]
    _short("by", by)
    return [ev.TodosWritten(items, current + 1, by)]


# --- verification ---------------------------------------------------------------


class VerificationResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a verification service returns.

    Attributes:
        passed: The overall verdict. It must not contradict ``checks``: a result
            that passed with a failed check is refused.
        detail: An explanation.
        checks: The checks it ran.
        verifier: The service's name ("" to take the verifier's ``name``
            attribute, else its qualified name).
    """

    passed: bool
    detail: str = ""
    checks: tuple[ev.VerificationCheck, ...] = ()
    verifier: str = ""


class Verifier(Protocol):
    """A verification service the application supplies."""

    async def __call__(self, task: TaskView) -> VerificationResult:
        """Check the task as ``task`` shows it and return the verdict."""
        ...


def _verifier_name(verifier: object, result: VerificationResult) -> str:
    if result.verifier:
        return result.verifier
    name = getattr(verifier, "name", None)
    if isinstance(name, str) and name:
        return name
    qualname = getattr(verifier, "__qualname__", None)
    return qualname if isinstance(qualname, str) else type(verifier).__qualname__


async def run_verification(state: AgentState, verifier: Verifier) -> list[object]:
    """Call ``verifier`` on the current task and return its ``VerificationRecorded``.

    The only way a verification summary comes to be: the event records the
    verdict, the checks, the verifier's name and the version of every evidence
    object it was shown, so a later version change marks the verdict stale.

    Args:
        state: The thread's state.
        verifier: The application's verification service.

    Returns:
        ``[VerificationRecorded]``.

    Raises:
        TaskError: No task has begun, or the result passed with a failed check.
        TypeError: The verifier returned something other than a
            :class:`VerificationResult`.
    """
    tasks = _current(state)
    view = task_view(state)
    result = await verifier(view)
    if not isinstance(result, VerificationResult):
        raise TypeError(
            f"the verifier returned {type(result).__name__}, not a VerificationResult"
        )
    checks = list(result.checks)
    for check in checks:
        if not isinstance(check, ev.VerificationCheck):
            raise TypeError(
                f"a check must be a VerificationCheck, not {type(check).__name__}"
            )
    failed = [c.name for c in checks if not c.passed]
    if result.passed and failed:
        raise TaskError(
            f"the verifier said passed, but check {failed[0]!r} failed",
            task_id=tasks.task_id,
        )
    seen: dict[str, ev.ObjectVersion] = {}
    for item in view.evidence:
        if item.object_id is None:
            continue
        version = item.current_version
        if version is None:
            version = item.object_version
        if version is not None:
            seen[item.object_id] = version
    return [
        ev.VerificationRecorded(
            result.passed,
            result.detail,
            _verifier_name(verifier, result),
            checks,
            seen,
        )
    ]
