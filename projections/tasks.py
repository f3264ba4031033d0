"""The task context of a thread: todos, the current task, evidence, verifications.

Three things stay distinct and none is inferred from another: a todo being done, a
requirement being confirmed (accepted as part of the task by a trusted caller) and a
check passing (recorded only by a ``VerificationRecorded``). Evidence carries the
version of the object it looked at; it is *stale* once the object has another
current version (``ObjectVersionSet``).

Fields that predate the task API (``requirements``, ``decisions``, ``evidence``,
``verifications``) keep their meaning, so old logs and checkpoints fold and decode
to the same values; the fields added since have defaults.
"""

from __future__ import annotations

from typing import Any

import msgspec

from journal import events as ev

__all__ = [
    "TASK_EVENTS",
    "DecisionDetail",
    "EvidenceItem",
    "Proposal",
    "TasksContext",
    "Verification",
    "apply_task_event",
    "requirement_status",
]

TASK_EVENTS: tuple[type[ev.Event], ...] = (
    ev.TodosWritten,
    ev.TaskBegun,
    ev.RequirementProposed,
    ev.RequirementDecided,
    ev.EvidenceBound,
    ev.ObjectVersionSet,
    ev.VerificationRecorded,
)
"""The event types :func:`apply_task_event` folds."""


class Verification(msgspec.Struct):
    """One recorded verification of the current task.

    Attributes:
        passed: The verifier's overall verdict.
        detail: Its explanation.
        verifier: Which verification service gave it.
        checks: The checks it ran.
        evidence_versions: The version of each evidence object it saw.
    """

    passed: bool
    detail: str = ""
    verifier: str = ""
    checks: list[ev.VerificationCheck] = msgspec.field(default_factory=list)
    evidence_versions: dict[str, ev.ObjectVersion] = msgspec.field(default_factory=dict)


class Proposal(msgspec.Struct):
    """Who proposed a requirement, and why."""

    note: str = ""
    by: str = ""


class DecisionDetail(msgspec.Struct):
    """Who decided a requirement, and their note."""

    note: str = ""
    by: str = ""


class EvidenceItem(msgspec.Struct):
    """One piece of evidence bound to a requirement.

    Attributes:
        requirement: The requirement it supports.
        evidence: What it is (a test run, a file, a link).
        object_id: The object it looked at, if it names one.
        object_version: That object's version when the evidence was taken.
        by: Who bound it.
    """

    requirement: str
    evidence: str
    object_id: str | None = None
    object_version: ev.ObjectVersion | None = None
    by: str = ""


class TasksContext(msgspec.Struct):
    """Todos and the current task with its requirements, decisions and evidence.

    Attributes:
        todos: The todo list as last written.
        revision: The todo list's revision (0: never written).
        goal: The current task's goal (None: no task began).
        requirements: The task's requirements, the application's first and then
            the proposed ones, in order.
        decisions: A trusted caller's decision per requirement.
        evidence: Evidence texts per requirement (see ``evidence_items``).
        verifications: Every verification of the current task, oldest first.
        task_id: The current task's id, when the application gave one.
        proposals: The requirements that were proposed rather than given.
        decision_details: Who decided each decided requirement.
        evidence_items: Every evidence item, with its object and version.
        object_versions: The current version of each object evidence may name.
    """

    todos: list[Any] = msgspec.field(default_factory=list)
    revision: int = 0
    goal: str | None = None
    requirements: list[str] = msgspec.field(default_factory=list)
    decisions: dict[str, str] = msgspec.field(default_factory=dict)
    evidence: dict[str, list[str]] = msgspec.field(default_factory=dict)
    verifications: list[Verification] = msgspec.field(default_factory=list)
    task_id: str | None = None
    proposals: dict[str, Proposal] = msgspec.field(default_factory=dict)
    decision_details: dict[str, DecisionDetail] = msgspec.field(default_factory=dict)
    evidence_items: list[EvidenceItem] = msgspec.field(default_factory=list)
    object_versions: dict[str, ev.ObjectVersion] = msgspec.field(default_factory=dict)


def requirement_status(tasks: TasksContext, requirement: str) -> str:
    """A requirement's status: its decision, else ``proposed`` or ``confirmed``.

    A requirement the application began the task with is ``confirmed``; one that
    was proposed stays ``proposed`` until a trusted caller decides it. Decisions
    written before the task API (``met``, say) are returned as written.
    """
    decided = tasks.decisions.get(requirement)
    if decided is not None:
        return decided
    return "proposed" if requirement in tasks.proposals else "confirmed"


def apply_task_event(tasks: TasksContext, event: object) -> bool:
    """Fold one task event into ``tasks`` (mutated in place).

    Returns:
        True when ``event`` is a task event (one of :data:`TASK_EVENTS`), False
        when it is not and ``tasks`` was left alone.
    """
    match event:
        case ev.TodosWritten(todos=todos, revision=revision):
            tasks.todos = list(todos)
            tasks.revision = revision
        case ev.TaskBegun(goal=goal, requirements=requirements):
            tasks.goal = goal
            tasks.task_id = event.task_id
            tasks.requirements = list(requirements)
            tasks.decisions = {}
            tasks.evidence = {}
            tasks.verifications = []
            tasks.proposals = {}
            tasks.decision_details = {}
            tasks.evidence_items = []
            # Object versions are facts about the objects, not about one task.
        case ev.RequirementProposed(requirement=req, note=note, by=by):
            if req not in tasks.requirements:
                tasks.requirements.append(req)
            tasks.proposals[req] = Proposal(note, by)
        case ev.RequirementDecided(requirement=req, decision=decision):
            tasks.decisions[req] = decision
            tasks.decision_details[req] = DecisionDetail(event.note, event.by)
        case ev.EvidenceBound(requirement=req, evidence=evidence):
            tasks.evidence.setdefault(req, []).append(evidence)
            tasks.evidence_items.append(
                EvidenceItem(
                    req, evidence, event.object_id, event.object_version, event.by
                )
            )
        case ev.ObjectVersionSet(object_id=object_id, version=version):
            tasks.object_versions[object_id] = version
        case ev.VerificationRecorded(passed=passed, detail=detail):
            tasks.verifications.append(
                Verification(
                    passed,
                    detail,
                    event.verifier,
                    list(event.checks),
                    dict(event.evidence_versions),
                )
            )
        case _:
            return False
    return True
