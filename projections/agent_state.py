"""AgentState: the per-thread state an agent runs with, folded from events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from journal import events as ev
from journal.errors import UnknownEventError
from journal.events import message_added
from projections.tasks import TasksContext, Verification, apply_task_event

if TYPE_CHECKING:
    from collections.abc import Iterator

    from journal.codec import Record
    from journal.keys import ThreadKey

__all__ = [
    "AgentState",
    "AgentStateProjection",
    "PendingToolCall",
    "PermissionContext",
    "PlanModeContext",
    "TasksContext",
    "ToolContext",
    "Verification",
    "fold_refusal",
    "keep_log_facts",
    "message_added",
]


class PermissionContext(msgspec.Struct):
    """Permission mode and per-tool rules (``allow`` / ``deny`` / ``ask``)."""

    mode: str = "default"
    rules: dict[str, str] = msgspec.field(default_factory=dict)


class PlanModeContext(msgspec.Struct):
    """Whether plan mode is on, and its plan file."""

    active: bool = False
    plan_file: str | None = None


class PendingToolCall(msgspec.Struct):
    """A tool call requested with no result yet (uncertain once its run ended)."""

    call_id: str
    name: str
    input: Any = None
    run_id: str | None = None
    version: int = 0


class ToolContext(msgspec.Struct):
    """Activated tool groups and tool calls still waiting for a result."""

    active_groups: list[str] = msgspec.field(default_factory=list)
    pending_calls: dict[str, PendingToolCall] = msgspec.field(default_factory=dict)


class AgentState(msgspec.Struct):
    """The state of one thread as of ``version``; derived, never the truth.

    Attributes:
        session_id: The session the thread belongs to.
        thread_id: The thread within the session.
        user_id: The user, or None for the anonymous user.
        context: The messages the model sees next.
        summary: The running summary of compacted or earlier context.
        permission_context: Permission mode and rules.
        plan_mode_context: Plan mode.
        tasks_context: Todos and the current task.
        tool_context: Active tool groups and pending tool calls.
        shutdown_interrupted: True from a run cut short by a shutdown or found
            unfinished at recovery, until a run completes (an interrupt by the user
            does not set it).
        active_run_id: The run that started and has not ended, if any.
        version: The head version this state includes (0: the empty thread).
    """

    session_id: str | None = None
    thread_id: str = "main"
    user_id: str | None = None
    context: list[ev.Msg] = msgspec.field(default_factory=list)
    summary: str | None = None
    permission_context: PermissionContext = msgspec.field(
        default_factory=PermissionContext
    )
    plan_mode_context: PlanModeContext = msgspec.field(default_factory=PlanModeContext)
    tasks_context: TasksContext = msgspec.field(default_factory=TasksContext)
    tool_context: ToolContext = msgspec.field(default_factory=ToolContext)
    shutdown_interrupted: bool = False
    active_run_id: str | None = None
    version: int = 0

    def to_json(self) -> bytes:
        """Encode as JSON bytes."""
        return msgspec.json.encode(self)

    def json_pieces(self, messages: int = 512) -> Iterator[bytes]:
        """:meth:`to_json` in pieces: the context ``messages`` messages at a time.

        The pieces joined are exactly ``to_json()``. A writer that sends each as it
        comes (``agent-journal state --json`` to a pipe) encodes the next while
        the reader takes the last, and never holds the whole document: a
        5,000-turn state is 10 MB of JSON.

        Raises:
            ValueError: ``messages`` is below 1.
        """
        if messages < 1:
            raise ValueError(f"messages must be >= 1, not {messages}")
        context = self.context
        rest = msgspec.json.encode(msgspec.structs.replace(self, context=[]))
        # The fields before the context are strings or null, whose encoding
        # escapes every quote: the key's bytes occur nowhere else before it.
        at = rest.find(_CONTEXT_KEY)
        if not context or at < 0:
            yield rest if at >= 0 else self.to_json()
            return
        split = at + len(_CONTEXT_KEY) - 1
        yield rest[:split]
        for start in range(0, len(context), messages):
            if start:
                yield b","
            yield msgspec.json.encode(context[start : start + messages])[1:-1]
        yield rest[split:]

    @classmethod
    def from_json(cls, data: bytes | str) -> AgentState:
        """Decode from :meth:`to_json` output.

        Raises:
            msgspec.ValidationError: The JSON is not an AgentState.
        """
        return _json_decoder.decode(data)

    def copy(self) -> AgentState:
        """A deep copy (messages included)."""
        return _msgpack_decoder.decode(_msgpack_encoder.encode(self))

    def without_context(self) -> AgentState:
        """A shallow copy with an empty context (what checkpoints store inline)."""
        return msgspec.structs.replace(self, context=[])


_CONTEXT_KEY = b'"context":[]'
_json_decoder = msgspec.json.Decoder(AgentState)
_msgpack_encoder = msgspec.msgpack.Encoder()
_msgpack_decoder = msgspec.msgpack.Decoder(AgentState)


def decode_state(data: bytes) -> AgentState:
    """Decode a msgpack-encoded AgentState (checkpoints, AgentStateReplaced).

    Raises:
        msgspec.DecodeError: The bytes are not a state, or nest too deeply to
            decode (which only data written without the append checks can).
    """
    try:
        return _msgpack_decoder.decode(data)
    except RecursionError:
        raise msgspec.DecodeError("state is nested too deeply to decode") from None


def encode_state(state: AgentState) -> bytes:
    """msgpack-encode an AgentState."""
    return _msgpack_encoder.encode(state)


def keep_log_facts(new: AgentState, current: AgentState) -> AgentState:
    """Give ``new`` ``current``'s identity, active run and pending tool calls.

    They are facts of the log (its ``RunStarted``, ``ToolCallRequested``, ...), not
    something a whole-state save or replacement may rewrite. Returns ``new``.
    """
    new.session_id, new.thread_id, new.user_id = (
        current.session_id,
        current.thread_id,
        current.user_id,
    )
    new.active_run_id = current.active_run_id
    new.tool_context.pending_calls = current.tool_context.pending_calls
    return new


def _end_run(state: AgentState, run_id: str) -> None:
    if state.active_run_id == run_id:
        state.active_run_id = None


def fold_refusal(event: object) -> tuple[str, str] | None:
    """Why :meth:`AgentStateProjection.apply` would refuse ``event``, if it would.

    ``(field path, detail)``, or None. A writer asks before it commits an event,
    since a record whose fold fails is a thread no reader can load.
    """
    match event:
        case ev.UnknownEvent(required=True, type=type_name):
            return (
                "type",
                f"{type_name!r} is not a registered event type and is marked "
                "required: no reader of this process can build state with it",
            )
        case ev.AgentStateReplaced(chunks=chunks) if chunks:
            return (
                "chunks",
                "chunks are the journal's own encoding of the context; pass the "
                "messages",
            )
        case ev.AgentStateReplaced(state=state):
            try:
                decode_state(state)
            except (msgspec.DecodeError, ValueError) as exc:
                return "state", f"does not decode as an AgentState: {exc}"
    return None


class AgentStateProjection:
    """Folds every built-in event into :class:`AgentState`.

    Unknown optional events are skipped; an unknown required event raises
    ``UnknownEventError``, because the state would be wrong without it.
    """

    name = "agent_state"

    def __init__(self, label: str = "thread") -> None:
        self.label = label

    def initial(self, key: ThreadKey) -> AgentState:
        """The empty state of ``key``."""
        return AgentState(
            session_id=key.session_id, thread_id=key.thread_id, user_id=key.user_id
        )

    def apply(self, state: AgentState, record: Record, event: object) -> AgentState:
        """Fold one event (mutates and returns ``state``)."""
        state.version = record.version
        match event:
            case ev.MessageAppended(message=msg):
                state.context.append(msg)
            case ev.ToolCallRequested():
                state.tool_context.pending_calls[event.call_id] = PendingToolCall(
                    event.call_id,
                    event.name,
                    event.input,
                    event.run_id or record.run_id,
                    record.version,
                )
            case ev.ToolCallCompleted(call_id=call_id):
                state.tool_context.pending_calls.pop(call_id, None)
                message = event.message()
                if message is not None:
                    state.context.append(message)
            case ev.ToolCallReconciled(call_id=call_id):
                state.tool_context.pending_calls.pop(call_id, None)
            case ev.RunStarted(run_id=run_id):
                state.active_run_id = run_id
            case ev.RunCompleted(run_id=run_id):
                _end_run(state, run_id)
                state.shutdown_interrupted = False
            case ev.RunFailed(run_id=run_id):
                _end_run(state, run_id)
            case ev.RunInterrupted(run_id=run_id, by=by):
                _end_run(state, run_id)
                # A recovery marker (the seed's): a user's interrupt is not one.
                if by != "user":
                    state.shutdown_interrupted = True
            case ev.SummarySet(summary=summary):
                state.summary = summary
            case ev.ContextCompacted(summary=summary, replaced_ids=ids):
                gone = set(ids)
                state.context = [m for m in state.context if m.id not in gone]
                state.summary = summary
            case ev.ContextCleared():
                state.context = []
                state.summary = None
            case ev.ToolGroupActivated(group=group):
                if group not in state.tool_context.active_groups:
                    state.tool_context.active_groups.append(group)
            case ev.ToolGroupDeactivated(group=group):
                if group in state.tool_context.active_groups:
                    state.tool_context.active_groups.remove(group)
            case ev.PermissionRuleSet(tool=tool, decision=decision):
                state.permission_context.rules[tool] = decision
            case ev.PermissionRuleRemoved(tool=tool):
                state.permission_context.rules.pop(tool, None)
            case ev.PermissionModeSet(mode=mode):
                state.permission_context.mode = mode
            case ev.PlanModeEntered(plan_file=plan_file):
                state.plan_mode_context = PlanModeContext(True, plan_file)
            case ev.PlanModeExited():
                state.plan_mode_context = PlanModeContext(False, None)
            case (
                ev.TodosWritten()
                | ev.TaskBegun()
                | ev.RequirementProposed()
                | (
                    ev.RequirementDecided()
                    | ev.EvidenceBound()
                    | ev.ObjectVersionSet()
                    | ev.VerificationRecorded()
                )
            ):
                apply_task_event(state.tasks_context, event)
            case ev.AgentStateReplaced():
                state = self._replaced(state, record, event)
            case ev.UnknownEvent(required=True, type=type_name):
                raise UnknownEventError(self.label, record.version, type_name)
            case _:
                # ThreadCreated, LeaseAcquired and optional extensions change nothing.
                pass
        return state

    @staticmethod
    def _replaced(
        state: AgentState, record: Record, event: ev.AgentStateReplaced
    ) -> AgentState:
        if event.chunks:
            raise ValueError(
                f"AgentStateReplaced at version {record.version} still references "
                "chunks; the reader must resolve them before folding"
            )
        new = decode_state(event.state)
        new.context = list(event.messages)
        keep_log_facts(new, state)
        new.version = record.version
        return new
