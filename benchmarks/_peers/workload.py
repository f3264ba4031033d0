"""The shared workload: one agent turn, in a neutral form every adapter translates.

A turn is the one ``bench_commit.turn`` times: a user message (~200 B), an assistant
message with a short preamble and one tool call, a tool result (~1 KB) and a final
reply (~300 B). Side state changes now and then: the todo list is rewritten every
10th turn, plan mode toggles every 20th, the running summary is set every 50th.
Nothing here imports a library, so every adapter (and the fresh-process loader)
can use it.

The texts are pseudo-random words (fixed seeds, so every system and every run gets the
same bytes) rather than one phrase repeated: a store that compresses (PostgreSQL
TOAST, for one) would otherwise shrink a repeated phrase some fifty-fold, which real
conversations never allow.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from typing import Any

TODOS_EVERY = 10
PLAN_EVERY = 20
SUMMARY_EVERY = 50


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    """One turn of the workload, before any system's encoding."""

    i: int
    user: str
    preamble: str
    call_id: str
    tool: str
    args: dict[str, Any]
    result: str
    answer: str
    todos: list[dict[str, str]] | None = None
    """The new todo list, when this turn rewrites it."""
    todos_revision: int = 0
    summary: str | None = None
    """The new running summary, when this turn sets it."""
    plan_mode: bool | None = None
    """True: plan mode is entered this turn; False: exited; None: unchanged."""
    plan_file: str | None = None

    @property
    def has_side_state(self) -> bool:
        return (
            self.todos is not None
            or self.summary is not None
            or self.plan_mode is not None
        )


@functools.cache
def _vocabulary() -> tuple[str, ...]:
    rng = random.Random(20240601)  # noqa: S311 (test data)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"] + ["th", "st"]
    words = {
        "".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        for _ in range(3000)
    }
    return tuple(sorted(words))


def words(seed: str, size: int) -> str:
    """About ``size`` bytes of text (pseudo-random words, the same for a seed)."""
    rng = random.Random(seed)  # noqa: S311 (test data)
    vocabulary = _vocabulary()
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(vocabulary)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def make_turn(i: int) -> Turn:
    """Turn ``i`` (0-based) of a thread."""
    todos = summary = plan_mode = plan_file = None
    if i % TODOS_EVERY == TODOS_EVERY - 1:
        statuses = ("completed", "in_progress", "pending", "pending")
        todos = [
            {
                "content": f"Step {k + 1} of task {i // TODOS_EVERY}",
                "status": statuses[k],
                "activeForm": f"Working on step {k + 1}",
            }
            for k in range(4)
        ]
    if i % PLAN_EVERY == PLAN_EVERY - 1:
        plan_mode = (i // PLAN_EVERY) % 2 == 0
        plan_file = f"plans/plan-{i // PLAN_EVERY}.md" if plan_mode else None
    if i % SUMMARY_EVERY == SUMMARY_EVERY - 1:
        summary = f"Summary up to turn {i}: " + words(f"summary {i}", 380)
    return Turn(
        i=i,
        user=f"Question {i}: " + words(f"user {i}", 180),
        preamble="Let me check.",
        call_id=f"call-{i}",
        tool="search",
        args={"q": f"topic {i}"},
        result=words(f"result {i}", 1050),
        answer=f"Answer {i}: " + words(f"answer {i}", 280),
        todos=todos,
        todos_revision=i // TODOS_EVERY + 1,
        summary=summary,
        plan_mode=plan_mode,
        plan_file=plan_file,
    )


def side_state_at(n_turns: int) -> dict[str, Any]:
    """The side state after turns ``0 .. n_turns - 1`` (what a seeded thread holds)."""
    state: dict[str, Any] = {"todos": [], "summary": None, "plan_mode": False}
    for i in range(n_turns):
        if (
            i % TODOS_EVERY == TODOS_EVERY - 1
            or i % PLAN_EVERY == PLAN_EVERY - 1
            or (i % SUMMARY_EVERY == SUMMARY_EVERY - 1)
        ):
            t = make_turn(i)
            if t.todos is not None:
                state["todos"] = t.todos
            if t.summary is not None:
                state["summary"] = t.summary
            if t.plan_mode is not None:
                state["plan_mode"] = t.plan_mode
    return state


def text_bytes(t: Turn) -> int:
    """UTF-8 bytes of every string the application hands over in turn ``t``.

    The user's text, the preamble, the tool's name, its arguments (compact JSON),
    its result and the answer, plus the side state the turn sets: each todo's
    strings, the summary, the plan file. Ids, roles and every system's own framing
    are left out: this is the denominator a user would pick ("what did I store?"),
    the same for every system.
    """
    parts = [t.user, t.preamble, t.tool, _compact_json(t.args), t.result, t.answer]
    if t.todos is not None:
        parts += [value for todo in t.todos for value in todo.values()]
    if t.summary is not None:
        parts.append(t.summary)
    if t.plan_file is not None:
        parts.append(t.plan_file)
    return sum(len(p.encode()) for p in parts)


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
