"""``checkpoint``: write a checkpoint at a thread's head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.commands.threads import existing_head
from journal.cli.reports import CheckpointReport

if TYPE_CHECKING:
    from journal.cli.options import CheckpointOptions
    from journal.engine import Journal

__all__ = ["write_checkpoint"]


async def write_checkpoint(
    journal: Journal, options: CheckpointOptions
) -> CheckpointReport:
    """``checkpoint``: one checkpoint at the head (the lease is taken briefly).

    Raises:
        CommandError: The thread does not exist.
    """
    await existing_head(journal, options.key, options.root)
    version = await journal.checkpoint(options.key)
    return CheckpointReport(options.key, version)
