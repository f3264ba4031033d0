"""One run: the caller's handle (:class:`AgentRun`) and the runtime's side of it.

An :class:`AgentRun` is what ``Agent.prepare_call`` returns: nothing runs until it is
awaited or streamed. The agent and the run loop work on the run's
:class:`RunControl` (its identity, input, interrupt :class:`Signal` and event feed),
never on the handle, so the handle needs no back-reference to the agent: it is given
the function that executes it.

Public names are re-exported by ``journal.runtime`` (``AgentRun``, ``RunEvent``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from journal import events as ev
from journal.codec import Record
from journal.runtime.model import ModelResponse, ToolCall

if TYPE_CHECKING:
    from journal.keys import ThreadKey
    from journal.runtime.context import RuntimeContext

__all__ = [
    "AgentRun",
    "Execute",
    "Messages",
    "RunControl",
    "RunEvent",
    "Signal",
    "inputs_of",
    "interrupt_message",
]

RunEvent = ModelResponse | ToolCall | ev.ToolResultBlock | Record | ev.Msg
"""What :meth:`AgentRun.stream` yields: model output, a tool call about to run, its
result, each committed record (journal mode), and last the final reply ``Msg``."""

Messages = str | ev.Msg | Sequence[ev.Msg | str] | None
"""A call's input: messages, one message, or a string (a user message)."""


class Signal:
    """A per-execution interrupt signal: runtime only, never persisted.

    Attributes:
        event: Set once the signal fired.
        by: Who interrupted (``"user"`` or ``"shutdown"``).
        reason: Why (recorded, and put in the interrupted reply).
        task: The model or tool task running now, which firing cancels.
        message: A message the interrupt brings: the thread's next user turn.
    """

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.by: Literal["user", "shutdown", "recovery"] = "user"
        self.reason = ""
        self.task: asyncio.Future[Any] | None = None
        self.message: ev.Msg | None = None

    @property
    def fired(self) -> bool:
        """Whether an interrupt came."""
        return self.event.is_set()

    def fire(
        self,
        by: Literal["user", "shutdown"],
        reason: str,
        message: ev.Msg | None = None,
        *,
        cut_short: bool = True,
    ) -> None:
        """Interrupt: the first call's ``by``, ``reason`` and ``message`` stick.

        Args:
            by: Who interrupts.
            reason: Why.
            message: A message to add as the next user turn (see
                :func:`interrupt_message`).
            cut_short: Cancel the model call or tool running now (the default);
                False lets it finish, so the run stops at its next checkpoint
                (a cooperative stop: nothing running is left uncertain).
        """
        if not self.event.is_set():
            self.by, self.reason, self.message = by, reason, message
            self.event.set()
        # A running tool (or model) task is cut short at once.
        if cut_short and self.task is not None and not self.task.done():
            self.task.cancel()


class RunControl:
    """The runtime's side of one run: what the loop reads and how it reports.

    Args:
        key: The thread it runs on.
        run_id: This execution's run id.
        explicit: Whether ``run_id`` came from the caller's context (then it must be
            new to the thread).
        messages: The input messages.
        context: The caller's context.
        emit: Where the run's events go (every stream of the run sees them).
        parent_run_id: The run that started this one (a sub-agent's), if any.
        parent_thread: That run's thread (``str`` of its key).
        leave_uncertain: What becomes of a tool call cut short while running
            (by an interrupt or a cancellation): False (the default) records an
            error result saying its side effects were not verified; True records
            no result, so the call stays pending (uncertain) after the run ends,
            for the thread's next holder to decide (a durable worker's takeover
            policy).

    Attributes:
        key: The thread it runs on.
        run_id: This execution's run id.
        explicit: Whether ``run_id`` is the caller's.
        messages: The input messages.
        context: The caller's context.
        signal: The run's interrupt signal.
        parent_run_id: The parent run, if any.
        parent_thread: The parent run's thread, if any.
        leave_uncertain: Whether a call cut short while running stays pending.
    """

    def __init__(
        self,
        key: ThreadKey,
        run_id: str,
        explicit: bool,
        messages: list[ev.Msg],
        context: RuntimeContext,
        emit: Callable[[RunEvent], None],
        parent_run_id: str | None = None,
        parent_thread: str | None = None,
        *,
        leave_uncertain: bool = False,
    ) -> None:
        self.key = key
        self.run_id = run_id
        self.explicit = explicit
        self.messages = messages
        self.context = context
        self.signal = Signal()
        self.parent_run_id = parent_run_id
        self.parent_thread = parent_thread
        self.leave_uncertain = leave_uncertain
        self._emit = emit

    def emit(self, item: RunEvent) -> None:
        """Report one event of the run to its streams."""
        self._emit(item)


Execute = Callable[[RunControl], Awaitable[ev.Msg]]
"""What runs a run: given its control, returns the final reply."""


class AgentRun:
    """One prepared execution of a call; nothing runs until it is awaited.

    Get one from :meth:`Agent.prepare_call`. ``run_id`` is set at once, so it can be
    logged or stored before anything happens. ``await run.result()`` runs it and
    returns the final reply; ``async for event in run.stream()`` runs it and yields
    what happens. Both may be used (and several streams): each sees every event.

    Args:
        key: The thread it runs on.
        run_id: This execution's run id.
        explicit: Whether ``run_id`` came from ``context.run_id``.
        messages: The input messages.
        context: The caller's context.
        execute: What runs it (the agent's execution of one run).
        tasks: The agent's set of live run tasks; this run's task is in it while it
            runs.
        parent_run_id: The run that started this one (a sub-agent's), if any.
        parent_thread: That run's thread (``str`` of its key).

    Attributes:
        run_id: This execution's run id (explicit from ``ctx.run_id``, else new).
        key: The thread it runs on.
        context: The caller's context.
        messages: The input messages.
    """

    def __init__(
        self,
        key: ThreadKey,
        run_id: str,
        explicit: bool,
        messages: list[ev.Msg],
        context: RuntimeContext,
        *,
        execute: Execute,
        tasks: set[asyncio.Task[ev.Msg]],
        parent_run_id: str | None = None,
        parent_thread: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.key = key
        self.context = context
        self.messages = messages
        self._control = RunControl(
            key,
            run_id,
            explicit,
            messages,
            context,
            emit=self._emit,
            parent_run_id=parent_run_id,
            parent_thread=parent_thread,
        )
        self._execute = execute
        self._tasks = tasks
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

    def interrupt(self, message: str | ev.Msg | None = None) -> bool:
        """Ask this run to stop at its next checkpoint; returns whether it was live.

        Args:
            message: The reason (a str), or a message that becomes the thread's
                next user turn (its text is the reason).
        """
        if self._task is None or self._task.done():
            return False
        reason, steer = interrupt_message(message)
        self._control.signal.fire("user", reason, steer)
        return True

    def _start(self) -> asyncio.Task[ev.Msg]:
        if self._task is None:
            self._task = asyncio.create_task(
                self._run(), name=f"agent run {self.run_id}"
            )
            self._tasks.add(self._task)
            self._task.add_done_callback(self._finished)
        return self._task

    async def _run(self) -> ev.Msg:
        reply = await self._execute(self._control)
        self._emit(reply)
        return reply

    def _finished(self, task: asyncio.Task[ev.Msg]) -> None:
        self._tasks.discard(task)
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


def interrupt_message(message: str | ev.Msg | None) -> tuple[str, ev.Msg | None]:
    """An interrupt's reason, and the message it adds as a user turn (if any).

    Raises:
        TypeError: ``message`` is neither a str, a Msg nor None.
    """
    if message is None:
        return "interrupted by the user", None
    if isinstance(message, str):
        return message or "interrupted by the user", None
    if isinstance(message, ev.Msg):
        return message.text or "interrupted by the user", message
    raise TypeError(
        f"an interrupt message must be a str or a Msg, not {type(message).__name__}"
    )


def inputs_of(msgs: Messages) -> list[ev.Msg]:
    """A call's input as messages (a string is a user message).

    Raises:
        TypeError: An item is neither a ``Msg`` nor a str.
    """
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
