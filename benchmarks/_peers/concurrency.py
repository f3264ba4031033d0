"""Sessions writing at once: S asyncio tasks in one process, each on its own thread.

Each task writes ``turns`` turns of the workload to its own thread (session) with
the system's durable settings, one after the other; the S tasks run at once on one
event loop, as an async server's requests would. Reported: total turns per second
(all turns / wall time from the first write to the last) and each turn's latency.

How each system keeps the event loop free:

- agent-journal (``stores/_offload.py``): a local store writes a concurrent
  append's frame on the loop (in no-wait mode: a lock held elsewhere sends the
  whole append to a worker) and hands its ``fdatasync`` to threads kept for syncs
  (up to ``min(32, cpu_count + 4)``), which let go of the segment's locks after
  it; other blocking file I/O (renames, reads that would wait) runs on a pool of
  the same size. Each thread has its own segment file, so S sessions issue S
  fsyncs in parallel.
- OpenAI SQLiteSession: ``add_items`` runs in ``asyncio.to_thread``; the sessions on
  one database file share one lock per file (a class-level ``RLock`` keyed by the
  path), held around each write, so writes to the file run one at a time (and
  SQLite itself allows one writer).
- eventsourcing: ``Application.save`` is synchronous: it runs on the loop and
  blocks it for the whole commit, fsync included, so the tasks take turns.

Beside them, a floor that is no system (:func:`run_floor`): S plain threads each
writing a turn's bytes to their own file and syncing it, no event loop, what the
disk allows.
"""

from __future__ import annotations

import asyncio
import os
import resource
import threading
import time
from typing import TYPE_CHECKING, Any

from _peers.base import made
from _peers.workload import make_turn

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path


def usage() -> tuple[float, float, int]:
    """CPU seconds of this thread and of the process, and the process's context
    switches (voluntary and not), so far: what a run cost, beside its wall time."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return (
        time.thread_time(),
        used.ru_utime + used.ru_stime,
        used.ru_nvcsw + used.ru_nivcsw,
    )


def costs(before: tuple[float, float, int], thread: bool = True) -> dict[str, Any]:
    """What ran since ``before`` (from :func:`usage`) cost; ``thread``: the caller's
    thread is the event loop's (the floor has none)."""
    after = usage()
    return {
        "loop_cpu_s": after[0] - before[0] if thread else None,
        "cpu_s": after[1] - before[1],
        "switches": after[2] - before[2],
    }


async def _drive(
    writers: list[Callable[[int], Awaitable[None]]], turns: int
) -> dict[str, Any]:
    latencies: list[float] = []

    async def run(write: Callable[[int], Awaitable[None]]) -> None:
        for t in range(turns):
            t0 = time.perf_counter()
            await write(t)
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0)

    before = usage()
    t0 = time.perf_counter()
    await asyncio.gather(*(run(w) for w in writers))
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "latencies": latencies,
        "turns": len(latencies),
        **costs(before),
    }


async def run_aj(root: Path, sessions: int, turns: int, tag: str) -> dict[str, Any]:
    from _peers.journal_peer import events
    from journal import Journal, ThreadKey

    batches = [events(make_turn(t)) for t in range(turns)]
    journal = Journal.open(root)
    held = [
        await journal.acquire(ThreadKey("bench", f"{tag}-{s}", "bench"), holder="c")
        for s in range(sessions)
    ]

    def writer(w: Any) -> Callable[[int], Awaitable[None]]:
        async def write(t: int) -> None:
            await w.append(batches[t])

        return write

    try:
        return await _drive([writer(w) for w in held], turns)
    finally:
        for w in held:
            await w.close()
        await journal.aclose()


async def run_openai(
    directory: Path, sessions: int, turns: int, tag: str
) -> dict[str, Any]:
    from agents import SQLiteSession

    from _peers.openai_peer import items

    made(directory)
    db = str(directory / "sessions.db")  # one file shared by every session
    opened = [SQLiteSession(f"{tag}-{s}", db) for s in range(sessions)]
    payloads = [items(make_turn(t)) for t in range(turns)]

    def writer(session: Any) -> Callable[[int], Awaitable[None]]:
        async def write(t: int) -> None:
            await session.add_items(payloads[t])

        return write

    try:
        return await _drive([writer(s) for s in opened], turns)
    finally:
        for s in opened:
            s.close()


async def run_es(
    directory: Path, sessions: int, turns: int, tag: str
) -> dict[str, Any]:
    from _peers.eventsourcing_peer import Thread, Threads, apply_turn

    made(directory)
    app = Threads(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(directory / "events.sqlite"),
        }
    )
    threads = []
    for s in range(sessions):
        thread = Thread(name=f"{tag}-{s}")
        app.save(thread)
        threads.append(thread)
    # Made before the clock starts, as for the other systems: generating a turn's
    # text costs more than some systems' commit of it.
    made_turns = [make_turn(t) for t in range(turns)]

    def writer(thread: Any) -> Callable[[int], Awaitable[None]]:
        async def write(t: int) -> None:
            apply_turn(thread, made_turns[t])
            app.save(thread)

        return write

    try:
        return await _drive([writer(t) for t in threads], turns)
    finally:
        app.close()


async def run_floor(
    directory: Path, sessions: int, turns: int, tag: str
) -> dict[str, Any]:
    """No system: what the disk allows, to hold the others against.

    S threads, each with its own file (preallocated with zeros and synced, as a
    record segment's reserve is), each ``pwrite`` a turn's bytes (its events in
    msgpack, about a record's size) after the last and ``fdatasync``: the work
    no durable system can skip, with none of a system's own. The system calls let
    go of the interpreter, so the threads' syncs overlap as far as the disk lets
    them.
    """
    import msgspec

    from _peers.journal_peer import events

    made(directory)
    payloads = [msgspec.msgpack.encode(events(make_turn(t))) for t in range(turns)]
    size = sum(len(p) for p in payloads)
    latencies: list[float] = []

    def session(s: int, start: threading.Barrier) -> None:
        path = directory / f"{tag}-{s}"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except BaseException:
            start.abort()  # the others (and the timer) must not wait for this one
            raise
        try:
            try:
                os.pwrite(fd, bytes(size), 0)
                os.fsync(fd)
            except BaseException:
                start.abort()
                raise
            start.wait()
            offset = 0
            for data in payloads:
                t0 = time.perf_counter()
                os.pwrite(fd, data, offset)
                os.fdatasync(fd)
                latencies.append(time.perf_counter() - t0)
                offset += len(data)
        finally:
            os.close(fd)

    def run_all() -> float:
        start = threading.Barrier(sessions + 1)
        threads = [
            threading.Thread(target=session, args=(s, start)) for s in range(sessions)
        ]
        for thread in threads:
            thread.start()
        start.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        return time.perf_counter() - t0

    before = usage()
    wall = await asyncio.to_thread(run_all)
    return {
        "wall_s": wall,
        "latencies": latencies,
        "turns": len(latencies),
        **costs(before, thread=False),
    }


FLOOR = "fsync-floor"
"""The key of :func:`run_floor`'s row: not a system, never counted as a loss."""

SYSTEMS: dict[str, tuple[str, Any]] = {
    "aj-fsync": ("agent-journal: local disk, fsync=True", run_aj),
    "openai-sqlite": ("OpenAI Agents SDK: SQLiteSession (one file)", run_openai),
    "es-sqlite": ("eventsourcing: SQLite (one file)", run_es),
    FLOOR: ("floor: pwrite + fdatasync per turn, a file and thread each", run_floor),
}
