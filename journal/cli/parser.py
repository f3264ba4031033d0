"""The ``agent-journal`` argument parser, and command-line flags turned into options."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from journal.cli.commands.turns import add_turns_command
from journal.cli.config import DEFAULT_ROOT, ROOT_ENV
from journal.cli.errors import usage_error
from journal.cli.names import ANONYMOUS, merge_filter
from journal.cli.options import (
    CheckpointOptions,
    DemoOptions,
    DiffOptions,
    ExportOptions,
    HistoryOptions,
    ImportExportOptions,
    ImportOptions,
    IndexOptions,
    LogOptions,
    LsOptions,
    Options,
    ReconcileOptions,
    RecoverOptions,
    RunsOptions,
    SealOptions,
    StateOptions,
    ThreadFilter,
    VerifyOptions,
)
from journal.web.defaults import DEFAULT_HOST, DEFAULT_PORT

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from journal.keys import ThreadKey

__all__ = [
    "COMMANDS",
    "NO_DATA_COMMANDS",
    "PROG",
    "THREAD_COMMANDS",
    "JournalParser",
    "UsageErrorRaised",
    "build_parser",
    "options_from_args",
    "parse_command_line",
    "suggestion",
    "thread_filter",
]

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


_THREAD_PATH_HELP = (
    "the thread as `ls` prints it: namespace/agent/user/session/thread "
    "(~ for the anonymous user); or name it with the flags below"
)
_FILTER_PATH_HELP = (
    "a thread as `ls` prints it, or the start of one (namespace/agent/...)"
    " to filter by; or filter with the flags below"
)


def _add_thread_flags(
    parser: argparse.ArgumentParser, *, required: bool, creates: bool = False
) -> None:
    # ``required``: the command works on one thread; else the ids filter.
    parser.add_argument(
        "path",
        nargs="?",
        metavar="THREAD",
        help=_THREAD_PATH_HELP if required else _FILTER_PATH_HELP,
    )
    group = parser.add_argument_group(
        "thread" if required else "filters",
        "the thread's ids (instead of THREAD)"
        if required
        else "optional; every id left out matches any",
    )
    group.add_argument("--agent", help="agent id")
    group.add_argument("--session", help="session id")
    if creates:
        user_help = "user id (left out: the anonymous user, as the thread is new)"
    elif required:
        user_help = (
            "user id, ~ for the anonymous user (left out: any user, as for ls; "
            "the agent and session must then have one thread)"
        )
    else:
        user_help = "user id, ~ for the anonymous user (left out: any user)"
    group.add_argument("--user", help=user_help)
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
        help="wait this long for another writer's lease, showing progress "
        "(default: fail at once)",
    )
    parser.add_argument(
        "--holder", help="holder id written in the lease (default: cli-<host>-<pid>)"
    )


def _pair(text: str) -> tuple[str, str]:
    call_id, sep, value = text.partition("=")
    if not sep or not call_id:
        raise argparse.ArgumentTypeError(f"needs CALL_ID=TEXT, not {text!r}")
    return call_id, value


# --- the parser -----------------------------------------------------------------------


class UsageErrorRaised(Exception):
    """A quiet parser's usage error (see :func:`build_parser`)."""


def _terminal_columns() -> int:
    # What shutil.get_terminal_size() gives argparse: $COLUMNS, else the
    # terminal's width, else 80.
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        stdout = sys.__stdout__
        try:
            columns = (
                0 if stdout is None else os.get_terminal_size(stdout.fileno()).columns
            )
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, sized without importing ``shutil``.

    argparse makes one per argument added, and sizes it with
    ``shutil.get_terminal_size``: importing ``shutil`` (with ``bz2`` and
    ``lzma``) took 2 ms of every cold command, which prints no help.
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2  # as argparse does
        super().__init__(prog, indent_increment, max_help_position, width)


class JournalParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors suggest the nearest command or option.

    ``commands`` maps each command name to its subparser (filled by
    :func:`build_parser`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}
        self.quiet = False

    def error(self, message: str) -> NoReturn:
        """Print a one-line usage error, with a suggestion when one is near.

        Raises:
            UsageErrorRaised: The parser is quiet (see :func:`build_parser`).
        """
        if self.quiet:
            raise UsageErrorRaised(message)
        self.print_usage(sys.stderr)
        hint = suggestion(message, self)
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


def _options_of(parser: argparse.ArgumentParser) -> list[str]:
    # The options a parser takes, as its help lists them.
    return sorted(set(re.findall(r"(?<![\w-])--[a-zA-Z][\w-]*", parser.format_help())))


def suggestion(message: str, parser: argparse.ArgumentParser) -> str:
    """``"; did you mean X?"`` for a misspelled command, choice or option, else ``""``.

    Args:
        message: argparse's error message.
        parser: The parser that failed (its commands and options are the choices).
    """
    import difflib  # only for a command line that went wrong

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        given = choice.group(1)
        options = [c.strip(" '") for c in choice.group(2).split(",")]
        near = difflib.get_close_matches(given, options, n=1)
        return f"; did you mean {near[0]!r}?" if near else ""
    unknown = re.search(r"unrecognized arguments: (\S+)", message)
    if unknown:
        given = unknown.group(1).split("=", 1)[0]
        known = _options_of(parser)
        if isinstance(parser, JournalParser):
            for sub in parser.commands.values():
                known += _options_of(sub)
        near = difflib.get_close_matches(given, sorted(set(known)), n=1)
        return f"; did you mean {near[0]}?" if near else ""
    return ""


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("agent-journal")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked.

    Reading the installed distribution's metadata scans ``sys.path``; every other
    command would pay for it while the parser is built.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        sys.stdout.write(f"{parser.prog} {_version()}\n")
        parser.exit()


def _demo_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--incident",
        action="store_true",
        help="stop after the crash (step 4): leave the interrupted run and its "
        "uncertain tool call to investigate (docs/CLI.md)",
    )


def _ls_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=False)
    p.add_argument(
        "--attention",
        action="store_true",
        help="only threads that need attention: an unfinished run, uncertain "
        "tool calls, or damage",
    )


def _log_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    p.add_argument("--from", dest="start", type=_non_negative, metavar="N")
    p.add_argument("--to", dest="stop", type=_non_negative, metavar="M")
    p.add_argument("--tail", type=_non_negative, metavar="K", help="the last K only")
    p.add_argument("--run", dest="run_id", metavar="RUN_ID", help="one run's records")
    p.add_argument(
        "--type",
        dest="types",
        action="append",
        default=[],
        metavar="EVENT_TYPE",
        help="only events of this type, e.g. ToolCallRequested (repeatable)",
    )
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new records as they are committed, until Ctrl-C",
    )
    p.add_argument(
        "--poll",
        type=_seconds,
        default=0.5,
        metavar="SECONDS",
        help="with --follow: how often to look for new records (default: 0.5)",
    )
    p.add_argument(
        "--limit",
        type=_non_negative,
        metavar="N",
        help="with --follow: stop after N records",
    )


def _runs_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    p.add_argument("--run", dest="run_id", metavar="RUN_ID", help="this run only")


def _history_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)


def _state_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    p.add_argument(
        "--at",
        type=_non_negative,
        metavar="N",
        help="as of version N (default: head)",
    )


def _diff_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    p.add_argument(
        "--from",
        dest="start",
        type=_non_negative,
        metavar="N",
        help="default: head-1",
    )
    p.add_argument(
        "--to", dest="stop", type=_non_negative, metavar="M", help="default: head"
    )


def _verify_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=False)
    p.add_argument(
        "--trust",
        metavar="PUBLIC_KEY",
        help="an Ed25519 public key (ed25519:<base64>, 64 hex digits or a PEM "
        "file): fail unless the history extends the last seal it signed",
    )
    p.add_argument(
        "--anchor",
        metavar="SEAL_FILE",
        help="a seal printed by `seal` and kept elsewhere: the history must extend "
        "it too (needs --trust)",
    )


def _seal_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    p.add_argument("--new", action="store_true", help="sign a seal at the head now")


def _thread_and_lease_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    _add_lease_flags(p)


def _export_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    p.add_argument("--format", choices=["jsonl"], default="jsonl")
    p.add_argument("--output", "-o", metavar="FILE", help="default: stdout")


def _reconcile_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True)
    p.add_argument(
        "--call",
        dest="calls",
        action="append",
        default=[],
        type=_pair,
        metavar="CALL_ID=OUTCOME",
        help="the call's outcome as text, e.g. 'call-7=sent' (repeatable)",
    )
    p.add_argument(
        "--error",
        dest="errors",
        action="append",
        default=[],
        type=_pair,
        metavar="CALL_ID=MESSAGE",
        help="the call failed, with this message (repeatable)",
    )
    p.add_argument(
        "--reason",
        default="reconciled by an operator",
        help="why, recorded with each verdict (default: %(default)s)",
    )
    _add_lease_flags(p)


def _import_flags(p: argparse.ArgumentParser) -> None:
    _add_thread_flags(p, required=True, creates=True)
    p.add_argument(
        "--from",
        dest="source",
        metavar="URL",
        help="the state store: a directory or file:// (JSON files), redis://..., "
        "sqlite+aiosqlite://..., postgresql+asyncpg://... "
        "(default: the JSON-file store's default root for the agent)",
    )
    p.add_argument(
        "--from-export",
        dest="export_file",
        metavar="FILE",
        help="a file `export` wrote: the new thread's records carry its events",
    )
    p.add_argument("--holder", help="holder id written in the lease")


def _ui_flags(p: argparse.ArgumentParser) -> None:
    # Option values are plain here; journal.web.command checks them and needs the
    # optional ``ui`` extra only once the command runs.
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default: {DEFAULT_HOST}); any other than loopback "
        "requires a token",
    )
    p.add_argument(
        "--port",
        type=_non_negative,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"TCP port (default: {DEFAULT_PORT}; 0 picks a free one)",
    )
    p.add_argument(
        "--token",
        help="token every request must carry (default: none on loopback, "
        "a generated one otherwise)",
    )
    p.add_argument(
        "--poll",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="how often live updates look at the journal (default: 1)",
    )


_COMMAND_SPECS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None] | None]
] = {
    "demo": (
        "run a ten-second tour: turns with a tool call, a crash, a takeover, "
        "a zombie writer, time travel and verify",
        _demo_flags,
    ),
    "index": (
        "register every thread in the store's thread index, so that listing reads "
        "one prefix: for a store from before the index, or threads copied in by hand",
        None,
    ),
    "ls": (
        "list threads with their head, last activity and what needs attention",
        _ls_flags,
    ),
    "log": (
        "show a thread's records and events",
        _log_flags,
    ),
    "runs": (
        "the run ledger: each run's outcome, turn, parent run and tool calls "
        "(completed / uncertain / reconciled)",
        _runs_flags,
    ),
    "history": (
        "every message the thread ever held, cleared and compacted ones marked",
        _history_flags,
    ),
    "state": (
        "rebuild a thread's state (time travel: --at)",
        _state_flags,
    ),
    "diff": (
        "what changed in the state between two versions, and the events between",
        _diff_flags,
    ),
    "verify": (
        "check checksums, hash chain, epochs and checkpoints (every thread if no "
        "thread is named); exit 1 on a problem",
        _verify_flags,
    ),
    "seal": (
        "print the thread's latest seal (JSON), to publish elsewhere; --new signs "
        "one at the head first (key: $AGENT_JOURNAL_SIGNING_KEY)",
        _seal_flags,
    ),
    "checkpoint": (
        "write a checkpoint at the head",
        _thread_and_lease_flags,
    ),
    "export": (
        "export every record, one JSON line each (JSON already: no --json)",
        _export_flags,
    ),
    "recover": (
        "if the thread needs it, take the lease (an unfinished run is marked "
        "interrupted) and report tool calls whose outcome is unknown; never "
        "re-runs a tool, and writes nothing when nothing needs recovery",
        _thread_and_lease_flags,
    ),
    "reconcile": (
        "record what became of each uncertain tool call (exactly the uncertain "
        "set), so the thread can run again; no model is called",
        _reconcile_flags,
    ),
    "import": (
        "create a new thread from a snapshot-mode state slot (--from) or from an "
        "`export` file (--from-export)",
        _import_flags,
    ),
    "ui": (
        "serve a read-only web timeline: threads, runs, tool calls, state at any "
        "version, diffs and verify, updated live (needs the 'ui' extra)",
        _ui_flags,
    ),
}
"""Each command but ``turns`` (:mod:`journal.cli.commands.turns` adds it): its help,
and what adds its own flags besides the common ones."""


def build_parser(only: str | None = None, *, quiet: bool = False) -> JournalParser:
    """Build the argument parser of ``agent-journal``.

    Args:
        only: Build this command's subparser and no other's (what parsing a
            command line that runs it needs: see :func:`parse_command_line`).
        quiet: Usage errors raise :class:`UsageErrorRaised` instead of printing
            and exiting.

    Returns:
        The parser; the command's name is in ``command`` (None when missing).
    """
    parser = JournalParser(
        prog=PROG,
        description="An event-sourced journal for AI-agent state: "
        "inspect, verify, export, recover and reconcile threads.",
        epilog="exit status: 0 ok; 1 verify found a problem, or the journal "
        "reported an error (a missing thread, a held lease, a refused import); "
        "2 bad usage, or a root that is not a journal; 130 interrupted",
    )
    parser.quiet = quiet
    parser.add_argument("--version", action=_VersionAction)
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser | None:
        if only is not None and name != only:
            return None
        p = sub.add_parser(name, help=help_text, description=help_text)
        _add_common(p, top=False)
        parser.commands[name] = p
        return p

    for name, (help_text, add_flags) in _COMMAND_SPECS.items():
        p = command(name, help_text)
        if p is not None and add_flags is not None:
            add_flags(p)
    if only in (None, "turns"):
        add_turns_command(sub)
    for subparser in sub.choices.values():
        if isinstance(subparser, JournalParser):
            subparser.quiet = quiet
    return parser


COMMANDS = (*_COMMAND_SPECS, "turns")
"""Every command's name, in the order the help lists them."""


def parse_command_line(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` as :func:`build_parser`'s parser does, building less of it.

    A command line that names a command and asks for no help or version is parsed
    by a parser holding that command's subparser only (about a seventh of the
    work of building them all, on every run of the CLI). Parsing is then exactly
    the whole parser's: the options before the command are the same, and argparse
    picks the subparser by the name alone. When that parse fails, or picks another
    command (a value that looked like its name), the whole parser parses the line
    again and prints its own messages.

    Raises:
        SystemExit: What argparse raises: usage errors, ``--help``, ``--version``.
    """
    only = _named_command(argv)
    if only is not None:
        try:
            args = build_parser(only, quiet=True).parse_args(argv)
        except UsageErrorRaised:
            pass
        else:
            if args.command == only:
                return args
    return build_parser().parse_args(argv)


def _named_command(argv: Sequence[str]) -> str | None:
    # The first token that names a command, unless one may ask for help or the
    # version (also as argparse accepts them abbreviated): those print the whole
    # parser's text.
    for arg in argv:
        if arg == "-h" or (
            len(arg) > 2 and ("--help".startswith(arg) or "--version".startswith(arg))
        ):
            return None
    return next((arg for arg in argv if arg in COMMANDS), None)


# --- flags to options -----------------------------------------------------------------

THREAD_COMMANDS = frozenset(
    {
        "log",
        "runs",
        "history",
        "state",
        "diff",
        "seal",
        "checkpoint",
        "export",
        "recover",
        "reconcile",
        "import",
    }
)
"""Commands that work on one thread (all but ``demo``, ``ls`` and ``verify``)."""

NO_DATA_COMMANDS = {
    "demo": "the demo narrates as it runs and prints no data",
    "export": "export writes JSON lines already",
}
"""Commands that refuse ``--json``, and why."""


def thread_filter(args: argparse.Namespace) -> ThreadFilter:
    """The threads the command line names: its THREAD path, else its id flags.

    Raises:
        CommandError: Both a path and flags are given, or the path is malformed
            (exit 2).
    """
    user = args.user
    flags = ThreadFilter(
        args.namespace,
        args.agent,
        None if user == ANONYMOUS else user,
        args.session,
        args.thread,
        anonymous=user == ANONYMOUS,
    )
    return merge_filter(args.path, flags, prefix=args.command not in THREAD_COMMANDS)


def _holder(args: argparse.Namespace, verb: str) -> str:
    holder: str | None = args.holder
    if holder:
        return holder
    import socket  # with selectors: only a command that writes names a holder

    return f"cli-{verb}-{socket.gethostname()}-{os.getpid()}"


def _pairs(
    pairs: Sequence[tuple[str, str]], flag: str, seen: set[str]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for call_id, value in pairs:
        if call_id in seen:
            raise usage_error(f"call {call_id!r} is given twice ({flag})")
        seen.add(call_id)
        out[call_id] = value
    return out


def options_from_args(
    args: argparse.Namespace,
    *,
    root: str,
    storage_options: dict[str, Any],
    pace: float = 0.0,
    key: ThreadKey | None = None,
) -> Options:
    """The options of the command ``args`` names.

    Args:
        args: What :func:`build_parser`'s parser returned (with a command).
        root: The journal root URL the command runs on.
        storage_options: The root's storage options (for the demo's child).
        pace: The demo's pause after each step title, in seconds.
        key: The thread, for commands in :data:`THREAD_COMMANDS` (resolved from
            :func:`thread_filter` by the caller, which may need to list threads).

    Raises:
        InvalidKeyError: The thread's ids are not valid.
        CommandError: Contradictory flags (exit 2).
        ValueError: ``args`` names no known command, or a thread command has
            no ``key``.
    """
    if args.command in THREAD_COMMANDS and key is None:
        raise ValueError(f"{args.command} needs the thread's key")
    match args.command:
        case "demo":
            flags = ("--root", args.root) if args.root else ()
            return DemoOptions(
                root=root,
                storage_options=storage_options,
                cli_flags=flags,
                pace=pace,
                incident=args.incident,
            )
        case "index":
            return IndexOptions(root=root)
        case "ls":
            return LsOptions(
                root=root, filter=thread_filter(args), attention=args.attention
            )
        case "verify":
            return VerifyOptions(
                root=root,
                filter=thread_filter(args),
                trust=args.trust,
                anchor=args.anchor,
            )
    assert key is not None  # noqa: S101 -- checked above; narrows the type
    match args.command:
        case "log":
            if not args.follow and args.limit is not None:
                raise usage_error("--limit applies to --follow only")
            return LogOptions(
                root=root,
                key=key,
                start=args.start,
                stop=args.stop,
                tail=args.tail,
                run_id=args.run_id,
                types=tuple(args.types),
                follow=args.follow,
                poll=max(args.poll, 0.01),
                limit=args.limit,
            )
        case "runs":
            return RunsOptions(root=root, key=key, run_id=args.run_id)
        case "history":
            return HistoryOptions(root=root, key=key)
        case "state":
            return StateOptions(root=root, key=key, at=args.at)
        case "diff":
            return DiffOptions(root=root, key=key, start=args.start, stop=args.stop)
        case "seal":
            return SealOptions(root=root, key=key, new=args.new)
        case "checkpoint":
            return CheckpointOptions(root=root, key=key)
        case "export":
            return ExportOptions(root=root, key=key, output=args.output)
        case "recover":
            return RecoverOptions(
                root=root,
                key=key,
                holder=_holder(args, "recover"),
                wait=args.wait,
            )
        case "reconcile":
            seen: set[str] = set()
            outcomes = _pairs(args.calls, "--call", seen)
            errors = _pairs(args.errors, "--error", seen)
            if not seen:
                raise usage_error(
                    "give each uncertain call's outcome: --call CALL_ID=OUTCOME "
                    "or --error CALL_ID=MESSAGE (`recover` or `runs` lists them)"
                )
            return ReconcileOptions(
                root=root,
                key=key,
                holder=_holder(args, "reconcile"),
                outcomes=outcomes,
                errors=errors,
                reason=args.reason,
                wait=args.wait,
            )
        case "import":
            if args.export_file is not None:
                if args.source is not None:
                    raise usage_error("give --from or --from-export, not both")
                return ImportExportOptions(
                    key=key, holder=_holder(args, "import"), path=args.export_file
                )
            return ImportOptions(
                key=key, holder=_holder(args, "import"), source=args.source
            )
    raise ValueError(f"unknown command {args.command!r}")
