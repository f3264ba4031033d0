"""The ReAct loop of one run: model, tools, and the write-ahead order of its events.

Every batch is committed (to the run's :class:`~journal.runtime.sinks.Sink`) before
the next external step: the input before the model is called, every requested call
before any of them runs, each result before the next call or model turn. An
interrupt is honoured at those checkpoints, and cancels a running model or tool task.
A tool cut short that way gets an error result saying its side effects were not
verified, or, for a run whose ``leave_uncertain`` is set (a durable worker's), no
result: the call stays uncertain for the thread's next holder to decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from journal import codec
from journal import events as ev
from journal.runtime.context import derive_context, inject_agent_state
from journal.runtime.copies import StateSnapshot
from journal.runtime.model import ToolCall, as_response
from journal.runtime.request import RequestBuilder, decision_for, refusal_for
from journal.runtime.scope import RunScope, current_scope
from journal.runtime.tools import printable, result_of, to_jsonable, unrecordable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    import pydantic

    from journal.runtime.context import RuntimeContext
    from journal.runtime.model import Model, ModelResponse
    from journal.runtime.run import RunControl, Signal
    from journal.runtime.sinks import Sink
    from journal.runtime.tools import Tool
    from projections.agent_state import AgentState

__all__ = ["AskPermission", "RunLoop", "checked_calls", "result_events"]

AskPermission: TypeAlias = (
    "Callable[[ToolCall, RuntimeContext], bool | Awaitable[bool]]"
)
"""Decides a tool call whose permission rule is ``ask``: True runs it."""

_T = TypeVar("_T")

logger = logging.getLogger("journal.runtime")

_DEFAULT_BUILDER = RequestBuilder()

_NOT_RUN = "not run: the run was interrupted before this tool call started ({reason})"
_CUT_SHORT = (
    "interrupted while running ({reason}); the tool was cancelled and its side "
    "effects, if any, were not verified"
)


@dataclass(frozen=True, slots=True)
class RunLoop:
    """What a run needs of its agent, and the loop that drives it.

    Attributes:
        name: The agent's name (the ``name`` of its messages).
        model: The model.
        tools: The tools by name.
        max_iterations: The most model calls in one run.
        owner: Where the thread lives (the journal or state store), for the run's
            scope.
        builder: Builds each model call's request.
        ask_permission: Decides a call whose permission rule is ``ask`` (None:
            such calls are not run).
    """

    name: str
    model: Model
    tools: Mapping[str, Tool]
    max_iterations: int
    owner: object = None
    builder: RequestBuilder = _DEFAULT_BUILDER
    ask_permission: AskPermission | None = None

    async def run(self, run: RunControl, sink: Sink) -> ev.Msg:
        """Drive one run to its end and return the final reply.

        Args:
            run: The run.
            sink: Where its batches of events are committed.

        Returns:
            The final reply (an interrupted reply if an interrupt came).

        Raises:
            RuntimeError: The model did not finish within ``max_iterations``.
            Exception: What the model or a commit raised (after ``RunFailed`` was
                committed, when it still could be).
        """
        run_id = run.run_id
        parent = current_scope()
        scope = RunScope(self.owner, run.key, run_id, sink, run.emit, parent)
        scope.task = asyncio.current_task()
        ctx = derive_context(run.context, run_id, scope)
        pending: list[object] = [
            ev.RunStarted(
                run_id,
                turn_id=run.context.turn_id,
                parent_run_id=run.parent_run_id,
                parent_thread=run.parent_thread,
            ),
            *(ev.MessageAppended(m) for m in run.messages),
        ]
        # ended: the run's last record is committed; broken: a commit failed, so
        # nothing more can be recorded (the next lease holder recovers the run).
        flags = {"ended": False, "broken": False}
        # Calls requested and not yet resolved, in order (the first may be running).
        open_calls: list[ToolCall] = []

        def inject() -> None:
            state = sink.state
            # The caller's context gets a snapshot: an edit made through it (a task
            # beside the run) must not reach the model unrecorded. The run's own
            # context stays live: the run settles its tools' edits.
            inject_agent_state(run.context, StateSnapshot(state))
            inject_agent_state(ctx, state)

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
                    run.emit(record)

        inject()
        token = scope.enter()
        try:
            return await self._drive(
                run, sink, scope, ctx, pending, flags, open_calls, flush
            )
        finally:
            scope.close()
            scope.leave(token)
            # The run's state lives on in the (kept) writer: the contexts get a
            # copy of it as the run left it, so that editing ctx.agent_state after
            # the call cannot reach the thread's state.
            final = StateSnapshot(sink.state)
            inject_agent_state(run.context, final)
            inject_agent_state(ctx, final)

    async def _drive(
        self,
        run: RunControl,
        sink: Sink,
        scope: RunScope,
        ctx: RuntimeContext,
        pending: list[object],
        flags: dict[str, bool],
        open_calls: list[ToolCall],
        flush: Callable[..., Awaitable[None]],
    ) -> ev.Msg:
        run_id, signal = run.run_id, run.signal
        running = False
        try:
            for _ in range(self.max_iterations):
                await flush()  # the input and results are durable before the model
                if signal.fired:
                    return await self._interrupted(run, flush, [])
                response = await self._ask_model(sink.state, signal)
                if response is None:
                    return await self._interrupted(run, flush, [])
                run.emit(response)
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
                    run.emit(call)
                    running = True
                    scope.begin_tool()
                    found, cut_short = await self._run_tool(
                        call, sink.state, ctx, signal
                    )
                    running = False
                    del open_calls[0]
                    if found is None:
                        # Cut short while running: whether it had its effect is
                        # unknown.
                        if run.leave_uncertain:
                            return await self._interrupted(run, flush, open_calls)
                        message = _CUT_SHORT.format(reason=signal.reason)
                        block = ev.ToolResultBlock(call.id, message, True)
                    elif cut_short:
                        block = found
                    else:
                        block = await self._settle(scope, call, found)
                    run.emit(block)
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
                if run.leave_uncertain:
                    cut = []  # no result: the running call stays uncertain
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
        request = self.builder.build(state, self.tools)
        answer = self.model(request.messages, request.tools)
        if not inspect.isawaitable(answer):  # a sync model is tolerated
            return as_response(answer)
        task = await _interruptible(signal, answer)
        if task.cancelled() and signal.fired:
            return None
        return as_response(task.result())

    async def _run_tool(
        self, call: ToolCall, state: AgentState, ctx: RuntimeContext, signal: Signal
    ) -> tuple[ev.ToolResultBlock | None, bool]:
        """Run one requested call; returns its result and whether it was cut short.

        The result is None for a tool cut short while running (its outcome is
        unknown); a call cut short before its tool started has a result.
        """
        found = self.tools.get(call.name)
        if found is None:
            known = ", ".join(sorted(self.tools)) or "none"
            message = f"unknown tool {call.name!r}; the tools are: {known}"
            return ev.ToolResultBlock(call.id, message, True), False
        refusal = refusal_for(state, found)
        if refusal is not None:
            message = f"not run: {refusal}"
            return ev.ToolResultBlock(call.id, message, True), False
        try:
            args: pydantic.BaseModel = found.validate(call.input)
        except ValueError as exc:
            message = f"invalid input for tool {call.name!r}: {exc}"
            return ev.ToolResultBlock(call.id, message, True), False
        if decision_for(state, found) == "ask":
            approval = await self._approve(call, ctx, signal)
            if approval is None:
                message = _CUT_SHORT.format(reason=signal.reason)
                return ev.ToolResultBlock(call.id, message, True), True
            if approval is not True:
                return ev.ToolResultBlock(call.id, approval, True), False
        task = await _interruptible(signal, found.invoke(args, ctx))
        if task.cancelled():
            if signal.fired:
                return None, True
            return ev.ToolResultBlock(call.id, "the tool was cancelled", True), False
        error = task.exception()
        if error is not None:
            message = f"{type(error).__name__}: {printable(error)}"
            return _recordable(call, ev.ToolResultBlock(call.id, message, True)), False
        return _recordable(call, result_of(call.id, task.result())), False

    async def _approve(
        self, call: ToolCall, ctx: RuntimeContext, signal: Signal
    ) -> str | bool | None:
        """Ask the application about a call: True, a refusal, or None if cut short."""
        if self.ask_permission is None:
            return (
                f"not run: the tool {call.name!r} needs approval (permission rule "
                "'ask') and the agent has no ask_permission hook"
            )
        try:
            answer = self.ask_permission(call, ctx)
        except Exception as exc:
            return f"not run: asking for approval failed: {printable(repr(exc))}"
        if inspect.isawaitable(answer):
            task = await _interruptible(signal, answer)
            if task.cancelled():
                return None
            error = task.exception()
            if error is not None:
                return f"not run: asking for approval failed: {printable(repr(error))}"
            answer = task.result()
        if answer is True:
            return True
        return f"not run: the call of {call.name!r} was not approved"

    async def _settle(
        self, scope: RunScope, call: ToolCall, block: ev.ToolResultBlock
    ) -> ev.ToolResultBlock:
        """Commit the tool's direct edits of ``ctx.agent_state``, or refuse them."""
        try:
            await scope.settle(f"tool {call.name} changed ctx.agent_state")
        except (ValueError, TypeError) as exc:
            logger.warning("%s: tool %s: %s", scope.key, call.name, exc)
            message = (
                f"the tool's changes to ctx.agent_state were refused and not "
                f"recorded: {exc}"
            )
            return ev.ToolResultBlock(call.id, message, True)
        return block

    async def _interrupted(
        self,
        run: RunControl,
        flush: Callable[..., Any],
        not_run: Sequence[ToolCall],
        *,
        cut_short: Sequence[ToolCall] = (),
    ) -> ev.Msg:
        """Commit the interrupted end of a run and return the interrupted reply.

        Requested calls that never started get a "not run" error result; a call
        cancelled while running gets one saying its side effects were not verified.
        """
        signal = run.signal
        events: list[object] = []
        for calls, template in ((cut_short, _CUT_SHORT), (not_run, _NOT_RUN)):
            for call in list(calls):
                message = template.format(reason=signal.reason)
                block = ev.ToolResultBlock(call.id, message, True)
                run.emit(block)
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
        # An interrupt that brings a message steers the thread: it is the next
        # user turn, after the run it cut short.
        steer = [ev.MessageAppended(signal.message)] if signal.message else []
        await flush(
            *events,
            ev.MessageAppended(reply),
            ev.RunInterrupted(run.run_id, reason=signal.reason, by=by),
            *steer,
            last=True,
        )
        return reply


def checked_calls(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """A model's tool calls, checked, with their input made JSON-compatible.

    Raises:
        TypeError: An item is not a ``ToolCall``.
        ValueError: A call id is blank or repeated.
    """
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


def _recordable(call: ToolCall, block: ev.ToolResultBlock) -> ev.ToolResultBlock:
    """``block``, or an error result if the journal would refuse to record it.

    Checked as the writer will encode it (NaN, an int beyond 64 bits, a lone
    surrogate, too deep a nesting): refused at the commit instead, the run would
    end with the tool run and its call without a result, of unknown outcome.
    """
    output = block.output
    if type(output) is str:
        # Text fails only on a lone surrogate, which UTF-8 cannot encode: checked
        # alone, not by encoding a whole record for it.
        if output.isascii():
            return block  # the common case
        try:
            output.encode("utf-8")
        except UnicodeEncodeError as exc:
            return unrecordable(call.id, exc)
        return block
    try:
        codec.encode_record(
            version=1,
            epoch=0,
            writer="",
            batch_id="check",
            run_id=None,
            committed_at=0.0,
            prev_hash=codec.GENESIS_HASH,
            events=result_events(call, block),
        )
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        return unrecordable(call.id, exc)
    return block


def result_events(call: ToolCall, block: ev.ToolResultBlock) -> list[object]:
    """The event that records ``block`` as the result of ``call``.

    One event: its ``message_id`` makes the result the tool message of the context
    too, so the output is stored once.
    """
    return [
        ev.ToolCallCompleted(
            call.id,
            block.output,
            block.is_error,
            message_id=uuid.uuid4().hex,
            name=call.name,
        )
    ]


async def _interruptible(signal: Signal, work: Awaitable[_T]) -> asyncio.Future[_T]:
    """Run ``work`` as a task that an interrupt may cancel; return it once done.

    The task is registered on ``signal`` while it runs, so an interrupt can cancel
    it. If the caller itself is cancelled, the task is cancelled and awaited before
    the cancellation propagates.
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
