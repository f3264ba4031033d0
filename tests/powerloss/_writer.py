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
  ``retain_every`` (``Journal.retain(window=0)`` after every n-th append; 0: never).
  A writer fenced because its lease renewals fell behind prints ``stopped REASON``
  and idles until it is killed.
* mode ``state``: ``ready VERSION`` after loading the slot of a
  ``JsonFileAgentStateStore`` at ``root``, then ``ack VERSION`` per save, forever;
  the state saved as version V has summary ``s-V``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import sys
from typing import Any

from journal import FencedError, Journal, MessageAppended, Msg, ThreadKey
from journal.crypto import StaticKeys
from projections import AgentState
from stores import JsonFileAgentStateStore

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
    i = 0
    while True:
        batch = f"{cfg['round']}-{i}"
        message = Msg("user", text_of(batch, is_big(i, blob_every)))
        try:
            rec = await w.append([MessageAppended(message)], batch_id=batch)
        except FencedError as exc:
            # A writer whose renewals fall behind stops before its lease could
            # expire (README, "No interleaving writers"): by design, not a failure.
            out(f"stopped {exc}")
            await asyncio.sleep(3600)
        out(f"ack {rec.version} {batch}")
        if retain_every and i % retain_every == retain_every - 1:
            await j.retain(key, window=0)
        i += 1


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
    elif cfg["mode"] == "state":
        await state_writer(cfg)
    else:
        raise SystemExit(f"unknown mode {cfg['mode']!r}")


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    out("start")
    signal.sigwait({signal.SIGUSR1})
    asyncio.run(main(json.loads(sys.argv[1])))
