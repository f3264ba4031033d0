"""A child process for the cross-process journal tests (run it by path).

``python _child.py MODE ROOT KEY_JSON [ARGS...]``; it prints one line per event, each
flushed at once, so the parent can tell what was acknowledged before it killed us:

* ``append N``: append N messages, print ``ACK version batch`` each, then
  ``STATE json``.
* ``load``: print ``STATE json`` of a fresh load.
* ``zombie TTL``: take the lease (TTL seconds) and append until fenced; print
  ``READY``, ``ACK version batch`` per commit, and ``FENCED batch`` before exiting
  with :data:`FENCED_EXIT`.
* ``race IDENT ROUNDS PER_ROUND``: ROUNDS times take the lease (waiting), print
  ``FENCE version epoch``, append PER_ROUND records printing ``ACK version batch
  epoch``, release.
* ``crash ROUND CHECKPOINT_EVERY [LAYOUT]`` (``segments``, the default, or
  ``files``): print ``START``, take over the lease as holder ``crasher`` and append
  forever, printing ``READY`` and ``ACK version batch``; the
  parent kills us.
* ``fault POINT LAYOUT``: append 3 records, then stop (sleep) at a fault point
  inside the next write, after printing ``PAUSED POINT``; the parent kills us there.

With ``AJ_CHILD_KEK`` set, every mode runs on an encrypted journal.
  LAYOUT is ``files`` (records published file by file: the ``record-*-link`` and
  ``record-after-unlink`` points) or ``segments`` (records appended to segment
  files: the ``record-mid-write`` and ``record-*-fdatasync`` points).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from journal import EnvKey, FencedError, Journal, MessageAppended, Msg, ThreadKey
from tests.stores._segment_child import torn_cut

FENCED_EXIT = 3
KEK_ENV = "AJ_CHILD_KEK"
"""When set (base64 of 32 bytes), the child opens the journal encrypted with it."""

_armed = False
_point = ""


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("assistant", text))


async def append(j: Journal, key: ThreadKey, count: int) -> None:
    async with j.writer(key, holder="appender") as w:
        for i in range(count):
            rec = await w.append([say(f"child {i}")], batch_id=f"a-{i}")
            out(f"ACK {rec.version} {rec.batch_id}")
        out(f"STATE {w.state.to_json().decode()}")


async def load(j: Journal, key: ThreadKey) -> None:
    state = await j.load(key)
    out(f"STATE {state.to_json().decode()}")


async def zombie(j: Journal, key: ThreadKey, ttl: float, pause: float = 0.002) -> int:
    w = await j.acquire(key, holder="zombie", lease_ttl=ttl)
    out(f"READY {w.version} {w.epoch}")
    try:
        i = 0
        while True:
            batch = f"z-{i}"
            try:
                rec = await w.append([say(f"zombie {i}")], batch_id=batch)
            except FencedError as exc:
                out(f"FENCED {batch} {exc.current_epoch}")
                return FENCED_EXIT
            out(f"ACK {rec.version} {batch}")
            i += 1
            await asyncio.sleep(pause)
    finally:
        await w.close()


async def race(j: Journal, key: ThreadKey, ident: str, rounds: int, per: int) -> None:
    for r in range(rounds):
        async with j.writer(key, holder=f"racer-{ident}", wait=120, lease_ttl=20) as w:
            out(f"FENCE {w.version} {w.epoch}")
            for k in range(per):
                batch = f"{ident}-{r}-{k}"
                rec = await w.append([say(batch)], batch_id=batch)
                out(f"ACK {rec.version} {batch} {rec.epoch}")


async def crash(j: Journal, key: ThreadKey, round_: int) -> None:
    out("START")
    w = await j.acquire(key, holder="crasher", lease_ttl=60)
    out(f"READY {w.version} {w.epoch}")
    i = 0
    while True:
        batch = f"r{round_}-{i}"
        rec = await w.append([say(batch)], batch_id=batch)
        out(f"ACK {rec.version} {batch}")
        i += 1


def _pause() -> None:
    out(f"PAUSED {_point}")
    time.sleep(600)


def _is_log_segment(fd: int) -> bool:
    target = os.readlink(f"/proc/self/fd/{fd}")
    return "/log/.seg-" in target


def _is_blob_segment(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith("/blobs/.seg-blobs")


def _install_fault_points() -> None:
    real_link, real_rename, real_unlink = os.link, os.rename, os.unlink
    real_pwrite, real_fdatasync = os.pwrite, os.fdatasync

    def pwrite(fd, data, offset):
        # A segment append writes its whole frame, magic first, in one call.
        if _armed and _point == "record-mid-write" and bytes(data[:4]) == b"AJF1":
            real_pwrite(fd, bytes(data[: torn_cut(data, offset)]), offset)
            _pause()
        # A renewal overwrites LEASE in place, in one call: a kill lands before
        # it or after it (a process cannot be stopped inside a small write).
        if (
            _armed
            and _point == "lease-before-overwrite"
            and os.readlink(f"/proc/self/fd/{fd}").endswith("/LEASE")
        ):
            _pause()
        return real_pwrite(fd, data, offset)

    def fdatasync(fd):
        if _armed and _point == "record-before-fdatasync" and _is_log_segment(fd):
            _pause()
        if _armed and _point == "chunks-before-fdatasync" and _is_blob_segment(fd):
            _pause()
        real_fdatasync(fd)
        if _armed and _point == "record-after-fdatasync" and _is_log_segment(fd):
            _pause()

    def link(src, dst, *args, **kwargs):
        target = os.fspath(dst)
        if _armed and _point == "record-before-link" and "/log/" in target:
            _pause()
        if _armed and _point == "checkpoint-before-link" and "/checkpoints/" in target:
            _pause()
        if _armed and _point == "chunks-before-link" and "/blobs/" in target:
            _pause()
        real_link(src, dst, *args, **kwargs)
        if _armed and _point == "record-after-link" and "/log/" in target:
            _pause()

    def unlink(path, *args, **kwargs):
        real_unlink(path, *args, **kwargs)
        if _armed and _point == "record-after-unlink" and "/log/" in os.fspath(path):
            _pause()

    def rename(src, dst, *args, **kwargs):
        target = os.fspath(dst)
        if (
            _armed
            and _point == "hint-before-rename"
            and target.endswith("/LAST_CHECKPOINT")
        ):
            _pause()
        real_rename(src, dst, *args, **kwargs)

    os.link, os.rename, os.unlink = link, rename, unlink
    os.pwrite, os.fdatasync = pwrite, fdatasync


async def fault(j: Journal, key: ThreadKey, point: str) -> None:
    global _armed, _point
    _point = point
    _install_fault_points()
    w = await j.acquire(key, holder="faulty", lease_ttl=60)
    for i in range(3):
        rec = await w.append([say(f"f-{i}")], batch_id=f"f-{i}")
        out(f"ACK {rec.version} f-{i}")
    _armed = True
    if point.startswith(("checkpoint", "chunks", "hint")):
        await w.checkpoint()
    elif point.startswith("lease"):
        await w.renew()
    else:
        # Large enough to span sectors: a write is torn only between them.
        await w.append([say("f-unacked " + "x" * 2000)], batch_id="f-unacked")
    out("NOT PAUSED")


async def main(argv: list[str]) -> int:
    mode, root, key_json, *args = argv
    key = ThreadKey(**json.loads(key_json))
    checkpoint_every = int(args[1]) if mode == "crash" else 100
    options: dict[str, object] = {}
    if mode == "fault":
        # The fault points wrap os.fdatasync: a sync the kernel runs (an append
        # the store judged concurrent, e.g. with its writes slowed by a loaded
        # machine) would pass them by, and the child would never pause.
        options = {"segments": args[1] == "segments", "kernel_syncs": False}
    if mode == "crash" and len(args) > 2:
        options = {"segments": args[2] != "files"}
    if os.environ.get(KEK_ENV):
        # The parent's encrypted runs: the same key-encryption key in every process.
        options["encryption"] = EnvKey(KEK_ENV, previous="")
    j = Journal.open(root, checkpoint_every=checkpoint_every, **options)
    if mode == "append":
        await append(j, key, int(args[0]))
    elif mode == "load":
        await load(j, key)
    elif mode == "zombie":
        return await zombie(j, key, float(args[0]))
    elif mode == "race":
        await race(j, key, args[0], int(args[1]), int(args[2]))
    elif mode == "crash":
        await crash(j, key, int(args[0]))
    elif mode == "fault":
        await fault(j, key, args[0])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
