"""Writing a thread's seals, and judging its history against them.

See :mod:`journal.seals` for what a seal is. :func:`write_seal` stores one (at every
checkpoint of a journal opened with a signing key, and on demand);
:func:`check_seals` is the part of ``verify`` that a trusted public key turns on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import msgspec

from journal.engine.log import ChainBrokenError, ScanProblem
from journal.errors import CorruptRecordError
from journal.seals import decode_seal, encode_seal, public_key_id, seal_check

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from journal.engine.log import ThreadLog
    from journal.seals import Seal, Signer

__all__ = [
    "SealFindings",
    "check_seals",
    "latest_seal",
    "sealable_head",
    "write_seal",
]


async def write_seal(
    log: ThreadLog,
    signer: Signer,
    version: int,
    head: bytes,
    clock: Callable[[], float],
) -> Seal:
    """Sign and store the seal of ``log`` at ``version`` (record hash ``head``)."""
    seal = signer.sign(log.prefix, version, head, clock())
    await log.put_seal(version, encode_seal(seal))
    return seal


async def sealable_head(
    log: ThreadLog, own: Seal | None, first: int
) -> tuple[int, bytes]:
    """The head's version and hash, once what a new seal would vouch for is checked.

    A seal says the history up to it is the one its signer saw, so the signer
    checks it first: from its own latest seal (whose record must still have the
    hash it sealed: the history extends it) or, with none, from ``first`` (the
    first record kept), every record to the head is read and checked as
    ``verify`` checks it (framing, checksum, its hash, the chain, no gap). No data
    key is needed: an encrypted record is checked as stored.

    Raises:
        CorruptRecordError: A record is missing or fails a check
            (``ChainBrokenError``: the chain is broken), or the record at the own
            seal's version is not the one sealed.
    """
    start = own.version if own is not None and own.version >= first else first
    versions = await log.versions(start - 1)
    if not versions or versions[0] != start:
        cut = " (a seal vouched for it: the thread was cut short)" if own else ""
        raise CorruptRecordError(log.label, start, "record is missing" + cut)
    version, digest = start, b""
    async for batch in log.audit(versions, after=start - 1, prev_hash=None):
        for item in batch:
            if isinstance(item, ScanProblem):
                _refuse(log.label, item)
            if (
                own is not None
                and item.body.version == own.version == start
                and item.hash.hex() != own.hash
            ):
                raise CorruptRecordError(
                    log.label,
                    start,
                    "it is not the record sealed there (the history was "
                    "rewritten after it was sealed)",
                )
            version, digest = item.body.version, item.hash
    return version, digest


def _refuse(label: str, problem: ScanProblem) -> NoReturn:
    if problem.kind == "chain":
        raise ChainBrokenError(label, problem.version, problem.message)
    # A damaged record's problem is its error's text: raised again, not nested.
    prefix = str(CorruptRecordError(label, problem.version, ""))
    detail = problem.message.removeprefix(prefix)
    raise CorruptRecordError(label, problem.version, detail)


async def latest_seal(
    log: ThreadLog, trusted: Ed25519PublicKey | None = None
) -> Seal | None:
    """The seal of the highest version (valid for ``trusted``, when given)."""
    best: Seal | None = None
    for _, data in await log.read_seals():
        try:
            seal = decode_seal(data)
        except ValueError:
            continue
        if trusted is not None and seal_check(seal, trusted, log.prefix) is not None:
            continue
        if best is None or seal.version >= best.version:
            best = seal
    return best


class SealFindings(msgspec.Struct):
    """What :func:`check_seals` found.

    Attributes:
        problems: ``(version, message)`` of each failure.
        warnings: ``(version, message)`` of harmless findings.
        sealed: The highest version a valid seal (or the anchor) vouches for.
        key: The trusted key's id.
    """

    problems: list[tuple[int | None, str]]
    warnings: list[tuple[int | None, str]]
    sealed: int = 0
    key: str = ""


async def check_seals(
    log: ThreadLog,
    trusted: Ed25519PublicKey,
    hashes: Mapping[int, bytes],
    head: int,
    first: int,
    anchor: Seal | None = None,
) -> SealFindings:
    """Judge a thread's history against its seals and an optional anchor.

    Args:
        log: The thread.
        trusted: The public key seals must be signed with.
        hashes: The hash of every record that verify read intact, by version.
        head: The highest contiguous version verify read.
        first: The lowest version kept (retention removed those below).
        anchor: A seal kept elsewhere (``agent-journal seal``), which the history
            must extend.

    Every seal stored must be valid and agree with the log: a forged or replayed one
    is a problem, since a rewrite can only ever add such. A thread with no valid seal
    (and no anchor) is a problem too: deleting the seals is part of a rewrite. A seal
    of a version retention removed vouches for nothing (a warning; for the anchor, a
    problem): the history kept needs a seal of its own, which a signing journal
    writes at every checkpoint, retention's included.
    """
    found = SealFindings([], [], key=public_key_id(trusted))
    candidates: list[tuple[str, Seal]] = []
    for name, data in await log.read_seals():
        try:
            candidates.append((name, decode_seal(data)))
        except ValueError as exc:
            found.problems.append((None, f"seal {name} is unreadable: {exc}"))
    if anchor is not None:
        candidates.append(("the anchor given", anchor))
    for name, seal in candidates:
        why = seal_check(seal, trusted, log.prefix)
        if why is not None:
            found.problems.append((seal.version, f"seal {name} is not valid: {why}"))
            continue
        if seal.version < first:
            # It vouches for nothing kept: RETENTION is not signed, so a forged
            # marker could otherwise hide a rewrite behind seals of removed
            # versions. The anchor is a claim about this history: it must be kept.
            message = f"seal {name} covers version {seal.version}, which retention "
            if seal is anchor:
                found.problems.append(
                    (
                        seal.version,
                        message + f"removed (the log starts at {first}): the history "
                        "kept cannot be shown to extend it; anchor a newer seal",
                    )
                )
            else:
                found.warnings.append((seal.version, message + "removed"))
            continue
        actual = hashes.get(seal.version)
        if seal.version > head or actual is None:
            found.problems.append(
                (
                    seal.version,
                    f"seal {name} vouches for version {seal.version}, which the log "
                    "no longer holds intact (truncated or damaged history)",
                )
            )
            continue
        if actual.hex() != seal.hash:
            found.problems.append(
                (
                    seal.version,
                    f"the log's version {seal.version} is not the record seal {name} "
                    "signed: the history was rewritten",
                )
            )
            continue
        found.sealed = max(found.sealed, seal.version)
    if not found.sealed and not found.problems:
        kept = f" at or after version {first}, where retention left the log to start"
        found.problems.append(
            (
                None,
                f"no seal signed by {found.key}"
                + (kept if first > 1 else "")
                + ": the history cannot be vouched for",
            )
        )
    elif found.sealed and found.sealed < head:
        found.warnings.append(
            (
                found.sealed + 1,
                f"{head - found.sealed} record(s) after the last seal (version "
                f"{found.sealed}) are not sealed yet",
            )
        )
    return found
