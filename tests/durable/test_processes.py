"""Three worker processes drain many threads; one is SIGKILLed mid-turn.

``AJ_DURABLE_TURNS`` turns (CI 120; the full size is a few hundred or more) over
``AJ_DURABLE_THREADS`` threads (CI 12), on local disk and on S3 (moto).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from journal import Journal, RuntimeContext
from journal import turn_events as te
from journal.durable import DurableClient

from ..services.s3 import journal_options, make_bucket, s3_server  # noqa: F401
from ._support import check_invariants

CHILD = pathlib.Path(__file__).with_name("_worker_child.py")
TURNS = int(os.environ.get("AJ_DURABLE_TURNS", "120"))
THREADS = int(os.environ.get("AJ_DURABLE_THREADS", "12"))


async def drain_with_a_kill(url: str, tmp_path, endpoint: str | None = None):
    options = journal_options(endpoint) if endpoint else {}
    journal = Journal.open(url, **options)
    client = DurableClient(journal, "w")
    submitted: dict[object, list[str]] = {}
    for i in range(TURNS):
        ctx = RuntimeContext(user_id="u", session_id=f"s{i % THREADS}")
        turn = await client.submit(ctx, f"m{i}", turn_id=f"turn-{i}")
        submitted.setdefault(client.key(ctx), []).append(turn.turn_id)
    stop = tmp_path / "stop"
    args = [url, str(stop)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                *args,
                f"worker-{n}",
                *([endpoint] if endpoint else []),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        for n in range(3)
    ]
    victim = procs[0]
    # Kill the first worker on its third tool start: mid-turn, a call requested.
    started = 0
    killed_turn = None
    while started < 3:
        line = await asyncio.to_thread(victim.stdout.readline)
        assert line, victim.stderr.read().decode()
        if line.startswith(b"started"):
            started += 1
            killed_turn = line.split()[1].decode()
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    try:
        async with asyncio.timeout(240):
            while await client.threads_with_work():
                await asyncio.sleep(0.2)
    finally:
        stop.write_text("stop")
        for proc in procs[1:]:
            _out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err.decode()
    ledgers = await check_invariants(client, submitted)
    records = [
        e
        for key in submitted
        async for r in journal.records(key)
        for e in r.events
        if isinstance(e, te.TurnTakenOver)
    ]
    assert records, "no turn was taken over after the kill"
    assert killed_turn is not None
    total = sum(len(ledger.turns) for ledger in ledgers.values())
    assert total == TURNS
    await journal.aclose()


async def test_three_workers_one_killed_local(tmp_path):
    await drain_with_a_kill(str(tmp_path / "j"), tmp_path)


@pytest.mark.s3
async def test_three_workers_one_killed_s3(tmp_path, s3_server):
    bucket = await make_bucket(s3_server)
    await drain_with_a_kill(f"s3://{bucket}/journal", tmp_path, s3_server)
