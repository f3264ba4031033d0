"""Uncertain tool calls: requested, with no result, and their run is over.

A crash between ``ToolCallRequested`` and its result leaves the call uncertain: the
tool may or may not have run. A new run on the thread is refused until the
application records its verdict on exactly that set of calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import events as ev
from journal.errors import UncertainToolCallsError

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from journal.keys import ThreadKey
    from projections.agent_state import AgentState

__all__ = [
    "Outcome",
    "outcome_block",
    "reconcile_events",
    "refuse_uncertain",
    "uncertain_calls",
]

Outcome = str | ev.ToolResultBlock
"""An application's verdict on an uncertain tool call."""


def refuse_uncertain(key: ThreadKey, state: AgentState) -> None:
    """Refuse a new run on a thread that has unreconciled tool calls.

    Raises:
        UncertainToolCallsError: ``state`` has pending tool calls.
    """
    calls = state.tool_context.pending_calls
    if calls:
        raise UncertainToolCallsError(str(key), sorted(calls))


def uncertain_calls(state: AgentState) -> list[ev.ToolCallRequested]:
    """The pending calls of ``state``, except those of its active run (may be running).

    Args:
        state: The thread's state.

    Returns:
        One ``ToolCallRequested`` per uncertain call, in the state's order.
    """
    live = state.active_run_id
    return [
        ev.ToolCallRequested(p.call_id, p.name, p.input, run_id=p.run_id)
        for p in state.tool_context.pending_calls.values()
        if live is None or p.run_id != live
    ]


def outcome_block(call_id: str, value: Outcome) -> ev.ToolResultBlock:
    """The result block of an application's verdict on the call ``call_id``.

    Raises:
        ValueError: ``value`` is a block for another call.
        TypeError: ``value`` is neither a str nor a ``ToolResultBlock``.
    """
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


def reconcile_events(
    key: ThreadKey,
    state: AgentState,
    blocks: Mapping[str, ev.ToolResultBlock],
    reason: str,
    *,
    calls: Collection[str] | None = None,
) -> list[object]:
    """The events that record ``blocks`` as the verdicts on ``state``'s pending calls.

    Each verdict is a ``ToolCallReconciled`` and a tool-result message, so the model
    sees the outcome.

    Args:
        key: The thread (named in the error).
        state: The thread's state.
        blocks: Call id -> its result block.
        reason: Why (recorded as each reconciliation's note).
        calls: The pending calls to settle (default: all of them); a durable
            worker settles the calls of one turn's runs apart from the others.

    Raises:
        ValueError: ``blocks`` does not name exactly those calls, or ``calls``
            names a call that is not pending.
    """
    pending = state.tool_context.pending_calls
    wanted = set(pending) if calls is None else set(calls)
    if set(blocks) != wanted or not wanted <= set(pending):
        raise ValueError(
            f"reconcile exactly the uncertain tool calls of {key}: "
            f"{sorted(wanted & set(pending))}; missing "
            f"{sorted(wanted - set(blocks))}, unknown "
            f"{sorted(set(blocks) - (wanted & set(pending)))}"
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
