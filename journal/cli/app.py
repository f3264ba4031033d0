"""``main``: parse the command line, open the journal, run a command, print its report.

This module is the only place that starts an event loop, picks stdout and
stderr, and turns errors into exit statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from journal.cli.commands import (
    export_records,
    import_slot,
    list_threads,
    recover_thread,
    run_tour,
    show_diff,
    show_log,
    show_seal,
    show_state,
    verify_threads,
    write_checkpoint,
)
from journal.cli.config import parse_storage_options, resolve_root
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
    ImportOptions,
    LogOptions,
    LsOptions,
    RecoverOptions,
    SealOptions,
    StateOptions,
    VerifyOptions,
)
from journal.cli.parser import PROG, build_parser, options_from_args
from journal.cli.progress import TerminalProgress
from journal.cli.render_json import render_json
from journal.cli.render_text import render_notes, render_text
from journal.cli.reports import DemoReport, VerifyThreadsReport
from journal.cli.sinks import jsonl_file, jsonl_stream
from journal.engine import Journal
from journal.errors import InvalidKeyError, JournalError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from contextlib import AbstractContextManager
    from typing import TextIO

    from journal.cli.commands.export import RecordSink
    from journal.cli.options import Options
    from journal.cli.reports import Report

__all__ = ["exit_status", "main", "run_command"]


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


async def _run(args: argparse.Namespace) -> int:
    root = resolve_root(args.root)
    storage_options = parse_storage_options(args.options)
    try:
        journal = Journal.open(root, **journal_keys(), **storage_options)
    except (ValueError, TypeError) as exc:
        raise usage_error(f"cannot open the journal root {root!r}: {exc}") from None
    out = sys.stdout
    try:
        # Ids are checked only once the root opened, so a bad root is named first.
        options = options_from_args(
            args,
            root=root,
            storage_options=storage_options,
            # The demo pauses between steps for a reader at a terminal.
            pace=0.3 if args.command == "demo" and out.isatty() else 0.0,
        )
        report = await run_command(journal, options, out)
        _print(report, out, json=args.json)
    finally:
        await journal.aclose()
    return exit_status(report)


def _print(report: Report, out: TextIO, *, json: bool) -> None:
    document = render_json(report) if json else None
    if document is not None:
        text = document.decode("utf-8") + "\n"
    else:
        text = render_text(report)
    if text:
        out.write(text)
    notes = render_notes(report)
    if notes:
        sys.stderr.write(notes)


async def run_command(journal: Journal, options: Options, out: TextIO) -> Report:
    """Run the command ``options`` are for on ``journal``.

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
            return await list_threads(journal, options, progress)
        case LogOptions():
            return await show_log(journal, options)
        case StateOptions():
            return await show_state(journal, options)
        case DiffOptions():
            return await show_diff(journal, options)
        case VerifyOptions():
            return await verify_threads(journal, options, progress)
        case SealOptions():
            return await show_seal(journal, options)
        case CheckpointOptions():
            return await write_checkpoint(journal, options)
        case ExportOptions():
            return await export_records(
                journal, options, _export_sink(options.output, out)
            )
        case RecoverOptions():
            return await recover_thread(journal, options)
        case ImportOptions():
            return await import_slot(journal, options)
        case DemoOptions():
            return await run_tour(journal, options, out)


def _export_sink(
    path: str | None, out: TextIO
) -> Callable[[], AbstractContextManager[RecordSink]]:
    if path is None:
        return lambda: jsonl_stream(out)
    return lambda: jsonl_file(path)


def exit_status(report: Report) -> int:
    """The exit status a command's report stands for."""
    if isinstance(report, VerifyThreadsReport):
        return EXIT_OK if report.ok else EXIT_PROBLEM
    if isinstance(report, DemoReport):
        return report.status
    return EXIT_OK
