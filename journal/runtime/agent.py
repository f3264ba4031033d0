"""The stateless agent runtime on the journal: RuntimeContext and the Agent facade.

An :class:`Agent` is execution configuration — a model, tools, and where state lives
(a :class:`~journal.Journal`, or a snapshot-mode state store) — built once and shared.
Every request may use a fresh ``Agent`` and a fresh :class:`RuntimeContext`: a session
continues only through its identity (user, session, thread) and the journal.

One call is one *run*, a ReAct loop framed in the log::

    [RunStarted, MessageAppended(input)...]            before the model is called
    [MessageAppended(assistant + ToolUseBlocks), ToolCallRequested...]
                                                        before any of those tools runs
    [ToolCallCompleted, MessageAppended(tool result)]   after each tool
    ...
    [MessageAppended(reply), RunCompleted]              (or RunFailed / RunInterrupted)

The write-ahead order means a crash can only leave "requested, no result": such a call
is *uncertain*, and a new run on the thread is refused (``UncertainToolCallsError``)
until :meth:`Agent.reconcile_tool_calls` names exactly that set. The runtime never
re-runs a tool.

An instance holds a thread's lease only while an operation on that thread runs, and
serializes operations on one thread; other threads run in parallel.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from journal import events as ev
from journal.errors import (
    DuplicateRunError,
    JournalError,
    StaleStateError,
)
from journal.keys import ThreadKey
from journal.policy import ConflictPolicy
from journal.runtime.model import (
    Model,
    ModelResponse,
    RuntimeContext,
    ScriptedModel,
    ScriptItem,
    ToolCall,
    ToolSpec,
    as_response,
)
from journal.runtime.run import (
    AgentRun,
    JournalSink,
    Messages,
    Outcome,
    RunEvent,
    Signal,
    Sink,
    SnapshotSink,
    SnapshotSlots,
    checked_calls,
    fold_events,
    inputs_of,
    outcome_block,
    policy_of,
    refuse_uncertain,
    result_events,
)
from journal.runtime.tools import Tool, ToolFunction, result_of, tool
from projections.agent_state import AgentState, AgentStateProjection

if TYPE_CHECKING:
    from types import TracebackType

    import pydantic

    from journal.engine import Journal, ThreadWriter
    from stores.state.base import AgentStateStore

__all__ = [
    "Agent",
    "AgentRun",
    "Model",
    "ModelResponse",
    "RunEvent",
    "RuntimeContext",
    "ScriptItem",
    "ScriptedModel",
    "Tool",
    "ToolCall",
    "ToolSpec",
    "tool",
]

logger = logging.getLogger("journal.runtime")

_T = TypeVar("_T")

Mutation = Callable[[AgentState], AgentState | None]

_NOT_RUN = "not run: the run was interrupted before this tool call started ({reason})"
_CUT_SHORT = (
    "interrupted while running ({reason}); the tool was cancelled and its side "
    "effects, if any, were not verified"
)


@dataclass(slots=True)
class _ThreadLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


# --- the agent -------------------------------------------------------------------


class Agent:
    """A ReAct agent over the journal (or a snapshot store): stateless per request.

    Args:
        name: The agent's display name (the ``name`` of its messages).
        agent_id: The agent's id: part of every thread key.
        model: The model (see :class:`Model`).
        tools: Plain sync or async functions, or :func:`tool` results.
        journal: Journal mode: where threads live. Exactly one of ``journal`` and
            ``state_store`` is required.
        state_store: Snapshot mode: an ``AgentStateStore``. The agent never closes it.
        conflict_policy: Snapshot mode: what a save that finds a newer version does
            (a ``stores.ConflictPolicy`` or its value; default ``FAIL``).
        lease_ttl: Journal mode: the lease duration in seconds (renewed while held).
        lease_wait: Journal mode: how long to wait for another holder's lease
            (0: raise ``LeaseHeldError`` at once).
        max_iterations: The most model calls in one run.
        default_session_id: The session of contexts that name none.
        namespace: The thread keys' namespace.
        holder: This instance's lease holder id (default: unique per instance). A
            restarted worker may pass its predecessor's id to take over that
            holder's unexpired leases at once.

    Raises:
        ValueError: Neither or both of ``journal`` and ``state_store``, a bad
            number, or two tools with one name.
        InvalidKeyError: ``agent_id`` is not a valid id.

    Attributes:
        holder: This instance's lease holder id (unique per instance).
        tools: The tools by name.
        conflict_policy: The snapshot-mode ``ConflictPolicy`` (None in journal mode).
    """

    def __init__(
        self,
        name: str,
        agent_id: str,
        model: Model,
        tools: Iterable[ToolFunction | Tool] = (),
        journal: Journal | None = None,
        state_store: AgentStateStore | None = None,
        conflict_policy: ConflictPolicy | str = ConflictPolicy.FAIL,
        lease_ttl: float = 30.0,
        lease_wait: float = 0.0,
        max_iterations: int = 10,
        default_session_id: str | None = None,
        *,
        namespace: str = "default",
        holder: str | None = None,
    ) -> None:
        if (journal is None) == (state_store is None):
            raise ValueError(
                "give an Agent exactly one of journal= (journal mode) and "
                "state_store= (snapshot mode)"
            )
        if not callable(model):
            raise TypeError(f"model must be callable, not {type(model).__name__}")
        if lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, not {lease_ttl}")
        if lease_wait < 0:
            raise ValueError(f"lease_wait must be >= 0, not {lease_wait}")
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be >= 1, not {max_iterations}")
        ThreadKey(agent_id, default_session_id or "s", namespace=namespace)
        self.name = name
        self.agent_id = agent_id
        self.model = model
        self.journal = journal
        self.state_store = state_store
        self.conflict_policy = (
            policy_of(conflict_policy) if state_store is not None else None
        )
        self.lease_ttl = lease_ttl
        self.lease_wait = lease_wait
        self.max_iterations = max_iterations
        self.default_session_id = default_session_id
        self.namespace = namespace
        self.holder = holder or f"{agent_id}-{uuid.uuid4().hex[:12]}"
        self.tools: dict[str, Tool] = {}
        for item in tools:
            built = item if isinstance(item, Tool) else tool(item)
            if built.name in self.tools:
                raise ValueError(f"two tools are named {built.name!r}")
            self.tools[built.name] = built
        self._specs = [t.spec for t in self.tools.values()]
        self._locks: dict[ThreadKey, _ThreadLock] = {}
        self._running: dict[tuple[str | None, str], set[AgentRun]] = {}
        self._tasks: set[asyncio.Task[ev.Msg]] = set()
        self._run_ids: dict[ThreadKey, tuple[int, set[str]]] = {}
        self._closed = False

    # --- addressing ---

    def _thread_key(
        self,
        user_id: str | RuntimeContext | None,
        session_id: str | None = None,
        thread_id: str = "main",
    ) -> ThreadKey:
        """The key of a thread, from ids or from a context.

        Raises:
            ValueError: No session id, and the agent has no ``default_session_id``.
        """
        if isinstance(user_id, RuntimeContext):
            ctx = user_id
            user_id, session_id, thread_id = ctx.user_id, ctx.session_id, ctx.thread_id
        session = session_id if session_id is not None else self.default_session_id
        if session is None:
            raise ValueError(
                "no session_id: set it on the RuntimeContext or give the Agent a "
                "default_session_id"
            )
        return ThreadKey(self.agent_id, session, user_id, thread_id, self.namespace)

    def _journal(self) -> Journal:
        if self.journal is None:
            raise RuntimeError("journal mode only")
        return self.journal

    def _slots(self) -> SnapshotSlots:
        if self.state_store is None or self.conflict_policy is None:
            raise RuntimeError("snapshot mode only")
        return SnapshotSlots(self.state_store, self.conflict_policy)

    @contextlib.asynccontextmanager
    async def _thread_lock(self, key: ThreadKey) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = _ThreadLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[key]

    @contextlib.asynccontextmanager
    async def _writer(
        self, key: ThreadKey, wait: float | None = None
    ) -> AsyncIterator[ThreadWriter]:
        """Hold the thread's lock and lease for one operation."""
        async with (
            self._thread_lock(key),
            self._journal().writer(
                key,
                self.holder,
                lease_ttl=self.lease_ttl,
                wait=self.lease_wait if wait is None else wait,
            ) as writer,
        ):
            yield writer

    # --- calls ---

    def prepare_call(
        self, msgs: Messages, ctx: RuntimeContext | None = None
    ) -> AgentRun:
        """Prepare a run without starting it; returns at once.

        Args:
            msgs: The input: messages, a single message, or a string (a user
                message). Empty continues the thread without new input.
            ctx: The request's context (default: an empty one).

        Returns:
            The run, with ``run_id`` set.

        Raises:
            ValueError: No session id could be determined, or the explicit run id
                is blank.
            RuntimeError: The agent is closed.
        """
        if self._closed:
            raise RuntimeError(f"agent {self.name!r} is closed")
        ctx = ctx if ctx is not None else RuntimeContext.empty()
        if not isinstance(ctx, RuntimeContext):
            raise TypeError(f"ctx must be a RuntimeContext, not {type(ctx).__name__}")
        key = self._thread_key(ctx)
        explicit = ctx.run_id
        if explicit is not None and not explicit.strip():
            raise ValueError("run_id must not be blank")
        run_id = explicit or uuid.uuid4().hex
        return AgentRun(self, key, run_id, explicit is not None, inputs_of(msgs), ctx)

    async def call(self, msgs: Messages, ctx: RuntimeContext | None = None) -> ev.Msg:
        """Run one call and return the final assistant reply.

        An interrupted call returns the interrupted reply, whose
        ``metadata["interrupted"]`` is true.

        Raises:
            UncertainToolCallsError: The thread has unreconciled tool calls; nothing
                but the lease fence (and a recovery record) was committed.
            DuplicateRunError: ``ctx.run_id`` is already in the thread's log.
            LeaseHeldError: Another instance holds the thread's lease.
            StaleStateError: Snapshot mode: the save lost a conflict.
            RuntimeError: The model did not finish within ``max_iterations``.
            ValueError: See :meth:`prepare_call`.
        """
        return await self.prepare_call(msgs, ctx).result()

    async def stream_events(
        self, msgs: Messages, ctx: RuntimeContext | None = None
    ) -> AsyncIterator[RunEvent]:
        """Run one call and yield what happens (see :meth:`AgentRun.stream`)."""
        async for item in self.prepare_call(msgs, ctx).stream():
            yield item

    def interrupt(
        self,
        user_id: str | None,
        session_id: str | None = None,
        message: str | None = None,
    ) -> bool:
        """Interrupt the session's running execution(s); returns at once.

        The run stops at its next checkpoint (before the model call, before each
        tool; a running tool task is cancelled), records ``RunInterrupted(by="user")``
        and returns an interrupted reply. Call it from the event loop's thread.

        Args:
            user_id: The user (None: anonymous).
            session_id: The session (default: the agent's default session).
            message: The reason, recorded and put in the interrupted reply.

        Returns:
            Whether a running execution of that session was found.
        """
        session = session_id if session_id is not None else self.default_session_id
        runs = self._running.get((user_id, session or ""), set())
        for run in runs:
            run._signal.fire("user", message or "interrupted by the user")
        return bool(runs)

    async def _execute(self, run: AgentRun) -> ev.Msg:
        key = run.key
        async with self._thread_lock(key):
            if self._closed:
                raise RuntimeError(f"agent {self.name!r} is closed")
            slot = (key.user_id, key.session_id)
            self._running.setdefault(slot, set()).add(run)
            try:
                if self.journal is not None:
                    reply = await self._execute_journal(run)
                else:
                    reply = await self._execute_snapshot(run)
            finally:
                runs = self._running[slot]
                runs.discard(run)
                if not runs:
                    del self._running[slot]
        run._emit(reply)
        return reply

    async def _execute_journal(self, run: AgentRun) -> ev.Msg:
        key = run.key
        async with self._journal().writer(
            key, self.holder, lease_ttl=self.lease_ttl, wait=self.lease_wait
        ) as writer:
            # The fence (and, for a run left unfinished, RunInterrupted by recovery)
            # is committed; a refused run commits nothing else.
            refuse_uncertain(key, writer.state)
            if run._explicit:
                await self._check_run_id(key, run.run_id, writer.version)
            return await self._loop(run, JournalSink(writer))

    async def _check_run_id(self, key: ThreadKey, run_id: str, head: int) -> None:
        """Raise DuplicateRunError if ``run_id`` is in the thread's log."""
        scanned, seen = self._run_ids.get(key, (0, set()))
        if scanned < head:
            async for record in self._journal().records(key, scanned + 1, head + 1):
                if record.run_id:
                    seen.add(record.run_id)
                seen.update(
                    e.run_id for e in record.events if isinstance(e, ev.RunStarted)
                )
            self._run_ids[key] = (head, seen)
            if len(self._run_ids) > 1024:
                self._run_ids.pop(next(iter(self._run_ids)))
        if run_id in seen:
            raise DuplicateRunError(
                f"run id {run_id!r} is already in the log of {key} (head {head}); "
                "give every execution a new run id"
            )

    async def _loop(self, run: AgentRun, sink: Sink) -> ev.Msg:
        """The ReAct loop; every batch is committed before the next external step."""
        run_id, signal = run.run_id, run._signal
        ctx = run.context._derive(run_id)
        pending: list[object] = [
            ev.RunStarted(run_id, turn_id=run.context.turn_id),
            *(ev.MessageAppended(m) for m in run.messages),
        ]
        # ended: the run's last record is committed; broken: a commit failed, so
        # nothing more can be recorded (the next lease holder recovers the run).
        flags = {"ended": False, "broken": False}
        # Calls requested and not yet resolved, in order; running: the first of
        # them is running now.
        open_calls: list[ToolCall] = []
        running = False

        def inject() -> None:
            run.context._agent_state = ctx._agent_state = sink.state

        async def flush(*extra: object, last: bool = False) -> None:
            pending.extend(extra)
            if pending:
                batch = pending.copy()
                pending.clear()
                try:
                    record = await sink.commit(batch, run_id)
                except BaseException:
                    flags["broken"] = True
                    raise
                flags["ended"] = last
                inject()
                if record is not None:
                    run._emit(record)

        inject()
        try:
            for _ in range(self.max_iterations):
                await flush()  # the input and results are durable before the model
                if signal.fired:
                    return await self._interrupted(run, flush, [])
                response = await self._ask_model(sink.state, signal)
                if response is None:
                    return await self._interrupted(run, flush, [])
                run._emit(response)
                if not response.tool_calls:
                    reply = ev.Msg("assistant", response.text or "", name=self.name)
                    await flush(
                        ev.MessageAppended(reply), ev.RunCompleted(run_id), last=True
                    )
                    return reply
                calls = checked_calls(response.tool_calls)
                blocks: list[ev.ContentBlock] = []
                if response.text:
                    blocks.append(ev.TextBlock(response.text))
                blocks.extend(ev.ToolUseBlock(c.id, c.name, c.input) for c in calls)
                pending.append(
                    ev.MessageAppended(ev.Msg("assistant", blocks, name=self.name))
                )
                # Write-ahead: every call is requested before any of them runs.
                pending.extend(
                    ev.ToolCallRequested(c.id, c.name, c.input, run_id=run_id)
                    for c in calls
                )
                open_calls[:] = calls
                while open_calls:
                    call = open_calls[0]
                    await flush()
                    if signal.fired:
                        return await self._interrupted(run, flush, open_calls)
                    run._emit(call)
                    running = True
                    block, cut_short = await self._run_tool(call, sink.state, ctx, run)
                    running = False
                    del open_calls[0]
                    run._emit(block)
                    pending.extend(result_events(call, block))
                    if cut_short:
                        return await self._interrupted(run, flush, open_calls)
            raise RuntimeError(
                f"agent {self.name!r} made no final reply within "
                f"max_iterations={self.max_iterations} model calls (run {run_id})"
            )
        except asyncio.CancelledError:
            # The caller went away: record the interruption, then let it propagate.
            # A tool running at that moment was cancelled by _run_tool.
            if not flags["ended"] and not flags["broken"]:
                signal.fire("user", "the call was cancelled")
                cut = open_calls[:1] if running else []
                rest = open_calls[1:] if running else open_calls
                with contextlib.suppress(Exception):
                    await self._interrupted(run, flush, rest, cut_short=cut)
            raise
        except Exception as exc:
            if not flags["ended"] and not flags["broken"]:
                error = f"{type(exc).__name__}: {exc}"
                with contextlib.suppress(Exception):
                    await flush(ev.RunFailed(run_id, error=error), last=True)
            raise

    async def _ask_model(
        self, state: AgentState, signal: Signal
    ) -> ModelResponse | None:
        """Call the model; None when an interrupt came first (the call is dropped)."""
        messages = list(state.context)
        if state.summary:
            summary = f"Summary of the earlier conversation:\n{state.summary}"
            messages.insert(0, ev.Msg("system", summary))
        answer = self.model(messages, list(self._specs))
        if not inspect.isawaitable(answer):  # a sync model is tolerated
            return as_response(answer)
        task = await _interruptible(signal, answer)
        if task.cancelled() and signal.fired:
            return None
        return as_response(task.result())

    async def _run_tool(
        self, call: ToolCall, state: AgentState, ctx: RuntimeContext, run: AgentRun
    ) -> tuple[ev.ToolResultBlock, bool]:
        """Run one requested call; returns its result and whether it was cut short."""
        found = self.tools.get(call.name)
        if found is None:
            known = ", ".join(sorted(self.tools)) or "none"
            message = f"unknown tool {call.name!r}; the tools are: {known}"
            return ev.ToolResultBlock(call.id, message, True), False
        if state.permission_context.rules.get(call.name) == "deny":
            message = f"not run: a permission rule denies the tool {call.name!r}"
            return ev.ToolResultBlock(call.id, message, True), False
        try:
            args: pydantic.BaseModel = found.validate(call.input)
        except ValueError as exc:
            message = f"invalid input for tool {call.name!r}: {exc}"
            return ev.ToolResultBlock(call.id, message, True), False
        signal = run._signal
        task = await _interruptible(signal, found.invoke(args, ctx))
        if task.cancelled():
            if signal.fired:
                message = _CUT_SHORT.format(reason=signal.reason)
                return ev.ToolResultBlock(call.id, message, True), True
            return ev.ToolResultBlock(call.id, "the tool was cancelled", True), False
        error = task.exception()
        if error is not None:
            message = f"{type(error).__name__}: {error}"
            return ev.ToolResultBlock(call.id, message, True), False
        return result_of(call.id, task.result()), False

    async def _interrupted(
        self,
        run: AgentRun,
        flush: Callable[..., Any],
        not_run: Sequence[ToolCall],
        *,
        cut_short: Sequence[ToolCall] = (),
    ) -> ev.Msg:
        """Commit the interrupted end of a run and return the interrupted reply.

        Requested calls that never started get a "not run" error result; a call
        cancelled while running gets one saying its side effects were not verified.
        """
        signal = run._signal
        events: list[object] = []
        for calls, template in ((cut_short, _CUT_SHORT), (not_run, _NOT_RUN)):
            for call in list(calls):
                message = template.format(reason=signal.reason)
                block = ev.ToolResultBlock(call.id, message, True)
                run._emit(block)
                events.extend(result_events(call, block))
        text = f"[interrupted: {signal.reason}]"
        reply = ev.Msg(
            "assistant",
            text,
            name=self.name,
            metadata={"interrupted": True, "by": signal.by},
        )
        by: Literal["user", "shutdown"] = (
            "shutdown" if signal.by == "shutdown" else "user"
        )
        await flush(
            *events,
            ev.MessageAppended(reply),
            ev.RunInterrupted(run.run_id, reason=signal.reason, by=by),
            last=True,
        )
        return reply

    # --- snapshot mode ---

    async def _execute_snapshot(self, run: AgentRun) -> ev.Msg:
        key = run.key
        state, version = await self._slots().load(key)
        refuse_uncertain(key, state)
        base = state.copy()
        sink = SnapshotSink(state, str(key))
        try:
            reply = await self._loop(run, sink)
        except BaseException as exc:
            # The turn's record of what happened (RunFailed / RunInterrupted) is
            # saved too; the original error wins over a failed save.
            try:
                await self._slots().save_turn(key, base, sink.state, version)
            except Exception as save_error:
                exc.add_note(f"saving the turn's state failed too: {save_error!r}")
            raise
        final = await self._slots().save_turn(key, base, sink.state, version)
        run.context._agent_state = final
        return reply

    # --- state ---

    async def get_agent_state(
        self,
        user_id: str | RuntimeContext | None,
        session_id: str | None = None,
        thread_id: str = "main",
    ) -> AgentState:
        """The thread's current state (a ``ctx`` may stand in for the ids).

        Journal mode: a run left unfinished by a crash is recorded as interrupted
        (by recovery) first, if no one holds the thread's lease, so the state shows
        ``shutdown_interrupted``; otherwise this only reads.
        """
        key = self._thread_key(user_id, session_id, thread_id)
        if self.journal is None:
            return (await self._slots().load(key))[0]
        return await self._load_recovered(key, wait=0.0)

    async def _load_recovered(self, key: ThreadKey, wait: float) -> AgentState:
        state = await self._journal().load(key)
        busy = key in self._locks
        if state.active_run_id is None or busy:
            return state
        # The run looks unfinished: whoever takes the lease records its recovery.
        # If the lease is live, the run may still be running elsewhere.
        try:
            async with self._writer(key, wait=wait) as writer:
                return writer.state.copy()
        except JournalError as exc:
            logger.debug("%s: not recovering run now: %s", key, exc)
            return state

    async def update_agent_state(
        self, ctx: RuntimeContext, reason: str, mutation: Mutation
    ) -> AgentState:
        """Change the thread's state with ``mutation`` (given a deep copy).

        Journal mode commits the change as specific events where they exist, else as
        ``AgentStateReplaced``; snapshot mode retries the compare-and-swap on a newer
        slot version by reapplying the mutation.

        Returns:
            The state after the change.
        """
        key = self._thread_key(ctx)
        if self.journal is not None:
            async with self._writer(key) as writer:
                await writer.update(reason, mutation)
                return writer.state.copy()
        async with self._thread_lock(key):
            for attempt in range(3):
                state, version = await self._slots().load(key)
                result = mutation(state)
                new = state if result is None else result
                try:
                    return await self._slots().save(key, new, version)
                except StaleStateError:
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def save_agent_state(
        self, ctx: RuntimeContext, state: AgentState
    ) -> AgentState:
        """Save ``state`` as the thread's state if it is still current.

        Returns:
            The state after the save.

        Raises:
            StaleStateError: ``state.version`` is no longer the thread's version.
        """
        key = self._thread_key(ctx)
        if self.journal is not None:
            async with self._writer(key) as writer:
                if writer.base_version != state.version:
                    raise StaleStateError(str(key), state.version, writer.base_version)
                await writer.replace_state(state, reason="save")
                return writer.state.copy()
        async with self._thread_lock(key):
            return await self._slots().save(key, state, state.version)

    async def clear_context(
        self,
        user_id: str | RuntimeContext | None,
        session_id: str | None = None,
        thread_id: str = "main",
        *,
        reason: str = "cleared",
    ) -> AgentState:
        """Clear the thread's messages and summary (by ids or by ``ctx``).

        Permissions, tasks, plan mode and tool groups stay; in journal mode the
        history stays in the log (``ContextCleared`` is appended).

        Returns:
            The state after clearing.
        """
        key = self._thread_key(user_id, session_id, thread_id)
        if self.journal is not None:
            async with self._writer(key) as writer:
                await writer.clear_context(reason)
                return writer.state.copy()

        def clear(state: AgentState) -> None:
            state.context = []
            state.summary = None

        return await self.update_agent_state(
            RuntimeContext(
                user_id=key.user_id, session_id=key.session_id, thread_id=thread_id
            ),
            reason,
            clear,
        )

    # --- uncertain tool calls ---

    async def pending_tool_calls(
        self, ctx: RuntimeContext
    ) -> list[ev.ToolCallRequested]:
        """The thread's uncertain tool calls: requested, with no result, run over.

        Journal mode: a run left unfinished by a crash is recovered first (this
        takes the lease, waiting up to ``lease_wait``); while another holder keeps
        the lease, calls of its active run are not reported (they may be running).
        """
        key = self._thread_key(ctx)
        if self.journal is None:
            state = (await self._slots().load(key))[0]
        else:
            state = await self._load_recovered(key, wait=self.lease_wait)
        live = state.active_run_id
        return [
            ev.ToolCallRequested(p.call_id, p.name, p.input, run_id=p.run_id)
            for p in state.tool_context.pending_calls.values()
            if live is None or p.run_id != live
        ]

    async def reconcile_tool_calls(
        self,
        ctx: RuntimeContext,
        outcomes: dict[str, Outcome],
        reason: str = "reconciled by the application",
    ) -> AgentState:
        """Record the application's verdict on every uncertain tool call.

        Commits ``ToolCallReconciled`` for each, with a tool-result message so the
        model sees the outcome. ``outcomes`` must name exactly the uncertain set.

        Args:
            ctx: The thread.
            outcomes: call id → the outcome: a string (a successful result) or a
                ``ToolResultBlock`` (``is_error`` for a failure).
            reason: Why (recorded as each reconciliation's note).

        Returns:
            The state after reconciling.

        Raises:
            ValueError: ``outcomes`` does not name exactly the uncertain calls.
            TypeError: An outcome is neither a str nor a ToolResultBlock.
        """
        blocks = {cid: outcome_block(cid, value) for cid, value in outcomes.items()}
        key = self._thread_key(ctx)

        def events_for(state: AgentState) -> list[object]:
            pending = state.tool_context.pending_calls
            if set(blocks) != set(pending):
                raise ValueError(
                    f"reconcile exactly the uncertain tool calls of {key}: "
                    f"{sorted(pending)}; missing {sorted(set(pending) - set(blocks))}, "
                    f"unknown {sorted(set(blocks) - set(pending))}"
                )
            events: list[object] = []
            for call_id, block in blocks.items():
                events.append(
                    ev.ToolCallReconciled(
                        call_id, block.output, note=reason, is_error=block.is_error
                    )
                )
                message = ev.Msg(
                    "tool",
                    [block],
                    name=pending[call_id].name,
                    metadata={"reconciled": True, "reason": reason},
                )
                events.append(ev.MessageAppended(message))
            return events

        if self.journal is not None:
            async with self._writer(key) as writer:
                events = events_for(writer.state)
                if events:
                    await writer.append(events)
                return writer.state.copy()
        async with self._thread_lock(key):
            state, version = await self._slots().load(key)
            events = events_for(state)
            state = fold_events(AgentStateProjection(str(key)), state, events, None)
            return await self._slots().save(key, state, version)

    # --- lifecycle ---

    async def close(self) -> None:
        """Stop: interrupt runs in flight (``by="shutdown"``) and wait for them.

        When it returns, every interrupted run's ``RunInterrupted`` is committed and
        every lease this instance held is released. New calls raise
        ``RuntimeError``. The journal or state store given is not closed.
        """
        self._closed = True
        for runs in list(self._running.values()):
            for run in runs:
                run._signal.fire("shutdown", "the agent is shutting down")
        tasks = list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        mode = "journal" if self.journal is not None else "snapshot"
        return f"Agent({self.name!r}, agent_id={self.agent_id!r}, mode={mode})"


async def _interruptible(signal: Signal, work: Awaitable[_T]) -> asyncio.Future[_T]:
    """Run ``work`` as a task that an interrupt may cancel; return it once done.

    The task is registered on ``signal`` while it runs, so ``Agent.interrupt`` can
    cancel it. If the caller itself is cancelled, the task is cancelled and awaited
    before the cancellation propagates.
    """
    task = asyncio.ensure_future(work)
    signal.task = task
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    finally:
        signal.task = None
    return task
