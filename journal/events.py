"""The built-in event catalog, messages and content blocks.

Events are immutable ``msgspec.Struct`` values tagged by a ``type`` field (the class
name). Each is one fact about a thread; ``projections.AgentState`` is the fold of them.
Built-in events are *required*: a reader that does not know one must not build a state
without it. Application events registered with ``journal.register_event`` are optional
unless declared otherwise.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar, Literal

import msgspec

__all__ = [
    "AgentStateReplaced",
    "ContentBlock",
    "ContextCleared",
    "ContextCompacted",
    "Event",
    "EvidenceBound",
    "LeaseAcquired",
    "MessageAppended",
    "Msg",
    "ObjectVersion",
    "ObjectVersionSet",
    "PermissionModeSet",
    "PermissionRuleRemoved",
    "PermissionRuleSet",
    "PlanModeEntered",
    "PlanModeExited",
    "RequirementDecided",
    "RequirementProposed",
    "Role",
    "RunCompleted",
    "RunFailed",
    "RunInterrupted",
    "RunStarted",
    "SummarySet",
    "TaskBegun",
    "TextBlock",
    "ThinkingBlock",
    "ThreadCreated",
    "TodosWritten",
    "ToolCallCompleted",
    "ToolCallReconciled",
    "ToolCallRequested",
    "ToolGroupActivated",
    "ToolGroupDeactivated",
    "ToolResultBlock",
    "ToolUseBlock",
    "UnknownEvent",
    "VerificationCheck",
    "VerificationRecorded",
    "message_added",
]

Role = Literal["user", "assistant", "system", "tool"]
Decision = Literal["allow", "deny", "ask"]
InterruptedBy = Literal["user", "shutdown", "recovery"]
ObjectVersion = str | int


def _new_id() -> str:
    return uuid.uuid4().hex


# --- content blocks -------------------------------------------------------------


class TextBlock(msgspec.Struct, frozen=True, gc=False, tag="text", tag_field="type"):
    """Plain text."""

    text: str


class ToolUseBlock(
    msgspec.Struct, frozen=True, gc=False, tag="tool_use", tag_field="type"
):
    """A model's request to call a tool (``id`` is the call id)."""

    id: str
    name: str
    input: Any


class ToolResultBlock(
    msgspec.Struct, frozen=True, gc=False, tag="tool_result", tag_field="type"
):
    """The result of a tool call, sent back to the model."""

    tool_use_id: str
    output: Any
    is_error: bool = False


class ThinkingBlock(msgspec.Struct, frozen=True, tag="thinking", tag_field="type"):
    """A model's visible reasoning."""

    text: str


ContentBlock = TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock


class Msg(msgspec.Struct, omit_defaults=True, gc=False):
    """One conversation message.

    Args:
        role: ``"user"``, ``"assistant"``, ``"system"`` or ``"tool"``.
        content: A string or a list of content blocks.
        name: The speaker's name (optional).
        id: A unique id; a new uuid4 hex by default.
        metadata: Free-form JSON-compatible metadata.

    Messages and their blocks are not tracked by the cyclic garbage collector
    (msgspec's ``gc=False``): a long context holds tens of thousands of them, and
    rescanning them cost a load of 5,000 turns about a sixth of its time. They hold
    JSON-like values only; a message put inside its own ``metadata`` would never be
    freed.
    """

    role: Role
    content: str | list[ContentBlock]
    name: str | None = None
    id: str = msgspec.field(default_factory=_new_id)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def text(self) -> str:
        """The message's text: the string content, or its text blocks joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


# --- events ---------------------------------------------------------------------


class Event(msgspec.Struct, frozen=True, tag=True, tag_field="type"):
    """Base of every event. Subclass it and call ``journal.register_event``.

    Class attributes:
        required: Whether a reader that does not know this event type must refuse to
            build state from a log holding it. True for the built-ins.
        schema: The schema version written for this type (see upcasters).
    """

    required: ClassVar[bool] = True
    schema: ClassVar[int] = 1


class ThreadCreated(Event, frozen=True):
    """The thread's first event: its identity, for listing and audit."""

    agent_id: str
    session_id: str
    user_id: str | None = None
    thread_id: str = "main"
    namespace: str = "default"


class LeaseAcquired(Event, frozen=True):
    """The fence: from this record on, writers with a lower epoch cannot commit."""

    epoch: int
    holder: str


class RunStarted(Event, frozen=True):
    """An agent run (one execution of a call) began.

    A sub-agent's run (one started from inside another run's tool) names the run
    that started it and that run's thread (``str`` of its ``ThreadKey``).
    """

    run_id: str
    turn_id: str | None = None
    parent_run_id: str | None = None
    parent_thread: str | None = None


class RunCompleted(Event, frozen=True):
    """A run finished normally."""

    run_id: str


class RunFailed(Event, frozen=True):
    """A run ended with an error."""

    run_id: str
    error: str = ""


class RunInterrupted(Event, frozen=True):
    """A run was cut short by the user, a shutdown, or found unfinished at recovery."""

    run_id: str
    reason: str = ""
    by: InterruptedBy = "user"


class MessageAppended(Event, frozen=True):
    """A message joined the context."""

    message: Msg


class ContextCompacted(Event, frozen=True):
    """Messages were replaced by a summary."""

    summary: str
    replaced_ids: list[str] = msgspec.field(default_factory=list)


class SummarySet(Event, frozen=True):
    """The running summary was set (None clears it)."""

    summary: str | None


class ContextCleared(Event, frozen=True):
    """Messages and summary were cleared; everything else stays."""

    reason: str = ""


class ToolCallRequested(Event, frozen=True):
    """A tool call was decided; committed before the tool runs (write-ahead)."""

    call_id: str
    name: str
    input: Any = None
    run_id: str | None = None


class ToolCallCompleted(Event, frozen=True):
    """A tool call's result.

    With ``message_id`` set (schema 2), the result also joins the context as the tool
    message ``Msg("tool", [ToolResultBlock(call_id, output, is_error)], name=name,
    id=message_id)``, so the output is stored once. Schema 1 events (no
    ``message_id``) were followed by a ``MessageAppended`` of that message instead.
    """

    schema: ClassVar[int] = 2

    call_id: str
    output: Any = None
    is_error: bool = False
    message_id: str | None = None
    name: str | None = None

    def message(self) -> Msg | None:
        """The tool message this result adds to the context (None for schema 1)."""
        if self.message_id is None:
            return None
        block = ToolResultBlock(self.call_id, self.output, self.is_error)
        return Msg("tool", [block], name=self.name, id=self.message_id)


class ToolCallReconciled(Event, frozen=True):
    """An application's verdict on a tool call whose outcome was unknown."""

    call_id: str
    resolution: Any = None
    note: str = ""
    is_error: bool = False


class ToolGroupActivated(Event, frozen=True):
    """A group of tools became available."""

    group: str


class ToolGroupDeactivated(Event, frozen=True):
    """A group of tools stopped being available."""

    group: str


class PermissionRuleSet(Event, frozen=True):
    """A tool's permission decision was set."""

    tool: str
    decision: Decision


class PermissionRuleRemoved(Event, frozen=True):
    """A tool's permission rule was removed."""

    tool: str


class PermissionModeSet(Event, frozen=True):
    """The permission mode (e.g. ``default``, ``accept_edits``) changed."""

    mode: str


class PlanModeEntered(Event, frozen=True):
    """Plan mode began."""

    plan_file: str | None = None


class PlanModeExited(Event, frozen=True):
    """Plan mode ended."""


class TodosWritten(Event, frozen=True):
    """The todo list was replaced; ``revision`` is one more than the last one."""

    todos: list[Any]
    revision: int
    by: str = ""


class TaskBegun(Event, frozen=True):
    """A task with a goal and requirements began (the application's own requirements).

    It starts the task afresh: earlier requirements, decisions, evidence and
    verifications belong to the task before it.
    """

    goal: str
    requirements: list[str] = msgspec.field(default_factory=list)
    task_id: str | None = None


class RequirementProposed(Event, frozen=True):
    """A requirement was proposed for the current task (by a tool, say).

    A proposal is not a requirement of the task until a trusted caller decides it
    (``RequirementDecided``).
    """

    requirement: str
    note: str = ""
    by: str = ""


class RequirementDecided(Event, frozen=True):
    """A requirement of the current task was decided (``confirmed`` / ``rejected``)."""

    requirement: str
    decision: str
    note: str = ""
    by: str = ""


class EvidenceBound(Event, frozen=True):
    """Evidence was bound to a requirement, with the version of the object it saw.

    The evidence is stale once ``ObjectVersionSet`` gives ``object_id`` another
    version than ``object_version``.
    """

    requirement: str
    evidence: str
    object_id: str | None = None
    object_version: ObjectVersion | None = None
    by: str = ""


class ObjectVersionSet(Event, frozen=True):
    """The current version of an object evidence may refer to (a file, a build)."""

    object_id: str
    version: ObjectVersion


class VerificationCheck(msgspec.Struct, frozen=True):
    """One check a verification ran, and its outcome."""

    name: str
    passed: bool
    detail: str = ""


class VerificationRecorded(Event, frozen=True):
    """A verification service's verdict on the current task.

    ``evidence_versions`` maps each object the task's evidence refers to to the
    version the verifier saw, so a later version change shows the verdict is old.
    """

    passed: bool
    detail: str = ""
    verifier: str = ""
    checks: list[VerificationCheck] = msgspec.field(default_factory=list)
    evidence_versions: dict[str, ObjectVersion] = msgspec.field(default_factory=dict)


class AgentStateReplaced(Event, frozen=True):
    """A whole-state change (a save, an update or a migration).

    ``state`` is the msgpack encoding of the new ``AgentState`` without its messages.
    The messages are either inline (``messages``) or stored as content-addressed
    chunks (``chunks``, blob hashes) that the reader resolves before folding.
    """

    reason: str
    state: bytes
    messages: list[Msg] = msgspec.field(default_factory=list)
    chunks: list[str] = msgspec.field(default_factory=list)


class UnknownEvent(msgspec.Struct, frozen=True):
    """An event of a type this reader does not know, kept byte for byte.

    Attributes:
        type: The writer's type name.
        schema: The writer's schema version.
        required: Whether the writer declared it required.
        data: The event's original encoded bytes.
    """

    type: str
    schema: int
    required: bool
    data: bytes


def message_added(event: object) -> Msg | None:
    """The message an event adds to the end of the context when folded, if any.

    ``MessageAppended`` adds its message; ``ToolCallCompleted`` the tool message it
    carries (none for schema 1). No other built-in event appends one. Checkpoints
    that read their messages back from the log rely on this agreeing with the fold
    (``projections.agent_state.AgentStateProjection.apply``).
    """
    if isinstance(event, MessageAppended):
        return event.message
    if isinstance(event, ToolCallCompleted):
        return event.message()
    return None
