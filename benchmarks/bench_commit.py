"""Commit, load, replay and space benchmarks for the journal core (local disk).

Run: ``python benchmarks/bench_commit.py [--quick] [--out FILE]``

Everything is measured in one process, alternating where two things are compared,
and reported as ratios: absolute times on shared machines are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

# This script's directory is on sys.path whether it runs as a script or is imported
# by bench_s3 (run from the same directory), so the peers' helpers are importable.
from _peers.base import du
from _peers.journal_peer import events as peer_events
from _peers.journal_peer import message_id
from _peers.workload import make_turn

import journal
import stores.local
from journal import (
    ContextCompacted,
    Journal,
    MessageAppended,
    Msg,
    TextBlock,
    ThreadKey,
    ToolResultBlock,
    ToolUseBlock,
)
from projections import AgentStateProjection, fold
from stores._offload import run_blocking
from stores.segments import RESERVE

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


def turn(i: int) -> list[object]:
    """A typical turn: 4 messages, ~2 KB (user ~200 B, an assistant tool call, a
    ~1 KB tool result, a ~300 B final reply).

    The messages' ids are the same every run: chunk boundaries, and so where the
    checkpoints fall and how many records a load replays after the last one, follow
    from them (random ids moved a load of the compacted thread below between 0.4
    and 1.8 ms from run to run).
    """
    call = f"call-{i}"
    ids = [message_id(i, k) for k in range(4)]
    return [
        MessageAppended(
            Msg("user", f"Question {i}: " + "please look this up " * 9, id=ids[0])
        ),
        MessageAppended(
            Msg(
                "assistant",
                [
                    TextBlock("Let me check."),
                    ToolUseBlock(call, "search", {"q": f"topic {i}"}),
                ],
                id=ids[1],
            )
        ),
        MessageAppended(
            Msg("tool", [ToolResultBlock(call, "result " * 150)], id=ids[2])
        ),
        MessageAppended(
            Msg("assistant", f"Answer {i}: " + "the answer is here. " * 14, id=ids[3])
        ),
    ]


def payload_bytes(events: list[object]) -> int:
    """The bytes of the messages themselves (what a user would call the payload)."""
    return sum(
        len(msgspec.msgpack.encode(e.message))
        for e in events
        if isinstance(e, MessageAppended)
    )


def floor_publish(directory: str, data: bytes, n: int, fsync: bool) -> list[float]:
    """The raw floor: temp + fsync + link + unlink + fsync dir, no library."""
    out = []
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _i in range(n):
            t0 = time.perf_counter()
            tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
            os.close(fd)
            os.link(tmp, os.path.join(directory, uuid.uuid4().hex))
            os.unlink(tmp)
            if fsync:
                os.fsync(dfd)
            out.append(time.perf_counter() - t0)
    finally:
        os.close(dfd)
    return out


def append_floor(directory: str, data: bytes, n: int, fsync: bool) -> list[float]:
    """The one-sync floor: append a framed record to an open file + fdatasync."""
    out = []
    fd = os.open(
        os.path.join(directory, "floor.seg"),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o644,
    )
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, len(data).to_bytes(4, "big") + data)
            if fsync:
                os.fdatasync(fd)
            out.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return out


_IN_PLACE_END: dict[str, int] = {}


def in_place_floor(directory: str, data: bytes, n: int, fsync: bool) -> list[float]:
    """The one-sync floor with a reserve: write a framed record over zeros already
    on disk (extending by RESERVE zeros when they run out) + fdatasync."""
    out = []
    path = os.path.join(directory, "floor-in-place.seg")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        end, size = _IN_PLACE_END.get(path, 0), os.fstat(fd).st_size
        framed = len(data).to_bytes(4, "big") + data
        for _ in range(n):
            t0 = time.perf_counter()
            if size - end < len(framed):
                os.pwrite(fd, framed + bytes(RESERVE), end)
                size = end + len(framed) + RESERVE
            else:
                os.pwrite(fd, framed, end)
            if fsync:
                os.fdatasync(fd)
            out.append(time.perf_counter() - t0)
            end += len(framed)
        _IN_PLACE_END[path] = end
    finally:
        os.close(fd)
    return out


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


def _async(fn: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    async def run() -> object:
        return fn()

    return run


async def _to_thread(fn: Callable[..., object], *args: object) -> object:
    return await asyncio.to_thread(fn, *args)


def _hop_row(
    what: str,
    hop: dict[str, list[float]],
    scale: float,
    unit: str,
    digits: int,
    pair: tuple[str, str] = ("to_thread", "run_blocking"),
    label: str = "asyncio.to_thread / run_blocking",
) -> tuple[str, str, str]:
    a50, b50 = (statistics.median(hop[n]) for n in pair)
    return (
        f"{what}: {label}",
        f"{a50 * scale:.{digits}f} {unit} / {b50 * scale:.{digits}f} {unit}",
        f"{a50 / b50:.2f}x",
    )


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def peers_turn(i: int) -> list[object]:
    """The peers' turn (bench_peers): the same shape with pseudo-random words, which
    compress as conversation text does rather than fifty-fold like ``turn``'s
    repeated phrases; what compression measures run on."""
    return peer_events(make_turn(i))


async def fill(
    j: Journal,
    key: ThreadKey,
    n: int,
    start: int = 0,
    make: Callable[[int], list[object]] = turn,
) -> int:
    payload = 0
    async with j.writer(key, holder="bench") as w:
        for i in range(start, start + n):
            events = make(i)
            payload += payload_bytes(events)
            await w.append(events)
    return payload


async def fill_compacting(j: Journal, key: ThreadKey, n: int, every: int = 50) -> None:
    """Like fill, but compacts the context every ``every`` turns (keeping the last
    8 messages), as long-running agents do."""
    async with j.writer(key, holder="bench") as w:
        for i in range(n):
            await w.append(turn(i))
            if (i + 1) % every == 0:
                old = [m.id for m in w.state.context[:-8]]
                await w.append([ContextCompacted(f"summary up to turn {i}", old)])


async def commit_latencies(
    j: Journal,
    key: ThreadKey,
    n: int,
    start: int,
    make: Callable[[int], list[object]] = turn,
) -> list[float]:
    out = []
    async with j.writer(key, holder="bench") as w:
        for i in range(start, start + n):
            events = make(i)
            t0 = time.perf_counter()
            await w.append(events)
            out.append(time.perf_counter() - t0)
    return out


async def main(quick: bool) -> list[tuple[str, str, str]]:
    """Every row, measured in a scratch directory removed afterwards."""
    root = tempfile.mkdtemp(prefix="aj-bench-")
    try:
        return await measure(root, quick)
    finally:
        # A full run leaves some 230 MB there.
        shutil.rmtree(root, ignore_errors=True)


async def measure(root: str, quick: bool) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    n_commit = 300 if quick else 1500
    big = 1000 if quick else 5000
    huge = 2000 if quick else 10000
    sample = journal.codec.encode_record(
        version=1,
        epoch=1,
        writer="bench",
        batch_id=uuid.uuid4().hex,
        run_id=None,
        committed_at=time.time(),
        prev_hash=journal.codec.GENESIS_HASH,
        events=turn(0),
    ).data

    # 1. Commit latency vs the raw floors, alternating in blocks of 50: the
    #    segment log (default) against appending a framed record to an open file
    #    plus fdatasync (one sync); file-per-record against temp + fsync + link +
    #    fsync dir (two syncs).
    floor_dir = os.path.join(root, "floor")
    os.makedirs(floor_dir)
    for fsync in (True, False):
        layouts = {
            "segment log": (True, append_floor),
            "file per record": (False, floor_publish),
        }
        samples: dict[str, tuple[list[float], list[float]]] = {}
        in_place: list[float] = []
        journals = {
            name: Journal.open(
                os.path.join(root, f"commit-{fsync}-{segments}"),
                fsync=fsync,
                segments=segments,
            )
            for name, (segments, _) in layouts.items()
        }
        key = ThreadKey("bench", f"commit-{fsync}")
        for name in layouts:
            samples[name] = ([], [])
        done = 0
        while done < n_commit:
            for name, (_, floor_fn) in layouts.items():
                floor, ours = samples[name]
                floor += floor_fn(floor_dir, sample, 50, fsync)
                ours += await commit_latencies(journals[name], key, 50, done)
            in_place += in_place_floor(floor_dir, sample, 50, fsync)
            done += 50
        label = "fsync" if fsync else "no fsync"
        for name, (floor, ours) in samples.items():
            f50, o50 = statistics.median(floor), statistics.median(ours)
            rows.append(
                (
                    f"commit p50, {name} ({label}), {len(sample)} B turn",
                    f"{o50 * 1e3:.3f} ms vs its floor {f50 * 1e3:.3f} ms",
                    f"{o50 / f50:.2f}x floor",
                )
            )
            rows.append(
                (
                    f"commit p99, {name} ({label})",
                    f"{pct(ours, 0.99) * 1e3:.3f} ms vs its floor "
                    f"{pct(floor, 0.99) * 1e3:.3f} ms",
                    f"{pct(ours, 0.99) / pct(floor, 0.99):.2f}x floor",
                )
            )
        appended = samples["segment log"][0]
        a50, i50 = statistics.median(appended), statistics.median(in_place)
        rows.append(
            (
                f"one-sync floor p50 ({label}): append / write in place into a "
                "zero reserve",
                f"{a50 * 1e3:.3f} ms / {i50 * 1e3:.3f} ms",
                f"{a50 / i50:.2f}x",
            )
        )
        o50 = statistics.median(samples["segment log"][1])
        rows.append(
            (
                f"commit p50, segment log ({label}) vs the in-place floor",
                f"{o50 * 1e3:.3f} ms vs {i50 * 1e3:.3f} ms",
                f"{o50 / i50:.2f}x floor",
            )
        )
        seg, files = samples["segment log"][1], samples["file per record"][1]
        rows.append(
            (
                f"commit p50, segment log / file per record ({label})",
                f"{statistics.median(seg) * 1e3:.3f} ms / "
                f"{statistics.median(files) * 1e3:.3f} ms",
                f"{statistics.median(seg) / statistics.median(files):.2f}x",
            )
        )

    # 1b. The worker-thread hop: asyncio.to_thread against stores._offload's
    #     run_blocking, first around a no-op, then around a whole durable commit
    #     (the local store's hop swapped for the block), alternating in blocks of 50.
    hop: dict[str, list[float]] = {"to_thread": [], "run_blocking": []}
    for _ in range(n_commit // 50):
        for name in hop:
            call = asyncio.to_thread if name == "to_thread" else run_blocking
            for _ in range(50):
                hop[name].append(await timed(lambda call=call: call(int)))  # type: ignore[misc]
    rows.append(_hop_row("worker-thread hop p50, no-op", hop, 1e6, "us", 0))
    #     A third mode runs the commit on the event loop, as a quiet LocalStore does
    #     (inline_writes): the hop it saves.
    j = Journal.open(os.path.join(root, "hop"), fsync=True)
    key = ThreadKey("bench", "hop")
    hop = {"to_thread": [], "run_blocking": [], "inline": []}
    local: Any = stores.local  # its hop is swapped below
    store: Any = j.store
    done = 0
    try:
        while done < n_commit:
            for name in hop:
                local.run_blocking = _to_thread if name == "to_thread" else run_blocking
                store.inline_writes = name == "inline"
                hop[name] += await commit_latencies(j, key, 50, done)
                done += 50
    finally:
        local.run_blocking = run_blocking
        store.inline_writes = True
    rows.append(_hop_row("commit p50 (fsync), local store hop", hop, 1e3, "ms", 3))
    rows.append(
        _hop_row(
            "commit p50 (fsync)",
            hop,
            1e3,
            "ms",
            3,
            ("inline", "run_blocking"),
            "on the event loop (inline_writes) / run_blocking",
        )
    )

    # 2. Commit cost flat in history length: 100-record vs big thread, alternating.
    j = Journal.open(os.path.join(root, "flat"), fsync=False)
    small, large = ThreadKey("bench", "small"), ThreadKey("bench", "large")
    await fill(j, small, 100)
    await fill(j, large, big)
    s_lat: list[float] = []
    l_lat: list[float] = []
    for r in range(6):
        s_lat += await commit_latencies(j, small, 50, 100 + r * 50)
        l_lat += await commit_latencies(j, large, 50, big + r * 50)
    ratio = statistics.median(l_lat) / statistics.median(s_lat)
    rows.append(
        (
            f"commit at {big} records / at 100 records (p50, no fsync)",
            f"{statistics.median(l_lat) * 1e3:.3f} ms / "
            f"{statistics.median(s_lat) * 1e3:.3f} ms",
            f"{ratio:.2f}x",
        )
    )

    # 3. Load: huge thread with default checkpoints vs 100 records, for a context
    #    that is compacted as it grows, and for one that is never compacted.
    j = Journal.open(os.path.join(root, "load"), fsync=False)
    k_small = ThreadKey("bench", "load-small")
    k_huge = ThreadKey("bench", "load-huge")
    k_compact = ThreadKey("bench", "load-compacted")
    await fill(j, k_small, 100)
    await fill(j, k_huge, huge)
    await fill_compacting(j, k_compact, huge)
    fresh = Journal.open(os.path.join(root, "load"))
    times: dict[str, list[float]] = {"small": [], "huge": [], "compact": []}
    for _ in range(7):
        times["small"].append(await timed(lambda: fresh.load(k_small)))
        times["compact"].append(await timed(lambda: fresh.load(k_compact)))
        times["huge"].append(await timed(lambda: fresh.load(k_huge)))
    med = {name: statistics.median(v) for name, v in times.items()}
    # What a load replays after the checkpoint it starts from (0 to 400 records).
    tail = await fresh.head(k_compact) - await fresh._log(k_compact).read_hint()
    rows.append(
        (
            f"load {huge}-turn thread, context compacted every 50 turns / "
            "100-turn thread (checkpoints on)",
            f"{med['compact'] * 1e3:.2f} ms / {med['small'] * 1e3:.2f} ms "
            f"({tail} records after the compacted thread's last checkpoint)",
            f"{med['compact'] / med['small']:.2f}x",
        )
    )
    state = await fresh.load(k_huge)
    blob = msgspec.msgpack.encode(state.context)
    decoder = msgspec.msgpack.Decoder(list[Msg])
    floor = min([await timed(_async(lambda: decoder.decode(blob))) for _ in range(5)])
    rows.append(
        (
            f"load {huge}-turn thread, never compacted ({len(state.context)} "
            "messages in context) / 100-turn thread",
            f"{med['huge'] * 1e3:.2f} ms / {med['small'] * 1e3:.2f} ms "
            f"(decoding the context alone: {floor * 1e3:.2f} ms)",
            f"{med['huge'] / med['small']:.2f}x "
            f"({med['huge'] / floor:.2f}x the decode floor)",
        )
    )

    # 3b. What naming log spans costs a load and saves on disk: the same thread
    #     written twice, checkpoints naming the records (log_spans="always") and
    #     copying the messages into chunk blobs ("never"), loads alternating. The
    #     default ("dense") names them up to 1,024 records: the 100-turn case.
    span_bytes: dict[bool, int] = {}
    span_times: dict[bool, dict[int, list[float]]] = {}
    span_keys = {100: ThreadKey("bench", "span-100"), big: ThreadKey("bench", "span")}
    for spans in (True, False):
        span_root = os.path.join(root, f"spans-{spans}")
        spanning = Journal.open(
            span_root, fsync=False, log_spans="always" if spans else "never"
        )
        for n, key in span_keys.items():
            await fill(spanning, key, n, make=peers_turn)
        span_bytes[spans] = du(span_root)[0]
        span_times[spans] = {n: [] for n in span_keys}
    for _ in range(9):
        for spans in (True, False):
            reader = Journal.open(os.path.join(root, f"spans-{spans}"))
            for n, key in span_keys.items():
                span_times[spans][n].append(
                    await timed(functools.partial(reader.load, key))
                )
    for n in span_keys:
        on, off = (statistics.median(span_times[b][n]) for b in (True, False))
        rows.append(
            (
                f"load a {n:,}-turn thread (peers' turn), checkpoints naming log "
                "spans (log_spans='always') / copying messages into chunk blobs",
                f"{on * 1e3:.2f} ms / {off * 1e3:.2f} ms",
                f"{on / off:.2f}x",
            )
        )
    rows.append(
        (
            f"bytes of those two threads ({big:,} + 100 turns), log spans / "
            "chunk blobs",
            f"{span_bytes[True]:,} B / {span_bytes[False]:,} B",
            f"{span_bytes[True] / span_bytes[False]:.2f}x",
        )
    )

    # 4. Full replay throughput (decode + fold, records already read).
    records = [r async for r in fresh.records(k_huge)]
    n_events = sum(len(r.events) for r in records)
    raw_keys = [fresh._log(k_huge).record_key(r.version) for r in records]
    raw = await fresh.store.read_many(raw_keys)
    best = replay_time(raw, k_huge)
    rows.append(
        (
            "full replay (parse + checksum + hash + decode + fold)",
            f"{n_events} events in {best * 1e3:.1f} ms",
            f"{n_events / best:,.0f} events/s",
        )
    )

    # 5. verify throughput: the log alone (a thread without checkpoints), and a
    #    thread whose every checkpoint is also compared with a fresh replay.
    plain_root = os.path.join(root, "verify")
    k_plain = ThreadKey("bench", "verify-plain")
    await fill(Journal.open(plain_root, fsync=False, checkpoint_every=0), k_plain, big)
    for label, journal_, key_ in (
        (
            "verify, log only (checksums, chain, epochs, replay)",
            Journal.open(plain_root),
            k_plain,
        ),
        ("verify, log + every checkpoint vs a fresh replay", fresh, k_huge),
    ):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            report = await journal_.verify(key_)
            best = min(best, time.perf_counter() - t0)
        rows.append(
            (
                label,
                f"{report.bytes / 1e6:.1f} MB of records in {best * 1e3:.0f} ms "
                f"({report.checkpoints} checkpoints), ok={report.ok}",
                f"{report.bytes / 1e6 / best:.1f} MB/s",
            )
        )

    # 6. Bytes written after 1,000 turns with default checkpoints, then the same
    #    with compression="zstd", and the peers' turn for both (see peers_turn).
    for compression, make, which in (
        (None, turn, ""),
        (None, peers_turn, ", peers' turn"),
        ("zstd", peers_turn, ", peers' turn, compression=zstd"),
    ):
        space_root = os.path.join(root, f"space-{compression}-{len(which)}")
        j = Journal.open(space_root, fsync=False, compression=compression)
        key = ThreadKey("bench", "space")
        payload = await fill(j, key, 1000, make=make)
        size, alloc = du(space_root)
        rows.append(
            (
                f"bytes written after 1,000 turns (records+checkpoints+chunks{which})",
                f"{size:,} B for {payload:,} B of messages (du {alloc:,} B)",
                f"{size / payload:.2f}x payload",
            )
        )

    # 7. What compression="zstd" costs: a durable commit with and without it
    #    (alternating in blocks of 50), and a full replay of compressed records.
    zstd_lat: dict[str | None, list[float]] = {None: [], "zstd": []}
    zjournals = {
        c: Journal.open(os.path.join(root, f"zcommit-{c}"), compression=c)
        for c in zstd_lat
    }
    zkey = ThreadKey("bench", "zstd-commit")
    done = 0
    while done < n_commit:
        for c, lat in zstd_lat.items():
            lat += await commit_latencies(zjournals[c], zkey, 50, done, peers_turn)
        done += 50
    p_plain, p_zstd = (statistics.median(zstd_lat[c]) for c in (None, "zstd"))
    rows.append(
        (
            "commit p50 (fsync, peers' turn), compression=zstd / none",
            f"{p_zstd * 1e3:.3f} ms / {p_plain * 1e3:.3f} ms",
            f"{p_zstd / p_plain:.2f}x",
        )
    )
    replays: dict[str | None, float] = {}
    for c in (None, "zstd"):
        zroot = os.path.join(root, f"zreplay-{c}")
        zj = Journal.open(zroot, fsync=False, compression=c)
        await fill(zj, k_huge, 2000, make=peers_turn)
        log = zj._log(k_huge)
        zraw = await zj.store.read_many([log.record_key(v) for v in range(1, 2002)])
        replays[c] = replay_time(zraw, k_huge)
    z_events = sum(len(r.events) for r in await fresh_records(zroot, k_huge))
    rows.append(
        (
            "full replay, peers' turn: compressed records / plain ones",
            f"{z_events / replays['zstd']:,.0f} / {z_events / replays[None]:,.0f} "
            "events/s",
            f"{replays[None] / replays['zstd']:.2f}x",
        )
    )
    return rows


def replay_time(raw: list[bytes | None], key: ThreadKey) -> float:
    """Best of 3: parse, check, decode and fold stored records, as the engine does
    (the cyclic GC paused during decode and fold)."""
    label = str(key)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        with journal.codec.gc_paused():
            parsed = [
                journal.codec.parse_record(d, label=label, version=i + 1)
                for i, d in enumerate(raw)
                if d is not None
            ]
            decoded = [journal.codec.materialize(p, label=label) for p in parsed]
            proj = AgentStateProjection(label)
            fold(proj, proj.initial(key), decoded)
        best = min(best, time.perf_counter() - t0)
    return best


async def fresh_records(root: str, key: ThreadKey) -> list[journal.Record]:
    return [r async for r in Journal.open(root).records(key)]


def render(rows: list[tuple[str, str, str]], quick: bool) -> str:
    lines = [
        "# Journal core benchmark",
        "",
        f"Command: `python benchmarks/bench_commit.py{' --quick' if quick else ''}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, msgspec {msgspec.__version__}  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| measure | values | ratio |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    table = render(asyncio.run(main(args.quick)), args.quick)
    sys.stdout.write(table)
    if args.out:
        args.out.write_text(table)
