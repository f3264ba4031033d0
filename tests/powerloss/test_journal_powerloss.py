"""Power loss under a live journal writer, on LazyFS: no acknowledged commit is lost.

Each scenario runs one thread on one LazyFS mount through many rounds. A round
starts a writer child that acquires the thread and appends in a loop, printing every
acknowledged version; at a random moment (seeded) the parent SIGKILLs it and drops
every unsynced byte (the power loss). Then it checks that every acknowledged commit
is there with its batch id and content, that the log is a prefix of what was
committed (contiguous, hash-chained, the records seen before unchanged, at most the
one unacknowledged commit in flight beyond the acknowledged ones), that verify
reports no problem (and only the warnings documented for interrupted writes), that
a load rebuilds every committed message, and that the next writer gets a higher
epoch, appends, and leaves verify clean.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.chunk_index import INDEX_MIN_REFS
from journal.crypto import StaticKeys
from journal.layout import ThreadLayout
from tests.powerloss._harness import (
    MAX_DELAY,
    assert_verify_clean,
    check_records,
    round_batches,
    rounds,
)
from tests.powerloss._writer import is_big, text_of
from tests.powerloss.conftest import SEED

if TYPE_CHECKING:
    from pathlib import Path

    from tests.powerloss._lazyfs import LazyFS

pytestmark = pytest.mark.powerloss

# A scenario starts a new thread every this many rounds: the checks read the whole
# thread after every cut, and a bounded thread keeps a full-size run linear.
ROUNDS_PER_THREAD = 20


def _key(round_: int) -> ThreadKey:
    return ThreadKey("powerloss", f"session-{round_ // ROUNDS_PER_THREAD}", user_id="u")


@dataclass(frozen=True)
class Scenario:
    """One thread's settings; every round's writer uses them."""

    name: str
    segments: bool
    checkpoint_every: int = 100
    blob_every: int = 0
    retain_every: int = 0
    lease_ttl: float = 30.0
    # How late after the writer is ready the cut may come (s).
    max_delay: float = MAX_DELAY
    # Each round's writer is a new holder waiting for the dead one's lease to
    # expire (else every writer is the same holder, which takes over at once).
    takeover: bool = False
    # Every record, checkpoint and chunk encrypted (one key per scenario).
    encrypted: bool = False
    # Every message ends a chunk: past 64 messages each checkpoint names its
    # chunks through index blobs (journal.chunk_index), derived data written
    # unsynced, which retention must make durable before it removes records.
    chunk_each: bool = False

    def __str__(self) -> str:
        return self.name


def _scenarios() -> list[Scenario]:
    out = []
    for segments in (True, False):
        layout = "segments" if segments else "files"
        out += [
            Scenario(f"{layout}-plain", segments),
            Scenario(f"{layout}-blobs", segments, checkpoint_every=10, blob_every=2),
            Scenario(f"{layout}-checkpoints", segments, checkpoint_every=2),
            # Renewals every 0.2 s, cuts up to 0.7 s in: a few renewals per round.
            Scenario(
                f"{layout}-renewal",
                segments,
                lease_ttl=0.4,
                takeover=True,
                max_delay=0.7,
            ),
            Scenario(
                f"{layout}-retention", segments, checkpoint_every=3, retain_every=4
            ),
            Scenario(
                f"{layout}-encrypted",
                segments,
                checkpoint_every=3,
                blob_every=3,
                encrypted=True,
            ),
            Scenario(
                f"{layout}-chunk-indexes",
                segments,
                checkpoint_every=5,
                retain_every=40,
                chunk_each=True,
            ),
        ]
    return out


@dataclass
class Ledger:
    """What the parent knows the thread holds, from acknowledgements and reads."""

    scenario: Scenario
    key: ThreadKey
    batches: dict[int, str] = field(default_factory=dict)
    """version -> batch id of every commit known (fences: "")."""
    hashes: dict[int, str] = field(default_factory=dict)
    """version -> hash of every record read back after a cut."""
    epoch: int = 0
    head: int = 0
    acked: int = 0
    in_flight: int = 0
    """Commits that survived although their acknowledgement was never printed."""

    def text(self, batch: str) -> str:
        round_, index = batch.split("-")
        if round_ == "p":
            return text_of(batch, big=False)
        return text_of(batch, is_big(int(index), self.scenario.blob_every))

    def know(self, version: int, batch: str, where: str) -> None:
        known = self.batches.setdefault(version, batch)
        assert known == batch, f"{where}: version {version} is {batch!r}, was {known!r}"


def _retained_from(root: Path, key: ThreadKey) -> int:
    # The layout of docs/FORMAT.md; these ids need no escaping.
    marker = (
        (root / key.namespace / key.agent_id / str(key.user_id) / key.session_id)
        / key.thread_id
        / "RETENTION"
    )
    if not marker.exists():
        return 1
    return int(json.loads(marker.read_bytes())["checkpoint"])


async def _check_round(
    root: Path,
    ledger: Ledger,
    round_: int,
    ready: tuple[int, int] | None,
    acks: list[tuple[int, str]],
) -> None:
    s = ledger.scenario
    where = f"{s.name} round {round_} (seed {SEED})"
    j = Journal.open(
        root,
        segments=s.segments,
        checkpoint_every=s.checkpoint_every,
        encryption=_provider(s),
    )
    try:
        key = ledger.key
        first = _retained_from(root, key)
        records = [r async for r in j.records(key, start=first)]
        versions = [r.version for r in records]
        assert versions == list(range(first, first + len(records))), where
        head = versions[-1] if versions else first - 1
        # Nothing acknowledged is missing: the head covers every ack.
        last_ack = acks[-1][0] if acks else 0
        assert head >= last_ack, f"{where}: head {head} < acknowledged {last_ack}"
        assert head >= ledger.head, f"{where}: head {head} < earlier head {ledger.head}"
        if head > 0:
            # Its entry in the thread index was synced before its LEASE.
            listed = [k async for k in j.threads()]
            assert key in listed, f"{where}: a thread with records is not listed"
            assert (root / "~threads" / "COMPLETE").is_file(), where
        if ready is not None:
            ledger.know(ready[0], "", where)
        for version, batch in acks:
            ledger.know(version, batch, where)
        check_records(ledger, records, ledger.text, where)
        assert set(ledger.batches) >= set(range(1, head + 1)), (
            f"{where}: versions {sorted(set(range(1, head + 1)) - set(ledger.batches))}"
            " were removed before anyone saw them"
        )
        # The log is a prefix of what this round committed: its fence, then its
        # batches in order, at most one of them (the last) unacknowledged.
        new = round_batches(
            [ledger.batches[v] for v in range(ledger.head + 1, head + 1)],
            None if ready is None else ready[0],
            ledger.head,
            lambda n: f"{round_}-{n}",
            len(acks),
            where,
        )
        ledger.in_flight += len(new) - len(acks)
        ledger.acked += len(acks)
        ledger.hashes.update((r.version, r.hash) for r in records)
        ledger.head = head
        for record in records:
            ledger.epoch = max(ledger.epoch, record.epoch)
        if ready is not None:
            ledger.epoch = max(ledger.epoch, ready[1])

        assert_verify_clean(await j.verify(key), f"{where}, after the cut")
        state = await j.load(key)
        assert state.version == head, where
        batches = [ledger.batches[v] for v in range(1, head + 1)]
        expected = [ledger.text(b) for b in batches if b]
        assert [m.text for m in state.context] == expected, (
            f"{where}: the loaded context is not the committed messages"
        )
        if s.chunk_each and len(state.context) >= 2 * INDEX_MIN_REFS:
            # The scenario reaches what it is for: checkpoints with index blobs.
            indexes = await j.store.list(ThreadLayout.of(key).index_dir)
            assert indexes, f"{where}: no chunk index was written"

        # The next writer continues: a higher epoch than any before, an append, a
        # clean close, and verify still clean.
        holder = f"parent-{round_}" if s.takeover else "powerloss"
        w = await j.acquire(
            key, holder=holder, lease_ttl=s.lease_ttl, wait=s.lease_ttl * 4 + 5
        )
        assert w.epoch > ledger.epoch, (
            f"{where}: the next writer's epoch {w.epoch} is not above {ledger.epoch}"
        )
        fence = w.version
        ledger.know(fence, "", where)
        batch = f"p-{round_}"
        message = Msg("user", ledger.text(batch))
        rec = await w.append([MessageAppended(message)], batch_id=batch)
        await w.close()
        ledger.know(rec.version, batch, where)
        ledger.epoch = w.epoch
        ledger.head = rec.version
        async for r in j.records(key, start=fence):
            ledger.hashes[r.version] = r.hash
        assert_verify_clean(await j.verify(key), f"{where}, after the next writer")
    finally:
        await j.aclose()


def _config(scenario: Scenario, root: Path, round_: int) -> dict[str, Any]:
    key = _key(round_)
    return {
        "mode": "journal",
        "root": str(root),
        "key": {
            "agent_id": key.agent_id,
            "session_id": key.session_id,
            "user_id": key.user_id,
            "thread_id": key.thread_id,
            "namespace": key.namespace,
        },
        "segments": scenario.segments,
        "checkpoint_every": scenario.checkpoint_every,
        "lease_ttl": scenario.lease_ttl,
        "holder": f"child-{round_}" if scenario.takeover else "powerloss",
        "wait": scenario.lease_ttl * 4 + 5,
        "round": round_,
        "blob_every": scenario.blob_every,
        "retain_every": scenario.retain_every,
        "chunk_each": scenario.chunk_each,
        "kek": _KEKS[scenario.name] if scenario.encrypted else None,
    }


# One key-encryption key per encrypted scenario, shared with its writer children.
_KEKS = {
    s.name: base64.b64encode(random.Random(s.name).randbytes(32)).decode()  # noqa: S311
    for s in _scenarios()
    if s.encrypted
}


def _provider(scenario: Scenario) -> StaticKeys | None:
    if not scenario.encrypted:
        return None
    return StaticKeys([base64.b64decode(_KEKS[scenario.name])])


@pytest.mark.parametrize("scenario", _scenarios(), ids=str)
def test_power_cut_keeps_acknowledged_commits(
    lazyfs: LazyFS, cuts: int, scenario: Scenario
) -> None:
    root = lazyfs.mount_point / "journal"
    rng = random.Random(f"{SEED}:{scenario.name}")  # noqa: S311 - cut times
    ledger = Ledger(scenario, _key(0))
    acked = in_flight = 0
    cfgs = [_config(scenario, root, r) for r in range(cuts)]
    stopped = 0
    dead_writers = rounds(lazyfs, cfgs, rng, scenario.max_delay)
    with contextlib.closing(dead_writers):
        for round_, child in enumerate(dead_writers):
            stopped += child.stopped()
            if _key(round_) != ledger.key:
                acked, in_flight = acked + ledger.acked, in_flight + ledger.in_flight
                ledger = Ledger(scenario, _key(round_))
            asyncio.run(
                _check_round(root, ledger, round_, child.ready(), child.acked())
            )
    print(
        f"\npowerloss {scenario.name}: {lazyfs.cuts} cuts, "
        f"{acked + ledger.acked} acknowledged commits, 0 lost, "
        f"{in_flight + ledger.in_flight} unacknowledged commits survived, "
        f"{stopped} writers stopped by their lease guard"
    )


class _CrashingRandom(random.Random):
    """Cut times as usual, but every second cut LazyFS segfaults first.

    The crash lands while the writer is at work: the draw of its delay comes
    after its start (and, three times in four, after it is ready).
    """

    def __init__(self, fs: LazyFS) -> None:
        super().__init__(f"{SEED}:lazyfs-crash")
        self.fs = fs
        self.draws = 0

    def uniform(self, a: float, b: float) -> float:
        self.draws += 1
        if self.draws % 2 == 0:
            os.kill(self.fs.pid, signal.SIGSEGV)
        return super().uniform(a, b)


def test_a_lazyfs_crash_counts_as_a_power_cut(lazyfs: LazyFS) -> None:
    """LazyFS dying by itself (it rarely does) drops what it had not synced.

    That is a power cut: the harness starts it again on the same backing
    directory, and every commit acknowledged before the crash is still there."""
    scenario = _scenarios()[0]
    root = lazyfs.mount_point / "journal"
    ledger = Ledger(scenario, _key(0))
    cfgs = [_config(scenario, root, r) for r in range(4)]
    with contextlib.closing(
        rounds(lazyfs, cfgs, _CrashingRandom(lazyfs), scenario.max_delay)
    ) as dead_writers:
        for round_, child in enumerate(dead_writers):
            assert _key(round_) == ledger.key
            asyncio.run(
                _check_round(root, ledger, round_, child.ready(), child.acked())
            )
    assert lazyfs.cuts == 4
    assert len(lazyfs.revivals) == 2, lazyfs.revivals
    assert all(r.startswith(f"exited {-signal.SIGSEGV}") for r in lazyfs.revivals)
    assert ledger.acked > 0
    lazyfs.revivals.clear()  # crashes made here are no news for the fixture
