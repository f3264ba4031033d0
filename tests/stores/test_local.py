from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from journal.errors import ObjectNotFoundError
from stores.local import LocalStore
from stores.segments import MAX_OPEN, MIN_RESERVE, RESERVE, RESERVE_SHARE
from stores.testing import StoreContract
from tests.stores._race_child import body_for
from tests.stores._segment_child import PUT, encode_frame, parse_segment

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
RACERS = 20


class TestLocalStore(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path):
        return LocalStore(tmp_path / "root")


class TestLocalStoreNoFsync(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path):
        return LocalStore(tmp_path / "root", fsync=False)


# --- races across processes ------------------------------------------------------


def _spawn(module: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def _send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _recv(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline()


def _one_winner(outcomes: list[str]) -> tuple[int, str]:
    winners = [i for i, o in enumerate(outcomes) if o.startswith("won ")]
    assert len(winners) == 1, outcomes
    (winner,) = winners
    assert all(o == "lost" for i, o in enumerate(outcomes) if i != winner), outcomes
    return winner, outcomes[winner].split()[1]


def test_create_and_replace_races_across_processes(tmp_path):
    """20 processes race creates, then CAS rounds: exactly one winner each time."""
    root = tmp_path / "root"
    procs = [_spawn("tests.stores._race_child", root, i) for i in range(RACERS)]
    try:
        assert [_recv(p) for p in procs] == ["ready\n"] * RACERS

        def release(command: str) -> list[str]:
            # Every racer blocks on stdin: writing to all of them starts the race.
            for p in procs:
                _send(p, command)
            return [_recv(p).strip() for p in procs]

        store = LocalStore(root)
        # Exclusive create: one winner per key, over many keys.
        for rnd in range(20):
            key = f"ns/agent/~/s1/main/log/{rnd + 1:020d}.rec"
            winner, etag = _one_winner(release(f"create {rnd} {key}"))
            assert asyncio.run(store.read(key)) == (body_for(winner, rnd), etag)
            assert release(f"create 99 {key}") == ["lost"] * RACERS

        # Compare-and-swap: one winner per etag, round after round.
        lease = "ns/agent/~/s1/main/LEASE"
        etag = asyncio.run(store.create(lease, b"epoch 0"))
        first = etag
        for rnd in range(1, 16):
            winner, new = _one_winner(release(f"replace {rnd} {lease} {etag}"))
            assert asyncio.run(store.read(lease)) == (body_for(winner, rnd), new)
            assert new != etag
            etag = new
        # Nobody may win with a stale etag.
        assert release(f"replace 99 {lease} {first}") == ["lost"] * RACERS
        assert asyncio.run(store.read(lease)) == (body_for(winner, 15), etag)
        assert asyncio.run(store.leftovers("")) == []
        for p in procs:
            _send(p, "exit")
        assert [p.wait(timeout=60) for p in procs] == [0] * RACERS
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# --- readers never see a partial object ------------------------------------------


class _Reader(threading.Thread):
    """Hammers ``read`` from its own store and event loop; records what it saw."""

    def __init__(self, root: Path, keys: list[str], bodies: dict[str, set[bytes]]):
        super().__init__(daemon=True)
        self.root = root
        self.keys = keys
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

    async def _run(self) -> None:
        store = LocalStore(self.root)
        i = 0
        # Waits for each key in turn, so most reads race the write of that key.
        while not self.stop.is_set() and i < len(self.keys):
            key = self.keys[i]
            try:
                data, _ = await store.read(key)
            except ObjectNotFoundError:
                self.absent += 1
                continue
            if data in self.bodies[key]:
                self.full += 1
            else:
                self.bad.append((key, len(data)))
            if len(self.keys) > 1:
                i += 1


async def test_reader_never_sees_a_partial_create(tmp_path):
    n = 16
    keys = [f"pub/{i:04d}.rec" for i in range(n)]
    bodies = {k: bytes([i + 1]) * MIB for i, k in enumerate(keys)}
    reader = _Reader(tmp_path, keys, {k: {b} for k, b in bodies.items()})
    reader.start()

    async def writer(mine: list[str]) -> None:
        store = LocalStore(tmp_path)
        for key in mine:
            await store.create(key, bodies[key])

    # Two writers publish concurrently (even and odd keys).
    await asyncio.gather(writer(keys[0::2]), writer(keys[1::2]))
    reader.join(timeout=120)
    reader.stop.set()
    assert not reader.is_alive()
    assert reader.errors == []
    assert reader.bad == []
    assert reader.full == n


async def test_reader_never_sees_a_partial_replace(tmp_path):
    a, b = b"\x01" * MIB, b"\x02" * MIB
    store = LocalStore(tmp_path)
    await store.create("lease", a)
    reader = _Reader(tmp_path, ["lease"], {"lease": {a, b}})
    reader.start()
    for i in range(24):
        await store.replace("lease", b if i % 2 == 0 else a, if_match=None)
    reader.stop.set()
    reader.join(timeout=120)
    assert not reader.is_alive()
    assert reader.errors == []
    assert reader.bad == []
    assert reader.absent == 0


# --- keys, layout and leftovers ----------------------------------------------------

HOSTILE_KEYS = [
    "",
    "/etc/passwd",
    "/abs",
    "..",
    "../escape",
    "a/../../escape",
    "a/..",
    ".",
    "./a",
    "a/./b",
    "a//b",
    "a/",
    "a\\..\\b",
    "a\x00b",
    ".hidden",
    "a/.tmp-0123",
    "a/.b.lock",
]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
async def test_hostile_keys_are_rejected(tmp_path, key):
    root = tmp_path / "root"
    store = LocalStore(root)
    with pytest.raises(ValueError, match="invalid object key"):
        await store.create(key, b"x")
    with pytest.raises(ValueError, match="invalid object key"):
        await store.read(key)
    with pytest.raises(ValueError, match="invalid object key"):
        await store.replace(key, b"x", if_match=None)
    with pytest.raises(ValueError, match="invalid object key"):
        await store.replace(key, b"x", if_match="etag")
    with pytest.raises(ValueError, match="invalid object key"):
        await store.delete(key)
    with pytest.raises(ValueError, match="invalid object key"):
        await store.read_many([key])
    # Nothing was written anywhere, inside the root or beside it.
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("prefix", ["..", "../", "a/../../", "./", "a/./"])
async def test_hostile_prefixes_are_rejected(tmp_path, prefix):
    store = LocalStore(tmp_path / "root")
    with pytest.raises(ValueError, match="invalid object key"):
        await store.list(prefix)
    with pytest.raises(ValueError, match="invalid object key"):
        await store.children(prefix)
    with pytest.raises(ValueError, match="invalid object key"):
        await store.leftovers(prefix)


async def test_objects_are_plain_files_under_the_root(tmp_path):
    store = LocalStore(tmp_path / "root", segments=False)
    await store.create("a/b/00000000000000000001.rec", b"record")
    await store.replace("a/LEASE", b"lease", if_match=None)
    assert (tmp_path / "root/a/b/00000000000000000001.rec").read_bytes() == b"record"
    assert (tmp_path / "root/a/LEASE").read_bytes() == b"lease"
    # A successful write leaves no temporary file behind.
    assert await store.leftovers("") == []
    assert store.url == f"file://{tmp_path / 'root'}"


async def test_records_are_frames_of_a_segment_under_the_root(tmp_path):
    root = tmp_path / "root"
    store = LocalStore(root)
    await store.create("a/b/00000000000000000001.rec", b"record")
    await store.create("a/b/00000000000000001024.rec", b"next segment")
    await store.replace("a/LEASE", b"lease", if_match=None)
    assert sorted(os.listdir(root / "a/b")) == [
        ".seg-00000000000000000000",
        ".seg-00000000000000000001",
    ]
    frames, tail = parse_segment(root / "a/b/.seg-00000000000000000000")
    assert tail == 0
    assert [(f.kind, f.name, f.data_ok) for f in frames] == [
        (PUT, "00000000000000000001.rec", True)
    ]
    raw = (root / "a/b/.seg-00000000000000000000").read_bytes()
    # The segment's file-id frame (kind 3, 16 random bytes), then the record, then
    # the reserve: zeros that the next appends overwrite (few, in a small segment).
    assert raw[4] == 3
    framed = encode_frame(PUT, frames[0].name, b"record")
    assert raw[35 : 35 + len(framed)] == framed
    assert raw[35 + len(framed) :] == bytes(MIN_RESERVE)
    # Everything else is still a plain file.
    assert (root / "a/LEASE").read_bytes() == b"lease"
    assert await store.leftovers("") == []
    assert await store.list("a/") == [
        "a/LEASE",
        "a/b/00000000000000000001.rec",
        "a/b/00000000000000001024.rec",
    ]


async def test_a_segments_reserve_grows_with_its_frames(tmp_path):
    """A small segment carries a few KiB of zeros; a large one the whole RESERVE."""
    store = LocalStore(tmp_path, fsync=False)
    path = tmp_path / "t/.seg-00000000000000000000"
    body = bytes(range(1, 256)) * 12  # about 3 KiB
    framed = len(encode_frame(PUT, f"{1:020d}.rec", body))
    reserves: list[tuple[int, int]] = []  # (frames end, zeros after them)
    size = 0
    last = RESERVE_SHARE * RESERVE // framed + 40
    for version in range(1, last + 1):
        await store.create(f"t/{version:020d}.rec", body)
        end = 35 + version * framed  # the file id's frame, then the records
        if path.stat().st_size != size:  # this append extended the file
            size = path.stat().st_size
            reserves.append((end, size - end))
    frames, tail = parse_segment(path)
    assert (len(frames), tail) == (last, 0)
    assert path.read_bytes()[end:] == bytes(size - end)
    for end, zeros in reserves:
        assert zeros == min(RESERVE, max(MIN_RESERVE, end // RESERVE_SHARE))
    assert reserves[0][1] == MIN_RESERVE
    assert reserves[-1][1] == RESERVE
    # Most appends are written into a reserve, not extending the file.
    assert len(reserves) < last // 4


async def test_a_threads_later_segments_start_with_the_whole_reserve(tmp_path):
    """A thread's first segment starts with a few KiB of zeros (a small thread
    carries few); the thread filled it before its second began, so that one is
    extended by the whole RESERVE from its first frame, not at every other append
    as a segment growing from MIN_RESERVE is. Closing the store cuts both."""
    store = LocalStore(tmp_path, fsync=False)
    for version in (1, 1024, 2048):
        await store.create(f"t/{version:020d}.rec", b"record")
    framed = len(encode_frame(PUT, f"{1:020d}.rec", b"record"))
    first, second, third = (tmp_path / f"t/.seg-{number:020d}" for number in (0, 1, 2))
    assert first.stat().st_size == 35 + framed + MIN_RESERVE
    assert second.stat().st_size == 35 + framed + RESERVE
    assert third.stat().st_size == 35 + framed + RESERVE
    for version in range(1025, 1040):  # written into the reserve: no growth
        await store.create(f"t/{version:020d}.rec", b"record")
    assert second.stat().st_size == 35 + framed + RESERVE
    await store.aclose()
    assert [p.stat().st_size for p in (first, second, third)] == [
        35 + framed,
        35 + 16 * framed,
        35 + framed,
    ]
    for path, count in ((first, 1), (second, 16), (third, 1)):
        frames, tail = parse_segment(path)
        assert (len(frames), tail) == (count, 0)


async def test_etags_hold_across_store_instances(tmp_path):
    one, two = LocalStore(tmp_path), LocalStore(tmp_path, fsync=False)
    etag = await one.create("k", b"v1")
    assert await two.read("k") == (b"v1", etag)
    new = await two.replace("k", b"v2", if_match=etag)
    assert await one.read("k") == (b"v2", new)


async def test_leftovers_are_listed_apart_and_ignored(tmp_path):
    store = LocalStore(tmp_path)
    await store.create("t/log/00000000000000000001.rec", b"one")
    await store.replace("t/LEASE", b"lease", if_match=None)  # leaves a lock file
    (tmp_path / "t/log/.tmp-0123abcd").write_bytes(b"half a rec")
    (tmp_path / "t/.tmp-feed").write_bytes(b"half a lease")
    (tmp_path / "t/.hidden-dir").mkdir()
    (tmp_path / "t/.hidden-dir/x").write_bytes(b"not an object")
    assert await store.leftovers("t/") == ["t/.tmp-feed", "t/log/.tmp-0123abcd"]
    assert await store.leftovers("t/log/") == ["t/log/.tmp-0123abcd"]
    assert await store.leftovers("") == ["t/.tmp-feed", "t/log/.tmp-0123abcd"]
    assert await store.leftovers("elsewhere/") == []
    expected = ["t/LEASE", "t/log/00000000000000000001.rec"]
    assert await store.list("t/") == expected
    assert await store.list("t/", start_after="t/.tmp") == expected
    assert await store.children("t/") == ["log"]
    assert await store.children("") == ["t"]
    # Leftovers never block a create, a replace or a read beside them.
    await store.create("t/log/00000000000000000002.rec", b"two")
    etag = await store.replace("t/LEASE", b"lease 2", if_match=None)
    assert await store.read("t/LEASE") == (b"lease 2", etag)
    assert len(await store.leftovers("t/")) == 2


async def test_a_directory_holding_only_leftovers_is_no_child(tmp_path):
    store = LocalStore(tmp_path)
    await store.create("a/kept/1", b"x")
    (tmp_path / "a/stray").mkdir()
    (tmp_path / "a/stray/.tmp-0001").write_bytes(b"x")
    assert await store.children("a/") == ["kept"]
    assert await store.leftovers("a/") == ["a/stray/.tmp-0001"]


@pytest.mark.parametrize(("fsync", "expect_syncs"), [(True, True), (False, False)])
async def test_fsync_option(tmp_path, monkeypatch, fsync, expect_syncs):
    calls: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    store = LocalStore(tmp_path, fsync=fsync)
    await store.create("a/b", b"warm up the directories")
    monkeypatch.setattr(os, "fsync", counting_fsync)
    await store.create("a/c", b"x")
    # The file and its directory are synced before create returns.
    assert len(calls) == (2 if expect_syncs else 0)
    calls.clear()
    await store.replace("a/c", b"y", if_match=None)
    assert len(calls) == (2 if expect_syncs else 0)


async def test_closing_a_store_cuts_its_segments_reserves(tmp_path):
    """A closed store leaves no zeros after the frames; it appends after them again."""
    store = LocalStore(tmp_path)
    path = tmp_path / "t/.seg-00000000000000000000"
    await store.create("t/00000000000000000001.rec", b"one")
    end = 35 + len(encode_frame(PUT, "00000000000000000001.rec", b"one"))
    assert path.stat().st_size == end + MIN_RESERVE
    await store.aclose()
    assert path.stat().st_size == end
    # Used again: the next append extends the file with a new reserve.
    await store.create("t/00000000000000000002.rec", b"two")
    end += len(encode_frame(PUT, "00000000000000000002.rec", b"two"))
    assert path.stat().st_size == end + MIN_RESERVE
    reopened = LocalStore(tmp_path)
    assert await reopened.read("t/00000000000000000001.rec") == (
        b"one",
        (await store.read("t/00000000000000000001.rec"))[1],
    )
    frames, tail = parse_segment(path)
    assert ([f.name for f in frames], tail) == (
        ["00000000000000000001.rec", "00000000000000000002.rec"],
        0,
    )
    await store.aclose()
    await reopened.aclose()
    assert path.stat().st_size == end


async def test_a_store_that_wrote_more_segments_than_it_keeps_open_leaves_no_zeros(
    tmp_path,
):
    """A segment whose descriptor was closed to keep at most MAX_OPEN open still has
    its reserve cut when the store closes, as the open ones have: whatever the
    number of threads a process wrote, a closed store leaves no zeros after the
    frames."""
    store = LocalStore(tmp_path)
    count = MAX_OPEN + 6
    for t in range(count):
        await store.create(f"t{t}/00000000000000000001.rec", b"one")
    await store.aclose()
    end = 35 + len(encode_frame(PUT, "00000000000000000001.rec", b"one"))
    sizes = {
        (tmp_path / f"t{t}/.seg-00000000000000000000").stat().st_size
        for t in range(count)
    }
    assert sizes == {end}
    # Each is appended to again after its frames, with a new reserve.
    await store.create("t0/00000000000000000002.rec", b"two")
    frames, tail = parse_segment(tmp_path / "t0/.seg-00000000000000000000")
    assert ([f.name for f in frames], tail) == (
        ["00000000000000000001.rec", "00000000000000000002.rec"],
        0,
    )
    await store.aclose()


async def test_closing_a_store_keeps_a_torn_tail_and_a_locked_reserve(tmp_path):
    """Only zeros are cut: a reserve whose lock another writer holds is left alone,
    and so is a torn frame (for the next writer to cut)."""
    store = LocalStore(tmp_path)
    path = tmp_path / "t/.seg-00000000000000000000"
    await store.create("t/00000000000000000001.rec", b"one")
    size = path.stat().st_size
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        await store.aclose()
        assert path.stat().st_size == size  # the lock's holder may be writing
        fcntl.flock(fd, fcntl.LOCK_UN)
        await store.create("t/00000000000000000002.rec", b"two")
        assert path.stat().st_size == size  # written into the reserve
        end = 35 + sum(
            len(encode_frame(PUT, f"{v:020d}.rec", body))
            for v, body in ((1, b"one"), (2, b"two"))
        )
        # A writer killed in the middle of its frame, inside the reserve.
        torn = encode_frame(PUT, "00000000000000000003.rec", b"3" * 3000)[:-1500]
        os.pwrite(fd, torn, end)
    finally:
        os.close(fd)
    await store.aclose()
    assert path.stat().st_size == size
    assert path.read_bytes()[end : end + len(torn)] == torn
    # The next writer cuts it and appends where the valid frames end.
    await store.create("t/00000000000000000003.rec", b"three")
    frames, tail = parse_segment(path)
    assert ([f.name for f in frames][-1], tail) == ("00000000000000000003.rec", 0)
    await store.aclose()


async def test_read_siblings_refuses_what_keys_refuse(tmp_path):
    """A name the local store's keys refuse (hidden, with a NUL) is refused here too."""
    store = LocalStore(tmp_path)
    await store.create("t/log/00000000000000000001.rec", b"x")
    assert await store.read_siblings("t/log/", ["00000000000000000001.rec"]) == [b"x"]
    for bad in (".hidden", "a\x00b", "a\\b"):
        with pytest.raises(ValueError, match="invalid object key"):
            await store.read_siblings("t/log/", ["00000000000000000001.rec", bad])
