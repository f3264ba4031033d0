"""``agent-journal demo``: what the journal is for, in about ten seconds.

Read this module as documentation. It runs an :class:`~journal.Agent` the way a
service would, in the stateless-engine pattern: the execution configuration
(:class:`DemoConfig`: the journal opened from its URL and the tools; and the model
script factories, one script per request) is built once; every request gets a fresh
``Agent`` and a fresh ``RuntimeContext``; a session continues only through its
identity (user, session, thread) and the journal.

1. Two users, alice and bob, each ask for the weather: the model calls a tool, and
   every step is committed before the next one happens (write-ahead).
2. alice's second turn, on a fresh Agent, continues her session from the journal;
   the application records permissions, a tool group and todos.
3. A checkpoint.
4. A crash in the middle of a tool: a child process running the Agent is SIGKILLed
   while ``send_email`` runs.
5. Recovery on a new Agent: the run shows as interrupted, the call with an unknown
   outcome is listed, a new call is refused until the application reconciles it,
   then the session goes on.
6. A zombie worker, whose lease was taken over while it was frozen mid-tool, is
   fenced by epoch: its result never lands.
7. ``clear_context``: the messages go, everything else stays, the log keeps it all.
8. Time travel: alice's state as of earlier versions.
9. ``verify``: checksums, hash chain, epochs and checkpoints, for every thread.

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
    Agent,
    FencedError,
    ModelResponse,
    Msg,
    RuntimeContext,
    ScriptedModel,
    TextBlock,
    ThreadKey,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    UncertainToolCallsError,
    tool,
)
from journal import events as ev
from journal.cli.describe import thread_label
from projections import HistoryProjection, fold

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from journal import Journal, Record, ScriptItem
    from journal.runtime import Tool
    from projections import AgentState

__all__ = [
    "DEMO_AGENT",
    "DEMO_NAMESPACE",
    "DEMO_USER",
    "DEMO_USERS",
    "EMAIL_TO_BOB",
    "STEPS",
    "DemoConfig",
    "DemoError",
    "Outbox",
    "email_script",
    "get_weather",
    "run_demo",
    "send_email",
]

DEMO_NAMESPACE = "demo"
DEMO_AGENT = "assistant"
DEMO_USER = "alice"
"""The user whose session the demo follows from start to end."""
DEMO_USERS = ("alice", "bob")

CHILD_LEASE_TTL = 1.5
"""The crashing process's lease TTL: how long the takeover has to wait."""

STEPS = 9
_CHILD_TIMEOUT = 60.0


class DemoError(Exception):
    """The demo could not run a step (e.g. the child process failed to start)."""


# --- the application: two tools and an outbox -----------------------------------------

FORECASTS = {"Paris": ("sunny", 18), "Oslo": ("rain", 9)}
EMAIL_TO_BOB = ("bob@example.com", "Paris: 18 C and sunny")
"""The email alice asks for in the turn that crashes: recipient and subject."""


def get_weather(city: str) -> dict[str, Any]:
    """Today's forecast for a city (read-only: safe to run again).

    Args:
        city: The city's name, e.g. "Paris".
    """
    sky, celsius = FORECASTS.get(city, ("cloudy", 15))
    return {"city": city, "sky": sky, "celsius": celsius}


class Outbox:
    """The application's mail service, handed to tools through the RuntimeContext.

    A context attribute is runtime-only: never persisted, never sent to a model.

    Attributes:
        sent: ``(to, subject)`` of every email that went out.
    """

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def deliver(self, to: str, subject: str) -> str:
        """Send one email; returns a receipt."""
        self.sent.append((to, subject))
        return f"sent to {to}"


async def send_email(to: str, subject: str, ctx: RuntimeContext) -> str:
    """Send an email (a side effect: once it is out, it cannot be taken back).

    Args:
        to: The recipient's address.
        subject: The subject line.
        ctx: The request's context, injected by the runtime (not in the schema).
    """
    outbox = ctx.get(Outbox)
    if outbox is None:
        raise RuntimeError("no Outbox on the request's context")
    return await outbox.deliver(to, subject)


class _FrozenOutbox(Outbox):
    """Delivers only once thawed: a worker frozen in the middle of a tool."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.thaw = asyncio.Event()

    async def deliver(self, to: str, subject: str) -> str:
        self.entered.set()
        await self.thaw.wait()
        return await super().deliver(to, subject)


# --- the model: one script per request ------------------------------------------------


def _tool_outputs(messages: list[Msg]) -> list[ToolResultBlock]:
    return [
        block
        for msg in messages
        if isinstance(msg.content, list)
        for block in msg.content
        if isinstance(block, ToolResultBlock)
    ]


def _forecast(messages: list[Msg]) -> dict[str, Any] | None:
    for block in reversed(_tool_outputs(messages)):
        if isinstance(block.output, dict) and "sky" in block.output:
            return block.output
    return None


def _report_forecast(messages: list[Msg]) -> str:
    found = _forecast(messages)
    if found is None:
        return "I could not get a forecast."
    return f"{found['celsius']} C and {found['sky']} in {found['city']}."


def weather_script(city: str, call_id: str) -> list[ScriptItem]:
    """Ask for the forecast, then answer from the tool's result."""
    call = ToolCall("get_weather", {"city": city}, id=call_id)
    return [ModelResponse("Let me check.", [call]), _report_forecast]


def umbrella_script() -> list[ScriptItem]:
    """Answer from a forecast found in the conversation so far (earlier turns)."""

    def answer(messages: list[Msg]) -> str:
        found = _forecast(messages)
        if found is None:
            return "Which city? I have no forecast in this conversation."
        verdict = "Yes" if found["sky"] == "rain" else "No"
        return (
            f"{verdict}: it is {found['sky']} in {found['city']}, as I found earlier."
        )

    return [answer]


def email_script(to: str, subject: str, call_id: str) -> list[ScriptItem]:
    """Send one email, then confirm."""
    call = ToolCall("send_email", {"to": to, "subject": subject}, id=call_id)
    return [ModelResponse("Sending it now.", [call]), "Done: the email is sent."]


def retry_script(to: str, subject: str, call_id: str) -> list[ScriptItem]:
    """Read the reconciled result; if the email did not go out, send it again."""

    def decide(messages: list[Msg]) -> str | ModelResponse:
        last = _tool_outputs(messages)[-1]
        if not last.is_error:
            return "It went out."
        call = ToolCall("send_email", {"to": to, "subject": subject}, id=call_id)
        return ModelResponse("It did not go out; sending it again.", [call])

    return [decide, "Sent this time."]


# --- the execution configuration ------------------------------------------------------

TOOLS: tuple[Tool, ...] = (tool(get_weather), tool(send_email))


@dataclass(frozen=True)
class DemoConfig:
    """The execution configuration, built once and shared by every request.

    Attributes:
        journal: Where sessions live: the only state that outlives a request.
        tools: The tools every Agent gets.
        lease_ttl: The lease TTL of each Agent (renewed while an operation runs).
        lease_wait: How long an Agent waits for another holder's lease (a
            crashed process's lease expires after its TTL).
    """

    journal: Journal
    tools: tuple[Tool, ...] = TOOLS
    lease_ttl: float = 30.0
    lease_wait: float = 10.0

    def agent(self, model: ScriptedModel) -> Agent:
        """A fresh Agent for one request: configuration only, no session state."""
        return Agent(
            "Assistant",
            DEMO_AGENT,
            model,
            tools=self.tools,
            journal=self.journal,
            lease_ttl=self.lease_ttl,
            lease_wait=self.lease_wait,
            namespace=DEMO_NAMESPACE,
        )


# --- narration ------------------------------------------------------------------------


@dataclass
class Demo:
    """What every step needs: the configuration, the session, somewhere to print.

    Attributes:
        config: The execution configuration.
        session_id: This run's session id (each user has a thread in it).
        root_url: The root, for the child process that the demo crashes.
        storage_options: The root's storage options, for that process too.
        out: Where the narration goes.
        pace: Seconds to pause after each step title (0 when not on a terminal).
        marks: Versions of alice's thread worth travelling back to.
    """

    config: DemoConfig
    session_id: str
    root_url: str
    storage_options: dict[str, Any]
    out: TextIO
    pace: float = 0.0
    marks: dict[str, int] = field(default_factory=dict)
    steps_done: int = field(default=0, init=False)
    explained: set[str] = field(default_factory=set, init=False)

    @property
    def journal(self) -> Journal:
        """The journal (for reading: the log, states, verify)."""
        return self.config.journal

    def key(self, user: str = DEMO_USER) -> ThreadKey:
        """A user's thread in this run's session."""
        return ThreadKey(DEMO_AGENT, self.session_id, user, namespace=DEMO_NAMESPACE)

    def ctx(self, user: str = DEMO_USER, run_id: str | None = None) -> RuntimeContext:
        """A fresh request context: just the identity of the session to continue."""
        return RuntimeContext(user_id=user, session_id=self.session_id, run_id=run_id)

    def say(self, text: str = "") -> None:
        """Print one line of narration."""
        print(text, file=self.out, flush=True)

    async def step(self, title: str) -> None:
        """Print the next step's title."""
        self.steps_done += 1
        self.say()
        self.say(f"[{self.steps_done}/{STEPS}] {title}")
        if self.pace:
            await asyncio.sleep(self.pace)

    def show(self, record: Record, note: str | None = None) -> None:
        """Print a committed record: its version, its events, and why.

        Without ``note``, a record of a kind already explained gets no why line.
        """
        events = " + ".join(_brief(e) for e in record.events)
        self.say(f"  v{record.version:<3} {events}")
        if note is None:
            kind, note = _why(record)
            if kind and kind in self.explained:
                return
            self.explained.add(kind)
        if note:
            self.say(f"        {note}")

    async def show_since(
        self,
        version: int,
        user: str = DEMO_USER,
        *,
        stop: int | None = None,
        notes: dict[type[object], str] | None = None,
    ) -> int:
        """Print the records of a user's thread after ``version``; return the head.

        Args:
            version: Print from the next version on.
            user: Whose thread.
            stop: Print up to (not including) this version.
            notes: A why for the records holding an event of a given type.
        """
        head = version
        notes = notes or {}
        async for record in self.journal.records(self.key(user), version + 1, stop):
            found = [notes[type(e)] for e in record.events if type(e) in notes]
            self.show(record, found[0] if found else None)
            head = record.version
        return head


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
        case ev.RunInterrupted(run_id=run_id, by=by, reason=reason):
            return f"RunInterrupted({run_id}, by={by}, reason={reason})"
        case ev.RunStarted(run_id=run_id) | ev.RunCompleted(run_id=run_id):
            return f"{type(event).__name__}({run_id})"
        case ev.ToolCallCompleted(call_id=call_id, message_id=message_id):
            as_message = ", tool_result message" if message_id is not None else ""
            return f"ToolCallCompleted({call_id}{as_message})"
        case (
            ev.ToolCallRequested(call_id=call_id)
            | ev.ToolCallReconciled(call_id=call_id)
        ):
            return f"{type(event).__name__}({call_id})"
        case ev.PermissionRuleSet(tool=name, decision=decision):
            return f"PermissionRuleSet({name}={decision})"
        case ev.ToolGroupActivated(group=group):
            return f"ToolGroupActivated({group})"
        case ev.TodosWritten(revision=revision):
            return f"TodosWritten(rev {revision})"
        case _:
            return type(event).__name__


def _why(record: Record) -> tuple[str, str]:
    """The kind of a record the runtime commits, and a one-line why."""
    kinds = {type(e) for e in record.events}
    if ev.RunInterrupted in kinds and ev.LeaseAcquired in kinds:
        return (
            "recovery",
            "the new holder's fence marks the unfinished run interrupted, at once",
        )
    if ev.ThreadCreated in kinds:
        return "created", "a new thread; the fence travels in its first record"
    if kinds == {ev.LeaseAcquired}:
        return "fence", "the fence: a fresh Agent holds the lease for one operation"
    if ev.RunStarted in kinds and ev.LeaseAcquired in kinds:
        return "input", "a new holder's fence, with the turn's input, before the model"
    if ev.RunStarted in kinds:
        return "input", "the turn's input is durable before the model is called"
    if ev.ToolCallRequested in kinds:
        return "request", "write-ahead: the call is committed BEFORE the tool runs"
    if ev.ToolCallCompleted in kinds:
        done = next(e for e in record.events if isinstance(e, ev.ToolCallCompleted))
        return "", f"the tool ran: {json.dumps(done.output)}"
    if ev.RunCompleted in kinds:
        return "reply", "the final reply and the end of the run, together"
    if ev.ToolCallReconciled in kinds:
        return "", "the application's verdict, as a tool result the model will see"
    if ev.ContextCleared in kinds:
        return "", "one event: the records before it stay as they are"
    return "", ""


def _text(msg: Msg, width: int = 48) -> str:
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
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(demo: Demo, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        demo.say("  " + "  ".join(cells).rstrip())


# --- the steps ------------------------------------------------------------------------


async def _turn(
    demo: Demo,
    user: str,
    run_id: str,
    text: str,
    script: list[ScriptItem],
) -> tuple[Msg, ScriptedModel]:
    """One request: a fresh Agent and a fresh context, then ``Agent.call``."""
    model = ScriptedModel(script)
    ctx = demo.ctx(user, run_id)
    async with demo.config.agent(model) as agent:
        reply = await agent.call(text, ctx)
    return reply, model


async def two_users(demo: Demo) -> None:
    """Step 1: alice and bob each run a turn with a tool call, in parallel."""
    await demo.step("Two users, one tool call each, through Agent.call")
    demo.say("  alice: What's the weather in Paris?   bob: What's the weather in Oslo?")
    demo.say("  (two requests at once, each on a fresh Agent: threads run in parallel)")
    (alice, _), (bob, _) = await asyncio.gather(
        _turn(
            demo,
            "alice",
            "alice-1",
            "What's the weather in Paris?",
            weather_script("Paris", "call-weather-a1"),
        ),
        _turn(
            demo,
            "bob",
            "bob-1",
            "What's the weather in Oslo?",
            weather_script("Oslo", "call-weather-b1"),
        ),
    )
    demo.say("  alice's thread:")
    demo.marks["alice's turn 1"] = await demo.show_since(0, "alice")
    demo.say(f"  -> alice gets: {alice.text}")
    demo.say("  bob's thread, the same shape in a log of its own:")
    await demo.show_since(0, "bob")
    demo.say(f"  -> bob gets: {bob.text}")
    demo.say("  two threads, two logs; neither context holds the other's messages:")
    rows = []
    for user in DEMO_USERS:
        state = await demo.journal.load(demo.key(user))
        cities = sorted({f["city"] for f in _forecasts(state)})
        rows.append((demo.key(user).prefix, str(len(state.context)), ", ".join(cities)))
    _table(demo, ("THREAD", "MESSAGES", "FORECASTS"), rows)


def _forecasts(state: AgentState) -> list[dict[str, Any]]:
    return [
        b.output
        for b in _tool_outputs(state.context)
        if isinstance(b.output, dict) and "city" in b.output
    ]


async def second_turn(demo: Demo) -> None:
    """Step 2: a new Agent continues alice's session; the app records its settings."""
    await demo.step("alice's second turn, on a FRESH Agent: the journal is the session")
    head = await demo.journal.head(demo.key())
    reply, model = await _turn(
        demo, "alice", "alice-2", "Should I pack an umbrella?", umbrella_script()
    )
    head = await demo.show_since(head)
    roles = ", ".join(m.role for m in model.calls[0])
    demo.say(f"  the model saw {len(model.calls[0])} messages: {roles}")
    demo.say(f"  -> alice gets: {reply.text}")
    demo.marks["alice's turn 2"] = head

    def plan_trip(state: AgentState) -> None:
        state.permission_context.rules.update(get_weather="allow", send_email="allow")
        state.tool_context.active_groups.append("email")
        state.tasks_context.todos = [
            {"content": "Pack sunglasses", "status": "pending"},
            {"content": "Email Bob the forecast", "status": "pending"},
        ]
        state.tasks_context.revision = 1

    demo.say("  the application records alice's settings (update_agent_state):")
    async with demo.config.agent(ScriptedModel([])) as agent:
        await agent.update_agent_state(demo.ctx(), "trip planning", plan_trip)
    await demo.show_since(
        head,
        notes={
            ev.PermissionRuleSet: (
                "a state change is committed as the specific events it amounts to"
            )
        },
    )


async def checkpoint(demo: Demo) -> None:
    """Step 3: a checkpoint, so loads replay only what came after it."""
    await demo.step("A checkpoint")
    version = await demo.journal.checkpoint(demo.key())
    demo.say(
        f"  checkpoint of alice's thread at v{version}: message bodies go to "
        "content-addressed chunks; a load reads it plus only the records after it"
    )


async def crash_mid_tool(demo: Demo) -> None:
    """Step 4: a process runs alice's next turn and is SIGKILLed mid-tool."""
    await demo.step("A crash in the middle of a tool: the Agent's PROCESS is killed")
    demo.say(
        "  alice: Email Bob the forecast.  (run by a child process: an Agent with "
        f"a {CHILD_LEASE_TTL}s lease)"
    )
    head = await demo.journal.head(demo.key())
    config = {
        "root": demo.root_url,
        "options": demo.storage_options,
        "session_id": demo.session_id,
        "user_id": DEMO_USER,
        "lease_ttl": CHILD_LEASE_TTL,
        "run_id": "alice-3",
        "call_id": "call-email-1",
        "message": "Email Bob the forecast.",
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "journal.cli._demo_child",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    if child.stdin is None or child.stdout is None:
        raise DemoError("could not talk to the child process")
    child.stdin.write(json.dumps(config).encode())
    await child.stdin.drain()
    child.stdin.close()
    try:
        while True:
            line = await asyncio.wait_for(child.stdout.readline(), _CHILD_TIMEOUT)
            if not line:
                raise DemoError(
                    "the child process exited early: "
                    + await _stderr_tail(child.stderr)
                )
            message = json.loads(line)
            if message["what"] == "sending":
                break
            head = await demo.show_since(head, stop=message["version"] + 1)
        # The tool is running: its request is already in the log.
        head = await demo.show_since(
            head,
            notes={
                ev.ToolCallRequested: "write-ahead: durable BEFORE send_email started"
            },
        )
        demo.marks["mid-tool crash"] = head
        demo.say(
            f"  send_email is talking to the mail server in pid {child.pid} ... SIGKILL"
        )
        child.kill()
        await child.wait()
        demo.say(
            "  the process is gone. Did the email go out? The log cannot know, "
            "and nothing will guess."
        )
    except TimeoutError:
        raise DemoError("the child process did not answer in time") from None
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


async def recover(demo: Demo) -> None:
    """Step 5: a new Agent recovers the thread, reconciles, and carries on."""
    await demo.step("Recovery on a new Agent: interrupted, uncertain, reconciled")
    head = await demo.journal.head(demo.key())
    ctx = demo.ctx()
    model = ScriptedModel(retry_script(*EMAIL_TO_BOB, call_id="call-email-2"))
    started = time.monotonic()
    # Recovery needs the dead process's lease: the Agent waits for it to expire.
    async with demo.config.agent(model) as agent:
        pending = await agent.pending_tool_calls(ctx)
        demo.say(
            f"  pending_tool_calls waited {time.monotonic() - started:.1f}s for the "
            "dead process's lease to expire, then took it:"
        )
        head = await demo.show_since(head)
        demo.marks["recovered"] = head
        state = await agent.get_agent_state(ctx)
        demo.say(
            f"  state: shutdown_interrupted={state.shutdown_interrupted}, "
            f"active run {state.active_run_id}; the uncertain call (never re-run):"
        )
        for call in pending:
            demo.say(f"    {call.call_id}: {call.name} {json.dumps(call.input)}")

        demo.say("  alice: Did my email go out?")
        try:
            await agent.call("Did my email go out?", demo.ctx(run_id="alice-4"))
        except UncertainToolCallsError as exc:
            demo.say(f"    UncertainToolCallsError: {exc}")
        else:
            raise DemoError("a call on a thread with an uncertain call was not refused")
        if await demo.journal.head(demo.key("alice")) != head:
            raise DemoError("the refused call committed something")
        demo.say(
            "    the refused call committed nothing: no fence, no RunStarted, no "
            f"input, and the model was called {len(model.calls)} times"
        )

        demo.say("  the application checks its outbox: no such email went out")
        verdicts: dict[str, str | ToolResultBlock] = {
            call.call_id: ToolResultBlock(
                call.call_id, "not sent: the outbox has no such email", is_error=True
            )
            for call in pending
        }
        await agent.reconcile_tool_calls(ctx, verdicts, "outbox checked")
        head = await demo.show_since(head)
        demo.marks["reconciled"] = head

        demo.say("  alice: Did my email go out?  (again, now that it is reconciled)")
        outbox = Outbox()
        call_ctx = demo.ctx(run_id="alice-4")
        call_ctx.put(Outbox, outbox)
        reply = await agent.call("Did my email go out?", call_ctx)
        head = await demo.show_since(
            head,
            notes={
                ev.ToolCallRequested: (
                    "a NEW call: the model's decision, seeing the verdict "
                    "(nothing is ever replayed)"
                )
            },
        )
        demo.say(
            f"  -> alice gets: {reply.text}  (the model chose to send it again, as a "
            "new call; the outbox now holds "
            f"{len(outbox.sent)} email)"
        )


async def zombie_is_fenced(demo: Demo) -> None:
    """Step 6: a worker frozen mid-tool is taken over; its result never lands."""
    await demo.step("A zombie worker is fenced by epoch")
    key = demo.key("bob")
    head = await demo.journal.head(key)
    demo.say("  bob: Email alice that Oslo is rainy.  (on worker Z, a fresh Agent)")
    outbox = _FrozenOutbox()
    ctx = demo.ctx("bob", "bob-2")
    ctx.put(Outbox, outbox)
    script = email_script("alice@example.com", "Oslo: rain", "call-email-b1")
    zombie = demo.config.agent(ScriptedModel(script))
    call = asyncio.create_task(zombie.call("Email alice that Oslo is rainy.", ctx))
    try:
        await asyncio.wait_for(outbox.entered.wait(), _CHILD_TIMEOUT)
        head = await demo.show_since(head, "bob")
        demo.say("  worker Z freezes inside send_email (a long GC pause).")
        demo.say(
            "  Its supervisor restarts it under the same holder id, which may take "
            "over its own lease at once:"
        )
        async with demo.journal.writer(key, holder=zombie.holder):
            head = await demo.show_since(
                head,
                "bob",
                notes={
                    ev.LeaseAcquired: (
                        "the restart's fence, at a higher epoch; bob-2 is marked "
                        "interrupted"
                    )
                },
            )
        demo.say("  worker Z wakes up: the email goes out, and it commits the result:")
        outbox.thaw.set()
        try:
            await call
        except FencedError as exc:
            demo.say(f"    FencedError: {exc}")
        else:
            raise DemoError("the zombie's commit was not fenced")
    finally:
        if not call.done():
            call.cancel()
        with contextlib.suppress(BaseException):
            await call
        await zombie.close()
    demo.say(
        f"  nothing landed: bob's head is still v{await demo.journal.head(key)}; "
        "the email is out, but the log can only call it uncertain"
    )
    async with demo.config.agent(ScriptedModel([])) as agent:
        pending = await agent.pending_tool_calls(demo.ctx("bob"))
        sent = {to for to, _ in outbox.sent}
        demo.say(
            f"  the application checks its outbox: {', '.join(sorted(sent))} got it"
        )
        verdicts: dict[str, str | ToolResultBlock] = {
            p.call_id: (
                f"sent to {p.input['to']} (confirmed by the outbox)"
                if p.input["to"] in sent
                else ToolResultBlock(p.call_id, "not sent", is_error=True)
            )
            for p in pending
        }
        await agent.reconcile_tool_calls(demo.ctx("bob"), verdicts, "outbox checked")
    await demo.show_since(
        head,
        "bob",
        notes={ev.ToolCallReconciled: "this time the verdict is: sent"},
    )


async def clear_context(demo: Demo) -> None:
    """Step 7: clear alice's context; the rest of the state and the log stay."""
    await demo.step("clear_context: the messages go, the rest stays, the log keeps all")
    key = demo.key()
    head = await demo.journal.head(key)
    before = await demo.journal.load(key)
    demo.marks["before clear"] = head
    async with demo.config.agent(ScriptedModel([])) as agent:
        after = await agent.clear_context(demo.ctx(), reason="alice starts over")
    await demo.show_since(head)
    history = fold(
        HistoryProjection(), [], [r async for r in demo.journal.records(key)]
    )
    rows = [
        ("messages in context", len(before.context), len(after.context)),
        (
            "permission rules",
            len(before.permission_context.rules),
            len(after.permission_context.rules),
        ),
        (
            "active tool groups",
            len(before.tool_context.active_groups),
            len(after.tool_context.active_groups),
        ),
        ("todos", len(before.tasks_context.todos), len(after.tasks_context.todos)),
    ]
    _table(
        demo,
        ("", "BEFORE", "AFTER"),
        [(label, str(b), str(a)) for label, b, a in rows],
    )
    demo.say(
        f"  the log's history still holds all {len(history)} messages "
        f"({sum(1 for h in history if h.cleared_at)} marked cleared)"
    )


async def time_travel(demo: Demo) -> None:
    """Step 8: rebuild alice's state as of earlier versions."""
    await demo.step("Time travel: alice's state rebuilt as of any version")
    key = demo.key()
    head = await demo.journal.head(key)
    rows: list[tuple[str, ...]] = []
    for label, version in [*demo.marks.items(), ("head", head)]:
        state = await demo.journal.load(key, at_version=version)
        pending = ", ".join(p.name for p in state.tool_context.pending_calls.values())
        last = state.context[-1] if state.context else None
        rows.append(
            (
                f"v{version}",
                label,
                str(len(state.context)),
                state.active_run_id or "-",
                "yes" if state.shutdown_interrupted else "-",
                pending or "-",
                f"{last.role}: {_text(last, 40)}" if last else "-",
            )
        )
    headers = (
        "VERSION", "MOMENT", "MESSAGES", "RUN", "INTERRUPTED", "PENDING",
        "LAST MESSAGE",
    )  # fmt: skip
    _table(demo, headers, rows)


async def verify(demo: Demo) -> bool:
    """Step 9: verify every thread the demo wrote."""
    await demo.step("verify: every thread of this run")
    rows: list[tuple[str, ...]] = []
    findings: list[str] = []
    async for key in demo.journal.threads(
        DEMO_NAMESPACE, DEMO_AGENT, session_id=demo.session_id
    ):
        report = await demo.journal.verify(key)
        status = "ok" if report.ok else "PROBLEMS FOUND"
        rows.append((key.prefix, str(report.records), str(report.checkpoints), status))
        findings += [
            f"{key.user_id}: {f}" for f in [*report.problems, *report.warnings]
        ]
    _table(demo, ("THREAD", "RECORDS", "CHECKPOINTS", "VERIFY"), rows)
    for finding in findings:
        demo.say(f"    {finding}")
    ok = bool(rows) and all(row[-1] == "ok" for row in rows)
    if ok:
        demo.say(
            "  checksums, hash chains, contiguous versions, increasing epochs, and "
            "each checkpoint equal to a fresh replay"
        )
    return ok


# --- the whole tour -------------------------------------------------------------------


async def _lease_gone(journal: Journal, key: ThreadKey, limit: float = 30.0) -> None:
    from journal.cli.commands.leases import read_lease_view

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        lease = await read_lease_view(journal, key)
        if lease is None or not lease.live:
            return
        await asyncio.sleep(0.1)


async def run_demo(
    journal: Journal,
    *,
    root_url: str,
    storage_options: dict[str, Any] | None = None,
    cli_flags: Sequence[str] = (),
    out: TextIO | None = None,
    pace: float = 0.0,
    incident: bool = False,
) -> int:
    """Run the demo on ``journal`` and narrate it.

    Args:
        journal: The journal to write the demo threads to.
        root_url: Its root, which the crashing child process opens too.
        storage_options: The root's storage options (JSON-compatible).
        cli_flags: Flags to repeat in the printed inspection commands (``--root``).
        out: Where to print (default ``sys.stdout``).
        pace: Seconds to pause after each step title.
        incident: Stop after the crash (step 4), leaving alice's interrupted run
            and its uncertain tool call for an operator (docs/CLI.md).

    Returns:
        0 when the final verify is clean (with ``incident``: 0), else 1.

    Raises:
        DemoError: A step could not run.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    demo = Demo(
        DemoConfig(journal),
        f"demo-{stamp}-{uuid.uuid4().hex[:6]}",
        root_url,
        dict(storage_options or {}),
        out if out is not None else sys.stdout,
        pace,
    )
    started = time.monotonic()
    demo.say("agent-journal demo: an Agent whose state is an append-only log of events")
    demo.say(f"  root:    {root_url}")
    demo.say(f"  session: {demo.session_id} (users: {', '.join(DEMO_USERS)})")

    await two_users(demo)
    await second_turn(demo)
    await checkpoint(demo)
    await crash_mid_tool(demo)
    flags = [*cli_flags]
    if incident:
        alice = thread_label(demo.key(DEMO_USER))
        # Leave the thread as an operator finds it later: the dead process's
        # short lease run out, so nothing looks like a live writer.
        await _lease_gone(demo.journal, demo.key(DEMO_USER))
        demo.say()
        demo.say(
            f"Stopped after the crash, in {time.monotonic() - started:.1f}s: "
            f"{DEMO_USER}'s run alice-3 is unfinished and its send_email call "
            "uncertain. Investigate it (docs/CLI.md):"
        )
        for command in (
            ["ls", "--attention"],
            ["runs", alice],
            ["log", alice, "--run", "alice-3"],
            ["recover", alice],
        ):
            demo.say("  " + shlex.join(["agent-journal", *flags, *command]))
        return 0
    await recover(demo)
    await zombie_is_fenced(demo)
    await clear_context(demo)
    await time_travel(demo)
    ok = await verify(demo)

    demo.say()
    demo.say(f"Done in {time.monotonic() - started:.1f}s. Inspect it:")
    alice = thread_label(demo.key(DEMO_USER))
    turn1 = demo.marks.get("alice's turn 1", 1)
    for command in (
        ["ls", "--namespace", DEMO_NAMESPACE],
        ["log", alice],
        ["runs", alice],
        ["state", alice, "--at", str(turn1)],
        ["diff", alice, "--from", str(turn1)],
        ["log", thread_label(demo.key("bob"))],
        ["verify", "--namespace", DEMO_NAMESPACE],
    ):
        demo.say("  " + shlex.join(["agent-journal", *flags, *command]))
    return 0 if ok else 1
