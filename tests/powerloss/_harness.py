"""Writer children on a LazyFS mount, cut at random moments, and what they acked."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from journal import LeaseAcquired, MessageAppended
from tests.journal._procs import Child

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Iterable, Iterator

    from journal import Record
    from tests.powerloss._lazyfs import LazyFS

WRITER = Path(__file__).with_name("_writer.py")
# A cut lands uniformly within this many seconds after the writer starts work (its
# acquire: lease, replay, fence, about 0.05-0.15 s on an idle machine) or, three
# times in four, after it is ready (appends, checkpoints, renewals, retention):
# how long an acquire takes does not decide where most cuts land.
MAX_DELAY = 0.35
ACQUIRE_SHARE = 0.25
# What verify may say after a power cut (docs/FORMAT.md, README "Guarantees"): an
# interrupted write leaves a temporary file; the unsynced hint may be lost or name a
# checkpoint that was not synced, and such a checkpoint may be torn or lack a chunk;
# a lease renewed without a sync may be torn; an interrupted retention leaves records
# behind.
ALLOWED_WARNINGS = (
    "temporary file left by an interrupted write",
    "LAST_CHECKPOINT points at a missing checkpoint",
    "below the retention point",
    # Checkpoints are derived data written without a sync: one may be torn.
    "checkpoint (derived, written unsynced)",
    # A holder renews its own lease without a sync: the power cut that ended it may
    # leave LEASE torn, which proves no holder (the fence decides epochs).
    "LEASE is damaged, unreadable",
)


class Writer(Child):
    """A ``_writer.py`` child; its lines are collected as they come."""

    def __init__(self, cfg: dict[str, Any], errors: Path) -> None:
        self._start(str(cfg["mode"]), [str(WRITER), json.dumps(cfg)], errors)

    def go(self) -> None:
        """Let the writer start its work (it waits after its imports)."""
        self.wait_for("start")
        self.proc.send_signal(signal.SIGUSR1)

    def ready(self) -> tuple[int, int] | None:
        """(fence version, epoch) from ``ready``, or None if it never got there."""
        for line in self.lines:
            if line.startswith("ready "):
                _, version, epoch = line.split()
                return int(version), int(epoch)
        return None

    def stopped(self) -> bool:
        """Whether the writer stopped on its own (its lease renewals fell behind)."""
        return any(line.startswith("stopped ") for line in self.lines)

    def acked(self) -> list[tuple[int, str]]:
        """``(version, rest)`` of every ``ack`` line, in order."""
        out = []
        for line in self.lines:
            if line.startswith("ack "):
                _, version, *rest = line.split()
                out.append((int(version), " ".join(rest)))
        return out


def cut_at_random(
    fs: LazyFS, child: Writer, rng: random.Random, max_delay: float = MAX_DELAY
) -> Writer:
    """Let the writer go, cut the power at a random moment, return the dead writer."""
    try:
        child.go()
        if rng.random() >= ACQUIRE_SHARE:
            try:
                child.wait_for("ready")
            except AssertionError:
                if not fs.crashed():
                    raise
        time.sleep(rng.uniform(0.0, max_delay))
        crashed = fs.power_cut(child.proc)
        rc = child.finish()
        if rc != -signal.SIGKILL and not crashed:
            raise AssertionError(
                f"the writer ended by itself (exit {rc}) before the cut: "
                f"{child.lines[-3:]}, stderr: {child.stderr()}"
            )
    finally:
        child.close()
    return child


def rounds(
    fs: LazyFS,
    cfgs: list[dict[str, Any]],
    rng: random.Random,
    max_delay: float = MAX_DELAY,
) -> Iterator[Writer]:
    """One dead writer per config, each cut at a random moment.

    The next writer is started (it imports, then waits) before the caller checks
    the last cut, so that its start-up overlaps the checks. Use it under
    ``contextlib.closing`` so that a failed check also ends the spare writer.
    """
    spare: Writer | None = None
    try:
        for i, cfg in enumerate(cfgs):
            child = spare if spare is not None else Writer(cfg, fs.base)
            spare = None
            dead = cut_at_random(fs, child, rng, max_delay)
            if i + 1 < len(cfgs):
                spare = Writer(cfgs[i + 1], fs.base)
            yield dead
    finally:
        if spare is not None:
            spare.close()


def round_batches(
    new: list[str],
    fenced_at: int | None,
    after: int,
    batch: Callable[[int], str],
    acked: int,
    where: str,
) -> list[str]:
    """Check that a round's records are its fence, then its batches in order, at most
    one of them (the last) unacknowledged; return the batches.

    Args:
        new: The batch ids of the records past version ``after``, "" for a fence.
        fenced_at: The fence's version, if the writer printed it (None: cut
            before that, when at most the fence can have landed).
        after: The head before the round.
        batch: The round's n-th batch id.
        acked: How many appends the writer acknowledged.
        where: Names the round in failure messages.
    """
    if new and fenced_at is not None:
        assert after + 1 == fenced_at, where
        assert new[0] == "", where
        new = new[1:]
    elif new:
        assert new == [""], f"{where}: records {new} without a fence"
        new = []
    assert new == [batch(n) for n in range(len(new))], where
    assert acked <= len(new) <= acked + 1, (
        f"{where}: {acked} acknowledged, {len(new)} in the log"
    )
    return new


class Known(Protocol):
    """What a test knows a thread holds: each version's record hash and batch id."""

    hashes: dict[int, str]

    def know(self, version: int, batch: str, where: str) -> None:
        """Record ``batch`` (a fence: "") at ``version``; fail if it was another."""


def message_of(record: Record) -> str | None:
    """The text of the record's first message, if it has one."""
    for event in record.events:
        if isinstance(event, MessageAppended):
            return event.message.text
    return None


def check_records(
    known: Known, records: Iterable[Record], text: Callable[[str], str], where: str
) -> None:
    """Each record read back after a cut is unchanged since an earlier cut, and is a
    fence or the batch its id names, with that batch's message (``text``)."""
    for record in records:
        seen = known.hashes.get(record.version)
        assert seen in (None, record.hash), (
            f"{where}: version {record.version} changed after an earlier cut"
        )
        if any(isinstance(e, LeaseAcquired) for e in record.events):
            known.know(record.version, "", where)
            continue
        known.know(record.version, record.batch_id, where)
        assert message_of(record) == text(record.batch_id), (
            f"{where}: version {record.version} has the wrong content"
        )


def assert_verify_clean(report: Any, where: str) -> None:
    """``verify`` found no problem, and warned only of :data:`ALLOWED_WARNINGS`."""
    assert report.ok, f"{where}: verify problems {report.problems}"
    odd = [
        w for w in report.warnings if not any(a in w.message for a in ALLOWED_WARNINGS)
    ]
    assert not odd, f"{where}: undocumented verify warnings {odd}"
