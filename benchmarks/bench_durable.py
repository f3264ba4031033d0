"""Durable turns: turns per second drained by 1, 2 and 4 workers; requests per turn.

Run: ``python benchmarks/bench_durable.py [--turns N] [--threads M]``.

Local disk: N turns over M threads are submitted, then 1, 2 or 4 workers (each a
``Worker`` with its own holder id, concurrency 4, in this one process) drain them;
turns/s is N over the drain's wall time. S3 (moto on loopback, through a counting
proxy): the requests of submitting and of draining, per turn, by method, for one
worker taking one turn per claim and for one draining several turns per claim.
The model is scripted (no model latency): this measures the queue's overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moto.server import ThreadedMotoServer

from journal import Agent, Journal, RuntimeContext, ScriptedModel
from journal.durable import DurableClient, Worker
from tests.services.s3 import S3Proxy, journal_options, make_bucket


def reply(messages: list[object]) -> str:
    return "ok"


async def submit_all(client: DurableClient, turns: int, threads: int) -> None:
    for i in range(turns):
        ctx = RuntimeContext(user_id="u", session_id=f"s{i % threads}")
        await client.submit(ctx, f"turn {i}")


async def drain(journal: Journal, workers: int, **options: object) -> int:
    agent = Agent("B", "b", ScriptedModel([reply] * 1_000_000), journal=journal)
    pool = [
        Worker(agent, poll=0.01, control_poll=1.0, concurrency=4, **options)  # type: ignore[arg-type]
        for _ in range(workers)
    ]
    done = await asyncio.gather(*(w.drain(idle_rounds=2) for w in pool))
    return sum(w.turns_run for w in pool) if done else 0


async def local_rate(turns: int, threads: int, workers: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as root:
        journal = Journal.open(root)
        await submit_all(DurableClient(journal, "b"), turns, threads)
        start = time.perf_counter()
        ran = await drain(journal, workers)
        elapsed = time.perf_counter() - start
        return ran / elapsed, ran


async def s3_requests(
    endpoint: str, turns: int, threads: int, max_turns: int
) -> tuple[Counter[str], Counter[str]]:
    async with S3Proxy(endpoint) as proxy:
        bucket = await make_bucket(endpoint)
        journal = Journal.open(f"s3://{bucket}/j", **journal_options(proxy.url))
        client = DurableClient(journal, "b")
        proxy.seen.clear()
        await submit_all(client, turns, threads)
        submit = Counter(s.method for s in proxy.seen)
        proxy.seen.clear()
        await drain(journal, 1, max_turns=max_turns)
        work = Counter(s.method for s in proxy.seen)
        await journal.aclose()
        return submit, work


def per_turn(counts: Counter[str], turns: int) -> str:
    total = sum(counts.values())
    parts = ", ".join(f"{m} {n / turns:.1f}" for m, n in sorted(counts.items()))
    return f"{total / turns:.1f} ({parts})"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--s3-turns", type=int, default=60)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    print(f"# bench_durable ({platform.python_version()}, {platform.machine()})")
    print(f"local disk: {args.turns} turns over {args.threads} threads")
    print("| workers | turns/s | turns run |")
    print("| --- | --- | --- |")
    for workers in (1, 2, 4):
        rate, ran = await local_rate(args.turns, args.threads, workers)
        print(f"| {workers} | {rate:.0f} | {ran} |")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        n = args.s3_turns
        print(f"\nS3 (moto): {n} turns; requests per turn (total, by method)")
        print("| case | submit | drain |")
        print("| --- | --- | --- |")
        for label, threads, max_turns in (
            ("one turn per thread, one per claim", n, 1),
            (f"{n // 10} turns per thread, all in one claim", 10, 16),
        ):
            submit, work = await s3_requests(endpoint, n, threads, max_turns)
            print(f"| {label} | {per_turn(submit, n)} | {per_turn(work, n)} |")
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
