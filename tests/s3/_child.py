"""A child process for the cross-process journal tests on S3.

``python -m tests.s3._child MODE URL ENDPOINT KEY_JSON [ARGS...]``, from the
repository's root (the writer loops it shares with the local tests' child are
imported from ``tests.journal._child``), opens
``Journal.open(URL, endpoint_url=ENDPOINT, key="testing", secret="testing", ...)``.
It prints one line per event, each flushed at once, so the parent can tell what was
acknowledged before it paused or killed us:

* ``zombie TTL``: take the lease (TTL seconds) as holder ``zombie`` and append until
  fenced; print ``READY version epoch``, ``ACK version batch`` per commit, and
  ``FENCED batch current_epoch`` before exiting with :data:`FENCED_EXIT`.
* ``hold TTL``: take the lease as holder ``holder`` with TTL, renew it once, print
  ``READY version epoch expires_at`` and wait to be killed.
* ``race IDENT ROUNDS PER_ROUND``: ROUNDS times take the lease (waiting), print
  ``FENCE version epoch``, append PER_ROUND records printing ``ACK version batch
  epoch``, release.
* ``crash ROUND CHECKPOINT_EVERY TTL``: print ``START``, take the lease as holder
  ``crasher-ROUND`` (once the previous holder's lease has expired), print
  ``READY version epoch``, then append forever printing ``ACK version batch``; the
  parent kills us. A writer that loses its lease (its renewals came too late on a
  loaded machine) prints ``FENCED`` and waits to be killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from journal import FencedError, Journal, LeaseHeldError, ThreadKey, ThreadWriter
from tests.journal._child import out, race, say, zombie

CREDENTIALS = {
    "key": "testing",
    "secret": "testing",
    "client_kwargs": {"region_name": "us-east-1"},
}


async def take_over(
    j: Journal, key: ThreadKey, holder: str, ttl: float
) -> ThreadWriter:
    """Acquire as soon as the previous holder's lease has expired.

    Sleeps until the expiry the refusal names instead of passing ``wait=``:
    ``acquire`` starts its lease-validity clock before it waits, so a wait longer
    than 0.9 x ``lease_ttl`` leaves it holding a lease it already counts as lapsed
    (its fence commit raises ``FencedError``); ``test_processes`` shows that apart.
    """
    deadline = time.monotonic() + 120
    while True:
        try:
            return await j.acquire(key, holder=holder, lease_ttl=ttl)
        except LeaseHeldError as exc:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(max(exc.expires_at - time.time(), 0.0) + 0.01)
        except FencedError:
            # On a loaded machine the acquire took longer than the lease it took
            # (nothing was committed): take it again, as the same holder.
            if time.monotonic() > deadline:
                raise
            out("FENCED")


async def crash(j: Journal, key: ThreadKey, round_: int, ttl: float) -> None:
    out("START")
    w = await take_over(j, key, f"crasher-{round_}", ttl)
    out(f"READY {w.version} {w.epoch}")
    i = 0
    while True:
        batch = f"r{round_}-{i}"
        try:
            rec = await w.append([say(batch)], batch_id=batch)
        except FencedError:
            out("FENCED")
            await asyncio.sleep(600)
            return
        out(f"ACK {rec.version} {batch}")
        i += 1


async def hold(j: Journal, key: ThreadKey, ttl: float) -> None:
    w = await j.acquire(key, holder="holder", lease_ttl=ttl)
    await w.renew()
    out(f"READY {w.version} {w.epoch}")
    await asyncio.sleep(600)


async def main(argv: list[str]) -> int:
    mode, url, endpoint, key_json, *args = argv
    key = ThreadKey(**json.loads(key_json))
    checkpoint_every = int(args[1]) if mode == "crash" else 100
    j = Journal.open(
        url,
        checkpoint_every=checkpoint_every,
        endpoint_url=endpoint,
        **CREDENTIALS,
    )
    try:
        if mode == "zombie":
            return await zombie(j, key, float(args[0]), pause=0.005)
        if mode == "hold":
            await hold(j, key, float(args[0]))
        elif mode == "race":
            await race(j, key, args[0], int(args[1]), int(args[2]))
        elif mode == "crash":
            await crash(j, key, int(args[0]), float(args[2]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    finally:
        await j.aclose()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
