"""S3 request economy and latency: each store primitive, and journal commits.

Run (from a ``pip install -e '.[test]'`` checkout, which makes ``tests`` importable):
``python benchmarks/bench_s3.py [--quick] [--out benchmarks/results_s3.md]``

It starts moto's S3 server on loopback and puts a counting proxy in front of it, so
the request counts are what goes over the wire. Request counts carry over to real S3;
the latencies are loopback moto's (real S3 is roughly an order of magnitude slower
per request) and are reported only as a median and a p99 per primitive.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import statistics
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from moto.server import ThreadedMotoServer

from journal import Journal, MessageAppended, Msg, ThreadKey
from tests.services.s3 import CREDENTIALS, S3Proxy, make_bucket, open_s3_store

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from stores.s3 import S3Store


def ms(samples: list[float]) -> str:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"{statistics.median(samples) * 1e3:.2f} / {p99 * 1e3:.2f}"


async def timed(
    proxy: S3Proxy, op: Callable[[], Awaitable[object]], runs: int
) -> tuple[list[float], Counter[str]]:
    samples: list[float] = []
    counts: Counter[str] = Counter()
    for _ in range(runs):
        proxy.seen.clear()
        start = time.perf_counter()
        await op()
        samples.append(time.perf_counter() - start)
        counts.update(s.method for s in proxy.seen)
    return samples, Counter({m: n // runs for m, n in counts.items()})


async def primitives(proxy: S3Proxy, runs: int) -> list[tuple[str, str, str]]:
    bucket = await make_bucket(proxy.url)
    store: S3Store = open_s3_store(proxy.url, bucket)
    rows: list[tuple[str, str, str]] = []
    body = b"r" * 1700  # about one journal record
    n = 0

    async def create() -> None:
        nonlocal n
        n += 1
        await store.create(f"t/log/{n:020d}.rec", body)

    await store.create("t/LEASE", b"lease")
    etag = (await store.read("t/LEASE"))[1]

    async def replace() -> None:
        nonlocal etag
        etag = await store.replace(
            "t/LEASE", b"lease " + str(n).encode(), if_match=etag
        )

    async def read() -> None:
        await store.read("t/LEASE")

    async def list_tail() -> None:
        await store.list("t/log/", start_after=f"t/log/{max(n - 10, 0):020d}.rec")

    async def children() -> None:
        await store.children("t")

    for name, op in [
        ("create (1.7 KB)", create),
        ("replace (If-Match)", replace),
        ("read", read),
        ("list last 10 (StartAfter)", list_tail),
        ("children", children),
    ]:
        samples, counts = await timed(proxy, op, runs)
        rows.append(
            (
                name,
                " + ".join(f"{v} {k}" for k, v in sorted(counts.items())),
                ms(samples),
            )
        )
    await store.aclose()
    return rows


async def journal_run(proxy: S3Proxy, turns: int) -> list[tuple[str, str]]:
    bucket = await make_bucket(proxy.url)
    j = Journal.open(f"s3://{bucket}/journal", endpoint_url=proxy.url, **CREDENTIALS)
    key = ThreadKey(agent_id="bench", session_id=uuid.uuid4().hex)
    rows: list[tuple[str, str]] = []
    async with j:
        proxy.seen.clear()
        async with j.writer(key, holder="bench") as w:
            acquire = Counter(s.method for s in proxy.seen)
            rows.append(("acquire the lease (new thread)", str(dict(acquire))))
            proxy.seen.clear()
            for i in range(turns):
                await w.append([MessageAppended(Msg("user", f"turn {i} " * 40))])
            appends = Counter(s.method for s in proxy.seen)
            per = {m: round(c / turns, 2) for m, c in appends.items()}
            rows.append((f"{turns} appends, per append", str(per)))
            proxy.seen.clear()
        rows.append(("release", str(dict(Counter(s.method for s in proxy.seen)))))
        proxy.seen.clear()
        state = await j.load(key)
        rows.append(
            (
                f"load at version {state.version}",
                str(dict(Counter(s.method for s in proxy.seen))),
            )
        )
    return rows


async def main(quick: bool, out: Path | None) -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    runs, turns = (30, 20) if quick else (300, 150)
    try:
        async with S3Proxy(f"http://{host}:{port}") as proxy:
            prim = await primitives(proxy, runs)
            jrun = await journal_run(proxy, turns)
    finally:
        server.stop()
    lines = [
        "# S3 requests per operation (moto on loopback, counted at a proxy)",
        "",
        f"Python {platform.python_version()}, {platform.machine()}, {runs} runs each.",
        "",
        "| primitive | requests | latency p50 / p99 (ms) |",
        "| --- | --- | --- |",
        *(f"| {a} | {b} | {c} |" for a, b, c in prim),
        "",
        "| journal operation | requests |",
        "| --- | --- |",
        *(f"| {a} | {b} |" for a, b in jrun),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if out is not None:
        await asyncio.to_thread(out.write_text, text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.out))
