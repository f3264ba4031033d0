"""The commands: each turns a journal and its options into a report, printing nothing.

Every command is ``async (journal, options, ...) -> report``; the report types are
in :mod:`journal.cli.reports`, the option types in :mod:`journal.cli.options`.
"""

from __future__ import annotations

import typing as _typing

# Eager: these two functions share their module's name, and a lazy export would
# be shadowed by the submodule once anything imported it. Both modules are light
# (the events, the codec and the state projection every command loads anyway).
from journal.cli.commands.import_export import (
    event_from_json,
    import_export,
    read_export,
)
from journal.cli.commands.import_slot import import_slot, open_state_store
from journal.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from journal.cli.commands.checkpoint import write_checkpoint
    from journal.cli.commands.demo import run_tour
    from journal.cli.commands.diff import show_diff, state_changes
    from journal.cli.commands.export import RecordSink, export_records
    from journal.cli.commands.leases import read_lease_view, wait_for_lease
    from journal.cli.commands.log import RunFilter, follow_log, show_log
    from journal.cli.commands.ls import attention, list_threads, summarize_thread
    from journal.cli.commands.reconcile import check_verdicts, reconcile_thread
    from journal.cli.commands.recover import recover_thread
    from journal.cli.commands.root import check_root, probe_root
    from journal.cli.commands.runs import run_views, show_history, show_runs
    from journal.cli.commands.seal import show_seal
    from journal.cli.commands.state import show_state
    from journal.cli.commands.threads import (
        existing_head,
        resolve_thread,
        select_threads,
    )
    from journal.cli.commands.verify import verify_one, verify_threads

# Lazy (PEP 562): the CLI imports only the command it runs, and a front end
# that uses one command does not load the others (``turns`` alone pulls in the
# durable-turn client, ``import`` the state stores).
_EXPORTS: dict[str, str] = {
    "RecordSink": "journal.cli.commands.export",
    "RunFilter": "journal.cli.commands.log",
    "attention": "journal.cli.commands.ls",
    "check_root": "journal.cli.commands.root",
    "check_verdicts": "journal.cli.commands.reconcile",
    "existing_head": "journal.cli.commands.threads",
    "export_records": "journal.cli.commands.export",
    "follow_log": "journal.cli.commands.log",
    "list_threads": "journal.cli.commands.ls",
    "probe_root": "journal.cli.commands.root",
    "read_lease_view": "journal.cli.commands.leases",
    "reconcile_thread": "journal.cli.commands.reconcile",
    "recover_thread": "journal.cli.commands.recover",
    "resolve_thread": "journal.cli.commands.threads",
    "run_tour": "journal.cli.commands.demo",
    "run_views": "journal.cli.commands.runs",
    "select_threads": "journal.cli.commands.threads",
    "show_diff": "journal.cli.commands.diff",
    "show_history": "journal.cli.commands.runs",
    "show_log": "journal.cli.commands.log",
    "show_runs": "journal.cli.commands.runs",
    "show_seal": "journal.cli.commands.seal",
    "show_state": "journal.cli.commands.state",
    "state_changes": "journal.cli.commands.diff",
    "summarize_thread": "journal.cli.commands.ls",
    "verify_one": "journal.cli.commands.verify",
    "verify_threads": "journal.cli.commands.verify",
    "wait_for_lease": "journal.cli.commands.leases",
    "write_checkpoint": "journal.cli.commands.checkpoint",
}

__all__ = [
    "RecordSink",
    "RunFilter",
    "attention",
    "check_root",
    "check_verdicts",
    "event_from_json",
    "existing_head",
    "export_records",
    "follow_log",
    "import_export",
    "import_slot",
    "list_threads",
    "open_state_store",
    "probe_root",
    "read_export",
    "read_lease_view",
    "reconcile_thread",
    "recover_thread",
    "resolve_thread",
    "run_tour",
    "run_views",
    "select_threads",
    "show_diff",
    "show_history",
    "show_log",
    "show_runs",
    "show_seal",
    "show_state",
    "state_changes",
    "summarize_thread",
    "verify_one",
    "verify_threads",
    "wait_for_lease",
    "write_checkpoint",
]


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__, globals())
