"""The journals the web UI tests look at: the demo's incident, and hostile content.

``build_incident`` runs the demo's first four steps (two users, a second turn, a
checkpoint, a process SIGKILLed in the middle of ``send_email``), then
``agent-journal recover`` on alice's thread: the run ``alice-3`` is interrupted
and the call ``call-email-1`` is uncertain, which is what an operator finds.

``build_hostile`` writes a thread whose ids, messages and tool call hold markup
and script: the page must show all of it as text.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from journal import (
    Journal,
    MessageAppended,
    Msg,
    RunCompleted,
    RunStarted,
    ScriptedModel,
    TextBlock,
    ThreadKey,
    ToolCallCompleted,
    ToolCallRequested,
    ToolResultBlock,
    ToolUseBlock,
)
from journal.cli.commands.recover import recover_thread
from journal.cli.demo import (
    DEMO_AGENT,
    DEMO_NAMESPACE,
    DEMO_USER,
    Demo,
    DemoConfig,
    checkpoint,
    crash_mid_tool,
    second_turn,
    two_users,
)
from journal.cli.options import RecoverOptions

INCIDENT_RUN = "alice-3"
INCIDENT_CALL = "call-email-1"
SESSION = "incident-1"

XSS_TEXT = (
    "<script>window.__pwned = 'script'; alert('script')</script>"
    "<img src=x onerror=\"window.__pwned = 'img'; alert('img')\">"
)
HOSTILE_KEY = ThreadKey(
    "bot<b>",
    "s/<img src=x onerror=alert('sid')>&x=1#frag",
    "mallory\"'><svg onload=alert('user')>",
    namespace="hostile",
)


@dataclass(frozen=True)
class Incident:
    """What the tests need to know of the incident they built."""

    key: ThreadKey
    run_started_at: int
    head: int


async def build_incident(
    root: str, storage_options: dict[str, Any] | None = None
) -> Incident:
    """The demo's crash, recovered but not reconciled, under ``root``."""
    options = dict(storage_options or {})
    journal = Journal.open(root, **options)
    try:
        demo = Demo(DemoConfig(journal), SESSION, root, options, io.StringIO())
        await two_users(demo)
        await second_turn(demo)
        await checkpoint(demo)
        await crash_mid_tool(demo)
        key = ThreadKey(DEMO_AGENT, SESSION, DEMO_USER, namespace=DEMO_NAMESPACE)
        report = await recover_thread(
            journal,
            RecoverOptions(root=root, key=key, holder="operator", wait=30.0),
        )
        assert [u.call.call_id for u in report.uncertain] == [INCIDENT_CALL]
        records = [r async for r in journal.records(key)]
        started = next(
            r.version
            for r in records
            if any(
                isinstance(e, RunStarted) and e.run_id == INCIDENT_RUN for e in r.events
            )
        )
        return Incident(key, started, report.fence_version)
    finally:
        await journal.aclose()


async def build_hostile(root: str, storage_options: dict[str, Any] | None = None):
    """A thread whose every visible string is markup (see ``XSS_TEXT``)."""
    journal = Journal.open(root, **dict(storage_options or {}))
    try:
        async with journal.writer(HOSTILE_KEY, holder="hostile-writer") as w:
            await w.append(
                [RunStarted("<b>run</b>"), MessageAppended(Msg("user", XSS_TEXT))],
                run_id="<b>run</b>",
            )
            await w.append(
                [
                    MessageAppended(
                        Msg(
                            "assistant",
                            [
                                TextBlock(XSS_TEXT),
                                ToolUseBlock("c<i>1</i>", "<svg onload=alert(1)>", {}),
                            ],
                        )
                    ),
                    ToolCallRequested(
                        "c<i>1</i>", "<svg onload=alert(1)>", {"html": XSS_TEXT}
                    ),
                ],
                run_id="<b>run</b>",
            )
            await w.append(
                [
                    ToolCallCompleted("c<i>1</i>", XSS_TEXT),
                    MessageAppended(Msg("assistant", XSS_TEXT)),
                    RunCompleted("<b>run</b>"),
                ],
                run_id="<b>run</b>",
            )
    finally:
        await journal.aclose()
    return HOSTILE_KEY


async def settle_incident(
    root: str, storage_options: dict[str, Any] | None = None
) -> None:
    """Reconcile the incident's uncertain call, as the application would."""
    options = dict(storage_options or {})
    journal = Journal.open(root, **options)
    try:
        demo = Demo(DemoConfig(journal), SESSION, root, options, io.StringIO())
        async with demo.config.agent(ScriptedModel([])) as agent:
            await agent.reconcile_tool_calls(
                demo.ctx(),
                {
                    INCIDENT_CALL: ToolResultBlock(
                        INCIDENT_CALL, "not sent", is_error=True
                    )
                },
                "outbox checked",
            )
    finally:
        await journal.aclose()


LONG_KEY = ThreadKey("long-agent", "long-session", "carol", namespace="long")
LONG_RUNS = 130
"""Runs of the long thread: each is two records, so 261 records with the writer's
first (more than a timeline page holds by default)."""


def long_run(i: int) -> str:
    """The id of the long thread's run ``i`` (0-based); its record pair is
    versions ``2 * i + 2`` and ``2 * i + 3``."""
    return f"long-{i:03d}"


async def build_long(root: str) -> ThreadKey:
    """A thread of :data:`LONG_RUNS` runs, each a question and a tool call in its
    first record, the call's result and an answer in its second (which carries no
    ``run_id``: the timeline files it with the call's run)."""
    journal = Journal.open(root, fsync=False)
    try:
        async with journal.writer(LONG_KEY, holder="long-writer") as w:
            for i in range(LONG_RUNS):
                run, call = long_run(i), f"call-{i}"
                await w.append(
                    [
                        RunStarted(run),
                        MessageAppended(Msg("user", f"question {i}")),
                        ToolCallRequested(call, "search", {"q": i}, run),
                    ],
                    run_id=run,
                )
                await w.append(
                    [
                        ToolCallCompleted(call, f"result {i}"),
                        MessageAppended(Msg("assistant", f"answer {i}")),
                        RunCompleted(run),
                    ]
                )
    finally:
        await journal.aclose()
    return LONG_KEY
