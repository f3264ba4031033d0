"""``seal``: the latest signed seal of a thread, to publish elsewhere."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.commands.threads import existing_head
from journal.cli.errors import usage_error
from journal.cli.reports import SealReport

if TYPE_CHECKING:
    from journal.cli.options import SealOptions
    from journal.engine import Journal
    from journal.seals import Seal

__all__ = ["show_seal"]


async def show_seal(journal: Journal, options: SealOptions) -> SealReport:
    """``seal``: the thread's latest seal; with ``new``, sign one at the head first.

    Raises:
        CommandError: The thread does not exist, or ``--new`` without a signing key.
    """
    head = await existing_head(journal, options.key, options.root)
    seal: Seal | None
    if options.new:
        if journal.signer is None:
            raise usage_error(
                "seal --new needs a signing key: set AGENT_JOURNAL_SIGNING_KEY to "
                "an Ed25519 private key file (PEM)"
            )
        seal = await journal.seal(options.key)
    else:
        seal = await journal.latest_seal(options.key)
    return SealReport(options.key, head, seal)
