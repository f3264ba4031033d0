"""The local store's segment files: contract, races, torn tails, damage, layouts.

Records (``<20 digits>.rec``, and other ``.rec`` names) are frames appended to
per-directory segment files. These tests hold that layout to the object-store
contract, race it across threads and processes, kill writers inside an append,
damage frames on disk, and mix it with the file-per-record layout. Frames are found
and checked with the independent reader of ``tests.stores._segment_child``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from journal import CorruptRecordError, Journal, MessageAppended, Msg, ThreadKey
from journal.engine.log import ThreadLog
from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from journal.store import ObjectStore
from stores import segments as segments_module
from stores.local import LocalStore
from stores.segments import CACHED_MAX, MAX_OPEN, SegmentSet, is_segment, segment_of
from stores.testing import StoreContract
from tests.journal._syncs import syncs
from tests.stores._segment_child import (
    NOT_REACHED,
    POINTS,
    PUT,
    TOMBSTONE,
    body_for,
    encode_frame,
    flip,
    live,
    parse_segment,
    race_body,
    record_frame,
    record_name,
    segment_extent,
    segment_name,
    torn_length,
)

if TYPE_CHECKING:
    import builtins
    from collections.abc import Iterator, Sequence

REPO = Path(__file__).resolve().parents[2]
CHILD = "tests.stores._segment_child"
THREAD = "ns/agent/~/s/main/"
LOG = f"{THREAD}log/"
RACERS = 20
MIB = 1024 * 1024


def rec(version: int) -> str:
    return f"{LOG}{record_name(version)}"


def seg(root: Path, version: int, log: str = LOG) -> Path:
    return root / log / segment_name(version)


def write_halves(path: Path, data: bytes) -> Iterator[None]:
    """Write ``data`` where a writer's append puts it (after the last frame, into
    the reserve), in two steps: the first half, then (resumed) the second."""
    at = segment_extent(path)
    half = len(data) // 2
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data[:half], at)
        yield
        os.pwrite(fd, data[half:], at + half)
    finally:
        os.close(fd)


# --- the contract, every object a frame -----------------------------------------------

_NUMBERED = re.compile(r"^\d{20}\.rec$")


@contextlib.contextmanager
def _named(key: str) -> Iterator[None]:
    """Errors name the caller's key, not the suffixed one."""
    try:
        yield
    except (ObjectExistsError, ObjectNotFoundError, PreconditionFailedError) as exc:
        raise type(exc)(key) from exc


class SuffixedStore(ObjectStore):
    """A LocalStore seen through ``.rec`` names, so every object is a segment frame.

    A key's last segment gets ``.rec`` on the way in unless it already is a record
    name (``<20 digits>.rec``, which the contract uses for its version tests: those
    land in numbered segments and exercise the listing's segment skipping). The map
    is one to one on every key but a bare 20-digit name, which would meet its own
    record name, and which the contract never uses. Directories keep their names,
    so ``children`` passes through.
    """

    def __init__(self, inner: LocalStore) -> None:
        self.inner = inner
        self.url = inner.url

    @staticmethod
    def inward(key: str) -> str:
        name = key.rpartition("/")[2]
        if _NUMBERED.match(name):
            return key
        assert not re.fullmatch(r"\d{20}", name), key
        return key + ".rec"

    @staticmethod
    def outward(key: str) -> str:
        if _NUMBERED.match(key.rpartition("/")[2]):
            return key
        assert key.endswith(".rec"), key
        return key[: -len(".rec")]

    async def create(self, key: str, data: bytes) -> str:
        with _named(key):
            return await self.inner.create(self.inward(key), data)

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        with _named(key):
            return await self.inner.replace(self.inward(key), data, if_match=if_match)

    async def read(self, key: str) -> tuple[bytes, str]:
        with _named(key):
            return await self.inner.read(self.inward(key))

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        return await self.inner.read_many([self.inward(k) for k in keys])

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        # The suffix can reorder keys: "a" < "a-b" but "a.rec" > "a-b.rec" ("." sorts
        # after "-"), and it can lift a key over ``start_after`` ("k" <= "k" but
        # "k.rec" > "k"). So the inner listing is held to the contract on inner keys
        # (sorted, strictly after ``start_after``, which is a sound lower bound:
        # K > S implies K + ".rec" > S), then filtered and sorted again on outer keys.
        inner = await self.inner.list(prefix, start_after=start_after)
        assert inner == sorted(inner)
        assert len(set(inner)) == len(inner), inner
        assert start_after is None or all(k > start_after for k in inner)
        keys = [self.outward(k) for k in inner]
        return sorted(k for k in keys if start_after is None or k > start_after)

    async def delete(self, key: str) -> bool:
        return await self.inner.delete(self.inward(key))

    async def children(self, prefix: str) -> builtins.list[str]:
        return await self.inner.children(prefix)

    async def leftovers(self, prefix: str) -> builtins.list[str]:
        return await self.inner.leftovers(prefix)


class TestSegmentFrames(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path):
        root = tmp_path / "root"
        yield SuffixedStore(LocalStore(root))
        # Every object of the suite went to a segment: no other file was written.
        others = [p for p in root.rglob("*") if p.is_file() and not is_segment(p.name)]
        assert others == []


# --- one sync per append --------------------------------------------------------------


def _count_syncs(monkeypatch) -> list[str]:
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        calls.append("fdatasync")
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


async def test_an_append_to_a_segment_costs_one_fdatasync(tmp_path, monkeypatch):
    # Syncs through os.fdatasync: on a busy machine the store's inline writes turn
    # slow and it hands the sync to the kernel (native AIO), which this count
    # would not see (it failed that way about one run in two under load).
    store = LocalStore(tmp_path, kernel_syncs=False)
    await store.create(rec(1), b"the segment and its directory exist")
    calls = _count_syncs(monkeypatch)
    await store.create(rec(2), b"x")
    assert calls == ["fdatasync"]
    calls.clear()
    await LocalStore(tmp_path, fsync=False).create(rec(3), b"y")
    assert calls == []
    assert sorted(os.listdir(tmp_path / LOG)) == [segment_name(1)]
    assert [f.name for f in parse_segment(seg(tmp_path, 1))[0]] == [
        record_name(v) for v in (1, 2, 3)
    ]


async def test_a_replace_that_starts_a_segment_syncs_its_directory(tmp_path):
    """replace, like create: the frame and the new segment's directory entry."""
    store = LocalStore(tmp_path, kernel_syncs=False)
    with syncs() as calls:
        await store.replace(rec(1), b"first", if_match=None)
    log = str(tmp_path / LOG).rstrip("/")
    assert ("fdatasync", str(seg(tmp_path, 1))) in calls
    assert ("fsync", log) in calls
    data, etag = await store.read(rec(1))
    assert data == b"first"
    # Without syncs when asked for none.
    with syncs() as calls:
        await store.replace_unsynced(rec(1), b"second", if_match=etag)
    assert calls == []
    assert (await store.read(rec(1)))[0] == b"second"


@pytest.mark.parametrize("segments", [True, False], ids=["segments", "files"])
async def test_a_batch_of_blobs_costs_one_sync_per_segment(
    tmp_path, monkeypatch, segments
):
    """create_many: one fdatasync for all framed blobs; n + 1 syncs as files."""
    store = LocalStore(tmp_path, segments=segments)
    blobs = [os.urandom(100 * i + 1) for i in range(6)]
    items = [(f"t/blobs/{hashlib.sha256(b).hexdigest()}", b) for b in blobs]
    await store.create_many(items[:1])  # the directory (and segment) exist
    calls = _count_syncs(monkeypatch)
    assert await store.create_many(items) == [False] + [True] * 5
    assert calls == (["fdatasync"] if segments else ["fsync"] * 6)
    monkeypatch.undo()
    names = os.listdir(tmp_path / "t" / "blobs")
    assert (
        names == [".seg-blobs"]
        if segments
        else sorted(names) == sorted(k.rpartition("/")[2] for k, _ in items)
    )
    for reader in (store, LocalStore(tmp_path, segments=not segments)):
        assert await reader.read_many([k for k, _ in items]) == blobs
        assert await reader.list("t/blobs/") == sorted(k for k, _ in items)
    # Deleting them all frees the segment, as it does for records.
    for key, _ in items:
        assert await store.delete(key)
    assert os.listdir(tmp_path / "t" / "blobs") == []


# --- races ----------------------------------------------------------------------------


def _spawn(root: Path, ident: int, *bounds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", CHILD, str(root), "race", str(ident)]
        + [str(b) for b in bounds],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


@contextlib.contextmanager
def _racers(
    root: Path, count: int, *bounds: int
) -> Iterator[list[subprocess.Popen[str]]]:
    """``count`` racers, each ready; told to exit after the block (each must exit
    0), and killed if the block failed or one is still running."""
    procs = [_spawn(root, i, *bounds) for i in range(count)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        yield procs
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("exit\n")
            proc.stdin.flush()
        assert [p.wait(timeout=60) for p in procs] == [0] * count
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _release(procs: list[subprocess.Popen[str]], lines: list[str]) -> list[list[str]]:
    """Send each racer its line (they block on stdin), then collect their outcomes."""
    for proc, line in zip(procs, lines, strict=True):
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    outcomes = []
    for proc in procs:
        assert proc.stdout is not None
        got = []
        while (line := proc.stdout.readline().strip()) != "end":
            assert line, "a racer died"
            got.append(line)
        outcomes.append(got)
    return outcomes


def _check_segments(root: Path, log: str, expected: dict[str, bytes]) -> None:
    """Each segment parses cleanly: one whole put per name, nothing else."""
    by_segment: dict[str, set[str]] = {}
    for key in expected:
        name = key.rpartition("/")[2]
        by_segment.setdefault(segment_name(int(name[:20])), set()).add(name)
    assert sorted(os.listdir(root / log)) == sorted(by_segment)
    for segment, names in by_segment.items():
        frames, tail = parse_segment(root / log / segment)
        assert tail == 0
        assert all(f.kind == PUT and f.data_ok for f in frames)
        assert sorted(f.name for f in frames) == sorted(names)
    data = asyncio.run(LocalStore(root).read_many(list(expected)))
    assert data == list(expected.values())


def test_create_races_across_processes(tmp_path):
    """20 processes: one winner per record key; disjoint keys all land."""
    root = tmp_path / "root"
    with _racers(root, RACERS) as procs:
        expected: dict[str, bytes] = {}
        # A new segment, an existing one, and the first key of the next segment.
        for version in (1, 2, 1024):
            key = rec(version)
            outcomes = _release(procs, [f"create {key}"] * RACERS)
            winners = [i for i, o in enumerate(outcomes) if o[0].startswith("won ")]
            assert len(winners) == 1, outcomes
            (winner,) = winners
            assert all(o == ["lost"] for i, o in enumerate(outcomes) if i != winner)
            etag = outcomes[winner][0].split()[1]
            body = race_body(winner, key)
            assert asyncio.run(LocalStore(root).read(key)) == (body, etag)
            expected[key] = body
        # Consecutive keys across a segment boundary, dealt round-robin: each racer
        # appends its own keys while the others append theirs to the same files.
        versions = list(range(2000, 2100))
        lines = [
            "create " + " ".join(rec(v) for v in versions[i::RACERS])
            for i in range(RACERS)
        ]
        outcomes = _release(procs, lines)
        for i, got in enumerate(outcomes):
            assert all(o.startswith("won ") for o in got), got
            expected |= {rec(v): race_body(i, rec(v)) for v in versions[i::RACERS]}
    assert asyncio.run(LocalStore(root).list(LOG)) == sorted(expected)
    _check_segments(root, LOG, expected)
    assert asyncio.run(LocalStore(root).leftovers("")) == []


def test_create_races_across_processes_that_drop_their_indexes(tmp_path):
    """Six processes that each keep one idle segment index and one open descriptor
    claim the same records of eight threads (a read, then a create), each going
    round the threads from another one: every racer drops and rebuilds indexes and
    reopens files while the others append to them. Each record has one winner,
    whose bytes are the frame on disk, and no segment holds anything else."""
    root = tmp_path / "root"
    logs = [f"ns/a/~/s/t{d}/log/" for d in range(8)]
    versions = range(1, 11)
    racers = 6
    with _racers(root, racers, 1, 1) as procs:
        orders = [
            [f"{log}{record_name(v)}" for v in versions for log in logs[i:] + logs[:i]]
            for i in range(racers)
        ]
        outcomes = _release(procs, ["claim " + " ".join(keys) for keys in orders])
    winners: dict[str, list[int]] = {}
    for i, (keys, got) in enumerate(zip(orders, outcomes, strict=True)):
        assert len(got) == len(keys), got
        for key, outcome in zip(keys, got, strict=True):
            assert outcome == "lost" or outcome.startswith("won "), outcome
            if outcome.startswith("won "):
                winners.setdefault(key, []).append(i)
    assert sorted(winners) == sorted(orders[0])
    assert all(len(won) == 1 for won in winners.values()), winners
    for log in logs:
        _check_segments(
            root,
            log,
            {k: race_body(w[0], k) for k, w in winners.items() if k.startswith(log)},
        )


def _in_threads(root: Path, jobs: list[list[str]]) -> list[list[str | BaseException]]:
    """Each thread creates its keys with its own store (own descriptors, so only
    ``flock`` keeps them apart), all starting at once."""
    barrier = threading.Barrier(len(jobs))
    results: list[list[str | BaseException]] = [[] for _ in jobs]

    def run(i: int) -> None:
        store = LocalStore(root)

        async def go() -> None:
            for key in jobs[i]:
                try:
                    results[i].append(await store.create(key, race_body(i, key)))
                except BaseException as exc:
                    results[i].append(exc)

        barrier.wait()
        asyncio.run(go())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return results


def test_create_races_across_threads(tmp_path):
    root = tmp_path / "root"
    expected: dict[str, bytes] = {}
    for version in (1, 2, 1024):
        key = rec(version)
        results = [r for (r,) in _in_threads(root, [[key]] * RACERS)]
        winners = [i for i, r in enumerate(results) if isinstance(r, str)]
        assert len(winners) == 1, results
        (winner,) = winners
        losers = [r for i, r in enumerate(results) if i != winner]
        assert all(isinstance(r, ObjectExistsError) for r in losers), losers
        assert asyncio.run(LocalStore(root).read(key)) == (
            race_body(winner, key),
            results[winner],
        )
        expected[key] = race_body(winner, key)
    versions = list(range(2000, 2100))
    results = _in_threads(root, [[rec(v) for v in versions[i::8]] for i in range(8)])
    for i, got in enumerate(results):
        assert all(isinstance(r, str) for r in got), got
        expected |= {rec(v): race_body(i, rec(v)) for v in versions[i::8]}
    assert asyncio.run(LocalStore(root).list(LOG)) == sorted(expected)
    _check_segments(root, LOG, expected)


# --- readers never see a partial frame ------------------------------------------------


class _Reader(threading.Thread):
    """Hammers ``list`` and ``read`` with its own store and loop."""

    def __init__(self, root: Path, bodies: dict[str, bytes]):
        super().__init__(daemon=True)
        self.root = root
        self.bodies = bodies
        self.stop = threading.Event()
        self.absent = 0
        self.full = 0
        self.bad: list[tuple[str, int]] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self.errors.append(exc)

    def _check(self, key: str, data: bytes) -> None:
        if data == self.bodies[key]:
            self.full += 1
        else:
            self.bad.append((key, len(data)))

    async def _run(self) -> None:
        store = LocalStore(self.root)
        keys = list(self.bodies)
        seen: set[str] = set()
        while not self.stop.is_set():
            listed = await store.list(LOG)
            # A listed key stays listed, and is whole.
            assert seen <= set(listed), (seen, listed)
            seen = set(listed)
            for key in listed:
                self._check(key, (await store.read(key))[0])
            pending = [k for k in keys if k not in seen]
            if not pending:
                return
            # The next keys are being written right now.
            for key in pending[:2]:
                try:
                    data, _ = await store.read(key)
                except ObjectNotFoundError:
                    self.absent += 1
                else:
                    self._check(key, data)
            for key, data in zip(
                pending, await store.read_many(pending[:2]), strict=False
            ):
                if data is not None:
                    self._check(key, data)


@pytest.mark.parametrize(
    ("versions", "size"),
    [
        # Larger than the reserve: each append extends the file.
        (range(1018, 1030), MIB),
        # Written into the reserve, where a reader without the shared lock could
        # see a frame's header before its data.
        (range(1000, 1080), 6000),
    ],
    ids=["extending", "into-the-reserve"],
)
async def test_reader_sees_whole_records_or_nothing(tmp_path, versions, size):
    # Across a segment boundary.
    bodies = {rec(v): bytes([v % 251]) * size for v in versions}
    reader = _Reader(tmp_path, bodies)
    reader.start()

    async def writer(keys: list[str]) -> None:
        store = LocalStore(tmp_path)
        for key in keys:
            await store.create(key, bodies[key])

    keys = list(bodies)
    await asyncio.gather(writer(keys[0::2]), writer(keys[1::2]))
    await asyncio.to_thread(reader.join, 120)
    reader.stop.set()
    assert not reader.is_alive()
    assert reader.errors == []
    assert reader.bad == []
    assert reader.full >= len(bodies)


# --- a writer killed inside an append -------------------------------------------------


def _append_and_die(root: Path, key: str, point: str, *extra: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", CHILD, str(root), "append", key, point, *extra],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != NOT_REACHED, "the crash point was never reached"
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


SIZE = 64 * 1024
ID_FRAME_SIZE = 11 + 4 + 16 + 4  # header, header CRC, 16-byte id, data CRC


@pytest.mark.parametrize("version", [3, 1024], ids=["same-segment", "new-segment"])
@pytest.mark.parametrize("point", POINTS)
async def test_killed_during_an_append(tmp_path, point, version):
    root = tmp_path / "root"
    early = LocalStore(root)  # indexed the segment before the crash
    earlier = {rec(v): f"record {v}".encode() for v in (1, 2)}
    for k, d in earlier.items():
        await early.create(k, d)
    assert await early.list(LOG) == list(earlier)
    key = rec(version)
    body = body_for(key, SIZE)
    path = seg(root, version)
    before = path.read_bytes()[: segment_extent(path)] if path.exists() else b""

    _append_and_die(root, key, point, str(SIZE))

    landed = point != "mid-write"
    # A new segment starts with its file-id frame, written with the first record.
    id_frame = 0 if before else ID_FRAME_SIZE
    length = id_frame + len(encode_frame(PUT, record_name(version), body))
    torn = 0 if landed else torn_length(length, len(before))
    assert 0 < torn < length or landed
    assert segment_extent(path) == len(before) + (length if landed else torn)
    expected = dict(earlier) | ({key: body} if landed else {})
    for store in (early, LocalStore(root)):
        if landed:
            assert (await store.read(key))[0] == body
        else:
            with pytest.raises(ObjectNotFoundError):
                await store.read(key)
        assert await store.read_many([*earlier, key]) == [
            *earlier.values(),
            body if landed else None,
        ]
        assert await store.list(LOG) == sorted(expected)
        assert await store.list(THREAD, start_after=rec(1)) == sorted(expected)[1:]
        # A torn first append of a new segment may leave its file-id frame whole.
        reported = torn - id_frame if torn > id_frame else torn
        tails = [f"{LOG}{segment_name(version)} (torn tail: {reported} bytes)"]
        assert await store.leftovers(THREAD) == (tails if torn else [])
        assert await store.children(THREAD) == ["log"]

    # The slot is free exactly when the key is absent; a free slot's torn bytes go.
    fresh = LocalStore(root)
    if landed:
        with pytest.raises(ObjectExistsError):
            await fresh.create(key, b"a retry")
        assert segment_extent(path) == len(before) + length
    else:
        body = b"the retry"
        etag = await fresh.create(key, body)
        assert await fresh.read(key) == (body, etag)
        retry = encode_frame(PUT, record_name(version), body)
        assert segment_extent(path) == len(before) + id_frame + len(retry)
    assert path.read_bytes().startswith(before)
    frames, tail = parse_segment(path)
    assert tail == 0
    assert all(f.kind == PUT and f.data_ok for f in frames)
    expected[key] = body
    for store in (early, fresh, LocalStore(root)):
        assert await store.read_many(list(expected)) == list(expected.values())
        assert await store.list(LOG) == sorted(expected)
        assert await store.leftovers("") == []


@pytest.mark.parametrize("version", [3, 1024], ids=["same-segment", "new-segment"])
async def test_a_torn_tail_is_overwritten_with_zeros_not_cut(
    tmp_path, monkeypatch, version
):
    """The next writer clears a torn tail by writing zeros over it (the reserve's
    own end-of-frames mark), never with ``ftruncate``: LazyFS, which the power-loss
    suite runs on, empties a file it has not cached when asked to truncate it and
    then fails the call (ENOENT), so a cut there could lose every frame before it."""
    root = tmp_path / "root"
    earlier = {rec(v): f"record {v}".encode() for v in (1, 2)}
    for k, d in earlier.items():
        await LocalStore(root).create(k, d)
    key = rec(version)
    path = seg(root, version)
    _append_and_die(root, key, "mid-write", str(SIZE))
    torn_size = path.stat().st_size
    assert segment_extent(path) > (ID_FRAME_SIZE if version == 1024 else 0)

    def no_cut(fd: int, length: int) -> None:
        raise AssertionError(f"ftruncate({fd}, {length}) on a torn tail")

    monkeypatch.setattr(os, "ftruncate", no_cut)
    store = LocalStore(root)
    etag = await store.create(key, b"the retry")
    assert await store.read(key) == (b"the retry", etag)
    assert path.stat().st_size >= torn_size  # zeros where the torn bytes were
    frames, tail = parse_segment(path)
    assert tail == 0
    assert all(f.data_ok for f in frames)
    names = [f.name for f in frames if f.kind == PUT]
    assert names[-1] == record_name(version)  # the retry, after the earlier frames
    expected = earlier | {key: b"the retry"}
    for reader in (store, LocalStore(root)):
        assert await reader.read_many(list(expected)) == list(expected.values())
        assert await reader.leftovers("") == []


async def test_a_torn_first_frame_leaves_no_child(tmp_path):
    """A directory whose only segment holds a torn first frame holds no object."""
    root = tmp_path / "root"
    await LocalStore(root).create(rec(1), b"a thread that exists")
    other = "ns/agent/~/s/other/log/"
    _append_and_die(root, f"{other}{record_name(1)}", "mid-write", str(SIZE))
    store = LocalStore(root)
    assert await store.list("ns/agent/~/s/other/") == []
    assert await store.leftovers("ns/agent/~/s/other/")
    assert await store.children("ns/agent/~/s/") == ["main"]


async def test_a_frame_inside_torn_data_is_no_object(tmp_path):
    """Torn data that happens to hold a whole frame (a record quoting a segment
    file, say) is still a torn tail: the quoted frame must not become an object.

    The module docstring: "A frame is *torn* when the file ends inside it"."""
    root = tmp_path / "root"
    store = LocalStore(root)
    for v in (1, 2):
        await store.create(rec(v), f"record {v}".encode())
    key = rec(3)
    before = segment_extent(seg(root, 3))
    _append_and_die(root, key, "mid-write", str(SIZE), record_name(9))
    body = body_for(key, SIZE, record_name(9))
    length = len(encode_frame(PUT, record_name(3), body))
    torn = torn_length(length, before)
    assert segment_extent(seg(root, 3)) == before + torn
    fresh = LocalStore(root)
    assert await fresh.list(LOG) == [rec(1), rec(2)]
    with pytest.raises(ObjectNotFoundError):
        await fresh.read(rec(9))
    assert await fresh.leftovers(THREAD) == [
        f"{LOG}{segment_name(3)} (torn tail: {torn} bytes)"
    ]
    await fresh.create(key, b"the retry")
    size = before + len(encode_frame(PUT, record_name(3), b"the retry"))
    assert segment_extent(seg(root, 3)) == size


@pytest.mark.parametrize("embed", [None, record_name(9)], ids=["plain", "quoting"])
async def test_a_reader_between_two_halves_of_a_frame(tmp_path, embed):
    """A reader may look while a large frame is half written (a write lands page by
    page). It must see nothing of it then, and the whole record once it is complete,
    also when the data quotes a whole frame."""
    store = LocalStore(tmp_path)
    for v in (1, 2):
        await store.create(rec(v), f"record {v}".encode())
    reader = LocalStore(tmp_path)
    assert await reader.list(LOG) == [rec(1), rec(2)]
    body = body_for(rec(3), SIZE, embed)
    whole = encode_frame(PUT, record_name(3), body)
    # The bytes a writer's append puts there, in two steps.
    halves = write_halves(seg(tmp_path, 3), whole)
    next(halves)
    assert await reader.list(LOG) == [rec(1), rec(2)]
    next(halves, None)
    assert await reader.list(LOG) == [rec(1), rec(2), rec(3)]
    assert (await reader.read(rec(3)))[0] == body
    assert await reader.leftovers("") == []


def test_a_reader_waits_for_a_frame_being_written_into_the_reserve(tmp_path):
    """A writer fills the reserve in place, under its exclusive lock. A reader of
    another store (another open file, as in another process) that looks meanwhile
    waits on the shared lock, then sees the whole frame: never a frame whose
    header is there and whose last bytes are not yet."""
    asyncio.run(_records(tmp_path, 1, 2))
    path = seg(tmp_path, 3)
    body = body_for(rec(3), 6000)
    whole = encode_frame(PUT, record_name(3), body)
    at = segment_extent(path)
    got: list[bytes] = []
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, whole[:-2], at)  # all but the last two bytes of its checksum
        reader = threading.Thread(
            target=lambda: got.append(asyncio.run(LocalStore(tmp_path).read(rec(3)))[0])
        )
        reader.start()
        reader.join(0.3)
        assert reader.is_alive()  # waiting for the lock
        os.pwrite(fd, whole[-2:], at + len(whole) - 2)
    finally:
        os.close(fd)  # releases the lock
    reader.join(10)
    assert got == [body]


async def _records(root: Path, *versions: int) -> None:
    store = LocalStore(root)
    for v in versions:
        await store.create(rec(v), f"record {v}".encode())


@pytest.mark.parametrize("embed", [None, record_name(9)], ids=["plain", "quoting"])
async def test_an_append_never_cuts_a_committed_frame(tmp_path, embed):
    """A store that looked while another process's frame was half written, and
    appends once that frame is complete, keeps the frame whole."""
    store = LocalStore(tmp_path)
    for v in (1, 2):
        await store.create(rec(v), f"record {v}".encode())
    looker = LocalStore(tmp_path)
    await looker.list(LOG)
    body = body_for(rec(3), SIZE, embed)
    whole = encode_frame(PUT, record_name(3), body)
    halves = write_halves(seg(tmp_path, 3), whole)
    next(halves)
    await looker.list(LOG)
    next(halves, None)
    await looker.create(rec(4), b"record 4")
    frames, tail = parse_segment(seg(tmp_path, 3))
    assert tail == 0
    assert [f.name for f in frames] == [record_name(v) for v in (1, 2, 3, 4)]
    fresh = LocalStore(tmp_path)
    assert await fresh.list(LOG) == [rec(v) for v in (1, 2, 3, 4)]
    assert (await fresh.read(rec(3)))[0] == body


# --- damage on disk is reported, never truncated --------------------------------------


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text))


async def build_thread(root: Path, count: int = 6) -> tuple[ThreadKey, Path]:
    key = ThreadKey("seg-agent", "s", user_id="u")
    j = Journal(LocalStore(root), checkpoint_every=0)
    async with j.writer(key, holder="builder") as w:
        while w.version < count:
            await w.append([say(f"msg-{w.version + 1}")])
    return key, root / key.prefix / "log"


async def drain(j: Journal, key: ThreadKey, seen: list[int], start: int = 1) -> None:
    async for record in j.records(key, start):
        seen.append(record.version)  # noqa: PERF401 - keeps what came before an error


@pytest.mark.parametrize("victim", [3, 6], ids=["middle", "last"])
async def test_flipped_data_byte_is_corruption_not_a_tear(tmp_path, victim):
    key, log_dir = await build_thread(tmp_path)
    log = ThreadLog(LocalStore(tmp_path), key)
    original, _ = await log.store.read(log.record_key(victim))
    path, frame = record_frame(log_dir, victim)
    flip(path, frame.data_at + frame.data_len // 2)

    damaged, _ = await LocalStore(tmp_path).read(log.record_key(victim))
    assert len(damaged) == len(original)
    assert sum(a != b for a, b in zip(damaged, original, strict=True)) == 1
    frames, tail = parse_segment(path)
    assert tail == 0
    assert [f.name for f in frames if not f.data_ok] == [record_name(victim)]

    async def reported(j: Journal) -> None:
        with pytest.raises(CorruptRecordError) as info:
            await j.load(key)
        assert info.value.version == victim
        seen: list[int] = []
        with pytest.raises(CorruptRecordError) as info:
            await drain(j, key, seen)
        assert info.value.version == victim
        assert all(v < victim for v in seen)
        report = await j.verify(key)
        assert report.problems[0].version == victim, [str(p) for p in report.problems]
        assert report.warnings == []

    await reported(Journal.open(tmp_path))
    # The damaged frame is complete: kept, and the next append goes after it.
    size = segment_extent(path)
    content = path.read_bytes()[:size]
    store = LocalStore(tmp_path)
    await store.create(log.record_key(7), b"after the damage")
    assert segment_extent(path) == size + len(
        encode_frame(PUT, record_name(7), b"after the damage")
    )
    assert path.read_bytes().startswith(content)
    assert (await store.read(log.record_key(victim)))[0] == damaged
    assert await store.leftovers("") == []
    await reported(Journal.open(tmp_path))


async def test_flipped_header_byte_in_a_middle_frame(tmp_path):
    """A middle frame whose header fails its checksum is skipped, never truncated:
    its record is reported missing and the frames after it stay readable."""
    key, log_dir = await build_thread(tmp_path)
    log = ThreadLog(LocalStore(tmp_path), key)
    path, frame = record_frame(log_dir, 3)
    flip(path, frame.offset + 11 + 5, 0x01)  # a digit of the name
    size = segment_extent(path)

    store = LocalStore(tmp_path)
    listed = await store.list(log.log_dir)
    assert listed == [log.record_key(v) for v in (1, 2, 4, 5, 6)]
    with pytest.raises(ObjectNotFoundError):
        await store.read(log.record_key(3))
    assert await store.leftovers("") == []
    j = Journal.open(tmp_path)
    with pytest.raises(CorruptRecordError) as info:
        await j.load(key)
    assert info.value.version == 3
    assert "missing" in str(info.value)
    report = await j.verify(key)
    assert (report.problems[0].version, report.problems[0].message) == (
        3,
        "record is missing",
    )
    later: list[int] = []
    await drain(j, key, later, start=4)
    assert later == [4, 5, 6]
    assert None not in await store.read_many(listed[2:])
    # The next append goes after the damage, which stays.
    content = path.read_bytes()[:size]
    await store.create(log.record_key(7), b"after the damage")
    assert path.read_bytes().startswith(content)
    assert segment_extent(path) > size
    assert await store.list(log.log_dir) == [*listed, log.record_key(7)]


async def test_flipped_header_byte_in_the_last_frame_is_read_and_reported(tmp_path):
    """One flipped bit in the header of the very last frame made it look torn, and
    the next append cut an acknowledged record. Now readers put the bit back (the
    header and the data then check out), read the record, and report the damage;
    the slot stays taken. Damage beyond one bit still looks torn: it is kept in a
    quarantine file before any cut (see test_reliability_quarantine)."""
    key, log_dir = await build_thread(tmp_path)
    log = ThreadLog(LocalStore(tmp_path), key)
    path, frame = record_frame(log_dir, 6)
    before = (await LocalStore(tmp_path).read(log.record_key(6)))[0]
    flip(path, frame.offset + 11 + 5, 0x01)
    store = LocalStore(tmp_path)
    assert await store.list(log.log_dir) == [log.record_key(v) for v in range(1, 7)]
    assert (await store.read(log.record_key(6)))[0] == before
    assert await store.leftovers(key.prefix) == []
    (damaged,) = await store.quarantined(key.prefix)
    assert damaged.in_place
    assert damaged.key == log.record_key(6)
    assert (await Journal.open(tmp_path).load(key)).version == 6
    with pytest.raises(ObjectExistsError):
        await store.create(log.record_key(6), b"refilled")
    report = await Journal.open(tmp_path).verify(key)
    assert [p.version for p in report.problems] == [6]


# --- deletion, retention, reading only the newest segment -----------------------------


async def test_deletes_append_tombstones_and_free_emptied_segments(tmp_path):
    store = LocalStore(tmp_path)
    first, second = [1, 2, 3, 4, 5], [1024, 1025, 1026]
    for v in first + second:
        await store.create(rec(v), f"record {v}".encode())
    assert sorted(os.listdir(tmp_path / LOG)) == [segment_name(1), segment_name(1024)]

    # Some objects of a segment: tombstones, and the objects are gone everywhere.
    size = segment_extent(seg(tmp_path, 1))
    for v in (2, 4):
        assert await store.delete(rec(v)) is True
    tomb = [encode_frame(TOMBSTONE, record_name(v), b"") for v in (2, 4)]
    assert segment_extent(seg(tmp_path, 1)) == size + sum(map(len, tomb))
    frames, tail = parse_segment(seg(tmp_path, 1))
    assert tail == 0
    assert [(f.kind, f.name) for f in frames[-2:]] == [
        (TOMBSTONE, record_name(2)),
        (TOMBSTONE, record_name(4)),
    ]
    assert sorted(live(frames)) == [record_name(v) for v in (1, 3, 5)]
    for reader in (store, LocalStore(tmp_path)):
        assert await reader.list(LOG) == [rec(v) for v in (1, 3, 5, *second)]
        with pytest.raises(ObjectNotFoundError):
            await reader.read(rec(2))
        assert await reader.read_many([rec(2), rec(3)]) == [None, b"record 3"]
        assert await reader.delete(rec(4)) is False

    # Every object of a segment: the file goes.
    for v in second:
        assert await LocalStore(tmp_path).delete(rec(v)) is True
    assert sorted(os.listdir(tmp_path / LOG)) == [segment_name(1)]
    # A deleted name can be created again, after its tombstone.
    await store.create(rec(2), b"again")
    assert await LocalStore(tmp_path).read_many([rec(2)]) == [b"again"]
    for v in (1, 2, 3, 5):
        assert await LocalStore(tmp_path).delete(rec(v)) is True
    assert os.listdir(tmp_path / LOG) == []
    assert await store.list("") == []
    assert await store.children("") == []
    assert await store.leftovers("") == []


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def build_long_thread(
    root: Path, count: int
) -> tuple[Journal, ThreadKey, _Clock, Path]:
    clock = _Clock()
    j = Journal(LocalStore(root, fsync=False), checkpoint_every=0, clock=clock)
    key = ThreadKey("long-agent", "s", user_id="u")
    async with j.writer(key, holder="long") as w:
        while w.version < count:
            await w.append([say(f"msg-{w.version + 1}")])
            if w.version % 100 == 0:
                await w.checkpoint()
    return j, key, clock, root / key.prefix / "log"


async def test_retention_frees_whole_old_segments(tmp_path):
    j, key, clock, log_dir = await build_long_thread(tmp_path, 2150)
    assert sorted(os.listdir(log_dir)) == [segment_name(v) for v in (1, 1024, 2048)]
    state = await Journal.open(tmp_path).load(key)
    clock.now += 30 * 24 * 3600
    marker = await j.retain(key, window=3600)
    assert marker is not None
    assert marker.checkpoint == 2100
    assert sorted(os.listdir(log_dir)) == [segment_name(2048)]
    frames, tail = parse_segment(log_dir / segment_name(2048))
    assert tail == 0
    assert sorted(live(frames)) == [record_name(v) for v in range(2100, 2151)]
    assert sum(f.kind == TOMBSTONE for f in frames) == 2100 - 2048
    fresh = Journal.open(tmp_path)
    assert (await fresh.load(key)).to_json() == state.to_json()
    report = await fresh.verify(key)
    assert report.ok, [str(p) for p in report.problems]
    assert report.warnings == []
    assert await fresh.store.list(f"{key.prefix}/log/") == [
        f"{key.prefix}/log/{record_name(v)}" for v in range(2100, 2151)
    ]


async def test_load_after_a_checkpoint_reads_only_the_newest_segment(
    tmp_path, monkeypatch
):
    _, key, _, log_dir = await build_long_thread(tmp_path, 1105)
    segments = [segment_name(1), segment_name(1024)]
    assert sorted(os.listdir(log_dir)) == segments
    expected = await Journal.open(tmp_path).load(key)  # the old segment may be read
    opened: list[str] = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):
        name = os.path.basename(os.fsdecode(path))
        if is_segment(name):
            opened.append(name)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    state = await Journal.open(tmp_path).load(key)
    monkeypatch.undo()
    assert state.version == 1105
    assert state.to_json() == expected.to_json()
    assert opened
    # Of the log, only the newest segment; the checkpoint's chunks are in theirs.
    assert set(opened) == {segment_name(1024), ".seg-blobs"}


# --- mixed layouts --------------------------------------------------------------------


async def test_layouts_read_each_other(tmp_path):
    """A thread written by turns in both layouts reads, lists and verifies alike."""
    key = ThreadKey("mixed-agent", "s")
    log_dir = tmp_path / key.prefix / "log"
    by_layout: dict[bool, list[int]] = {False: [], True: []}
    for segments in (False, True, False, True):
        j = Journal.open(tmp_path, segments=segments, checkpoint_every=0)
        start = await j.head(key)
        async with j.writer(key, holder=f"w-{segments}") as w:
            for _ in range(3):
                await w.append([say(f"msg-{w.version + 1}")])
            by_layout[segments] += range(start + 1, w.version + 1)
    head = max(by_layout[False] + by_layout[True])
    files = sorted(n for n in os.listdir(log_dir) if not n.startswith("."))
    assert files == [record_name(v) for v in sorted(by_layout[False])]
    frames, tail = parse_segment(log_dir / segment_name(1))
    assert tail == 0
    assert sorted(f.name for f in frames) == [
        record_name(v) for v in sorted(by_layout[True])
    ]
    states = []
    for segments in (False, True):
        j = Journal.open(tmp_path, segments=segments)
        listed = await j.store.list(f"{key.prefix}/log/")
        assert listed == [
            f"{key.prefix}/log/{record_name(v)}" for v in range(1, head + 1)
        ]
        seen: list[int] = []
        await drain(j, key, seen)
        assert seen == list(range(1, head + 1))
        report = await j.verify(key)
        assert report.ok, [str(p) for p in report.problems]
        assert report.warnings == []
        states.append((await j.load(key)).to_json())
    assert states[0] == states[1]


async def test_a_segment_create_refuses_a_version_held_by_a_file(tmp_path):
    files, segments = LocalStore(tmp_path, segments=False), LocalStore(tmp_path)
    await files.create(rec(1), b"a file")
    await segments.create(rec(2), b"a frame")  # the segment exists
    with pytest.raises(ObjectExistsError):
        await segments.create(rec(1), b"a frame")
    assert (await segments.read(rec(1)))[0] == b"a file"
    assert await segments.list(LOG) == [rec(1), rec(2)]
    assert [f.name for f in parse_segment(seg(tmp_path, 1))[0]] == [record_name(2)]


async def test_a_file_create_refuses_a_version_held_by_a_frame(tmp_path):
    """Exclusive create holds across layouts both ways: a writer that still
    publishes files must not commit a second record at a version already framed."""
    files, segments = LocalStore(tmp_path, segments=False), LocalStore(tmp_path)
    await segments.create(rec(1), b"a frame")
    with pytest.raises(ObjectExistsError):
        await files.create(rec(1), b"a file")
    for store in (files, segments):
        assert (await store.read(rec(1)))[0] == b"a frame"
        assert await store.list(LOG) == [rec(1)]


async def test_a_recreated_segment_is_not_read_through_an_old_index(tmp_path):
    """A store that indexed a segment must notice when the file was emptied,
    unlinked and created again by another store (or process), even when the file
    system hands the new file the old inode number."""
    root = tmp_path / "root"
    old = LocalStore(root)
    await old.create(rec(1), b"first generation, one")
    await old.create(rec(2), b"first generation, two")
    assert await old.list(LOG) == [rec(1), rec(2)]
    other = LocalStore(root)
    await _recreate_on_the_same_inode(root, other, b"new")
    assert await old.read(rec(1)) == await other.read(rec(1))
    assert await old.list(LOG) == [rec(1)]
    await old.create(rec(2), b"second generation, two")
    assert (await other.read(rec(2)))[0] == b"second generation, two"


async def _recreate_on_the_same_inode(
    root: Path, other: LocalStore, body: bytes
) -> None:
    """Empty segment 0 through ``other`` (which unlinks it), then create it again
    holding ``rec(1)``, the new file bearing the old inode number.

    File systems such as ext4 hand a freed inode out again at once, but not
    always: to be certain, a link outside the root keeps the old inode alive, and
    the new file's bytes are moved into it and renamed into place.
    """
    path = seg(root, 1)
    inode = path.stat().st_ino
    keep = root.parent / "old-inode"
    os.link(path, keep)
    for key in await other.list(LOG):
        assert await other.delete(key) is True
    assert not path.exists()
    await other.create(rec(1), body)
    keep.write_bytes(path.read_bytes())
    os.rename(keep, path)
    assert path.stat().st_ino == inode


async def test_an_append_through_an_old_index_keeps_a_recreated_segment(tmp_path):
    """The same, for an append: the old index's end of file lies inside the new
    file's first frame, which must not be taken for a torn tail and cut."""
    root = tmp_path / "root"
    old = LocalStore(root)
    await old.create(rec(1), b"first generation, one")
    await old.create(rec(2), b"first generation, two")
    other = LocalStore(root)
    body = b"second generation, one " * 64  # a frame across the old end of file
    await _recreate_on_the_same_inode(root, other, body)
    await old.create(rec(3), b"second generation, three")
    frames, tail = parse_segment(seg(root, 1))
    assert tail == 0
    assert [f.name for f in frames] == [record_name(1), record_name(3)]
    fresh = LocalStore(root)
    assert await fresh.read_many([rec(1), rec(3)]) == [
        body,
        b"second generation, three",
    ]


# --- the writers' descriptors kept open between commits -----------------------------


def _open_segments(root: Path) -> list[str]:
    """The segment files under ``root`` this process has open."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(root)) and "/.seg-" in target:
                out.append(target)
    return out


async def test_open_segment_descriptors_are_capped_and_closed(tmp_path):
    store = LocalStore(tmp_path)
    threads = MAX_OPEN + 8
    for t in range(threads):
        await store.create(f"ns/a/~/s/t{t}/log/{record_name(1)}", b"one")
    held = _open_segments(tmp_path)
    assert 0 < len(held) <= MAX_OPEN
    # The newest stay open: writing to them again opens nothing.
    for t in range(threads - 4, threads):
        await store.create(f"ns/a/~/s/t{t}/log/{record_name(2)}", b"two")
    assert len(_open_segments(tmp_path)) == len(held)
    await store.aclose()
    assert _open_segments(tmp_path) == []
    # A closed store reopens what it writes to.
    await store.create(f"ns/a/~/s/t0/log/{record_name(2)}", b"two")
    assert len(_open_segments(tmp_path)) == 1
    await store.aclose()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
async def test_a_forked_child_does_not_write_through_the_parents_descriptor(tmp_path):
    """A forked child shares its parent's open files, and so their flocks: it must
    open segments of its own, which its parent's lock then excludes."""
    store = LocalStore(tmp_path)
    await store.create(rec(1), b"parent")
    assert len(_open_segments(tmp_path)) == 1
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            segs = store._segs._segments.values()
            inherited = any(s.fd is not None for s in segs)
            asyncio.run(store.create(rec(2), b"child"))
            code = 0 if not inherited else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert await LocalStore(tmp_path).read_many([rec(1), rec(2)]) == [
        b"parent",
        b"child",
    ]
    await store.create(rec(3), b"parent again")
    frames, tail = parse_segment(seg(tmp_path, 1))
    assert tail == 0
    assert [f.name for f in frames] == [record_name(v) for v in (1, 2, 3)]
    await store.aclose()


# --- the segments a store keeps indexed ---------------------------------------------


def _thread_rec(t: int, version: int = 1) -> str:
    return f"ns/a/~/s/t{t}/log/{record_name(version)}"


async def test_a_reader_keeps_a_bounded_number_of_segment_indexes(tmp_path):
    """A long-running process that reads each of many threads once (a server, a
    listing tool) must not hold every segment's index for ever: about 25 KB a
    thread of 100 records, and every full garbage collection walks them."""
    writer = LocalStore(tmp_path, fsync=False)
    count = CACHED_MAX + 40
    for t in range(count):
        await writer.create(_thread_rec(t), f"one {t}".encode())
    await writer.aclose()
    reader = LocalStore(tmp_path, fsync=False)
    for t in range(count):
        assert (await reader.read(_thread_rec(t)))[0] == f"one {t}".encode()
    assert len(reader._segs._segments) <= CACHED_MAX
    # The least recently used went first: the segment read last is kept.
    newest = tmp_path / _thread_rec(count - 1)
    assert str(newest.parent / segment_name(1)) in reader._segs._segments
    await reader.aclose()


async def test_a_segment_indexed_again_keeps_create_exclusive(tmp_path, monkeypatch):
    """An index dropped to keep the bound is rebuilt from the file: a name written
    before is still refused, a new one still goes after the last frame."""
    monkeypatch.setattr(segments_module, "CACHED_MAX", 2)
    store = LocalStore(tmp_path, fsync=False)
    first = str(seg(tmp_path, 1, "ns/a/~/s/t0/log/"))
    for t in range(6):
        await store.create(_thread_rec(t), b"first %d" % t)
    await store.aclose()  # closes the writers' descriptors: the segments are idle

    async def read_the_others() -> None:
        for t in range(1, 6):
            assert (await store.read(_thread_rec(t)))[0] == b"first %d" % t
        assert first not in store._segs._segments
        assert len(store._segs._segments) <= 2

    await read_the_others()
    with pytest.raises(ObjectExistsError):
        await store.create(_thread_rec(0), b"again")
    await store.create(_thread_rec(0, 2), b"second")
    await store.aclose()
    await read_the_others()
    assert (await store.read(_thread_rec(0)))[0] == b"first 0"
    assert (await store.read(_thread_rec(0, 2)))[0] == b"second"
    await store.aclose()
    frames, torn = parse_segment(Path(first))
    assert torn == 0
    assert [f.name for f in frames if f.kind == PUT] == [
        record_name(1),
        record_name(2),
    ]


def test_threads_racing_while_indexes_are_dropped_create_each_name_once(
    tmp_path, monkeypatch
):
    """Threads reading and creating the same names in several segments while the
    set keeps one idle index and one open descriptor: a thread may go on with a
    segment object another dropped while a third makes a new one for the file,
    which is what two processes are, and the file's lock keeps each create
    exclusive."""
    monkeypatch.setattr(segments_module, "CACHED_MAX", 1)
    monkeypatch.setattr(segments_module, "MAX_OPEN", 1)
    monkeypatch.setattr(segments_module, "UNTRIMMED_MAX", 0)
    made = []

    class Counted(segments_module._Segment):
        def __init__(self, path: str, *args: object, **kwargs: object) -> None:
            made.append(path)
            super().__init__(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(segments_module, "_Segment", Counted)
    segs = SegmentSet(fsync=False)
    dirs = [str(tmp_path / f"t{d}" / "log") for d in range(4)]
    for directory in dirs:
        os.makedirs(directory)
    names = [record_name(v) for v in range(1, 13)]
    won: list[tuple[str, str, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def race(me: int) -> None:
        start.wait()
        for name in names:
            for directory in dirs[me % 4 :] + dirs[: me % 4]:
                segs.read(directory, name)
                try:
                    segs.create(directory, name, b"racer %d" % me, key=name)
                except ObjectExistsError:
                    continue
                with lock:
                    won.append((directory, name, me))

    racers = [threading.Thread(target=race, args=(me,)) for me in range(6)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    segs.close()
    # Indexes were dropped and built again while the threads raced.
    assert len(made) > len(dirs)
    assert sorted((d, n) for d, n, _ in won) == sorted(
        (d, n) for d in dirs for n in names
    )
    for directory, name, me in won:
        path = Path(directory) / segment_name(1)
        frames, torn = parse_segment(path)
        assert torn == 0
        buf = path.read_bytes()
        puts = [f for f in frames if f.kind == PUT and f.name == name]
        assert [buf[f.data_at : f.data_at + f.data_len] for f in puts] == [
            b"racer %d" % me
        ]


def test_a_sets_segments_share_one_callback_that_holds_the_set_weakly(tmp_path):
    """A segment tells its set when it opens a descriptor (the set keeps at most
    MAX_OPEN). All of a set's segments share one such callback, which holds the set
    weakly. A callback per segment was a weak method, its references, a closure and
    its cell for every thread a loader visited, all tracked by the collector; held
    weakly, a dropped store's descriptors still close when it goes."""
    segs = SegmentSet(fsync=False)
    directory = str(tmp_path / "log")
    os.makedirs(directory)
    names = [record_name(1), record_name(2_000)]
    held = [segs.segment(os.path.join(directory, segment_of(n))) for n in names]
    assert len({segment.path for segment in held}) == 2
    assert held[0]._on_open is not None
    assert held[0]._on_open is held[1]._on_open
    for name in names:
        segs.create(directory, name, b"x", key=name)
    # Through the shared callback, each segment counted as open by its set.
    assert set(held) <= set(segs._open)
    gone = weakref.ref(segs)
    segs.close()
    del segs
    assert gone() is None
    held[0]._on_open(held[0])  # the set is gone: nothing to tell


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_forgets_the_descriptor_of_a_dropped_segment(tmp_path):
    """A segment dropped from the cache while a thread still used it, then opened
    for writing through that object, is no longer in the cache but holds a
    descriptor: a forked child must forget that one too."""
    segs = SegmentSet(fsync=False)
    directory = str(tmp_path / "log")
    os.makedirs(directory)
    stale = segs.segment(os.path.join(directory, segment_name(1)))
    with segs._lock:  # what _drop_idle does while another thread holds ``stale``
        del segs._segments[stale.path]
    with stale.locked(create=True) as fd:
        assert fd is not None
        stale.append(fd, PUT, record_name(1), b"parent")
    assert stale.fd is not None
    assert stale.path not in segs._segments
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if stale.fd is None else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert stale.fd is not None  # the parent's own is kept
    segs.close()
