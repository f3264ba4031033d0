"""The Agent facade: execution configuration, and the operations on a thread.

The overview of the runtime is in :mod:`journal.runtime`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from journal import events as ev
from journal.errors import JournalError, RecursiveRunError, StaleStateError
from journal.keys import ThreadKey
from journal.policy import ConflictPolicy
from journal.runtime import tasks
from journal.runtime.context import RuntimeContext, inject_agent_state, scope_of
from journal.runtime.copies import state_copy
from journal.runtime.leases import WarmLeases
from journal.runtime.locks import ThreadLocks
from journal.runtime.loop import AskPermission, RunLoop
from journal.runtime.request import RequestBuilder
from journal.runtime.run import (
    AgentRun,
    Messages,
    RunControl,
    RunEvent,
    inputs_of,
    interrupt_message,
)
from journal.runtime.run_ids import RunIds
from journal.runtime.scope import RunScope, current_scope, enclosing_scope
from journal.runtime.sinks import JournalSink, SnapshotSink, fold_events
from journal.runtime.slots import SnapshotSlots, policy_of
from journal.runtime.tools import Tool, ToolFunction, tool
from journal.runtime.uncertain import (
    Outcome,
    outcome_block,
    reconcile_events,
    refuse_uncertain,
    uncertain_calls,
)
from projections.agent_state import (
    AgentState,
    AgentStateProjection,
    keep_log_facts,
)

if TYPE_CHECKING:
    from types import TracebackType

    from journal.engine import Journal, ThreadWriter
    from journal.runtime.model import Model
    from stores.state.protocol import AgentStateStore

__all__ = ["Agent", "Mutation"]

logger = logging.getLogger("journal.runtime")

Mutation = Callable[[AgentState], AgentState | None]
"""A change to a thread's state: edit the given copy, or return a new state."""


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
        system_prompt: The instructions every model call sees first; generated
            for each call, never persisted (``clear_context`` keeps it).
        request_builder: Builds each model call's request (system messages, the
            view of tasks and plan mode, the tools offered); default a
            ``RequestBuilder(system_prompt)``.
        ask_permission: Decides a tool call whose permission rule is ``ask``:
            ``(call, ctx) -> bool`` (sync or async). Without it such calls are not
            run (the model gets an error result saying so).
        keep_lease: Journal mode: seconds an instance keeps a thread's lease
            after an operation, idle, with the state it holds, so the next
            operation there pays no fence and no reload (0: release at once).
            Any other instance may take an idle lease at once.
        hold_lease: Journal mode: seconds the kept lease stays busy before it is
            marked idle. Above 0 saves the two ``LEASE`` writes of a warm call
            when one instance serves a session, but another instance must then
            wait for it (``lease_wait``) or get ``LeaseHeldError``.

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
        system_prompt: str | None = None,
        request_builder: RequestBuilder | None = None,
        ask_permission: AskPermission | None = None,
        keep_lease: float = 30.0,
        hold_lease: float = 0.0,
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
        if keep_lease < 0 or hold_lease < 0:
            raise ValueError(
                f"keep_lease and hold_lease must be >= 0, not {keep_lease} and "
                f"{hold_lease}"
            )
        if request_builder is not None and system_prompt is not None:
            raise ValueError(
                "give the system prompt to the request builder, not both "
                "system_prompt= and request_builder="
            )
        if ask_permission is not None and not callable(ask_permission):
            raise TypeError("ask_permission must be callable")
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
        self.request_builder = request_builder or RequestBuilder(system_prompt)
        self.ask_permission = ask_permission
        self._locks = ThreadLocks()
        self._leases = (
            WarmLeases(
                journal,
                self.holder,
                lease_ttl,
                lease_wait,
                self._locks,
                keep=keep_lease,
                hold=min(hold_lease, keep_lease),
            )
            if journal is not None
            else None
        )
        self._running: dict[tuple[str | None, str], set[RunControl]] = {}
        self._tasks: set[asyncio.Task[ev.Msg]] = set()
        self._run_ids = RunIds()
        self._closed = False

    # --- addressing ---

    def thread_key(
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

    def _leases_of(self) -> WarmLeases:
        if self._leases is None:
            raise RuntimeError("journal mode only")
        return self._leases

    @contextlib.asynccontextmanager
    async def _writer(
        self, key: ThreadKey, wait: float | None = None
    ) -> AsyncIterator[ThreadWriter]:
        """Hold the thread's lock and lease for one operation."""
        async with (
            self._locks.hold(key),
            self._leases_of().writer(key, wait) as writer,
        ):
            yield writer

    @property
    def _owner(self) -> object:
        # Two agents over the same journal (or store) and key share a thread.
        return self.journal if self.journal is not None else self.state_store

    def _inside(self, key: ThreadKey) -> RunScope | None:
        """The run on ``key`` that the calling code runs inside (from its tool)."""
        return enclosing_scope(self._owner, key)

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
        key = self.thread_key(ctx)
        inside = self._inside(key)
        if inside is not None:
            raise RecursiveRunError(str(key), inside.run_id)
        # A tool's context carries its run's id: a run started with it is a
        # sub-agent's, with an id of its own.
        parent = scope_of(ctx) or current_scope()
        explicit = ctx.run_id if scope_of(ctx) is None else None
        if explicit is not None and not explicit.strip():
            raise ValueError("run_id must not be blank")
        run_id = explicit or uuid.uuid4().hex
        return AgentRun(
            key,
            run_id,
            explicit is not None,
            inputs_of(msgs),
            ctx,
            execute=self._execute,
            tasks=self._tasks,
            parent_run_id=parent.run_id if parent is not None else None,
            parent_thread=str(parent.key) if parent is not None else None,
        )

    def prepare_run(
        self, msgs: Messages, ctx: RuntimeContext | None = None
    ) -> AgentRun:
        """The seed's name of :meth:`prepare_call` (the same run handle)."""
        return self.prepare_call(msgs, ctx)

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
        message: str | ev.Msg | None = None,
        *,
        thread_id: str | None = None,
    ) -> bool:
        """Interrupt the session's running execution(s); returns at once.

        The run stops at its next checkpoint (before the model call, before each
        tool; a running tool task is cancelled), records ``RunInterrupted(by="user")``
        and returns an interrupted reply. Call it from the event loop's thread.

        Args:
            user_id: The user (None: anonymous).
            session_id: The session (default: the agent's default session).
            message: The reason (a str, recorded and put in the interrupted reply),
                or a ``Msg`` that also becomes the thread's next user turn, right
                after the interrupted run (its text is the reason).
            thread_id: Only this thread of the session (default: all of them).

        Returns:
            Whether a running execution was found.

        Raises:
            TypeError: ``message`` is neither a str, a Msg nor None.
        """
        reason, steer = interrupt_message(message)
        session = session_id if session_id is not None else self.default_session_id
        runs = [
            run
            for run in self._running.get((user_id, session or ""), set())
            if thread_id is None or run.key.thread_id == thread_id
        ]
        for run in runs:
            run.signal.fire("user", reason, steer)
        return bool(runs)

    async def _execute(self, run: RunControl) -> ev.Msg:
        key = run.key
        inside = self._inside(key)
        if inside is not None:
            raise RecursiveRunError(str(key), inside.run_id)
        async with self._locks.hold(key):
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
        return reply

    def run_loop(self) -> RunLoop:
        """The loop that drives one run of this agent, built from its settings now.

        For hosts that hold a thread's lease themselves and run turns on its
        writer (``journal.durable`` workers); ``call`` and friends use it too.
        """
        return self._loop()

    def _loop(self) -> RunLoop:
        # Built per run: the agent's settings are plain attributes a caller may set.
        return RunLoop(
            self.name,
            self.model,
            self.tools,
            self.max_iterations,
            self._owner,
            self.request_builder,
            self.ask_permission,
        )

    async def _execute_journal(self, run: RunControl) -> ev.Msg:
        key = run.key
        async with self._leases_of().writer(key) as writer:
            # The fence (and, for a run left unfinished, RunInterrupted by recovery)
            # is committed; a refused run commits nothing else.
            refuse_uncertain(key, writer.state)
            if run.explicit:
                await self._run_ids.check(
                    self._journal(), key, run.run_id, writer.version
                )
            return await self._loop().run(run, JournalSink(writer))

    # --- snapshot mode ---

    async def _execute_snapshot(self, run: RunControl) -> ev.Msg:
        key = run.key
        state, version = await self._slots().load(key)
        refuse_uncertain(key, state)
        base = state.copy()
        sink = SnapshotSink(state, str(key))
        try:
            reply = await self._loop().run(run, sink)
        except BaseException as exc:
            # The turn's record of what happened (RunFailed / RunInterrupted) is
            # saved too; the original error wins over a failed save.
            try:
                await self._slots().save_turn(key, base, sink.state, version)
            except Exception as save_error:
                exc.add_note(f"saving the turn's state failed too: {save_error!r}")
            raise
        final = await self._slots().save_turn(key, base, sink.state, version)
        inject_agent_state(run.context, final)
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
        key = self.thread_key(user_id, session_id, thread_id)
        inside = self._inside(key)
        if inside is not None:
            return state_copy(inside.state)
        if self.journal is None:
            return (await self._slots().load(key))[0]
        return await self._load_recovered(key, wait=0.0)

    async def _load_recovered(self, key: ThreadKey, wait: float) -> AgentState:
        state = await self._journal().load(key)
        busy = self._locks.busy(key)
        if state.active_run_id is None or busy:
            return state
        # The run looks unfinished: whoever takes the lease records its recovery.
        # If the lease is live, the run may still be running elsewhere.
        try:
            async with self._writer(key, wait=wait) as writer:
                return state_copy(writer.state)
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
        key = self.thread_key(ctx)
        inside = self._inside(key)
        if inside is not None:
            return await inside.update(reason, mutation)
        if self.journal is not None:
            async with self._writer(key) as writer:
                await writer.update(reason, mutation)
                return state_copy(writer.state)
        async with self._locks.hold(key):
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
        key = self.thread_key(ctx)
        inside = self._inside(key)
        if inside is not None:
            if inside.state.version != state.version:
                raise StaleStateError(str(key), state.version, inside.state.version)
            return await inside.update("save", lambda current: _saved(current, state))
        if self.journal is not None:
            async with self._writer(key) as writer:
                if writer.version != state.version:
                    raise StaleStateError(str(key), state.version, writer.version)
                await writer.replace_state(state, reason="save")
                return state_copy(writer.state)
        async with self._locks.hold(key):
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
        key = self.thread_key(user_id, session_id, thread_id)
        inside = self._inside(key)
        if inside is not None:
            return await inside.commit([ev.ContextCleared(reason)])
        if self.journal is not None:
            async with self._writer(key) as writer:
                if writer.state.context or writer.state.summary is not None:
                    await writer.clear_context(reason)
                return state_copy(writer.state)

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

    # --- the task context ---

    async def _apply(
        self,
        ctx: RuntimeContext,
        build: Callable[[AgentState], list[object] | Awaitable[list[object]]],
    ) -> AgentState:
        """Commit the events ``build`` derives from the thread's current state."""
        key = self.thread_key(ctx)
        inside = self._inside(key)
        if inside is not None:
            events = await _resolved(build(inside.state))
            return await inside.commit(events) if events else state_copy(inside.state)
        if self.journal is not None:
            async with self._writer(key) as writer:
                events = await _resolved(build(writer.state))
                if events:
                    await writer.append(events, expected_version=writer.version)
                return state_copy(writer.state)
        async with self._locks.hold(key):
            state, version = await self._slots().load(key)
            events = await _resolved(build(state))
            if not events:
                return state
            state = fold_events(AgentStateProjection(str(key)), state, events, None)
            return await self._slots().save(key, state, version)

    async def begin_task(
        self,
        ctx: RuntimeContext,
        goal: str,
        requirements: Sequence[str] = (),
        task_id: str | None = None,
    ) -> AgentState:
        """Begin a task: its goal and the application's requirements (confirmed).

        Raises:
            TaskError: An empty goal or requirement, or one given twice.
        """
        return await self._apply(
            ctx, lambda s: tasks.begin_task(s, goal, requirements, task_id)
        )

    async def decide_requirement(
        self,
        ctx: RuntimeContext,
        requirement: str,
        decision: str,
        note: str = "",
        by: str = "",
    ) -> AgentState:
        """Decide a requirement (``confirmed`` or ``rejected``): a trusted caller's.

        Tools can only propose requirements (``ctx.tasks.propose_requirement``).

        Raises:
            TaskError: No task, a requirement it does not have, or a bad decision.
        """
        return await self._apply(
            ctx,
            lambda s: tasks.decide_requirement(s, requirement, decision, note, by),
        )

    async def bind_evidence(
        self,
        ctx: RuntimeContext,
        requirement: str,
        evidence: str,
        object_id: str | None = None,
        object_version: ev.ObjectVersion | None = None,
        by: str = "",
    ) -> AgentState:
        """Bind evidence to a requirement, with the version of what it verified.

        Raises:
            TaskError: An unknown or rejected requirement, or a stale version.
        """
        return await self._apply(
            ctx,
            lambda s: tasks.bind_evidence(
                s, requirement, evidence, object_id, object_version, by
            ),
        )

    async def set_object_version(
        self, ctx: RuntimeContext, object_id: str, version: ev.ObjectVersion
    ) -> AgentState:
        """Record an object's new version; evidence bound to an older one is stale."""
        return await self._apply(
            ctx, lambda s: tasks.set_object_version(s, object_id, version)
        )

    async def write_todos(
        self,
        ctx: RuntimeContext,
        todos: Sequence[dict[str, Any]],
        expected_revision: int | None = None,
        by: str = "",
    ) -> AgentState:
        """Replace the todo list; refused when ``expected_revision`` is stale.

        Raises:
            TodoRevisionError: ``expected_revision`` is not the current revision.
        """
        return await self._apply(
            ctx, lambda s: tasks.write_todos(s, todos, expected_revision, by)
        )

    async def verify_task(
        self, ctx: RuntimeContext, verifier: tasks.Verifier
    ) -> AgentState:
        """Run the application's verification service and record what it found.

        The only way a ``VerificationRecorded`` is written: the verifier sees the
        task (requirements, evidence with stale flags, todos) and returns its
        result and checks; the evidence versions it saw are recorded with it.

        Raises:
            TaskError: No task has begun, or the result contradicts itself.
        """
        return await self._apply(ctx, lambda s: tasks.run_verification(s, verifier))

    def task_view(self, state: AgentState) -> tasks.TaskView:
        """The task of ``state`` as a read-only view (statuses, stale evidence)."""
        return tasks.task_view(state)

    # --- uncertain tool calls ---

    async def pending_tool_calls(
        self, ctx: RuntimeContext
    ) -> list[ev.ToolCallRequested]:
        """The thread's uncertain tool calls: requested, with no result, run over.

        Journal mode: a run left unfinished by a crash is recovered first (this
        takes the lease, waiting up to ``lease_wait``); while another holder keeps
        the lease, calls of its active run are not reported (they may be running).
        """
        key = self.thread_key(ctx)
        inside = self._inside(key)
        if inside is not None:
            return uncertain_calls(inside.state)
        if self.journal is None:
            state = (await self._slots().load(key))[0]
        else:
            state = await self._load_recovered(key, wait=self.lease_wait)
        return uncertain_calls(state)

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
        key = self.thread_key(ctx)
        inside = self._inside(key)
        if inside is not None:
            events = reconcile_events(key, inside.state, blocks, reason)
            return await inside.commit(events) if events else state_copy(inside.state)
        if self.journal is not None:
            async with self._writer(key) as writer:
                events = reconcile_events(key, writer.state, blocks, reason)
                if events:
                    await writer.append(events)
                return state_copy(writer.state)
        async with self._locks.hold(key):
            state, version = await self._slots().load(key)
            events = reconcile_events(key, state, blocks, reason)
            state = fold_events(AgentStateProjection(str(key)), state, events, None)
            return await self._slots().save(key, state, version)

    # --- lifecycle ---

    async def close(self) -> None:
        """Stop: interrupt runs in flight (``by="shutdown"``) and wait for them.

        When it returns, every interrupted run's ``RunInterrupted`` is committed and
        every lease this instance held is released. New calls raise
        ``RuntimeError``. The journal or state store given is not closed. Called
        from inside a run's tool, it does not wait for the runs enclosing it
        (they wait for the tool); they end, interrupted, when it returns.
        """
        self._closed = True
        for runs in list(self._running.values()):
            for run in runs:
                run.signal.fire("shutdown", "the agent is shutting down")
        enclosing: set[object] = set()
        scope = current_scope()
        while scope is not None:
            enclosing.add(scope.task)
            scope = scope.parent
        tasks = [t for t in self._tasks if t not in enclosing]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._leases is not None:
            await self._leases.close()

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


async def _resolved(value: list[object] | Awaitable[list[object]]) -> list[object]:
    if inspect.isawaitable(value):
        return await value
    return value


def _saved(current: AgentState, state: AgentState) -> AgentState:
    """``state`` as a save makes it: the log's own facts stay ``current``'s."""
    new = keep_log_facts(state.copy(), current)
    new.version = current.version
    return new
