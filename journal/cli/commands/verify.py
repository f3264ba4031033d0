"""``verify``: checksums, hash chain, epochs and checkpoints of threads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from journal.cli.commands.threads import existing_head, map_bounded, select_threads
from journal.cli.errors import usage_error
from journal.cli.progress import NO_PROGRESS
from journal.cli.reports import VerifyThreadsReport
from journal.engine import Finding, VerifyReport
from journal.errors import JournalError
from journal.seals import decode_seal, load_public_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from journal.cli.options import VerifyOptions
    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey
    from journal.seals import Seal

__all__ = ["verify_one", "verify_threads"]


async def verify_one(
    journal: Journal,
    key: ThreadKey,
    trust: Ed25519PublicKey | None = None,
    anchor: Seal | None = None,
) -> VerifyReport:
    """The engine's report on ``key``; a check that cannot finish is a problem."""
    try:
        return await journal.verify(key, trust=trust, anchor=anchor)
    except JournalError as exc:
        report = VerifyReport(key)
        report.problems.append(Finding(None, f"verify could not finish: {exc}"))
        return report


async def verify_threads(
    journal: Journal, options: VerifyOptions, progress: Progress = NO_PROGRESS
) -> VerifyThreadsReport:
    """``verify``: the thread the filter names, else every thread matching it.

    Raises:
        CommandError: The one thread named does not exist, or ``--trust`` /
            ``--anchor`` is unusable.
        InvalidKeyError: A filter id is not valid.
    """
    trust, anchor = _trust(options)
    if options.filter.names_one_thread:
        key = options.filter.key()
        await existing_head(journal, key, options.root)
        keys = [key]
    else:
        keys = await select_threads(journal, options.filter)
    reports = await map_bounded(
        keys,
        lambda key: verify_one(journal, key, trust, anchor),
        progress,
        "verifying threads",
    )
    return VerifyThreadsReport(options.root, reports)


def _trust(options: VerifyOptions) -> tuple[Ed25519PublicKey | None, Seal | None]:
    if options.trust is None:
        if options.anchor is not None:
            raise usage_error("--anchor needs --trust")
        return None, None
    try:
        trust = load_public_key(options.trust)
        anchor = (
            decode_seal(Path(options.anchor).read_bytes())
            if options.anchor is not None
            else None
        )
    except (ValueError, OSError) as exc:
        raise usage_error(f"cannot use --trust/--anchor: {exc}") from None
    return trust, anchor
