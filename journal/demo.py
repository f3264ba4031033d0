"""``agent-journal demo``: what the journal is for, in about ten seconds.

Read this module as documentation: each step is a few calls of the public API.

1. A turn with a tool call, committed write-ahead (the request before the tool runs).
2. Permissions and todos, and a second turn.
3. A checkpoint.
4. A writer *process* crashes mid-tool: the demo SIGKILLs it.
5. Another writer takes over once the dead writer's lease expires: the unfinished
   run is marked interrupted, and the tool call with an unknown outcome is listed
   and reconciled (never re-run).
6. A zombie writer, whose lease was taken over, tries to append: ``FencedError``.
7. Time travel: the state as of earlier versions.
8. ``verify``: checksums, hash chain, epochs and checkpoints are all consistent.

The demo writes to its own namespace (``demo``) with a fresh session id per run, so
reruns never collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from journal import (
    FencedError,
    MessageAppended,
    Msg,
    PermissionModeSet,
    PermissionRuleSet,
    RunCompleted,
    RunStarted,
    TextBlock,
    ThreadKey,
    TodosWritten,
    ToolCallCompleted,
    ToolCallReconciled,
    ToolCallRequested,
    ToolGroupActivated,
    ToolResultBlock,
    ToolUseBlock,
)
from journal import events as ev

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from journal import Journal, Record, ThreadWriter

__all__ = ["DEMO_AGENT", "DEMO_NAMESPACE", "DEMO_USER", "DemoError", "run_demo"]

DEMO_NAMESPACE = "demo"
DEMO_AGENT = "assistant"
DEMO_USER = "alice"

CHILD_LEASE_TTL = 2.0
"""The crashing writer's lease TTL: how long the takeover has to wait."""

_CHILD_TIMEOUT = 60.0


class DemoError(Exception):
    """The demo could not run a step (e.g. the writer process failed to start)."""


@dataclass
class Demo:
    """What every step needs: the journal, the thread, and somewhere to print.

    Attributes:
        journal: The journal on the demo's root.
        key: The demo's thread (a fresh session per run).
        root_url: The root, for the writer process that the demo crashes.
        storage_options: The root's storage options, for that process too.
        out: Where the narration goes.
        pace: Seconds to pause after each step title (0 when not on a terminal).
        marks: Versions worth travelling back to, by what happened there.
    """

    journal: Journal
    key: ThreadKey
    root_url: str
    storage_options: dict[str, Any]
    out: TextIO
    pace: float = 0.0
    marks: dict[str, int] = field(default_factory=dict)
    steps_done: int = field(default=0, init=False)

    def say(self, text: str = "") -> None:
        """Print one line of narration."""
        print(text, file=self.out, flush=True)

    async def step(self, title: str) -> None:
        """Print the next step's title."""
        self.steps_done += 1
        self.say()
        self.say(f"[{self.steps_done}/8] {title}")
        if self.pace:
            await asyncio.sleep(self.pace)

    def show(self, record: Record, note: str = "") -> None:
        """Print a committed record: its version, its events, and why."""
        events = " + ".join(_brief(e) for e in record.events)
        self.say(f"  v{record.version:<3} {events}")
        if note:
            self.say(f"        {note}")

    async def show_version(self, version: int, note: str = "") -> None:
        """Read the record at ``version`` back from the log and print it."""
        async for record in self.journal.records(self.key, version, version + 1):
            self.show(record, note)


def _brief(event: object) -> str:
    """An event's type with the one detail that matters here."""
    match event:
        case ev.MessageAppended(message=msg):
            blocks = msg.content if isinstance(msg.content, list) else []
            uses = [b.name for b in blocks if isinstance(b, ToolUseBlock)]
            results = [b for b in blocks if isinstance(b, ToolResultBlock)]
            what = f"{msg.role}, tool_use {uses[0]}" if uses else msg.role
            return f"MessageAppended({what}{', tool_result' if results else ''})"
        case ev.LeaseAcquired(epoch=epoch, holder=holder):
            return f"LeaseAcquired(epoch {epoch}, {holder})"
        case ev.RunInterrupted(run_id=run_id, by=by):
            return f"RunInterrupted({run_id}, by={by})"
        case ev.RunStarted(run_id=run_id) | ev.RunCompleted(run_id=run_id):
            return f"{type(event).__name__}({run_id})"
        case (
            ev.ToolCallRequested(call_id=call_id)
            | ev.ToolCallCompleted(call_id=call_id)
            | ev.ToolCallReconciled(call_id=call_id)
        ):
            return f"{type(event).__name__}({call_id})"
        case ev.PermissionRuleSet(tool=tool, decision=decision):
            return f"PermissionRuleSet({tool}={decision})"
        case ev.TodosWritten(revision=revision):
            return f"TodosWritten(rev {revision})"
        case _:
            return type(event).__name__


def get_weather(city: str) -> dict[str, Any]:
    """The demo's only real tool: a forecast that never changes."""
    return {"city": city, "forecast": "sunny", "celsius": 18}


# --- the steps --------------------------------------------------------------------


async def turn_with_tool_call(demo: Demo, writer: ThreadWriter) -> None:
    """Step 1: one turn in which the model calls a tool."""
    await demo.step("A turn with a tool call: one atomic record per step")
    await demo.show_version(writer.version, "worker-1 took the lease: the fence")

    run_id = "run-1"
    question = Msg("user", "What's the weather in Paris?")
    record = await writer.append(
        [RunStarted(run_id), MessageAppended(question)], run_id=run_id
    )
    demo.show(record, "the turn's input is durable before the model is called")

    call = ToolUseBlock("call-weather-1", "get_weather", {"city": "Paris"})
    asks = Msg("assistant", [TextBlock("Let me check."), call])
    record = await writer.append(
        [
            MessageAppended(asks),
            ToolCallRequested(call.id, call.name, call.input, run_id=run_id),
        ],
        run_id=run_id,
    )
    demo.show(record, "write-ahead: the tool call is committed BEFORE the tool runs")

    output = get_weather("Paris")
    result = Msg("tool", [ToolResultBlock(call.id, output)])
    record = await writer.append(
        [ToolCallCompleted(call.id, output), MessageAppended(result)], run_id=run_id
    )
    demo.show(record, f"the tool ran: {json.dumps(output)}")

    answer = Msg("assistant", "It's 18 C and sunny in Paris.")
    record = await writer.append(
        [MessageAppended(answer), RunCompleted(run_id)], run_id=run_id
    )
    demo.show(record, "the final reply and the end of the run, together")
    demo.marks["turn 1 done"] = record.version


async def permissions_and_todos(demo: Demo, writer: ThreadWriter) -> None:
    """Step 2: state beyond messages (permissions, tool groups, todos)."""
    await demo.step("Permissions, tool groups and todos are events too")
    record = await writer.append(
        [
            PermissionModeSet("default"),
            PermissionRuleSet("get_weather", "allow"),
            PermissionRuleSet("send_email", "ask"),
            ToolGroupActivated("email"),
        ]
    )
    demo.show(record, "the user allows get_weather and wants to approve emails")

    run_id = "run-2"
    request = Msg("user", "Plan my trip: pack an umbrella, then email Bob.")
    plan = Msg("assistant", "Noted: two todos.")
    todos = [
        {"content": "Pack an umbrella", "status": "pending"},
        {"content": "Email Bob the forecast", "status": "pending"},
    ]
    record = await writer.append(
        [
            RunStarted(run_id),
            MessageAppended(request),
            MessageAppended(plan),
            TodosWritten(todos, revision=1),
            RunCompleted(run_id),
        ],
        run_id=run_id,
    )
    demo.show(record, "a short turn: a whole run in one atomic record")


async def checkpoint(demo: Demo, writer: ThreadWriter) -> None:
    """Step 3: a checkpoint, so loads replay only what came after it."""
    await demo.step("A checkpoint")
    version = await writer.checkpoint()
    demo.say(
        f"  checkpoint at v{version}: message bodies go to content-addressed "
        "chunks; a load reads it plus only the records after it"
    )


async def crash_mid_tool(demo: Demo) -> None:
    """Step 4: a writer process commits a tool request and is SIGKILLed."""
    await demo.step("A writer PROCESS is killed in the middle of a tool call")
    config = {
        "root": demo.root_url,
        "options": demo.storage_options,
        "key": demo.key.model_dump(),
        "holder": "worker-2",
        "lease_ttl": CHILD_LEASE_TTL,
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "journal._demo_child",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    if child.stdin is None or child.stdout is None:
        raise DemoError("could not talk to the writer process")
    child.stdin.write(json.dumps(config).encode())
    await child.stdin.drain()
    child.stdin.close()
    notes = {
        "fence": f"pid {child.pid} (worker-2) took the lease, TTL {CHILD_LEASE_TTL}s",
        "input": "a new run starts",
        "tool_call": "send_email is requested (write-ahead) ...",
    }
    try:
        while True:
            line = await asyncio.wait_for(child.stdout.readline(), _CHILD_TIMEOUT)
            if not line:
                raise DemoError(
                    "the writer process exited early: "
                    + await _stderr_tail(child.stderr)
                )
            message = json.loads(line)
            if message["what"] == "tool_running":
                break
            await demo.show_version(message["version"], notes[message["what"]])
            if message["what"] == "tool_call":
                demo.marks["mid-tool crash"] = message["version"]
        demo.say(
            f"        ... and while the email is being sent: SIGKILL pid {child.pid}"
        )
        child.kill()
        await child.wait()
        demo.say(
            "  the process is gone. Did the email go out? The log cannot know, "
            "and nothing will guess."
        )
    except TimeoutError:
        raise DemoError("the writer process did not answer in time") from None
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


async def _stderr_tail(stream: asyncio.StreamReader | None) -> str:
    if stream is None:
        return "(no output)"
    with contextlib.suppress(TimeoutError):
        data = await asyncio.wait_for(stream.read(), 5)
        lines = data.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"
    return "(no output)"


async def take_over(demo: Demo) -> ThreadWriter:
    """Step 5: a new writer takes over, sees the uncertain call and reconciles it."""
    await demo.step("Takeover: another writer resumes from the last committed record")
    started = time.monotonic()
    writer = await demo.journal.acquire(
        demo.key, holder="worker-3", wait=CHILD_LEASE_TTL * 5
    )
    demo.say(
        f"  worker-3 waited {time.monotonic() - started:.1f}s for the dead "
        "writer's lease to expire, then took it:"
    )
    await demo.show_version(
        writer.version, "its fence marks the unfinished run interrupted, at once"
    )
    pending = list(writer.state.tool_context.pending_calls.values())
    demo.say("  tool calls with unknown outcome (the engine never re-runs them):")
    for call in pending:
        demo.say(
            f"    {call.name} {json.dumps(call.input)}  call {call.call_id}, "
            f"requested at v{call.version} in {call.run_id}"
        )
    demo.say("  the application checks the mail server: the email was NOT sent")
    for call in pending:
        verdict = "not sent: the writer crashed before the email went out"
        record = await writer.append(
            [
                ToolCallReconciled(call.call_id, "not sent", note="outbox checked"),
                MessageAppended(
                    Msg("tool", [ToolResultBlock(call.call_id, verdict, is_error=True)])
                ),
            ]
        )
        demo.show(record, "the verdict is in the log, and the model will see it")
    return writer


async def zombie_is_fenced(demo: Demo, zombie: ThreadWriter) -> None:
    """Step 6: a writer whose lease was taken over cannot append any more."""
    await demo.step("A zombie writer is fenced")
    demo.say(
        "  worker-3 freezes (a long GC pause); its supervisor starts a replacement "
        "with the same holder id, which takes over at once:"
    )
    replacement = await demo.journal.acquire(demo.key, holder="worker-3")
    try:
        await demo.show_version(replacement.version, "the replacement's fence")
        demo.say("  the frozen worker-3 wakes up and appends a message:")
        try:
            await zombie.append([MessageAppended(Msg("assistant", "Where was I?"))])
        except FencedError as exc:
            demo.say(f"    FencedError: {exc}")
        else:
            raise DemoError("the zombie's append was not fenced")
        head = await demo.journal.head(demo.key)
        demo.say(f"  nothing landed: the head is still v{head}")
    finally:
        await zombie.close()
        await replacement.close()


async def time_travel(demo: Demo) -> None:
    """Step 7: rebuild the state as of earlier versions."""
    await demo.step("Time travel: the state rebuilt as of any version")
    head = await demo.journal.head(demo.key)
    moments = [*demo.marks.items(), ("head", head)]
    rows: list[tuple[str, ...]] = []
    for label, version in moments:
        state = await demo.journal.load(demo.key, at_version=version)
        pending = ", ".join(p.name for p in state.tool_context.pending_calls.values())
        last = state.context[-1] if state.context else None
        rows.append(
            (
                f"v{version}",
                label,
                str(len(state.context)),
                state.active_run_id or "-",
                pending or "-",
                f"{last.role}: {_text(last)}" if last else "-",
            )
        )
    _table(
        demo, ("VERSION", "MOMENT", "MESSAGES", "RUN", "PENDING", "LAST MESSAGE"), rows
    )


def _text(msg: Msg) -> str:
    if isinstance(msg.content, str):
        text = msg.content
    else:
        parts = []
        for block in msg.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                parts.append(f"[tool_use {block.name}]")
            elif isinstance(block, ToolResultBlock):
                parts.append(f"[tool_result] {block.output}")
        text = " ".join(parts)
    return text if len(text) <= 48 else text[:45] + "..."


def _table(demo: Demo, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        demo.say("  " + "  ".join(cells).rstrip())


async def verify(demo: Demo) -> bool:
    """Step 8: verify the whole thread."""
    await demo.step("verify")
    report = await demo.journal.verify(demo.key)
    status = "ok" if report.ok else "PROBLEMS FOUND"
    demo.say(
        f"  {status}: {report.records} records, hash chain intact, epochs "
        f"increasing, {report.checkpoints} checkpoint(s) equal to a fresh replay"
    )
    for finding in [*report.problems, *report.warnings]:
        demo.say(f"    {finding}")
    return report.ok


# --- the whole tour ---------------------------------------------------------------


async def run_demo(
    journal: Journal,
    *,
    root_url: str,
    storage_options: dict[str, Any] | None = None,
    cli_flags: Sequence[str] = (),
    out: TextIO | None = None,
    pace: float = 0.0,
) -> int:
    """Run the demo on ``journal`` and narrate it.

    Args:
        journal: The journal to write the demo thread to.
        root_url: Its root, which the crashing writer process opens too.
        storage_options: The root's storage options (JSON-compatible).
        cli_flags: Flags to repeat in the printed inspection commands (``--root``).
        out: Where to print (default ``sys.stdout``).
        pace: Seconds to pause after each step title.

    Returns:
        0 when the final verify is clean, else 1.

    Raises:
        DemoError: A step could not run.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    key = ThreadKey(
        DEMO_AGENT,
        f"demo-{stamp}-{uuid.uuid4().hex[:6]}",
        DEMO_USER,
        namespace=DEMO_NAMESPACE,
    )
    demo = Demo(
        journal,
        key,
        root_url,
        dict(storage_options or {}),
        out if out is not None else sys.stdout,
        pace,
    )
    started = time.monotonic()
    demo.say("agent-journal demo: an agent's state as an append-only log of events")
    demo.say(f"  root:   {root_url}")
    demo.say(f"  thread: {key}")

    async with journal.writer(key, holder="worker-1") as writer:
        await turn_with_tool_call(demo, writer)
        await permissions_and_todos(demo, writer)
        await checkpoint(demo, writer)
    await crash_mid_tool(demo)
    survivor = await take_over(demo)
    await zombie_is_fenced(demo, survivor)
    await time_travel(demo)
    ok = await verify(demo)

    demo.say()
    demo.say(f"Done in {time.monotonic() - started:.1f}s. Inspect it:")
    flags = [*cli_flags]
    thread = [
        "--namespace", DEMO_NAMESPACE, "--agent", DEMO_AGENT,
        "--user", DEMO_USER, "--session", key.session_id,
    ]  # fmt: skip
    turn1 = demo.marks.get("turn 1 done", 1)
    for command in (
        ["ls", "--namespace", DEMO_NAMESPACE],
        ["log", *thread],
        ["state", *thread, "--at", str(turn1)],
        ["diff", *thread, "--from", str(turn1)],
        ["verify", "--namespace", DEMO_NAMESPACE],
    ):
        demo.say("  " + shlex.join(["agent-journal", *flags, *command]))
    return 0 if ok else 1
