"""The commands: each turns a journal and its options into a report, printing nothing.

Every command is ``async (journal, options, ...) -> report``; the report types are
in :mod:`journal.cli.reports`, the option types in :mod:`journal.cli.options`.
"""

from __future__ import annotations

from journal.cli.commands.checkpoint import write_checkpoint
from journal.cli.commands.demo import run_tour
from journal.cli.commands.diff import show_diff, state_changes
from journal.cli.commands.export import RecordSink, export_records
from journal.cli.commands.import_slot import import_slot, open_state_store
from journal.cli.commands.log import show_log
from journal.cli.commands.ls import list_threads, summarize_thread
from journal.cli.commands.recover import recover_thread
from journal.cli.commands.seal import show_seal
from journal.cli.commands.state import show_state
from journal.cli.commands.verify import verify_one, verify_threads

__all__ = [
    "RecordSink",
    "export_records",
    "import_slot",
    "list_threads",
    "open_state_store",
    "recover_thread",
    "run_tour",
    "show_diff",
    "show_log",
    "show_seal",
    "show_state",
    "state_changes",
    "summarize_thread",
    "verify_one",
    "verify_threads",
    "write_checkpoint",
]
