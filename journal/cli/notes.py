"""What the CLI prints on stderr beside a report.

Its own module, so that a command printing JSON does not import the text renderer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.describe import thread_label
from journal.cli.reports import ExportReport

if TYPE_CHECKING:
    from journal.cli.reports import Report

__all__ = ["render_notes"]


def render_notes(report: Report) -> str:
    """What ``agent-journal`` prints on stderr about ``report`` (often nothing).

    Returns:
        Whole lines, each ending in a newline, or an empty string.
    """
    if isinstance(report, ExportReport) and report.output is not None:
        return (
            f"exported {report.count} records of {thread_label(report.key)} "
            f"to {report.output}\n"
        )
    return ""
