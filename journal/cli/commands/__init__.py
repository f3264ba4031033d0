"""The commands: each turns a journal and its options into a report, printing nothing.

Every command is ``async (journal, options, ...) -> report``; the report types are
in :mod:`journal.cli.reports`, the option types in :mod:`journal.cli.options`.
"""

from __future__ import annotations

from journal.cli.commands.checkpoint import write_checkpoint
from journal.cli.commands.demo import run_tour
from journal.cli.commands.diff import show_diff, state_changes
from journal.cli.commands.export import RecordSink, export_records
from journal.cli.commands.import_export import (
    event_from_json,
    import_export,
    read_export,
)
from journal.cli.commands.import_slot import import_slot, open_state_store
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
