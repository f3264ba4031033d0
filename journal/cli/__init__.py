"""The ``agent-journal`` command line (also ``python -m journal``).

Replay and audit tooling for operators, and the demo::

    agent-journal demo [--incident]
    agent-journal ls [PATH] [--namespace N] [--agent A] [--user U] [--session S]
                     [--attention]
    agent-journal log THREAD [--from N] [--to M] [--tail K] [--run R] [--type T]
                     [--follow]
    agent-journal runs THREAD [--run R]
    agent-journal history THREAD
    agent-journal state THREAD [--at N]
    agent-journal diff THREAD [--from N] [--to M]
    agent-journal verify [PATH] [filters]
    agent-journal checkpoint THREAD
    agent-journal export THREAD --format jsonl [--output FILE]
    agent-journal recover THREAD [--wait S]
    agent-journal reconcile THREAD --call ID=OUTCOME ... [--error ID=MSG] [--reason R]
    agent-journal import THREAD [--from URL | --from-export FILE]
    agent-journal ui [--host H] [--port N] [--token T] [--poll S]

THREAD is the path ``ls`` prints (``namespace/agent/user/session/thread``, ``~`` for
the anonymous user), or ``--agent A --session S [--user U] [--thread T]
[--namespace N]``; a user left out means any user (:mod:`journal.cli.names`).

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
including invalid ids, and on a root that is not a journal; 130 when interrupted.

A web front end calls the commands (:mod:`~journal.cli.commands`) with options it
builds itself, and renders their reports with
:func:`~journal.cli.render_json.render_json` or its own templates.

The package is layered so that other front ends can reuse the middle:

- :mod:`~journal.cli.parser` turns flags into typed options
  (:mod:`~journal.cli.options`);
- :mod:`~journal.cli.commands` turn a journal and options into a report
  (:mod:`~journal.cli.reports`), printing nothing;
- :mod:`~journal.cli.render_text` and :mod:`~journal.cli.render_json` turn a report
  into tables or a JSON document;
- :mod:`~journal.cli.app` (``main``) wires them to the terminal and exit statuses,
  and is the only place that starts an event loop.
"""

from __future__ import annotations

import typing as _typing

from journal.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from journal.cli.app import main, run
    from journal.cli.commands import open_state_store, state_changes
    from journal.cli.config import (
        DEFAULT_ROOT,
        ROOT_ENV,
        STORAGE_OPTIONS_ENV,
        parse_storage_options,
        resolve_root,
    )
    from journal.cli.describe import (
        describe_event,
        format_time,
        message_summary,
        shorten,
        thread_label,
    )
    from journal.cli.errors import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CommandError
    from journal.cli.parser import PROG, build_parser
    from journal.cli.render_json import event_json, record_json
    from journal.cli.render_text import format_table
    from journal.cli.reports import FieldChange

# Lazy (PEP 562), like the package root: a command imports only the modules it
# uses, so `agent-journal ls` does not pay for every other command's imports.
_EXPORTS: dict[str, str] = {
    "DEFAULT_ROOT": "journal.cli.config",
    "EXIT_OK": "journal.cli.errors",
    "EXIT_PROBLEM": "journal.cli.errors",
    "EXIT_USAGE": "journal.cli.errors",
    "PROG": "journal.cli.parser",
    "ROOT_ENV": "journal.cli.config",
    "STORAGE_OPTIONS_ENV": "journal.cli.config",
    "CommandError": "journal.cli.errors",
    "FieldChange": "journal.cli.reports",
    "build_parser": "journal.cli.parser",
    "describe_event": "journal.cli.describe",
    "event_json": "journal.cli.render_json",
    "format_table": "journal.cli.render_text",
    "format_time": "journal.cli.describe",
    "main": "journal.cli.app",
    "message_summary": "journal.cli.describe",
    "open_state_store": "journal.cli.commands",
    "parse_storage_options": "journal.cli.config",
    "record_json": "journal.cli.render_json",
    "resolve_root": "journal.cli.config",
    "run": "journal.cli.app",
    "shorten": "journal.cli.describe",
    "state_changes": "journal.cli.commands",
    "thread_label": "journal.cli.describe",
}

__all__ = [
    "DEFAULT_ROOT",
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_USAGE",
    "PROG",
    "ROOT_ENV",
    "STORAGE_OPTIONS_ENV",
    "CommandError",
    "FieldChange",
    "build_parser",
    "describe_event",
    "event_json",
    "format_table",
    "format_time",
    "main",
    "message_summary",
    "open_state_store",
    "parse_storage_options",
    "record_json",
    "resolve_root",
    "run",
    "shorten",
    "state_changes",
    "thread_label",
]


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__, globals())
