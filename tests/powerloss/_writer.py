"""The writer child of the power-loss tests (run by path: ``python _writer.py JSON``).

JSON is an object with ``mode`` and its settings. It prints one line per event, each
flushed at once, so that the parent knows what was acknowledged when it cut the
power:

* ``start`` once the imports are done; then it waits for SIGUSR1 (so that the
  parent can start the next writer while it checks the last cut, and still choose
  the moment its work begins).
* mode ``journal``: ``ready VERSION EPOCH`` after acquiring (VERSION is the fence
  record's), then ``ack VERSION BATCH`` per append, forever. Settings: ``root``,
  ``key`` (ThreadKey fields), ``segments``, ``checkpoint_every``, ``lease_ttl``,
  ``holder``, ``wait``, ``round`` (prefix of the batch ids), ``blob_every`` (every
  n-th append carries an event larger than the blob threshold; 0: none),
  ``retain_every`` (``Journal.retain(window=0)`` after every n-th append; 0: never),
  ``chunk_each`` (each message's id ends a chunk, so that checkpoints soon name
  their chunks through index blobs).
  A writer fenced because its lease renewals fell behind prints ``stopped REASON``
  and idles until it is killed.
* mode ``journal-many``: acquires ``threads`` threads of one journal (default
  settings: segments, fsync) and appends to all of them at once, one task each, so
  that their syncs overlap and the store hands them to the kernel
  (``stores._kernel_sync``). ``fence INDEX VERSION EPOCH`` per thread once all are
  acquired, then ``ready THREADS``, then ``ack INDEX VERSION BATCH`` per append,
  forever, and ``kernel COUNT`` (``stores._kernel_sync.submitted()``) after every
  ``kernel_every``-th ack of the process. Settings: ``root``, ``threads``,
  ``set`` (which thread keys, see :func:`many_key`), ``holder``, ``lease_ttl``,
  ``wait``, ``round`` (prefix of the batch ids), ``kernel_every``,
  ``nowait_fallback`` (see :func:`fall_back_from_nowait`). A fenced thread prints
  ``stopped INDEX REASON`` and its task idles.
* mode ``state``: ``ready VERSION`` after loading the slot of a
  ``JsonFileAgentStateStore`` at ``root``, then ``ack VERSION`` per save, forever;
  the state saved as version V has summary ``s-V``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
import uuid
from typing import TYPE_CHECKING, Any

from journal import FencedError, Journal, MessageAppended, Msg, ThreadKey
from journal.checkpoint import ends_chunk
from journal.crypto import StaticKeys
from projections import AgentState
from stores import JsonFileAgentStateStore, _nowait
from stores._kernel_sync import submitted

if TYPE_CHECKING:
    from journal import ThreadWriter

BIG = 70 * 1024  # above the 64 KiB blob threshold
SESSION = "powerloss"
ENTRY = "main"


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def text_of(batch: str, big: bool) -> str:
    """The message a batch appends; the parent recomputes it to check the content."""
    return f"{batch} " + ("x" * BIG if big else "y" * 200)


def is_big(index: int, blob_every: int) -> bool:
    return blob_every > 0 and index % blob_every == blob_every - 1


def chunk_ending_id() -> str:
    """A message id that ends a checkpoint chunk (one in 64 does)."""
    while True:
        candidate = uuid.uuid4().hex
        if ends_chunk(candidate):
            return candidate


async def append_acked(
    w: ThreadWriter, batch: str, text: str, tag: str = "", message_id: str = ""
) -> None:
    """Append one user message as ``batch``; print ``ack [TAG ]VERSION BATCH``.

    A writer whose renewals fall behind stops before its lease could expire
    (README, "No interleaving writers"): by design, not a failure. It prints
    ``stopped [TAG ]REASON`` and idles until it is killed.
    """
    prefix = f"{tag} " if tag else ""
    try:
        msg = Msg("user", text, id=message_id) if message_id else Msg("user", text)
        rec = await w.append([MessageAppended(msg)], batch_id=batch)
    except FencedError as exc:
        out(f"stopped {prefix}{exc}")
        await asyncio.sleep(3600)
        raise
    out(f"ack {prefix}{rec.version} {batch}")


async def journal_writer(cfg: dict[str, Any]) -> None:
    key = ThreadKey(**cfg["key"])
    kek = cfg.get("kek")
    j = Journal.open(
        str(cfg["root"]),
        segments=bool(cfg["segments"]),
        checkpoint_every=int(cfg["checkpoint_every"]),
        encryption=StaticKeys([base64.b64decode(kek)]) if kek else None,
    )
    w = await j.acquire(
        key,
        holder=str(cfg["holder"]),
        lease_ttl=float(cfg["lease_ttl"]),
        wait=float(cfg["wait"]),
    )
    out(f"ready {w.version} {w.epoch}")
    blob_every = int(cfg["blob_every"])
    retain_every = int(cfg["retain_every"])
    chunk_each = bool(cfg.get("chunk_each"))
    i = 0
    while True:
        batch = f"{cfg['round']}-{i}"
        text = text_of(batch, is_big(i, blob_every))
        await append_acked(
            w, batch, text, message_id=chunk_ending_id() if chunk_each else ""
        )
        if retain_every and i % retain_every == retain_every - 1:
            await j.retain(key, window=0)
        i += 1


def fall_back_from_nowait() -> None:
    """Serve a no-wait read the file system refuses with a plain read instead.

    FUSE, and so LazyFS, refuses ``preadv2(RWF_NOWAIT)`` (``EOPNOTSUPP``). The
    local store takes that to mean no write may be tried on the event loop
    (``LocalStore.inline_writes``), and only such a try hands a concurrent
    append's sync to the kernel: on LazyFS every append would go whole to a worker
    thread and the kernel path would never run. With this the store behaves as on
    a file system that takes the flag (ext4, XFS, btrfs); a read that may wait on
    the loop costs latency, never correctness.
    """
    refusing = _nowait._nowait_read

    def read(fd: int, length: int, offset: int) -> bytearray:
        try:
            return refusing(fd, length, offset)
        except _nowait.WouldBlock as exc:
            if not exc.unsupported:
                raise
        buf = bytearray(os.pread(fd, length, offset))
        if len(buf) != length:
            raise _nowait.WouldBlock("short read")
        return buf

    _nowait._nowait_read = read


def many_key(set_: int, index: int) -> ThreadKey:
    """Thread ``index`` of key set ``set_`` of mode ``journal-many``."""
    return ThreadKey("powerloss", f"many-{set_}", user_id="u", thread_id=f"t{index}")


async def many_writer(cfg: dict[str, Any]) -> None:
    if cfg["nowait_fallback"]:
        fall_back_from_nowait()
    j = Journal.open(str(cfg["root"]))
    keys = [many_key(int(cfg["set"]), i) for i in range(int(cfg["threads"]))]
    writers = await asyncio.gather(
        *(
            j.acquire(
                key,
                holder=str(cfg["holder"]),
                lease_ttl=float(cfg["lease_ttl"]),
                wait=float(cfg["wait"]),
            )
            for key in keys
        )
    )
    for index, w in enumerate(writers):
        out(f"fence {index} {w.version} {w.epoch}")
    out(f"ready {len(writers)}")
    kernel_every = int(cfg["kernel_every"])
    acks = 0

    async def append_forever(index: int, w: ThreadWriter) -> None:
        nonlocal acks
        n = 0
        while True:
            batch = f"{cfg['round']}-{index}-{n}"
            await append_acked(w, batch, text_of(batch, big=False), str(index))
            acks += 1
            if acks % kernel_every == 0:
                out(f"kernel {submitted()}")
            n += 1

    await asyncio.gather(*(append_forever(i, w) for i, w in enumerate(writers)))


async def state_writer(cfg: dict[str, Any]) -> None:
    store = JsonFileAgentStateStore(str(cfg["root"]))
    found = await store.load(None, SESSION, ENTRY)
    version = found[1] if found else 0
    out(f"ready {version}")
    while True:
        state = AgentState(summary=f"s-{version + 1}")
        version = await store.save(
            None, SESSION, ENTRY, state, expected_version=version
        )
        out(f"ack {version}")


async def main(cfg: dict[str, Any]) -> None:
    if cfg["mode"] == "journal":
        await journal_writer(cfg)
    elif cfg["mode"] == "journal-many":
        await many_writer(cfg)
    elif cfg["mode"] == "state":
        await state_writer(cfg)
    else:
        raise SystemExit(f"unknown mode {cfg['mode']!r}")


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    out("start")
    signal.sigwait({signal.SIGUSR1})
    asyncio.run(main(json.loads(sys.argv[1])))
