"""Runtime internals: one run's handle, interrupt signal and event sinks, helpers.

Public names are re-exported by ``journal.runtime`` (``AgentRun``, ``RunEvent``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from journal import events as ev
from journal.codec import Record
from journal.errors import StaleStateError, UncertainToolCallsError
from journal.policy import ConflictPolicy
from journal.runtime.model import ModelResponse, ToolCall
from journal.runtime.tools import to_jsonable
from projections.agent_state import AgentState, AgentStateProjection

if TYPE_CHECKING:
    from journal.engine import ThreadWriter
    from journal.keys import ThreadKey
    from journal.runtime.agent import Agent
    from journal.runtime.model import RuntimeContext
    from stores.state.base import AgentStateStore

__all__ = [
    "STATE_ENTRY",
    "AgentRun",
    "Messages",
    "Outcome",
    "RunEvent",
    "SnapshotSlots",
]

STATE_ENTRY = "agent_state"
"""The snapshot-mode entry name of an agent's state (``ThreadKey.state_entry``)."""

RunEvent = ModelResponse | ToolCall | ev.ToolResultBlock | Record | ev.Msg
"""What :meth:`AgentRun.stream` yields: model output, a tool call about to run, its
result, each committed record (journal mode), and last the final reply ``Msg``."""

Messages = str | ev.Msg | Sequence[ev.Msg | str] | None
"""A call's input: messages, one message, or a string (a user message)."""

Outcome = str | ev.ToolResultBlock
"""An application's verdict on an uncertain tool call."""


# --- interrupts ------------------------------------------------------------------


class Signal:
    """A per-execution interrupt signal: runtime only, never persisted."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.by: Literal["user", "shutdown", "recovery"] = "user"
        self.reason = ""
        self.task: asyncio.Future[Any] | None = None

    @property
    def fired(self) -> bool:
        return self.event.is_set()

    def fire(self, by: Literal["user", "shutdown"], reason: str) -> None:
        if not self.event.is_set():
            self.by, self.reason = by, reason
            self.event.set()
        # A running tool (or model) task is cut short at once.
        if self.task is not None and not self.task.done():
            self.task.cancel()


# --- where a run's events go -----------------------------------------------------


class Sink(Protocol):
    @property
    def state(self) -> AgentState: ...

    async def commit(self, events: list[object], run_id: str) -> Record | None: ...


class JournalSink:
    """Commits each batch as one record of the thread's log."""

    def __init__(self, writer: ThreadWriter) -> None:
        self.writer = writer

    @property
    def state(self) -> AgentState:
        return self.writer.state

    async def commit(self, events: list[object], run_id: str) -> Record | None:
        return await self.writer.append(events, run_id=run_id)


class SnapshotSink:
    """Folds each batch into an in-memory state, saved to the slot after the call."""

    def __init__(self, state: AgentState, label: str) -> None:
        self._state = state
        self._projection = AgentStateProjection(label)

    @property
    def state(self) -> AgentState:
        return self._state

    async def commit(self, events: list[object], run_id: str) -> Record | None:
        self._state = fold_events(self._projection, self._state, events, run_id)
        return None


def fold_events(
    projection: AgentStateProjection,
    state: AgentState,
    events: Sequence[object],
    run_id: str | None,
) -> AgentState:
    # The slot's version is not a log version: keep it while folding.
    version = state.version
    record = Record(version, 0, "", "", run_id, 0.0, "", "", list(events))
    for event in events:
        state = projection.apply(state, record, event)
    state.version = version
    return state


# --- runs ------------------------------------------------------------------------


class AgentRun:
    """One prepared execution of a call; nothing runs until it is awaited.

    Get one from :meth:`Agent.prepare_call`. ``run_id`` is set at once, so it can be
    logged or stored before anything happens. ``await run.result()`` runs it and
    returns the final reply; ``async for event in run.stream()`` runs it and yields
    what happens. Both may be used (and several streams): each sees every event.

    Attributes:
        run_id: This execution's run id (explicit from ``ctx.run_id``, else new).
        key: The thread it runs on.
        context: The caller's context.
        messages: The input messages.
    """

    def __init__(
        self,
        agent: Agent,
        key: ThreadKey,
        run_id: str,
        explicit: bool,
        messages: list[ev.Msg],
        context: RuntimeContext,
    ) -> None:
        self.run_id = run_id
        self.key = key
        self.context = context
        self.messages = messages
        self._agent = agent
        self._explicit = explicit
        self._signal = Signal()
        self._events: list[RunEvent] = []
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[ev.Msg] | None = None

    @property
    def started(self) -> bool:
        """Whether the run was started (by ``result()`` or ``stream()``)."""
        return self._task is not None

    @property
    def done(self) -> bool:
        """Whether the run finished (successfully or not)."""
        return self._task is not None and self._task.done()

    def interrupt(self, message: str | None = None) -> bool:
        """Ask this run to stop at its next checkpoint; returns whether it was live."""
        if self._task is None or self._task.done():
            return False
        self._signal.fire("user", message or "interrupted by the user")
        return True

    def _start(self) -> asyncio.Task[ev.Msg]:
        if self._task is None:
            self._task = asyncio.create_task(
                self._agent._execute(self), name=f"agent run {self.run_id}"
            )
            self._agent._tasks.add(self._task)
            self._task.add_done_callback(self._finished)
        return self._task

    def _finished(self, task: asyncio.Task[ev.Msg]) -> None:
        self._agent._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a stream nobody awaits must not warn
        self._notify()

    def _emit(self, item: RunEvent) -> None:
        self._events.append(item)
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        self._wake = None

    async def result(self) -> ev.Msg:
        """Run (if not yet started) and return the final reply.

        Cancelling the awaiting task cancels the run, which then records
        ``RunInterrupted`` before the cancellation completes.

        Raises:
            UncertainToolCallsError: The thread has unreconciled tool calls.
            DuplicateRunError: The explicit run id is already in the journal.
            LeaseHeldError: Another holder's lease is live (after ``lease_wait``).
            StaleStateError: Snapshot mode with ``ConflictPolicy.FAIL`` (or a refused
                merge) found a newer save.
            Exception: Whatever the model raised (after ``RunFailed`` was recorded).
        """
        task = self._start()
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            raise

    async def stream(self) -> AsyncIterator[RunEvent]:
        """Run (if not yet started) and yield every event, from the first.

        Yields model responses, each ``ToolCall`` just before it runs, each
        ``ToolResultBlock``, each committed ``Record`` (journal mode) and, last, the
        final reply ``Msg``. Stopping early does not stop the run.

        Raises:
            Exception: What :meth:`result` raises, after the events before it.
        """
        task = self._start()
        index = 0
        while True:
            while index < len(self._events):
                yield self._events[index]
                index += 1
            if task.done():
                break
            if self._wake is None:
                self._wake = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._wake)
        task.result()


# --- snapshot mode ----------------------------------------------------------------


class SnapshotSlots:
    """Snapshot-mode access to threads' slots, with the agent's conflict policy."""

    def __init__(self, store: AgentStateStore, policy: ConflictPolicy) -> None:
        self.store = store
        self.policy = policy

    async def load(self, key: ThreadKey) -> tuple[AgentState, int]:
        """The slot's state and version; an empty state at version 0 if absent."""
        entry = key.state_entry(STATE_ENTRY)
        loaded = await self.store.load(key.user_id, key.session_id, entry)
        if loaded is None:
            empty = AgentState(
                session_id=key.session_id, thread_id=key.thread_id, user_id=key.user_id
            )
            return empty, 0
        state, version = loaded
        state.version = version
        return state, version

    async def save(
        self, key: ThreadKey, state: AgentState, expected: int | None
    ) -> AgentState:
        """Save (compare-and-swap on ``expected``); return a copy at its new version."""
        version = await self.store.save(
            key.user_id,
            key.session_id,
            key.state_entry(STATE_ENTRY),
            state,
            expected_version=expected,
        )
        saved = state.copy()
        saved.version = version
        return saved

    async def save_turn(
        self, key: ThreadKey, base: AgentState, final: AgentState, version: int
    ) -> AgentState:
        """Save a turn with the version it loaded, applying the conflict policy.

        Args:
            key: The thread.
            base: The state the turn started from (as loaded).
            final: The state the turn ended with.
            version: The slot version ``base`` was loaded at.

        Raises:
            StaleStateError: ``FAIL`` and the slot moved on; or ``APPEND_MERGE`` and
                the turn changed the context beyond appending, or the retry lost too.
        """
        try:
            return await self.save(key, final, version)
        except StaleStateError:
            if self.policy is ConflictPolicy.OVERWRITE:
                return await self.save(key, final, None)
            if self.policy is not ConflictPolicy.APPEND_MERGE:
                raise
        # APPEND_MERGE: this turn's new messages go after the slot's, once.
        base_ids = [m.id for m in base.context]
        kept = [m.id for m in final.context[: len(base_ids)]]
        fresh, fresh_version = await self.load(key)
        if kept != base_ids or final.summary != base.summary:
            raise StaleStateError(
                f"{key} (snapshot; this turn changed the context beyond appending, "
                "so it cannot be merged)",
                version,
                fresh_version,
            )
        fresh.context.extend(final.context[len(base_ids) :])
        fresh.shutdown_interrupted = final.shutdown_interrupted
        return await self.save(key, fresh, fresh_version)


# --- helpers ---------------------------------------------------------------------


def policy_of(value: ConflictPolicy | str) -> ConflictPolicy:
    try:
        return ConflictPolicy(value)
    except ValueError:
        choices = ", ".join(p.value for p in ConflictPolicy)
        raise ValueError(
            f"unknown conflict_policy {value!r}; use one of {choices}"
        ) from None


def inputs_of(msgs: Messages) -> list[ev.Msg]:
    if msgs is None:
        return []
    if isinstance(msgs, str | ev.Msg):
        msgs = [msgs]
    out: list[ev.Msg] = []
    for item in msgs:
        if isinstance(item, str):
            out.append(ev.Msg("user", item))
        elif isinstance(item, ev.Msg):
            out.append(item)
        else:
            raise TypeError(
                f"input messages must be Msg or str, not {type(item).__name__}"
            )
    return out


def refuse_uncertain(key: ThreadKey, state: AgentState) -> None:
    calls = state.tool_context.pending_calls
    if calls:
        raise UncertainToolCallsError(str(key), sorted(calls))


def checked_calls(calls: Sequence[ToolCall]) -> list[ToolCall]:
    seen: set[str] = set()
    out: list[ToolCall] = []
    for call in calls:
        if not isinstance(call, ToolCall):
            raise TypeError(
                f"ModelResponse.tool_calls holds {type(call).__name__}, not ToolCall"
            )
        if not call.id or call.id in seen:
            raise ValueError(
                f"the model returned a blank or repeated call id {call.id!r}"
            )
        seen.add(call.id)
        out.append(ToolCall(call.name, to_jsonable(call.input), call.id))
    return out


def result_events(call: ToolCall, block: ev.ToolResultBlock) -> list[object]:
    message = ev.Msg("tool", [block], name=call.name)
    return [
        ev.ToolCallCompleted(call.id, block.output, block.is_error),
        ev.MessageAppended(message),
    ]


def outcome_block(call_id: str, value: Outcome) -> ev.ToolResultBlock:
    if isinstance(value, ev.ToolResultBlock):
        if value.tool_use_id != call_id:
            raise ValueError(
                f"the outcome for {call_id!r} is a ToolResultBlock for "
                f"{value.tool_use_id!r}"
            )
        return value
    if isinstance(value, str):
        return ev.ToolResultBlock(call_id, value)
    raise TypeError(
        f"an outcome must be a str or a ToolResultBlock, not {type(value).__name__}"
    )
