"""The journal on S3 across real processes: zombies, racing writers, crashes.

Children run ``_child.py`` with this interpreter and talk to moto's server over HTTP
(the endpoint is passed on their command line); the parent checks the bucket with a
journal of its own. Children print every acknowledged commit (after ``append``
returned) on its own flushed line, so whatever they printed before being paused or
killed is what a caller was promised.
"""

# The fixtures imported from tests.services are parameters of the tests below.

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import (
    Journal,
    LeaseAcquired,
    LeaseHeldError,
    MessageAppended,
    Msg,
    ThreadKey,
)
from journal.engine.lease import read_lease
from journal.engine.log import ThreadLog
from projections import AgentStateProjection, fold
from tests.journal._child import FENCED_EXIT
from tests.journal._procs import Child, check_acknowledged, key_json
from tests.services.s3 import journal_options, make_bucket, s3_server  # noqa: F401

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = [pytest.mark.s3, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


class S3Child(Child):
    """A ``_child.py`` process on S3 (the line handling is ``Child``'s)."""

    def __init__(
        self, mode: str, url: str, endpoint: str, key: ThreadKey, errors: Path, *args
    ) -> None:
        self._start(
            mode,
            ["-m", "tests.s3._child", mode, url, endpoint, key_json(key)]
            + [str(a) for a in args],
            errors,
            cwd=REPO,
        )


class Bucket:
    """A fresh bucket: its journal URL, endpoint and a factory of parent journals."""

    def __init__(self, endpoint: str, name: str, errors: Path) -> None:
        self.endpoint = endpoint
        self.url = f"s3://{name}/journal"
        self.errors = errors
        self._opened: list[Journal] = []

    def journal(self, clock: Callable[[], float] = time.time) -> Journal:
        # Journal.open hands every keyword it does not know to s3fs (which ignores
        # what it does not know either), so a clock is given to Journal itself.
        store = Journal.open(self.url, **journal_options(self.endpoint)).store
        j = Journal(store, clock=clock)
        self._opened.append(j)
        return j

    def child(self, mode: str, key: ThreadKey, *args: object) -> S3Child:
        return S3Child(mode, self.url, self.endpoint, key, self.errors, *args)

    async def aclose(self) -> None:
        for j in self._opened:
            await j.aclose()


@pytest.fixture
async def bucket(s3_server: str, tmp_path: Path) -> AsyncIterator[Bucket]:
    b = Bucket(s3_server, await make_bucket(s3_server), tmp_path)
    yield b
    await b.aclose()


def new_key() -> ThreadKey:
    return ThreadKey("s3-proc-agent", f"s-{uuid.uuid4().hex[:12]}", user_id="u")


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("assistant", text))


def replay(key: ThreadKey, records: list) -> bytes:
    projection = AgentStateProjection(str(key))
    return msgspec.msgpack.encode(fold(projection, projection.initial(key), records))


def clean(report) -> None:
    """S3 writes are single PUTs: nothing is ever left over, so no warning either."""
    assert report.ok, [str(p) for p in report.problems]
    assert report.warnings == [], [str(w) for w in report.warnings]


@pytest.mark.parametrize("how", ["lease-expired", "clock-skew"])
async def test_zombie_writer_is_fenced(bucket: Bucket, how: str) -> None:
    """A writer paused (SIGSTOP) past a takeover never lands another commit.

    ``lease-expired``: the zombie's 3 s lease runs out while it is stopped and the
    parent waits for that. ``clock-skew``: the zombie holds a 60 s lease, but the
    parent's clock runs two minutes ahead, so it takes over at once while the zombie
    still believes its lease valid: only the log can stop it (its next create
    collides with the fence, it reads the slot and sees the higher epoch).
    """
    key = new_key()
    skew = how == "clock-skew"
    ttl = 60.0 if skew else 3.0
    parent = bucket.journal(clock=(lambda: time.time() + 120.0) if skew else time.time)
    zombie = bucket.child("zombie", key, ttl)
    try:
        zombie.wait_for("ACK", count=5)
        zombie.kill(signal.SIGSTOP)
        try:
            async with parent.writer(key, holder="parent", wait=60.0) as w:
                assert w.epoch > 1
                fence_version = w.version
                await w.append([say("parent 1")], batch_id="p-1")
                zombie.kill(signal.SIGCONT)
                rc = await asyncio.to_thread(zombie.finish)
                assert rc == FENCED_EXIT, (zombie.lines[-3:], zombie.stderr())
                await w.append([say("parent 2")], batch_id="p-2")
                parent_epoch = w.epoch
        finally:
            zombie.kill(signal.SIGCONT)
    finally:
        zombie.close()
    fenced_line = zombie.lines[-1]
    assert fenced_line.startswith("FENCED "), zombie.lines[-3:]
    _, fenced_batch, seen_epoch = fenced_line.split()
    if skew:
        # Fenced through the log: it read the parent's epoch in a taken slot.
        assert seen_epoch == str(parent_epoch), fenced_line
    acked = zombie.acks()
    assert len(acked) >= 5
    text = {b: f"zombie {b[2:]}" for b in acked}
    text |= {"p-1": "parent 1", "p-2": "parent 2"}
    j = bucket.journal()
    records = await check_acknowledged(
        j, key, acked | {"p-1": fence_version + 1, "p-2": fence_version + 2}, text
    )
    assert len(records) == fence_version + 2
    assert fenced_batch not in [r.batch_id for r in records]
    # Everything the zombie committed lies before the fence; nothing after it.
    assert max(acked.values()) < fence_version
    assert all(r.writer == "parent" for r in records[fence_version - 1 :])
    fence = records[fence_version - 1]
    assert any(isinstance(e, LeaseAcquired) for e in fence.events)
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs)
    clean(await j.verify(key))
    lease, _ = await read_lease(j.store, ThreadLog(j.store, key).lease_key)
    assert lease is not None
    assert (lease.holder, lease.epoch) == ("parent", parent_epoch)
    state = await j.load(key)
    assert [m.text for m in state.context[-2:]] == ["parent 1", "parent 2"]
    assert msgspec.msgpack.encode(state) == replay(key, records)


async def test_racing_writer_processes(bucket: Bucket) -> None:
    """Writers in separate processes take turns on one thread through the lease."""
    key = new_key()
    racers, rounds, per = 4, 3, 3
    children = [bucket.child("race", key, f"p{i}", rounds, per) for i in range(racers)]
    try:
        for child in children:
            rc = await asyncio.to_thread(child.finish)
            assert rc == 0, child.stderr()
    finally:
        for child in children:
            child.close()
    acked: dict[str, int] = {}
    ack_epochs: dict[str, int] = {}
    fences: dict[int, int] = {}
    for child in children:
        acked |= child.acks()
        for line in child.lines:
            if line.startswith("ACK "):
                _, _, batch, epoch = line.split()
                ack_epochs[batch] = int(epoch)
            elif line.startswith("FENCE "):
                _, version, epoch = line.split()
                assert int(epoch) not in fences, "two writers got the same epoch"
                fences[int(epoch)] = int(version)
    assert len(acked) == racers * rounds * per
    assert len(fences) == racers * rounds
    j = bucket.journal()
    records = await check_acknowledged(j, key, acked, {b: b for b in acked})
    assert len(records) == racers * rounds * (per + 1)
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs)
    # Each lease holding is one contiguous block: its fence, then its appends.
    assert set(Counter(epochs).values()) == {per + 1}
    for epoch, version in fences.items():
        assert records[version - 1].epoch == epoch
        assert any(isinstance(e, LeaseAcquired) for e in records[version - 1].events)
    for batch, version in acked.items():
        assert records[version - 1].epoch == ack_epochs[batch]
    clean(await j.verify(key))
    assert msgspec.msgpack.encode(await j.load(key)) == replay(key, records)


S3_KILLS = int(os.environ.get("AJ_KILLS_S3", "40"))
"""Kills on S3 (CI: 40; AJ_KILLS_S3 sets more)."""


async def test_writers_killed_at_random_moments(bucket: Bucket) -> None:
    """SIGKILLed writers lose nothing they acknowledged; the next one takes over.

    Each round starts a writer under a new holder id, which must wait for the
    previous (killed) holder's lease to expire, and kills it at a random moment:
    while it waits for or takes the lease and commits its fence, or while it
    appends and checkpoints (every 0, 1, 2 or 5 records).
    """
    key = new_key()
    ttl = 1.5
    seed = int(os.environ.get("AJ_KILL_SEED", uuid.uuid4().int % 2**32))
    rng = random.Random(seed)  # noqa: S311 - test scheduling, not cryptography
    acked: dict[str, int] = {}
    for round_ in range(S3_KILLS):
        child = bucket.child("crash", key, round_, rng.choice([0, 1, 2, 5]), ttl)
        try:
            if rng.random() < 0.7:
                child.wait_for("READY")
                await asyncio.sleep(rng.uniform(0.0, 0.3))
            else:
                child.wait_for("START")
                await asyncio.sleep(rng.uniform(0.0, ttl + 0.5))
            child.kill()
            assert child.finish() == -signal.SIGKILL, (seed, child.stderr())
        finally:
            child.close()
        acked |= child.acks()
        # Every acknowledged commit is there after every kill.
        await check_acknowledged(bucket.journal(), key, acked, {b: b for b in acked})
    assert acked, f"no commit was acknowledged (seed {seed})"

    j = bucket.journal()
    lease, _ = await read_lease(j.store, ThreadLog(j.store, key).lease_key)
    assert lease is not None, seed
    # While the killed holder's lease runs, another holder is refused ...
    early = Journal(j.store, clock=lambda: lease.expires_at - 1.0)
    with pytest.raises(LeaseHeldError) as info:
        await early.acquire(key, holder="final")
    assert (info.value.holder, info.value.epoch) == (lease.holder, lease.epoch)
    # ... and takes over once it has expired.
    async with j.writer(key, holder="final", wait=60.0) as w:
        assert w.epoch == lease.epoch + 1, seed
        await w.append([say("final")], batch_id="final")
    taken, _ = await read_lease(j.store, ThreadLog(j.store, key).lease_key)
    assert taken is not None
    assert taken.holder == "final"
    assert taken.acquired_at >= lease.expires_at, seed
    acked["final"] = w.version
    records = await check_acknowledged(j, key, acked, {b: b for b in acked})
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs), seed
    clean(await j.verify(key))
    state, warnings = await bucket.journal().load_with_warnings(key)
    assert warnings == [], seed
    assert msgspec.msgpack.encode(state) == replay(key, records)
    assert state.context[-1].text == "final"


async def test_takeover_after_waiting_longer_than_its_own_ttl(bucket: Bucket) -> None:
    """A writer that waited out a dead holder's lease gets a lease it can use.

    The killed holder's lease (4 s, renewed just before it printed READY) has
    seconds left; the next writer waits for it with ``wait=`` and a 1 s lease of
    its own. The lease it then writes runs 1 s from that write, so its fence
    commit, right after, is within the lease.
    """
    key = new_key()
    holder = bucket.child("hold", key, 4.0)
    try:
        holder.wait_for("READY")
        holder.kill()
        assert holder.finish() == -signal.SIGKILL, holder.stderr()
    finally:
        holder.close()
    j = bucket.journal()
    async with j.writer(key, holder="next", lease_ttl=1.0, wait=30.0) as w:
        rec = await w.append([say("after the wait")], batch_id="after")
    records = await check_acknowledged(
        j, key, {"after": rec.version}, {"after": "after the wait"}
    )
    assert [r.writer for r in records] == ["holder", "next", "next"]
    clean(await j.verify(key))
