"""``demo``: the ten-second tour, narrated as it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.errors import CommandError, usage_error
from journal.cli.reports import DemoReport

if TYPE_CHECKING:
    from typing import TextIO

    from journal.cli.options import DemoOptions
    from journal.engine import Journal

__all__ = ["run_tour"]


async def run_tour(journal: Journal, options: DemoOptions, out: TextIO) -> DemoReport:
    """``demo``: run the tour on ``journal``, narrating on ``out``.

    The tour is a story told as it happens (with pauses on a terminal), so unlike
    the other commands it writes while it runs; the report holds only its outcome.

    Raises:
        CommandError: The root is in-process memory, which the tour's child
            process cannot open (exit 2), or a step could not run.
    """
    # Imported here: the tour pulls in the agent runtime, which no other
    # command needs.
    from journal.cli.demo import DemoError, run_demo

    if options.root.startswith("memory://"):
        raise usage_error(
            "the demo crashes a writer process, so it needs a root another process "
            "can open (a path, file://... or s3://...)"
        )
    try:
        status = await run_demo(
            journal,
            root_url=options.root,
            storage_options=options.storage_options,
            cli_flags=options.cli_flags,
            out=out,
            pace=options.pace,
            incident=options.incident,
        )
    except DemoError as exc:
        raise CommandError(str(exc)) from None
    return DemoReport(status)
