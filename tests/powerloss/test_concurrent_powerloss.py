"""Power loss while many threads of one journal are appended to at once, on LazyFS.

The journal scenarios append to one thread per process, whose syncs run on the
event loop. Appends to several threads at once hand their ``fdatasync`` to the
kernel instead (native AIO, ``stores._kernel_sync``), and acknowledge an append
only when the kernel reports its sync done: this suite cuts the power under that
path. Each round starts a writer child that acquires the same threads as the round
before (the same holder takes its own lease over at once), then appends to all of
them concurrently, printing every acknowledged version; at a random moment (seeded)
the parent SIGKILLs it and drops every unsynced byte. Then every thread must hold
every acknowledged append with its batch id and content, be a prefix of what was
committed (at most the one unacknowledged append in flight beyond its acks), pass
verify and load back every committed message.

LazyFS, as any FUSE file system, refuses no-wait reads, which on its own keeps the
store from ever handing a sync to the kernel; the child serves them with plain
reads (``_writer.fall_back_from_nowait``), and the test fails if no child reports a
sync handed to the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from journal import Journal
from tests.powerloss._harness import (
    assert_verify_clean,
    check_records,
    message_of,
    round_batches,
    rounds,
)
from tests.powerloss._writer import many_key, text_of
from tests.powerloss.conftest import SEED

if TYPE_CHECKING:
    from pathlib import Path

    from journal import ThreadKey
    from tests.powerloss._harness import Writer
    from tests.powerloss._lazyfs import LazyFS

pytestmark = pytest.mark.powerloss

# Enough threads that appends overlap all the time, so that syncs keep going to
# the kernel rather than back to the loop between two appends.
THREADS = 16
# The rounds use a new set of threads every this many: the checks read every thread
# whole after every cut, and bounded threads keep a full-size run linear.
ROUNDS_PER_SET = 20
KERNEL_EVERY = 50
HOLDER = "powerloss-many"
LEASE_TTL = 30.0
# Acquiring sixteen threads takes longer than one: a later cut leaves each round's
# appends time to reach the kernel while still landing in the acquire now and then.
MAX_DELAY = 0.5


@dataclass
class Thread:
    """What the parent knows one thread holds, from acknowledgements and reads."""

    key: ThreadKey
    batches: dict[int, str] = field(default_factory=dict)
    """version -> batch id of every commit known (fences: "")."""
    hashes: dict[int, str] = field(default_factory=dict)
    """version -> hash of every record read back after a cut."""
    epoch: int = 0
    head: int = 0

    def know(self, version: int, batch: str, where: str) -> None:
        known = self.batches.setdefault(version, batch)
        assert known == batch, f"{where}: version {version} is {batch!r}, was {known!r}"


@dataclass
class Report:
    """What one dead writer printed."""

    fences: dict[int, tuple[int, int]]
    """thread index -> (fence version, epoch)."""
    acks: dict[int, list[tuple[int, str]]]
    """thread index -> (version, batch id) of each acknowledged append, in order."""
    kernel: int
    """The last count of syncs handed to the kernel it printed (0: none)."""
    stopped: int

    @classmethod
    def of(cls, child: Writer) -> Report:
        report = cls({}, {i: [] for i in range(THREADS)}, 0, 0)
        for line in child.lines:
            kind, *fields = line.split()
            if kind == "fence":
                index, version, epoch = map(int, fields)
                report.fences[index] = (version, epoch)
            elif kind == "ack":
                report.acks[int(fields[0])].append((int(fields[1]), fields[2]))
            elif kind == "kernel":
                report.kernel = max(report.kernel, int(fields[0]))
            elif kind == "stopped":
                report.stopped += 1
        return report


def _text(batch: str) -> str:
    return text_of(batch, big=False)


async def _check_thread(
    j: Journal,
    thread: Thread,
    index: int,
    round_: int,
    fence: tuple[int, int] | None,
    acks: list[tuple[int, str]],
) -> int:
    """Check one thread after a cut; return its unacknowledged appends that landed."""
    where = f"round {round_} thread {index} (seed {SEED})"
    records = [r async for r in j.records(thread.key)]
    versions = [r.version for r in records]
    assert versions == list(range(1, len(records) + 1)), where
    head = len(records)
    by_version = {r.version: r for r in records}
    for version, batch in acks:
        record = by_version.get(version)
        assert record is not None, (
            f"{where}: acknowledged version {version} ({batch}) lost, head {head}"
        )
        assert record.batch_id == batch, (
            f"{where}: acknowledged version {version} is {record.batch_id!r}, "
            f"not {batch!r}"
        )
        assert message_of(record) == _text(batch), (
            f"{where}: acknowledged version {version} has the wrong content"
        )
    assert head >= thread.head, f"{where}: head {head} < earlier head {thread.head}"
    if fence is not None:
        # The fence is a commit: acquire returned only once it was synced.
        assert head >= fence[0], f"{where}: fence {fence[0]} lost, head {head}"
        assert fence[1] > thread.epoch, (
            f"{where}: the writer's epoch {fence[1]} is not above {thread.epoch}"
        )
        thread.know(fence[0], "", where)
    check_records(thread, records, _text, where)
    # The thread is a prefix of what this round committed to it: its fence, then
    # its batches in order, at most one of them (the last) unacknowledged.
    new = round_batches(
        [thread.batches[v] for v in range(thread.head + 1, head + 1)],
        None if fence is None else fence[0],
        thread.head,
        lambda n: f"{round_}-{index}-{n}",
        len(acks),
        where,
    )
    thread.hashes.update((r.version, r.hash) for r in records)
    thread.head = head
    thread.epoch = max([thread.epoch, *(r.epoch for r in records)])

    assert_verify_clean(await j.verify(thread.key), where)
    state = await j.load(thread.key)
    assert state.version == head, where
    expected = [text_of(b, big=False) for v, b in sorted(thread.batches.items()) if b]
    assert [m.text for m in state.context] == expected, (
        f"{where}: the loaded context is not the committed messages"
    )
    return len(new) - len(acks)


async def _check_round(
    root: Path, threads: list[Thread], round_: int, report: Report
) -> int:
    """Check every thread after a cut; return the unacknowledged appends landed."""
    j = Journal.open(root)
    in_flight = 0
    try:
        for index, thread in enumerate(threads):
            in_flight += await _check_thread(
                j,
                thread,
                index,
                round_,
                report.fences.get(index),
                report.acks[index],
            )
    finally:
        await j.aclose()
    return in_flight


def _config(root: Path, round_: int) -> dict[str, Any]:
    return {
        "mode": "journal-many",
        "root": str(root),
        "threads": THREADS,
        "set": round_ // ROUNDS_PER_SET,
        "holder": HOLDER,
        "lease_ttl": LEASE_TTL,
        "wait": LEASE_TTL * 4 + 5,
        "round": round_,
        "kernel_every": KERNEL_EVERY,
        # LazyFS refuses no-wait reads, which would keep the store from ever
        # handing a sync to the kernel (see _writer.fall_back_from_nowait).
        "nowait_fallback": True,
    }


def _threads(set_: int) -> list[Thread]:
    return [Thread(many_key(set_, i)) for i in range(THREADS)]


def test_power_cut_keeps_concurrent_appends_synced_by_the_kernel(
    lazyfs: LazyFS, cuts: int
) -> None:
    """Every append acknowledged to any of many concurrent threads survives a cut.

    After each cut every thread holds each of its acknowledged versions with the
    acknowledged batch id and message, is a contiguous prefix of what was
    committed (records seen earlier unchanged, at most one unacknowledged append
    beyond the acks), passes verify and loads every committed message; each
    round's writer takes the threads over with a higher epoch. Across the rounds
    some appends were acknowledged, and some writer handed syncs to the kernel:
    without that the cuts would not have tested the kernel path at all.
    """
    root = lazyfs.mount_point / "journal"
    rng = random.Random(f"{SEED}:concurrent")  # noqa: S311 - cut times
    cfgs = [_config(root, r) for r in range(cuts)]
    threads = _threads(0)
    acked = in_flight = stopped = 0
    kernel: list[int] = []
    dead_writers = rounds(lazyfs, cfgs, rng, MAX_DELAY)
    with contextlib.closing(dead_writers):
        for round_, child in enumerate(dead_writers):
            if round_ % ROUNDS_PER_SET == 0:
                threads = _threads(round_ // ROUNDS_PER_SET)
            report = Report.of(child)
            in_flight += asyncio.run(_check_round(root, threads, round_, report))
            acked += sum(len(a) for a in report.acks.values())
            stopped += report.stopped
            kernel.append(report.kernel)
    assert acked > 0, f"no append was acknowledged in {cuts} rounds (seed {SEED})"
    assert max(kernel) > 0, (
        f"no writer handed a sync to the kernel in {cuts} rounds (seed {SEED}): "
        f"counts printed {kernel}"
    )
    print(
        f"\npowerloss concurrent: {lazyfs.cuts} cuts, {THREADS} threads, "
        f"{acked} acknowledged appends, 0 lost, {in_flight} unacknowledged appends "
        f"survived, kernel syncs per round {kernel}, "
        f"{stopped} threads stopped by their lease guard"
    )
