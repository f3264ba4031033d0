"""``verify``: checksums, hash chain, epochs and checkpoints of threads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from journal.cli.commands.root import check_root
from journal.cli.commands.threads import map_bounded, select_threads
from journal.cli.errors import CommandError, usage_error
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
    """``verify``: every thread matching the filter (a user left out: any user).

    Raises:
        CommandError: The root is not a journal (exit 2), the filter names
            an agent and a session that have no thread (exit 1), or ``--trust`` /
            ``--anchor`` is unusable.
        InvalidKeyError: A filter id is not valid.
    """
    trust, anchor = _trust(options)
    await check_root(journal, options.root)
    keys = await select_threads(journal, options.filter)
    if not keys and options.filter.names_one_thread:
        selection = options.filter
        user = "~" if selection.anonymous else selection.user_id
        wanted = ", ".join(
            f"{name} {value}"
            for name, value in (
                ("agent", selection.agent_id),
                ("user", user),
                ("session", selection.session_id),
                ("thread", selection.thread_id),
            )
            if value is not None
        )
        raise CommandError(f"a thread of {wanted} does not exist under {options.root}")
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
