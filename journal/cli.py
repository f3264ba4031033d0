"""The ``agent-journal`` command line (also ``python -m journal``).

Replay and audit tooling for operators, and the demo::

    agent-journal demo
    agent-journal ls [--namespace N] [--agent A] [--user U] [--session S]
    agent-journal log --agent A --session S [--user U] [--thread T] [--namespace N]
    agent-journal state ... [--at N]
    agent-journal diff ... [--from N] [--to M]
    agent-journal verify [thread flags]
    agent-journal checkpoint ...
    agent-journal export ... --format jsonl [--output FILE]
    agent-journal recover ...
    agent-journal import --agent A --session S [--user U] [--thread T] [--from URL]

The journal root comes from ``--root`` (any URL ``Journal.open`` takes), else the
environment variable :data:`ROOT_ENV`, else :data:`DEFAULT_ROOT`. Storage options
(for S3: ``endpoint_url``, ``key``, ``secret``, ...) come from the JSON object in
:data:`STORAGE_OPTIONS_ENV` and from ``--option key=value`` (a string) or
``--option key:=JSON`` (a typed value); a dotted key nests
(``client_kwargs.region_name=...``). s3fs also reads the usual ``AWS_*`` variables.

Reading commands never take the lease and never write. ``checkpoint``, ``recover`` and
``import`` take the lease briefly, like any writer.

Exit status: 0 on success; 1 when ``verify`` finds a problem, ``import`` refuses, or
the journal reports an error (one line on stderr, no traceback); 2 on bad usage,
including invalid ids. This module is the only place that starts an event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import msgspec

from journal import codec
from journal import events as ev
from journal.engine import Finding, Journal, VerifyReport
from journal.engine.log import ThreadLog
from journal.errors import InvalidKeyError, JournalError, VersionConflictError
from journal.keys import ThreadKey
from projections.agent_state import AgentState, decode_state, encode_state
from projections.audit import RunEntry, RunLedger, ToolCallEntry
from projections.base import fold

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from stores.state.base import AgentStateStore

__all__ = [
    "DEFAULT_ROOT",
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_USAGE",
    "ROOT_ENV",
    "STORAGE_OPTIONS_ENV",
    "main",
]

ROOT_ENV = "AGENT_JOURNAL_HOME"
"""Environment variable naming the journal root when ``--root`` is not given."""

DEFAULT_ROOT = "~/.agent-journal/journal"
"""The journal root when neither ``--root`` nor :data:`ROOT_ENV` is set."""

STORAGE_OPTIONS_ENV = "AGENT_JOURNAL_STORAGE_OPTIONS"
"""Environment variable holding a JSON object of storage options for the root."""

EXIT_OK = 0
EXIT_PROBLEM = 1
"""verify found a problem, import refused, or the journal reported an error."""
EXIT_USAGE = 2
"""Bad usage: unknown options, missing or invalid ids, a bad URL."""

PROG = "agent-journal"
_T = TypeVar("_T")
_R = TypeVar("_R")
_CONCURRENCY = 16
_DETAIL_WIDTH = 90


class CommandError(Exception):
    """A command cannot go on; printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_PROBLEM) -> None:
        super().__init__(message)
        self.code = code


def _usage(message: str) -> CommandError:
    return CommandError(message, EXIT_USAGE)


# --- the parser -------------------------------------------------------------------


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # The same options are accepted before and after the command name. After it
    # they default to SUPPRESS, so they never hide a value given before it.
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--root",
        default=default,
        help=f"journal root: a path, file://, s3://bucket/prefix, ... "
        f"(default: ${ROOT_ENV} or {DEFAULT_ROOT})",
    )
    parser.add_argument(
        "--option",
        dest="options" if top else "options_after",
        action="append",
        default=[] if top else argparse.SUPPRESS,
        metavar="KEY=VALUE",
        help="storage option for the root (repeatable); KEY:=JSON for a typed "
        "value, e.g. fsync:=false; dotted keys nest",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print one JSON document on stdout instead of tables",
    )


def _add_thread_flags(parser: argparse.ArgumentParser, *, required: bool) -> None:
    group = parser.add_argument_group(
        "thread" if required else "filters",
        "the thread's ids"
        if required
        else "optional; with --agent and --session, names one thread",
    )
    group.add_argument("--agent", required=required, help="agent id")
    group.add_argument("--session", required=required, help="session id")
    group.add_argument("--user", help="user id (default: the anonymous user)")
    group.add_argument(
        "--thread", help="thread id (default: main)" if required else "thread id"
    )
    group.add_argument(
        "--namespace",
        help="namespace (default: default)" if required else "namespace",
    )


def _add_lease_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another writer's lease (default: fail at once)",
    )
    parser.add_argument(
        "--holder", help="holder id written in the lease (default: cli-<host>-<pid>)"
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of ``agent-journal``.

    Returns:
        The parser; each command's handler is in the ``handler`` default.
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="An event-sourced journal for AI-agent state: "
        "inspect, verify, export and recover threads.",
    )
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(
        name: str, handler: Callable[..., Awaitable[int]], help_text: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        _add_common(p, top=False)
        p.set_defaults(handler=handler)
        return p

    command(
        "demo",
        _cmd_demo,
        "run a ten-second tour: turns with a tool call, a crash, a takeover, "
        "a zombie writer, time travel and verify",
    )

    p = command("ls", _cmd_ls, "list threads with their head and last activity")
    _add_thread_flags(p, required=False)

    p = command("log", _cmd_log, "show a thread's records and events")
    _add_thread_flags(p, required=True)
    p.add_argument("--from", dest="start", type=_non_negative, metavar="N")
    p.add_argument("--to", dest="stop", type=_non_negative, metavar="M")
    p.add_argument("--tail", type=_non_negative, metavar="K", help="the last K only")

    p = command("state", _cmd_state, "rebuild a thread's state (time travel: --at)")
    _add_thread_flags(p, required=True)
    p.add_argument(
        "--at", type=_non_negative, metavar="N", help="as of version N (default: head)"
    )

    p = command(
        "diff",
        _cmd_diff,
        "what changed in the state between two versions, and the events between",
    )
    _add_thread_flags(p, required=True)
    p.add_argument(
        "--from", dest="start", type=_non_negative, metavar="N", help="default: head-1"
    )
    p.add_argument(
        "--to", dest="stop", type=_non_negative, metavar="M", help="default: head"
    )

    p = command(
        "verify",
        _cmd_verify,
        "check checksums, hash chain, epochs and checkpoints (every thread if no "
        "thread is named); exit 1 on a problem",
    )
    _add_thread_flags(p, required=False)

    p = command("checkpoint", _cmd_checkpoint, "write a checkpoint at the head")
    _add_thread_flags(p, required=True)
    _add_lease_flags(p)

    p = command("export", _cmd_export, "export every record, one JSON line each")
    _add_thread_flags(p, required=True)
    p.add_argument("--format", choices=["jsonl"], default="jsonl")
    p.add_argument("--output", "-o", metavar="FILE", help="default: stdout")

    p = command(
        "recover",
        _cmd_recover,
        "take the lease (an unfinished run is marked interrupted) and report "
        "runs and tool calls whose outcome is unknown; never re-runs a tool",
    )
    _add_thread_flags(p, required=True)
    _add_lease_flags(p)

    p = command(
        "import",
        _cmd_import,
        "turn a snapshot-mode state slot into a new journal thread",
    )
    _add_thread_flags(p, required=True)
    p.add_argument(
        "--from",
        dest="source",
        metavar="URL",
        help="the state store: a directory or file:// (JSON files), redis://..., "
        "sqlite+aiosqlite://..., postgresql+asyncpg://... "
        "(default: the JSON-file store's default root for the agent)",
    )
    p.add_argument("--holder", help="holder id written in the lease")
    return parser


# --- entry point ------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``agent-journal`` with ``argv`` (default: ``sys.argv[1:]``).

    Args:
        argv: The arguments, without the program name.

    Returns:
        The exit status: 0 success, 1 a problem found or an error reported,
        2 bad usage.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's own usage errors and --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: a command is required", file=sys.stderr)
        return EXIT_USAGE
    args.options = [*args.options, *getattr(args, "options_after", [])]
    try:
        return asyncio.run(_run(args))
    except CommandError as exc:
        return _fail(args.command, str(exc), exc.code)
    except InvalidKeyError as exc:
        return _fail(args.command, str(exc), EXIT_USAGE)
    except JournalError as exc:
        return _fail(args.command, str(exc), EXIT_PROBLEM)
    except ImportError as exc:  # a backend's optional dependency is missing
        return _fail(args.command, str(exc), EXIT_PROBLEM)
    except RecursionError:
        # Only data nested deeper than appends allow (written before that check)
        # can get here; say so rather than print a traceback.
        return _fail(
            args.command,
            "a value is nested too deeply to process; run `verify` to find the record",
            EXIT_PROBLEM,
        )
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``); keep Python from complaining at exit.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PROBLEM


def _fail(command: str, message: str, code: int) -> int:
    one_line = " ".join(message.split())
    print(f"{PROG} {command}: error: {one_line}", file=sys.stderr)
    return code


@dataclass(slots=True)
class _Context:
    args: argparse.Namespace
    root: str
    options: dict[str, Any]
    out: TextIO

    @property
    def json(self) -> bool:
        return bool(self.args.json)


async def _run(args: argparse.Namespace) -> int:
    root = resolve_root(args.root)
    options = parse_storage_options(args.options)
    try:
        journal = Journal.open(root, **options)
    except (ValueError, TypeError) as exc:
        raise _usage(f"cannot open the journal root {root!r}: {exc}") from None
    ctx = _Context(args, root, options, sys.stdout)
    handler: Callable[[Journal, _Context], Awaitable[int]] = args.handler
    try:
        return await handler(journal, ctx)
    finally:
        await journal.aclose()


def resolve_root(root: str | None = None) -> str:
    """The journal root URL: ``root``, else ``$AGENT_JOURNAL_HOME``, else the default.

    A plain path has ``~`` expanded; URLs are returned unchanged.
    """
    value = root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    if "://" not in value:
        value = os.path.expanduser(value)
    return value


def parse_storage_options(pairs: Sequence[str]) -> dict[str, Any]:
    """Storage options from :data:`STORAGE_OPTIONS_ENV` and ``--option`` pairs.

    ``key=value`` sets a string, ``key:=json`` a typed value; ``a.b=value`` nests.
    Later pairs win over earlier ones and over the environment.

    Raises:
        CommandError: A pair or the environment variable is malformed (exit 2).
    """
    options: dict[str, Any] = {}
    env = os.environ.get(STORAGE_OPTIONS_ENV, "").strip()
    if env:
        try:
            loaded = json.loads(env)
        except json.JSONDecodeError as exc:
            raise _usage(f"${STORAGE_OPTIONS_ENV} is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise _usage(f"${STORAGE_OPTIONS_ENV} must hold a JSON object")
        options.update(loaded)
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name or name == ":":
            raise _usage(f"--option needs KEY=VALUE or KEY:=JSON, not {pair!r}")
        value: Any = raw
        if name.endswith(":"):
            name = name[:-1]
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise _usage(f"--option {name}:= needs JSON: {exc}") from None
        *parents, leaf = name.split(".")
        target = options
        for part in parents:
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                raise _usage(f"--option {name}: {part!r} is not an object")
            target = nested
        target[leaf] = value
    return options


# --- thread selection -------------------------------------------------------------


def _key(args: argparse.Namespace) -> ThreadKey:
    return ThreadKey(
        args.agent,
        args.session,
        args.user,
        args.thread or "main",
        args.namespace or "default",
    )


def _names_one_thread(args: argparse.Namespace) -> bool:
    return args.agent is not None and args.session is not None


def _check_filters(args: argparse.Namespace) -> None:
    # Validate whatever filter ids were given with ThreadKey's own rules.
    ThreadKey(
        args.agent if args.agent is not None else "x",
        args.session if args.session is not None else "x",
        args.user,
        args.thread if args.thread is not None else "main",
        args.namespace if args.namespace is not None else "default",
    )


async def _select(journal: Journal, args: argparse.Namespace) -> list[ThreadKey]:
    _check_filters(args)
    keys = [
        key
        async for key in journal.threads(
            namespace=args.namespace,
            agent_id=args.agent,
            user_id=args.user if args.user is not None else ...,
            session_id=args.session,
        )
        if args.thread is None or key.thread_id == args.thread
    ]
    return sorted(keys, key=_sort_key)


def _sort_key(key: ThreadKey) -> tuple[str, str, str, str, str]:
    return (
        key.namespace,
        key.agent_id,
        key.user_id or "",
        key.session_id,
        key.thread_id,
    )


async def _existing(journal: Journal, key: ThreadKey, ctx: _Context) -> int:
    head = await journal.head(key)
    if head == 0:
        raise CommandError(f"{key} does not exist under {ctx.root}")
    return head


def thread_label(key: ThreadKey) -> str:
    """``namespace/agent/user/session/thread`` (``~`` for the anonymous user)."""
    user = "~" if key.user_id is None else key.user_id
    return f"{key.namespace}/{key.agent_id}/{user}/{key.session_id}/{key.thread_id}"


def _thread_json(key: ThreadKey) -> dict[str, Any]:
    return {
        "namespace": key.namespace,
        "agent_id": key.agent_id,
        "user_id": key.user_id,
        "session_id": key.session_id,
        "thread_id": key.thread_id,
    }


def _holder(args: argparse.Namespace, verb: str) -> str:
    holder: str | None = args.holder
    return holder or f"cli-{verb}-{socket.gethostname()}-{os.getpid()}"


# --- output helpers ---------------------------------------------------------------


def _emit_json(ctx: _Context, document: object) -> None:
    data = msgspec.json.format(msgspec.json.encode(document), indent=2)
    ctx.out.write(data.decode("utf-8") + "\n")


def _print(ctx: _Context, text: str = "") -> None:
    ctx.out.write(text + "\n")


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()
) -> str:
    """Align ``rows`` under ``headers``; columns in ``right`` are right-aligned.

    The last column is never padded, so long details do not push lines wider.
    """
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    last = len(headers) - 1

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            if i == last:
                out.append(cell)
            elif i in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def format_time(timestamp: float) -> str:
    """A wall-clock time as ``YYYY-MM-DD HH:MM:SSZ`` (UTC)."""
    if timestamp <= 0:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def shorten(text: str, width: int = _DETAIL_WIDTH) -> str:
    """Collapse whitespace and cut ``text`` to ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _compact(value: object) -> str:
    try:
        return msgspec.json.encode(value).decode("utf-8")
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def message_summary(msg: ev.Msg) -> str:
    """One line describing a message's content (text, tool use, tool result)."""
    if isinstance(msg.content, str):
        return msg.content
    parts: list[str] = []
    for block in msg.content:
        if isinstance(block, ev.TextBlock):
            parts.append(block.text)
        elif isinstance(block, ev.ToolUseBlock):
            parts.append(f"[tool_use {block.name} {_compact(block.input)}]")
        elif isinstance(block, ev.ToolResultBlock):
            flag = " error" if block.is_error else ""
            output = (
                block.output
                if isinstance(block.output, str)
                else _compact(block.output)
            )
            parts.append(f"[tool_result{flag} {output}]")
        else:
            parts.append(f"[thinking] {block.text}")
    return " ".join(parts)


def describe_event(event: object) -> str:
    """One readable line of what an event says (without its type name)."""
    match event:
        case ev.ThreadCreated():
            user = "~" if event.user_id is None else event.user_id
            return (
                f"{event.namespace}/{event.agent_id}/{user}/"
                f"{event.session_id}/{event.thread_id}"
            )
        case ev.LeaseAcquired(epoch=epoch, holder=holder):
            return f"epoch {epoch}, holder {holder}"
        case ev.RunStarted(run_id=run_id):
            extra = f" (turn {event.turn_id})" if event.turn_id else ""
            if event.parent_run_id:
                extra += f" (parent {event.parent_run_id})"
            return f"run {run_id}{extra}"
        case ev.RunCompleted(run_id=run_id):
            return f"run {run_id}"
        case ev.RunFailed(run_id=run_id, error=error):
            return f"run {run_id}: {error}" if error else f"run {run_id}"
        case ev.RunInterrupted(run_id=run_id, reason=reason, by=by):
            return f"run {run_id} by {by}" + (f" ({reason})" if reason else "")
        case ev.MessageAppended(message=msg):
            return f"{msg.role}: {message_summary(msg)}"
        case ev.ContextCompacted(summary=summary, replaced_ids=ids):
            return f"{len(ids)} messages -> summary: {summary}"
        case ev.SummarySet(summary=summary):
            return "cleared" if summary is None else summary
        case ev.ContextCleared(reason=reason):
            return reason
        case ev.ToolCallRequested(call_id=call_id, name=name):
            return f"call {call_id}: {name}({_compact(event.input)})"
        case ev.ToolCallCompleted(call_id=call_id, output=output):
            flag = "error " if event.is_error else ""
            return f"call {call_id}: {flag}{_compact(output)}"
        case ev.ToolCallReconciled(call_id=call_id, resolution=resolution):
            note = f" ({event.note})" if event.note else ""
            return f"call {call_id}: {_compact(resolution)}{note}"
        case ev.ToolGroupActivated(group=group) | ev.ToolGroupDeactivated(group=group):
            return group
        case ev.PermissionRuleSet(tool=tool, decision=decision):
            return f"{tool} = {decision}"
        case ev.PermissionRuleRemoved(tool=tool):
            return tool
        case ev.PermissionModeSet(mode=mode):
            return mode
        case ev.PlanModeEntered(plan_file=plan_file):
            return plan_file or ""
        case ev.TodosWritten(todos=todos, revision=revision):
            return f"revision {revision}: " + "; ".join(_todo(t) for t in todos)
        case ev.TaskBegun(goal=goal, requirements=requirements):
            return f"{goal} ({len(requirements)} requirements)"
        case ev.RequirementDecided(requirement=req, decision=decision):
            return f"{req}: {decision}"
        case ev.EvidenceBound(requirement=req, evidence=evidence):
            return f"{req}: {evidence}"
        case ev.VerificationRecorded(passed=passed, detail=detail):
            return ("passed" if passed else "failed") + (
                f": {detail}" if detail else ""
            )
        case ev.AgentStateReplaced(reason=reason, messages=messages):
            return f"reason {reason}, {len(messages)} messages"
        case ev.UnknownEvent():
            kind = "required" if event.required else "optional"
            return (
                f"unknown {kind} event (schema {event.schema}, "
                f"{len(event.data)} bytes kept as written)"
            )
        case msgspec.Struct():
            fields = msgspec.structs.asdict(event)
            return ", ".join(f"{k}={_compact(v)}" for k, v in fields.items())
        case _:
            return repr(event)


def _todo(todo: object) -> str:
    if isinstance(todo, dict) and "content" in todo:
        status = todo.get("status")
        return f"[{status}] {todo['content']}" if status else str(todo["content"])
    return todo if isinstance(todo, str) else _compact(todo)


def _type_name(event: object) -> str:
    try:
        return codec.event_type_name(event)
    except TypeError:
        return type(event).__name__


def event_json(event: object) -> dict[str, Any]:
    """An event as JSON-ready builtins, its ``type`` first.

    An ``AgentStateReplaced``'s msgpack ``state`` is decoded into the state's JSON
    form; an unknown event keeps its bytes (base64) and says ``"unknown": true``.
    """
    if isinstance(event, ev.UnknownEvent):
        return {
            "type": event.type,
            "unknown": True,
            "schema": event.schema,
            "required": event.required,
            "data": msgspec.to_builtins(event.data),
        }
    data = msgspec.to_builtins(event)
    fields: dict[str, Any] = data if isinstance(data, dict) else {"value": data}
    fields.pop("type", None)
    if isinstance(event, ev.AgentStateReplaced):
        fields["state"] = msgspec.to_builtins(decode_state(event.state))
    return {"type": _type_name(event), **fields}


def record_json(record: codec.Record) -> dict[str, Any]:
    """A record as JSON-ready builtins (what ``export`` writes per line)."""
    return {
        "version": record.version,
        "epoch": record.epoch,
        "writer": record.writer,
        "batch_id": record.batch_id,
        "run_id": record.run_id,
        "committed_at": record.committed_at,
        "prev_hash": record.prev_hash,
        "hash": record.hash,
        "events": [event_json(e) for e in record.events],
    }


def _log_rows(records: Sequence[codec.Record]) -> list[list[str]]:
    rows: list[list[str]] = []
    for record in records:
        head = [
            str(record.version),
            str(record.epoch),
            record.writer,
            format_time(record.committed_at),
            record.run_id or "-",
        ]
        for i, event in enumerate(record.events or [None]):
            cells = head if i == 0 else ["", "", "", "", ""]
            if event is None:
                rows.append([*cells, "(no events)", ""])
            else:
                rows.append([*cells, _type_name(event), shorten(describe_event(event))])
    return rows


_LOG_HEADERS = ("VERSION", "EPOCH", "WRITER", "COMMITTED", "RUN", "EVENT", "DETAIL")


class _Progress:
    """A one-line counter on stderr for long work, shown only on a terminal."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = total > 1 and callable(isatty) and bool(isatty())
        self.done = 0

    def step(self) -> None:
        self.done += 1
        if self.enabled:
            self.stream.write(f"\r{self.label} {self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * (len(self.label) + 24) + "\r")
            self.stream.flush()


async def _map_bounded(
    items: Sequence[_T],
    fn: Callable[[_T], Awaitable[_R]],
    progress: _Progress,
) -> list[_R]:
    semaphore = asyncio.Semaphore(_CONCURRENCY)

    async def one(item: _T) -> _R:
        async with semaphore:
            result = await fn(item)
        progress.step()
        return result

    try:
        return list(await asyncio.gather(*(one(item) for item in items)))
    finally:
        progress.close()


# --- demo -------------------------------------------------------------------------


async def _cmd_demo(journal: Journal, ctx: _Context) -> int:
    from journal.demo import DemoError, run_demo

    if ctx.root.startswith("memory://"):
        raise _usage(
            "the demo crashes a writer process, so it needs a root another process "
            "can open (a path, file://... or s3://...)"
        )
    flags: list[str] = []
    if ctx.args.root:
        flags += ["--root", ctx.args.root]
    try:
        return await run_demo(
            journal,
            root_url=ctx.root,
            storage_options=ctx.options,
            cli_flags=flags,
            out=ctx.out,
            pace=0.3 if ctx.out.isatty() else 0.0,
        )
    except DemoError as exc:
        raise CommandError(str(exc)) from None


# --- ls ---------------------------------------------------------------------------


@dataclass(slots=True)
class _ThreadInfo:
    key: ThreadKey
    head: int = 0
    records: int = 0
    last_activity: float = 0.0
    error: str | None = None


async def _thread_info(journal: Journal, key: ThreadKey) -> _ThreadInfo:
    info = _ThreadInfo(key)
    try:
        versions = await ThreadLog(journal.store, key).versions()
        info.records = len(versions)
        info.head = versions[-1] if versions else 0
        if info.head:
            async for record in journal.records(key, info.head, info.head + 1):
                info.last_activity = record.committed_at
    except JournalError as exc:
        info.error = str(exc)
    return info


async def _cmd_ls(journal: Journal, ctx: _Context) -> int:
    keys = await _select(journal, ctx.args)
    infos = await _map_bounded(
        keys,
        lambda key: _thread_info(journal, key),
        _Progress("reading threads", len(keys)),
    )
    if ctx.json:
        _emit_json(
            ctx,
            {
                "root": ctx.root,
                "count": len(infos),
                "threads": [
                    {
                        **_thread_json(i.key),
                        "head": i.head,
                        "records": i.records,
                        "last_activity": i.last_activity or None,
                        **({"error": i.error} if i.error else {}),
                    }
                    for i in infos
                ],
            },
        )
        return EXIT_OK
    if not infos:
        _print(ctx, f"no threads under {ctx.root}")
        return EXIT_OK
    rows = [
        [
            thread_label(i.key),
            str(i.head),
            str(i.records),
            f"unreadable: {shorten(i.error, 60)}"
            if i.error
            else format_time(i.last_activity),
        ]
        for i in infos
    ]
    _print(
        ctx,
        format_table(
            ("THREAD", "HEAD", "RECORDS", "LAST ACTIVITY"), rows, right=(1, 2)
        ),
    )
    _print(ctx, f"{len(infos)} thread{'s' if len(infos) != 1 else ''}")
    return EXIT_OK


# --- log --------------------------------------------------------------------------


async def _cmd_log(journal: Journal, ctx: _Context) -> int:
    args = ctx.args
    key = _key(args)
    head = await _existing(journal, key, ctx)
    start = args.start if args.start is not None else 1
    stop = args.stop if args.stop is not None else head
    if args.tail is not None:
        start = max(start, stop - args.tail + 1)
    if start > stop and args.start is not None and args.stop is not None:
        raise _usage(f"--from {start} is after --to {stop}")
    records = [r async for r in journal.records(key, max(start, 1), stop + 1)]
    if ctx.json:
        _emit_json(
            ctx,
            {
                "thread": _thread_json(key),
                "head": head,
                "records": [record_json(r) for r in records],
            },
        )
        return EXIT_OK
    _print(ctx, f"{thread_label(key)}  head {head}")
    if records:
        _print(ctx, format_table(_LOG_HEADERS, _log_rows(records), right=(0, 1)))
    else:
        _print(ctx, "(no records in that range)")
    return EXIT_OK


# --- state ------------------------------------------------------------------------


async def _load_at(
    journal: Journal, key: ThreadKey, version: int, head: int
) -> AgentState:
    if version > head:
        raise CommandError(f"{key} has no version {version}; its head is {head}")
    return await journal.load(key, at_version=version)


def _state_lines(state: AgentState) -> list[str]:
    rows: list[list[str]] = []
    perms = state.permission_context
    rules = ", ".join(f"{t}={d}" for t, d in perms.rules.items()) or "no rules"
    plan = state.plan_mode_context
    tasks = state.tasks_context
    tools = state.tool_context
    rows.append(["summary", shorten(state.summary) if state.summary else "-"])
    rows.append(["permissions", f"mode {perms.mode}; {rules}"])
    rows.append(
        [
            "plan mode",
            f"on ({plan.plan_file or 'no plan file'})" if plan.active else "off",
        ]
    )
    todos = "; ".join(_todo(t) for t in tasks.todos)
    rows.append(
        ["todos", f"revision {tasks.revision}: {shorten(todos)}" if todos else "-"]
    )
    if tasks.goal is not None:
        done = sum(1 for r in tasks.requirements if r in tasks.decisions)
        rows.append(
            [
                "task",
                f"{shorten(tasks.goal, 60)} ({done}/{len(tasks.requirements)} "
                f"requirements decided, {len(tasks.verifications)} verifications)",
            ]
        )
    rows.append(["tool groups", ", ".join(tools.active_groups) or "-"])
    pending = [
        f"{p.name} call {p.call_id} (v{p.version})"
        for p in tools.pending_calls.values()
    ]
    rows.append(["pending calls", "; ".join(pending) or "-"])
    rows.append(["active run", state.active_run_id or "-"])
    rows.append(["interrupted", "yes" if state.shutdown_interrupted else "no"])
    width = max(len(r[0]) for r in rows)
    return [f"{name.ljust(width)}  {value}" for name, value in rows]


def _message_rows(messages: Sequence[ev.Msg]) -> list[list[str]]:
    return [
        [str(i), m.role, shorten(message_summary(m))] for i, m in enumerate(messages, 1)
    ]


async def _cmd_state(journal: Journal, ctx: _Context) -> int:
    key = _key(ctx.args)
    head = await _existing(journal, key, ctx)
    at = ctx.args.at if ctx.args.at is not None else head
    state: AgentState = await _load_at(journal, key, at, head)
    if ctx.json:
        ctx.out.write(
            msgspec.json.format(state.to_json(), indent=2).decode("utf-8") + "\n"
        )
        return EXIT_OK
    when = "head" if at == head else f"head {head}"
    _print(ctx, f"{thread_label(key)}  version {at} ({when})")
    _print(ctx, f"messages ({len(state.context)})")
    if state.context:
        for line in format_table(
            ("#", "ROLE", "CONTENT"), _message_rows(state.context), right=(0,)
        ).splitlines()[1:]:
            _print(ctx, "  " + line)
    for line in _state_lines(state):
        _print(ctx, line)
    return EXIT_OK


# --- diff -------------------------------------------------------------------------

_ABSENT = object()


def _flatten(
    prefix: str, value: object, out: dict[str, object], depth: int = 3
) -> None:
    # Dicts are opened up to ``depth`` levels (field.subfield.key); an empty dict
    # adds nothing, so a first rule shows as one added key, not a changed dict.
    if isinstance(value, dict) and depth > 0:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out, depth - 1)
    else:
        out[prefix] = value


@dataclass(slots=True)
class FieldChange:
    """One changed state field (``old`` or ``new`` may be the absent marker)."""

    field: str
    old: object
    new: object

    @property
    def kind(self) -> str:
        """``added``, ``removed`` or ``changed``."""
        if self.old is _ABSENT:
            return "added"
        return "removed" if self.new is _ABSENT else "changed"


_FIELD_ORDER = {name: i for i, name in enumerate(AgentState.__struct_fields__)}


def state_changes(
    old: AgentState, new: AgentState
) -> tuple[list[FieldChange], list[ev.Msg], list[ev.Msg]]:
    """Field-by-field changes between two states, and messages added / removed."""
    flat_old: dict[str, object] = {}
    flat_new: dict[str, object] = {}
    for state, flat in ((old, flat_old), (new, flat_new)):
        data = msgspec.to_builtins(state)
        data.pop("context", None)
        data.pop("version", None)
        _flatten("", data, flat)
    names = sorted(
        set(flat_old) | set(flat_new),
        key=lambda n: (_FIELD_ORDER.get(n.split(".", 1)[0], len(_FIELD_ORDER)), n),
    )
    changes = [
        FieldChange(name, flat_old.get(name, _ABSENT), flat_new.get(name, _ABSENT))
        for name in names
        if flat_old.get(name, _ABSENT) != flat_new.get(name, _ABSENT)
    ]
    old_ids = {m.id for m in old.context}
    new_ids = {m.id for m in new.context}
    added = [m for m in new.context if m.id not in old_ids]
    removed = [m for m in old.context if m.id not in new_ids]
    return changes, added, removed


def _value(value: object) -> str:
    return "(absent)" if value is _ABSENT else shorten(_compact(value), 50)


def _json_value(value: object) -> object:
    return None if value is _ABSENT else value


async def _cmd_diff(journal: Journal, ctx: _Context) -> int:
    args = ctx.args
    key = _key(args)
    head = await _existing(journal, key, ctx)
    stop = args.stop if args.stop is not None else head
    start = args.start if args.start is not None else max(stop - 1, 0)
    if start > stop:
        raise _usage(f"--from {start} is after --to {stop}")
    old: AgentState = await _load_at(journal, key, start, head)
    new: AgentState = await _load_at(journal, key, stop, head)
    changes, added, removed = state_changes(old, new)
    records = [r async for r in journal.records(key, start + 1, stop + 1)]
    if ctx.json:
        _emit_json(
            ctx,
            {
                "thread": _thread_json(key),
                "from": start,
                "to": stop,
                "changes": [
                    {
                        "field": c.field,
                        "kind": c.kind,
                        "old": _json_value(c.old),
                        "new": _json_value(c.new),
                    }
                    for c in changes
                ],
                "messages": {"added": added, "removed": removed},
                "records": [record_json(r) for r in records],
            },
        )
        return EXIT_OK
    _print(ctx, f"{thread_label(key)}  version {start} -> {stop}")
    if not (changes or added or removed):
        _print(ctx, "state: no changes")
    else:
        _print(ctx, "state changes:")
        rows = [[c.field, _value(c.old), "->", _value(c.new)] for c in changes]
        if rows:
            for line in format_table(("FIELD", "OLD", "", "NEW"), rows).splitlines()[
                1:
            ]:
                _print(ctx, "  " + line)
        if added or removed:
            _print(ctx, f"  context: +{len(added)} / -{len(removed)} messages")
            rows = [["+", m.role, shorten(message_summary(m))] for m in added]
            rows += [["-", m.role, shorten(message_summary(m))] for m in removed]
            for line in format_table(("", "ROLE", "CONTENT"), rows).splitlines()[1:]:
                _print(ctx, "    " + line)
    if records:
        _print(ctx, f"records {start + 1}..{stop}:")
        _print(ctx, format_table(_LOG_HEADERS, _log_rows(records), right=(0, 1)))
    return EXIT_OK


# --- verify -----------------------------------------------------------------------


async def _verify_one(journal: Journal, key: ThreadKey) -> VerifyReport:
    try:
        return await journal.verify(key)
    except JournalError as exc:
        report = VerifyReport(key)
        report.problems.append(Finding(None, f"verify could not finish: {exc}"))
        return report


def _report_json(report: VerifyReport) -> dict[str, Any]:
    return {
        **_thread_json(report.key),
        "ok": report.ok,
        "head": report.head,
        "records": report.records,
        "checkpoints": report.checkpoints,
        "bytes": report.bytes,
        "problems": [
            {"version": f.version, "message": f.message} for f in report.problems
        ],
        "warnings": [
            {"version": f.version, "message": f.message} for f in report.warnings
        ],
    }


async def _cmd_verify(journal: Journal, ctx: _Context) -> int:
    args = ctx.args
    if _names_one_thread(args):
        key = _key(args)
        await _existing(journal, key, ctx)
        keys = [key]
    else:
        keys = await _select(journal, args)
    reports = await _map_bounded(
        keys,
        lambda key: _verify_one(journal, key),
        _Progress("verifying threads", len(keys)),
    )
    bad = [r for r in reports if not r.ok]
    if ctx.json:
        _emit_json(
            ctx,
            {
                "ok": not bad,
                "verified": len(reports),
                "with_problems": len(bad),
                "threads": [_report_json(r) for r in reports],
            },
        )
        return EXIT_PROBLEM if bad else EXIT_OK
    if not reports:
        _print(ctx, f"no threads under {ctx.root}")
        return EXIT_OK
    for report in reports:
        status = "ok  " if report.ok else "FAIL"
        _print(
            ctx,
            f"{status}  {thread_label(report.key)}  "
            f"{report.records} records, head {report.head}, "
            f"{report.checkpoints} checkpoints checked, {report.bytes} bytes",
        )
        for finding in report.problems:
            _print(ctx, f"      problem: {finding}")
        for finding in report.warnings:
            _print(ctx, f"      warning: {finding}")
    _print(
        ctx,
        f"verified {len(reports)} thread{'s' if len(reports) != 1 else ''}: "
        f"{len(reports) - len(bad)} ok, {len(bad)} with problems",
    )
    return EXIT_PROBLEM if bad else EXIT_OK


# --- checkpoint -------------------------------------------------------------------


async def _cmd_checkpoint(journal: Journal, ctx: _Context) -> int:
    key = _key(ctx.args)
    await _existing(journal, key, ctx)
    version = await journal.checkpoint(key)
    if ctx.json:
        _emit_json(ctx, {"thread": _thread_json(key), "version": version})
    else:
        _print(ctx, f"{thread_label(key)}: checkpoint written at version {version}")
    return EXIT_OK


# --- export -----------------------------------------------------------------------


async def _cmd_export(journal: Journal, ctx: _Context) -> int:
    key = _key(ctx.args)
    await _existing(journal, key, ctx)
    encoder = msgspec.json.Encoder()
    path: str | None = ctx.args.output
    count = 0
    if path is None:
        async for record in journal.records(key):
            ctx.out.write(encoder.encode(record_json(record)).decode("utf-8") + "\n")
            count += 1
        return EXIT_OK
    tmp = f"{path}.partial"
    try:
        with open(tmp, "wb") as fh:  # noqa: ASYNC230 - a local file the user named
            async for record in journal.records(key):
                fh.write(encoder.encode(record_json(record)) + b"\n")
                count += 1
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CommandError(f"cannot write {path}: {exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    print(f"exported {count} records of {thread_label(key)} to {path}", file=sys.stderr)
    return EXIT_OK


# --- recover ----------------------------------------------------------------------


def _call_json(call: ToolCallEntry, run_id: str) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "name": call.name,
        "input": call.input,
        "run_id": run_id or None,
        "requested_at": call.requested_at,
        "outcome": call.outcome,
    }


async def _cmd_recover(journal: Journal, ctx: _Context) -> int:
    key = _key(ctx.args)
    await _existing(journal, key, ctx)
    async with journal.writer(
        key, _holder(ctx.args, "recover"), wait=ctx.args.wait
    ) as writer:
        fence, epoch, base = writer.version, writer.epoch, writer.base_version
    records = [r async for r in journal.records(key, 1, fence + 1)]
    ledger: dict[str, RunEntry] = fold(RunLedger(), {}, records)
    RunLedger.finish(ledger)
    interrupted = [
        e.run_id
        for e in records[-1].events
        if isinstance(e, ev.RunInterrupted) and e.by == "recovery"
    ]
    uncertain = [
        (entry.run_id, call)
        for entry in ledger.values()
        for call in entry.tool_calls
        if call.outcome in ("unknown", "pending")
    ]
    # The runs worth an operator's attention: the one this recovery interrupted,
    # any still open, and those with calls whose outcome is unknown.
    flagged = set(interrupted) | {run for run, _ in uncertain}
    open_runs = [
        r
        for r in ledger.values()
        if r.run_id in flagged or r.status in ("running", "unfinished")
    ]
    if ctx.json:
        _emit_json(
            ctx,
            {
                "thread": _thread_json(key),
                "previous_head": base,
                "fence_version": fence,
                "epoch": epoch,
                "interrupted_now": interrupted,
                "runs": [
                    {
                        "run_id": r.run_id or None,
                        "status": r.status,
                        "started_at": r.started_at,
                        "ended_at": r.ended_at,
                        "reason": r.reason,
                        "tool_calls": [_call_json(c, r.run_id) for c in r.tool_calls],
                    }
                    for r in open_runs
                ],
                "uncertain_tool_calls": [_call_json(c, run) for run, c in uncertain],
            },
        )
        return EXIT_OK
    _print(
        ctx,
        f"{thread_label(key)}: lease taken at epoch {epoch}; "
        f"fence record at version {fence} (head was {base})",
    )
    if interrupted:
        _print(
            ctx,
            "unfinished run marked interrupted (by recovery): "
            + ", ".join(interrupted),
        )
    else:
        _print(ctx, "no unfinished run")
    if open_runs:
        _print(ctx, "runs needing attention:")
        rows = [
            [
                r.run_id or "(outside a run)",
                r.status,
                str(r.started_at),
                str(r.ended_at) if r.ended_at is not None else "-",
                r.reason or "-",
            ]
            for r in open_runs
        ]
        for line in format_table(
            ("RUN", "STATUS", "STARTED", "ENDED", "REASON"), rows
        ).splitlines():
            _print(ctx, "  " + line)
    if uncertain:
        _print(ctx, "tool calls with unknown outcome (nothing was re-run):")
        rows = [
            [
                c.call_id,
                c.name,
                str(c.requested_at),
                run or "-",
                shorten(_compact(c.input), 50),
            ]
            for run, c in uncertain
        ]
        for line in format_table(
            ("CALL", "TOOL", "REQUESTED", "RUN", "INPUT"), rows
        ).splitlines():
            _print(ctx, "  " + line)
        _print(
            ctx,
            "reconcile each one (ToolCallReconciled, or Agent.reconcile_tool_calls) "
            "once you know what happened",
        )
    else:
        _print(ctx, "no tool calls with unknown outcome")
    return EXIT_OK


# --- import -----------------------------------------------------------------------


def open_state_store(url: str | None, agent_id: str) -> AgentStateStore:
    """Open the snapshot-mode store that ``import --from`` names.

    Args:
        url: A directory or ``file://`` URL (the JSON-file store's root),
            ``redis://`` / ``rediss://`` / ``unix://`` (Redis), or an SQLAlchemy
            async URL such as ``sqlite+aiosqlite:///state.db`` (SQL). None: the
            JSON-file store at its default root for ``agent_id``.
        agent_id: The agent, for the JSON-file store's default root.

    Raises:
        CommandError: The URL's scheme is not a state store (exit 2).
        ImportError: The store's optional dependency is missing.
    """
    from stores import state

    if url is None:
        return state.JsonFileAgentStateStore(agent_id=agent_id)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return state.JsonFileAgentStateStore(url)
    scheme = scheme.lower()
    if scheme == "file":
        return state.JsonFileAgentStateStore("/" + rest.lstrip("/"))
    if scheme in ("redis", "rediss", "unix"):
        return state.RedisAgentStateStore(url)
    dialect = scheme.split("+", 1)[0]
    if dialect == "sqlite":
        # The SQL store would create a missing database file: refuse instead.
        path = rest[1:].split("?", 1)[0] if rest.startswith("/") else rest
        if path and path != ":memory:" and not os.path.exists(path):
            raise CommandError(f"--from {url!r}: no database file at {path}")
    if dialect in ("sqlite", "postgresql", "postgres", "mysql"):
        return state.SqlAgentStateStore(url)
    raise _usage(
        f"--from {url!r}: not a state store URL (a directory, file://, redis://, "
        "sqlite+aiosqlite://, postgresql+asyncpg://)"
    )


async def _cmd_import(journal: Journal, ctx: _Context) -> int:
    args = ctx.args
    key = _key(args)
    # Refuse before taking the lease, so an existing thread is not touched at all.
    head = await journal.head(key)
    if head:
        raise CommandError(
            f"{key} already exists (head {head}); import only creates new threads"
        )
    store = open_state_store(args.source, key.agent_id)
    try:
        entry = key.state_entry("agent_state")
        loaded = await store.load(key.user_id, key.session_id, entry)
    finally:
        await store.aclose()
    user = "~" if key.user_id is None else key.user_id
    where = args.source or f"the JSON-file store of agent {key.agent_id!r}"
    if loaded is None:
        raise CommandError(
            f"no state slot for user {user}, session {key.session_id!r}, "
            f"entry {entry!r} in {where}; nothing written"
        )
    state, slot_version = loaded
    baseline: list[object] = [
        ev.AgentStateReplaced(
            "migrated",
            encode_state(state.without_context()),
            messages=list(state.context),
        )
    ]
    # Tool calls the slot still waited on stay uncertain in the journal, so they are
    # reconciled rather than forgotten.
    baseline += [
        ev.ToolCallRequested(p.call_id, p.name, p.input, run_id=p.run_id)
        for p in state.tool_context.pending_calls.values()
    ]
    try:
        async with journal.writer(
            key, _holder(args, "import"), fence_events=baseline, create_only=True
        ) as writer:
            version, epoch = writer.version, writer.epoch
    except VersionConflictError as exc:
        raise CommandError(f"{key} was created meanwhile: {exc}") from None
    notes: list[str] = []
    if state.active_run_id is not None:
        notes.append(
            f"the slot's run {state.active_run_id} had not finished; it is not resumed"
        )
    if state.tool_context.pending_calls:
        notes.append(
            f"{len(state.tool_context.pending_calls)} pending tool calls kept as "
            "uncertain; reconcile them"
        )
    if ctx.json:
        _emit_json(
            ctx,
            {
                "thread": _thread_json(key),
                "version": version,
                "epoch": epoch,
                "source": where,
                "slot_version": slot_version,
                "messages": len(state.context),
                "notes": notes,
            },
        )
        return EXIT_OK
    _print(
        ctx,
        f"imported slot version {slot_version} ({len(state.context)} messages) "
        f"from {where}",
    )
    _print(
        ctx,
        f"into {thread_label(key)} at version {version} "
        "(LeaseAcquired + AgentStateReplaced reason=migrated)",
    )
    for note in notes:
        _print(ctx, f"note: {note}")
    return EXIT_OK
