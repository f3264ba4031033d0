"""``main``: parse the command line, open the journal, run a command, print its report.

This module is the only place that starts an event loop, picks stdout and
stderr, and turns errors into exit statuses.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

from journal.cli.config import parse_storage_options, resolve_root
from journal.cli.controls import error_line, is_terminal, json_for_terminal
from journal.cli.errors import (
    EXIT_OK,
    EXIT_PROBLEM,
    EXIT_USAGE,
    CommandError,
    usage_error,
)
from journal.cli.keys import journal_keys
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
    ReconcileOptions,
    RecoverOptions,
    RunsOptions,
    SealOptions,
    StateOptions,
    VerifyOptions,
)
from journal.cli.parser import (
    NO_DATA_COMMANDS,
    PROG,
    THREAD_COMMANDS,
    build_parser,
    options_from_args,
    parse_command_line,
    thread_filter,
)
from journal.cli.progress import TerminalProgress
from journal.engine import Journal
from journal.errors import InvalidKeyError, JournalError, LeaseHeldError
from journal.loopless import run_sync
from stores.registry import is_local

# A cold command pays for every module it imports, so each command's module,
# the JSON renderer and the export sinks are imported where they are used: see
# tests/cli/test_cold_imports.py for what `ls` and `state` may load.

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Coroutine, Sequence
    from contextlib import AbstractContextManager
    from typing import TextIO

    from journal.cli.commands.export import RecordSink
    from journal.cli.options import Options
    from journal.cli.reports import LogReport, Report

__all__ = ["Terminal", "exit_status", "main", "run_command"]

NO_COLOR_ENV = "NO_COLOR"
"""Set (to anything) to turn colour off on a terminal too (https://no-color.org)."""

LOOPLESS_COMMANDS = frozenset(
    {"ls", "log", "state", "diff", "runs", "history", "verify", "export"}
)
"""Commands that only read, run without an event loop on a local root.

Their coroutines are driven by ``journal.loopless.run_sync``, the local store's
file I/O inline: such a command waits on nothing but the disk, and importing and
starting asyncio was about a tenth of a cold ``state``. ``log --follow`` waits
between polls, and every other command may write (and so take a lease, which
renews on a timer): they run under ``asyncio.run``.
"""


class Terminal:
    """How to print on ``out``: the width to fit and whether to colour.

    Only a terminal gets a width (tables fit it) and colour, and colour only
    when ``NO_COLOR`` is unset and ``TERM`` is not ``dumb``; anything else (a
    pipe, a file, a test's capture) gets plain text at natural widths.
    """

    def __init__(self, out: TextIO) -> None:
        self.tty = is_terminal(out)
        self.width: int | None = None
        if self.tty:
            import shutil  # with the archive modules it loads: terminals only

            self.width = shutil.get_terminal_size().columns
        self.color = (
            self.tty
            and not os.environ.get(NO_COLOR_ENV)
            and os.environ.get("TERM") != "dumb"
        )

    def render(self, report: Report) -> str:
        """The report as text for this output."""
        from journal.cli.render_text import render_text

        return render_text(report, width=self.width, color=self.color)


def run() -> NoReturn:
    """The process entry point of ``agent-journal`` and ``python -m journal``.

    :func:`main` on ``sys.argv``, then exit with its status. What the imports
    built is frozen before the command and everything after it, so the cyclic
    collector neither walks it again and again while a load builds its state nor
    frees it at exit: the process ends and takes its memory with it. A cold
    ``state --json`` of 5,000 turns took 0.86 of the time (median of 12 runs
    each, 269 ms against 313 for :func:`main`). :func:`main` itself leaves the
    collector alone: a program that calls it keeps running.
    """
    gc.freeze()
    status = main()
    gc.freeze()
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``agent-journal`` with ``argv`` (default: ``sys.argv[1:]``).

    Args:
        argv: The arguments, without the program name.

    Returns:
        The exit status: 0 success, 1 a problem found or an error reported,
        2 bad usage.
    """
    try:
        args = parse_command_line(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse's own usage errors and --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        build_parser().print_usage(sys.stderr)
        print(f"{PROG}: error: a command is required", file=sys.stderr)
        return EXIT_USAGE
    args.options = [*args.options, *getattr(args, "options_after", [])]
    if args.json and args.command in NO_DATA_COMMANDS:
        return _fail(
            args.command,
            f"--json does not apply: {NO_DATA_COMMANDS[args.command]}",
            EXIT_USAGE,
        )
    try:
        return _drive(_run(args), loopless=_loopless(args))
    except CommandError as exc:
        return _fail(args.command, str(exc), exc.code)
    except InvalidKeyError as exc:
        return _fail(args.command, str(exc), EXIT_USAGE)
    except LeaseHeldError as exc:
        return _fail(args.command, _lease_held(exc), EXIT_PROBLEM)
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


def _loopless(args: argparse.Namespace) -> bool:
    if args.command not in LOOPLESS_COMMANDS or getattr(args, "follow", False):
        return False
    return is_local(resolve_root(args.root))


def _drive(coro: Coroutine[Any, Any, int], *, loopless: bool) -> int:
    if loopless:
        return run_sync(coro)
    import asyncio  # every command that may wait or write runs on a loop

    return asyncio.run(coro)


def _lease_held(exc: LeaseHeldError) -> str:
    from journal.cli.describe import format_relative, format_time

    until = format_time(exc.expires_at)
    relative = format_relative(exc.expires_at, time.time())
    return (
        f"the lease on {exc.key} is held by {exc.holder!r} (epoch {exc.epoch}) "
        f"until {until} ({relative}); wait for it with --wait SECONDS, or stop "
        "that writer"
    )


def _fail(command: str, message: str, code: int) -> int:
    # Messages quote store data (ids, an error a turn recorded): no control
    # character of theirs reaches the terminal, nor a line break.
    print(f"{PROG} {command}: error: {error_line(message)}", file=sys.stderr)
    return code


async def _run(args: argparse.Namespace) -> int:
    root = resolve_root(args.root)
    storage_options = parse_storage_options(args.options)
    try:
        journal = Journal.open(root, **journal_keys(), **storage_options)
    except (ValueError, TypeError) as exc:
        raise usage_error(f"cannot open the journal root {root!r}: {exc}") from None
    out = sys.stdout
    terminal = Terminal(out)
    if args.command == "ui":
        return await _serve_ui(journal, root, args, out)
    if args.command == "turns":
        from journal.cli.commands.turns import run_turns

        try:
            return await run_turns(journal, args, out)
        finally:
            await journal.aclose()
    try:
        # Ids are checked only once the root opened, so a bad root is named first.
        key = None
        if args.command in THREAD_COMMANDS:
            selection = thread_filter(args)
            from journal.cli.commands.threads import resolve_thread

            if args.command != "import":
                # A command that reads a thread refuses a root that is no journal
                # before it could report the thread as merely missing.
                from journal.cli.commands.root import check_root

                await check_root(journal, root)
                key = await resolve_thread(journal, selection, root)
            elif selection.agent_id is None or selection.session_id is None:
                key = await resolve_thread(journal, selection, root)  # refuses
            else:
                key = selection.key()  # a new thread: the user left out is ~
        options = options_from_args(
            args,
            root=root,
            storage_options=storage_options,
            # The demo pauses between steps for a reader at a terminal.
            pace=0.3 if args.command == "demo" and terminal.tty else 0.0,
            key=key,
        )
        if isinstance(options, LogOptions) and options.follow:
            from journal.cli.commands.log import follow_log

            await follow_log(
                journal, options, lambda batch: _follow(batch, out, args.json, terminal)
            )
            return EXIT_OK
        report = await run_command(journal, options, out)
        _print(report, out, json=args.json, terminal=terminal)
    finally:
        await journal.aclose()
    return exit_status(report)


def _follow(batch: LogReport, out: TextIO, json: bool, terminal: Terminal) -> None:
    # With --json, --follow prints one JSON line per record (as export does), so
    # a consumer can read them as they come.
    if json:
        import msgspec

        from journal.cli.render_json import record_json

        tty = terminal.tty
        for record in batch.records:
            line = msgspec.json.encode(record_json(record))
            if tty:
                line = json_for_terminal(line)
            out.write(line.decode("utf-8") + "\n")
        out.flush()
    else:
        _print(batch, out, json=False, terminal=terminal)


async def _serve_ui(
    journal: Journal, root: str, args: argparse.Namespace, out: TextIO
) -> int:
    # The web package is imported only here: no other command pays for it.
    from journal.cli.commands.root import check_root
    from journal.web.command import UiOptions, serve_ui

    if args.json:
        await journal.aclose()
        raise usage_error("ui serves a web page and prints no data: drop --json")
    try:
        await check_root(journal, root)
    except BaseException:
        await journal.aclose()
        raise
    options = UiOptions(
        root=root,
        host=args.host,
        port=args.port,
        token=args.token,
        poll_interval=args.poll,
    )
    try:
        return await serve_ui(journal, options, out)
    finally:
        await journal.aclose()


def _print(
    report: Report, out: TextIO, *, json: bool, terminal: Terminal | None = None
) -> None:
    pieces = None
    if json:
        from journal.cli.render_json import json_pieces

        tty = (terminal or Terminal(out)).tty
        pieces = json_pieces(report, indent=tty)
        if pieces is not None and tty:
            pieces = [json_for_terminal(piece) for piece in pieces]
    binary = getattr(out, "buffer", None)
    if pieces is not None and binary is not None:
        # Straight to the byte stream, as it is encoded: a thread's state can be
        # megabytes of JSON, which decoding to text only for the text layer to
        # encode again would copy twice, and whose reader can take each piece
        # while the next is encoded.
        out.flush()
        for piece in pieces:
            binary.write(piece)
        binary.write(b"\n")
        binary.flush()
        text = ""
    elif pieces is not None:
        text = b"".join(pieces).decode("utf-8") + "\n"
    else:
        text = (terminal or Terminal(out)).render(report)
    if text:
        out.write(text)
        out.flush()
    from journal.cli.notes import render_notes

    notes = render_notes(report)
    if notes:
        sys.stderr.write(notes)


async def run_command(journal: Journal, options: Options, out: TextIO) -> Report:
    """Run the command ``options`` are for on ``journal``.

    ``log --follow`` is not run here (it prints as it goes: see
    :func:`journal.cli.commands.follow_log`); here it shows the log once.

    Args:
        journal: The open journal.
        options: The command's options.
        out: Where ``export`` without a file streams its records and ``demo``
            narrates; no other command writes to it.

    Returns:
        The command's report.
    """
    progress = TerminalProgress(sys.stderr)
    match options:
        case LsOptions():
            from journal.cli.commands.ls import list_threads

            return await list_threads(journal, options, progress)
        case IndexOptions():
            from journal.cli.commands.root import check_root
            from journal.cli.reports import IndexReport

            # Writes to the root: refuse one that is no journal, as readers do.
            await check_root(journal, options.root)
            added = await journal.index_threads()
            return IndexReport(len([k async for k in journal.threads()]), added)
        case LogOptions():
            from journal.cli.commands.log import show_log

            return await show_log(journal, options)
        case StateOptions():
            from journal.cli.commands.state import show_state

            return await show_state(journal, options)
        case DiffOptions():
            from journal.cli.commands.diff import show_diff

            return await show_diff(journal, options)
        case VerifyOptions():
            from journal.cli.commands.verify import verify_threads

            return await verify_threads(journal, options, progress)
        case SealOptions():
            from journal.cli.commands.seal import show_seal

            return await show_seal(journal, options)
        case CheckpointOptions():
            from journal.cli.commands.checkpoint import write_checkpoint

            return await write_checkpoint(journal, options)
        case ExportOptions():
            from journal.cli.commands.export import export_records

            return await export_records(
                journal, options, _export_sink(options.output, out)
            )
        case RecoverOptions():
            from journal.cli.commands.recover import recover_thread

            return await recover_thread(journal, options, progress)
        case ReconcileOptions():
            from journal.cli.commands.reconcile import reconcile_thread

            return await reconcile_thread(journal, options, progress)
        case RunsOptions():
            from journal.cli.commands.runs import show_runs

            return await show_runs(journal, options)
        case HistoryOptions():
            from journal.cli.commands.runs import show_history

            return await show_history(journal, options)
        case ImportOptions():
            from journal.cli.commands.import_slot import import_slot

            return await import_slot(journal, options)
        case ImportExportOptions():
            from journal.cli.commands.import_export import import_export

            return await import_export(journal, options)
        case DemoOptions():
            from journal.cli.commands.demo import run_tour

            return await run_tour(journal, options, out)


def _export_sink(
    path: str | None, out: TextIO
) -> Callable[[], AbstractContextManager[RecordSink]]:
    from journal.cli.sinks import jsonl_file, jsonl_stream

    if path is None:
        return lambda: jsonl_stream(out)
    return lambda: jsonl_file(path)


def exit_status(report: Report) -> int:
    """The exit status a command's report stands for."""
    from journal.cli.reports import DemoReport, VerifyThreadsReport

    if isinstance(report, VerifyThreadsReport):
        return EXIT_OK if report.ok else EXIT_PROBLEM
    if isinstance(report, DemoReport):
        return report.status
    return EXIT_OK
