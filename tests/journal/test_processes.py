"""The journal across real processes on local disk: reload, zombies, races, crashes.

Children run ``_child.py`` with this interpreter; they print every acknowledged
commit (after ``append`` returned) on its own flushed line, so whatever they printed
before being paused or killed is what a caller was promised.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import uuid
from collections import Counter

import msgspec
import pytest

from journal import Journal, LeaseAcquired, MessageAppended, Msg, ThreadKey
from journal.engine.lease import read_lease
from journal.engine.log import ThreadLog
from projections import AgentState, AgentStateProjection, fold
from tests.journal._child import FENCED_EXIT
from tests.journal._procs import Child, check_acknowledged, message_text


def new_key() -> ThreadKey:
    return ThreadKey("proc-agent", f"s-{uuid.uuid4().hex[:12]}", user_id="u")


def replay(key: ThreadKey, records: list) -> bytes:
    projection = AgentStateProjection(str(key))
    return msgspec.msgpack.encode(fold(projection, projection.initial(key), records))


def only_harmless(report) -> None:
    assert report.ok, [str(p) for p in report.problems]
    for warning in report.warnings:
        assert "temporary file" in warning.message, str(warning)


@pytest.fixture
def root(tmp_path):
    return tmp_path / "journal"


async def test_append_in_one_process_reload_in_another(root):
    key = new_key()
    writer = Child("append", root, key, 7)
    try:
        assert writer.finish() == 0, writer.stderr()
        reader = Child("load", root, key)
        assert reader.finish() == 0, reader.stderr()
    finally:
        writer.close()
        reader.close()
    written = next(x for x in writer.lines if x.startswith("STATE "))[6:]
    loaded = next(x for x in reader.lines if x.startswith("STATE "))[6:]
    assert json.loads(loaded) == json.loads(written)
    here = await Journal.open(root).load(key)
    assert here.to_json() == AgentState.from_json(written).to_json()
    assert [m.text for m in here.context] == [f"child {i}" for i in range(7)]
    assert here.version == 8


async def test_zombie_writer_is_fenced(root):
    key = new_key()
    j = Journal.open(root)
    zombie = Child("zombie", root, key, 1.0)
    try:
        zombie.wait_for("ACK", count=5)
        zombie.kill(signal.SIGSTOP)
        try:
            # Wait out the paused holder's lease, then take over.
            async with j.writer(key, holder="parent", wait=60.0) as w:
                assert w.epoch > 1
                takeover_base = w.base_version
                fence_version = w.version
                await w.append([_say("parent 1")], batch_id="p-1")
                zombie.kill(signal.SIGCONT)
                rc = await asyncio.to_thread(zombie.finish)
                assert rc == FENCED_EXIT, (zombie.lines[-3:], zombie.stderr())
                await w.append([_say("parent 2")], batch_id="p-2")
                parent_epoch = w.epoch
        finally:
            zombie.kill(signal.SIGCONT)
    finally:
        zombie.close()
    fenced_line = zombie.lines[-1]
    assert fenced_line.startswith("FENCED "), zombie.lines[-3:]
    fenced_batch = fenced_line.split()[1]
    acked = zombie.acks()
    assert len(acked) >= 5
    text = {b: f"zombie {b[2:]}" for b in acked}
    text |= {"p-1": "parent 1", "p-2": "parent 2"}
    records = await check_acknowledged(
        j, key, acked | {"p-1": fence_version + 1, "p-2": fence_version + 2}, text
    )
    batches = [r.batch_id for r in records]
    assert fenced_batch not in batches
    # Everything the zombie committed lies before the fence; nothing after it.
    assert max(acked.values()) <= takeover_base < fence_version
    assert all(r.writer == "parent" for r in records[fence_version - 1 :])
    fence = records[fence_version - 1]
    assert any(isinstance(e, LeaseAcquired) for e in fence.events)
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs)
    only_harmless(await j.verify(key))
    lease, _ = await read_lease(j.store, ThreadLog(j.store, key).lease_key)
    assert lease is not None
    assert (lease.holder, lease.epoch) == ("parent", parent_epoch)
    state = await j.load(key)
    assert [m.text for m in state.context[-2:]] == ["parent 1", "parent 2"]
    assert msgspec.msgpack.encode(state) == replay(key, records)


async def test_racing_writer_processes(root):
    key = new_key()
    racers, rounds, per = 4, 5, 3
    children = [Child("race", root, key, f"p{i}", rounds, per) for i in range(racers)]
    try:
        for child in children:
            rc = await asyncio.to_thread(child.finish)
            assert rc == 0, child.stderr()
    finally:
        for child in children:
            child.close()
    j = Journal.open(root)
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
    records = await check_acknowledged(j, key, acked, {b: b for b in acked})
    assert len(records) == racers * rounds * (per + 1)
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs)
    # Each lease holding is one contiguous block: its fence, then its appends.
    by_epoch = Counter(epochs)
    assert set(by_epoch.values()) == {per + 1}
    for epoch, version in fences.items():
        assert records[version - 1].epoch == epoch
        assert any(isinstance(e, LeaseAcquired) for e in records[version - 1].events)
    for batch, version in acked.items():
        assert records[version - 1].epoch == ack_epochs[batch]
    report = await j.verify(key)
    assert report.ok, [str(p) for p in report.problems]
    assert report.warnings == []
    assert msgspec.msgpack.encode(await j.load(key)) == replay(key, records)


KILLS = int(os.environ.get("AJ_KILLS", "110"))
"""Kills per local layout (CI: 220 in all; AJ_KILLS=500 gives 1,000)."""


@pytest.mark.parametrize("layout", ["segments", "files"])
async def test_writer_killed_at_random_moments(root, layout):
    """Each SIGKILL loses nothing acknowledged: checked after every kill."""
    key = new_key()
    seed = int(os.environ.get("AJ_KILL_SEED", uuid.uuid4().int % 2**32))
    rng = random.Random(seed)  # noqa: S311 - test scheduling, not cryptography
    acked: dict[str, int] = {}
    segments = layout == "segments"
    for round_ in range(KILLS):
        child = Child("crash", root, key, round_, rng.choice([0, 1, 2, 5]), layout)
        try:
            if rng.random() < 0.7:
                # While appending (and checkpointing, for small intervals).
                child.wait_for("READY")
                await asyncio.sleep(rng.uniform(0.0, 0.08))
            else:
                # While taking the lease and committing the fence.
                child.wait_for("START")
                await asyncio.sleep(rng.uniform(0.0, 0.02))
            child.kill()
            assert child.finish() == -signal.SIGKILL, (seed, child.stderr())
        finally:
            child.close()
        acked |= child.acks()
        reader = Journal.open(root, segments=segments)
        await check_acknowledged(reader, key, acked, {b: b for b in acked})
    assert acked, f"no commit was acknowledged (seed {seed})"
    j = Journal.open(root, segments=segments)
    async with j.writer(key, holder="crasher") as w:
        await w.append([_say("final")], batch_id="final")
    acked["final"] = w.version
    text = {b: b for b in acked} | {"final": "final"}
    records = await check_acknowledged(j, key, acked, text)
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs), seed
    only_harmless(await j.verify(key))
    state, warnings = await j.load_with_warnings(key)
    assert warnings == [], seed
    assert msgspec.msgpack.encode(state) == replay(key, records)
    assert state.context[-1].text == "final"


@pytest.mark.parametrize(
    ("point", "layout", "lands", "leftover"),
    [
        # Records published file by file: temp, fsync, link, unlink, fsync dir.
        ("record-before-link", "files", False, True),
        ("record-after-link", "files", True, True),
        ("record-after-unlink", "files", True, False),
        # Records appended to a segment file: write the frame, fdatasync.
        ("record-mid-write", "segments", False, True),
        ("record-before-fdatasync", "segments", True, False),
        ("record-after-fdatasync", "segments", True, False),
        # Checkpoints, the hint and the lease are files in either layout.
        # A checkpoint's new chunks: frames in one write and one sync, or files
        # synced together before any is linked.
        ("chunks-before-fdatasync", "segments", False, False),
        ("chunks-before-link", "files", False, True),
        ("checkpoint-before-link", "segments", False, True),
        ("hint-before-rename", "segments", False, True),
        # A holder's renewal overwrites its LEASE in place: no file is left over.
        ("lease-before-overwrite", "segments", False, False),
    ],
)
async def test_writer_killed_at_a_fault_point(root, point, layout, lands, leftover):
    key = new_key()
    segments = layout == "segments"
    child = Child("fault", root, key, point, layout)
    try:
        child.wait_for("PAUSED")
        child.kill()
        assert child.finish() == -signal.SIGKILL
    finally:
        child.close()
    acked = child.acks()
    assert len(acked) == 3
    log_dir = root.joinpath(*key.segments, "log")
    # A store writing files leaves its segment files empty (locks, see
    # SegmentSet.guard_file); one writing frames keeps its records in them.
    framed = [
        n
        for n in os.listdir(log_dir)
        if n.startswith(".seg-") and os.path.getsize(log_dir / n) > 0
    ]
    assert bool(framed) == segments
    j = Journal.open(root, checkpoint_every=0, segments=segments)
    report = await j.verify(key)
    only_harmless(report)
    assert bool(report.warnings) == leftover, [str(w) for w in report.warnings]
    if point == "record-mid-write":
        assert ["torn tail" in w.message for w in report.warnings] == [True]
    before = [r async for r in j.records(key)]
    assert ("f-unacked" in [r.batch_id for r in before]) == lands
    state, warnings = await j.load_with_warnings(key)
    assert warnings == []
    assert msgspec.msgpack.encode(state) == replay(key, before)
    # The next writer (a restart of the same holder) resumes after the last record.
    async with j.writer(key, holder="faulty") as w:
        assert w.base_version == len(before)
        await w.append([_say("resumed")], batch_id="resumed")
        await w.checkpoint()
    acked["resumed"] = len(before) + 2
    text = {f"f-{i}": f"f-{i}" for i in range(3)} | {"resumed": "resumed"}
    records = await check_acknowledged(j, key, acked, text)
    assert message_text(records[-1].events) == "resumed"
    report = await j.verify(key)
    only_harmless(report)
    if point == "record-mid-write":
        # The next append cut the torn frame off before appending its own.
        assert report.warnings == []
    fresh = Journal.open(root, segments=not segments)
    state, warnings = await fresh.load_with_warnings(key)
    assert warnings == []
    assert msgspec.msgpack.encode(state) == replay(key, records)


def _say(text: str) -> MessageAppended:
    return MessageAppended(Msg("assistant", text))
