"""The ``agent-journal`` argument parser, and command-line flags turned into options."""

from __future__ import annotations

import argparse
import os
import socket
from typing import TYPE_CHECKING, Any

from journal.cli.config import DEFAULT_ROOT, ROOT_ENV
from journal.cli.options import (
    CheckpointOptions,
    DemoOptions,
    DiffOptions,
    ExportOptions,
    ImportOptions,
    LogOptions,
    LsOptions,
    Options,
    RecoverOptions,
    SealOptions,
    StateOptions,
    ThreadFilter,
    VerifyOptions,
)

if TYPE_CHECKING:
    from journal.keys import ThreadKey

__all__ = ["PROG", "build_parser", "options_from_args"]

PROG = "agent-journal"

# --- flag types and groups ------------------------------------------------------------


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


# --- the parser -----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of ``agent-journal``.

    Returns:
        The parser; the command's name is in ``command`` (None when missing).
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="An event-sourced journal for AI-agent state: "
        "inspect, verify, export and recover threads.",
    )
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        _add_common(p, top=False)
        return p

    command(
        "demo",
        "run a ten-second tour: turns with a tool call, a crash, a takeover, "
        "a zombie writer, time travel and verify",
    )

    p = command("ls", "list threads with their head and last activity")
    _add_thread_flags(p, required=False)

    p = command("log", "show a thread's records and events")
    _add_thread_flags(p, required=True)
    p.add_argument("--from", dest="start", type=_non_negative, metavar="N")
    p.add_argument("--to", dest="stop", type=_non_negative, metavar="M")
    p.add_argument("--tail", type=_non_negative, metavar="K", help="the last K only")

    p = command("state", "rebuild a thread's state (time travel: --at)")
    _add_thread_flags(p, required=True)
    p.add_argument(
        "--at", type=_non_negative, metavar="N", help="as of version N (default: head)"
    )

    p = command(
        "diff",
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
        "check checksums, hash chain, epochs and checkpoints (every thread if no "
        "thread is named); exit 1 on a problem",
    )
    _add_thread_flags(p, required=False)
    p.add_argument(
        "--trust",
        metavar="PUBLIC_KEY",
        help="an Ed25519 public key (ed25519:<base64>, 64 hex digits or a PEM file): "
        "fail unless the history extends the last seal it signed",
    )
    p.add_argument(
        "--anchor",
        metavar="SEAL_FILE",
        help="a seal printed by `seal` and kept elsewhere: the history must extend "
        "it too (needs --trust)",
    )

    p = command(
        "seal",
        "print the thread's latest seal (JSON), to publish elsewhere; --new signs "
        "one at the head first (key: $AGENT_JOURNAL_SIGNING_KEY)",
    )
    _add_thread_flags(p, required=True)
    p.add_argument("--new", action="store_true", help="sign a seal at the head now")

    p = command("checkpoint", "write a checkpoint at the head")
    _add_thread_flags(p, required=True)
    _add_lease_flags(p)

    p = command("export", "export every record, one JSON line each")
    _add_thread_flags(p, required=True)
    p.add_argument("--format", choices=["jsonl"], default="jsonl")
    p.add_argument("--output", "-o", metavar="FILE", help="default: stdout")

    p = command(
        "recover",
        "take the lease (an unfinished run is marked interrupted) and report "
        "runs and tool calls whose outcome is unknown; never re-runs a tool",
    )
    _add_thread_flags(p, required=True)
    _add_lease_flags(p)

    p = command(
        "import",
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


# --- flags to options -----------------------------------------------------------------


def _filter(args: argparse.Namespace) -> ThreadFilter:
    return ThreadFilter(
        args.namespace, args.agent, args.user, args.session, args.thread
    )


def _key(args: argparse.Namespace) -> ThreadKey:
    return _filter(args).key()


def _holder(args: argparse.Namespace, verb: str) -> str:
    holder: str | None = args.holder
    return holder or f"cli-{verb}-{socket.gethostname()}-{os.getpid()}"


def options_from_args(
    args: argparse.Namespace,
    *,
    root: str,
    storage_options: dict[str, Any],
    pace: float = 0.0,
) -> Options:
    """The options of the command ``args`` names.

    Args:
        args: What :func:`build_parser`'s parser returned (with a command).
        root: The journal root URL the command runs on.
        storage_options: The root's storage options (for the demo's child).
        pace: The demo's pause after each step title, in seconds.

    Raises:
        InvalidKeyError: The thread's ids are not valid.
        ValueError: ``args`` names no known command.
    """
    match args.command:
        case "demo":
            flags = ("--root", args.root) if args.root else ()
            return DemoOptions(
                root=root,
                storage_options=storage_options,
                cli_flags=flags,
                pace=pace,
            )
        case "ls":
            return LsOptions(root=root, filter=_filter(args))
        case "log":
            return LogOptions(
                root=root,
                key=_key(args),
                start=args.start,
                stop=args.stop,
                tail=args.tail,
            )
        case "state":
            return StateOptions(root=root, key=_key(args), at=args.at)
        case "diff":
            return DiffOptions(
                root=root, key=_key(args), start=args.start, stop=args.stop
            )
        case "verify":
            return VerifyOptions(
                root=root, filter=_filter(args), trust=args.trust, anchor=args.anchor
            )
        case "seal":
            return SealOptions(root=root, key=_key(args), new=args.new)
        case "checkpoint":
            return CheckpointOptions(root=root, key=_key(args))
        case "export":
            return ExportOptions(root=root, key=_key(args), output=args.output)
        case "recover":
            return RecoverOptions(
                root=root,
                key=_key(args),
                holder=_holder(args, "recover"),
                wait=args.wait,
            )
        case "import":
            return ImportOptions(
                key=_key(args), holder=_holder(args, "import"), source=args.source
            )
    raise ValueError(f"unknown command {args.command!r}")
