"""Tool results reach the provider right after the message holding their calls.

Found by review: a durable run interrupted while the first of two tools ran
leaves that call without a result (for the takeover policy), then an
``[interrupted]`` reply; the reconciled result comes at the end of the context.
Sent in stored order, that conversation breaks both providers' rule (every tool
call answered before anything else), so every later model call on the thread
failed.
"""

from __future__ import annotations

from journal.events import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from journal.models.anthropic import to_anthropic_messages
from journal.models.openai import to_openai_messages

CONTEXT = [
    Msg("user", "go"),
    Msg(
        "assistant",
        [
            ToolUseBlock("call_A", "slow", {}),
            ToolUseBlock("call_B", "fast", {}),
        ],
    ),
    Msg("tool", [ToolResultBlock("call_B", "B done")]),
    Msg("assistant", [TextBlock("[interrupted]")]),
    Msg("tool", [ToolResultBlock("call_A", "reconciled: sent")]),
    Msg("user", "and now?"),
]


def test_openai_gets_each_result_after_its_call():
    sent = to_openai_messages(CONTEXT)
    roles = [(m["role"], m.get("tool_call_id")) for m in sent]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_A"),
        ("tool", "call_B"),
        ("assistant", None),
        ("user", None),
    ]
    assert sent[2]["content"] == "reconciled: sent"


def test_anthropic_gets_each_result_in_the_next_turn():
    _, turns = to_anthropic_messages(CONTEXT)
    shape = [
        (t["role"], [b.get("tool_use_id") or b["type"] for b in t["content"]])
        for t in turns
    ]
    assert shape == [
        ("user", ["text"]),
        ("assistant", ["tool_use", "tool_use"]),
        ("user", ["call_A", "call_B"]),
        ("assistant", ["text"]),
        ("user", ["text"]),
    ]


def test_a_context_in_order_is_sent_as_it_is():
    in_order = [CONTEXT[0], CONTEXT[1], CONTEXT[4], CONTEXT[2], CONTEXT[3], CONTEXT[5]]
    assert to_openai_messages(in_order) == to_openai_messages(CONTEXT)
    plain = [Msg("user", "hi"), Msg("assistant", "hello"), Msg("user", "bye")]
    assert [m["content"] for m in to_openai_messages(plain)] == ["hi", "hello", "bye"]
