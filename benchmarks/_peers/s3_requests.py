"""agent-journal on S3: requests per turn and per load, counted at a proxy.

Moto's S3 server on loopback with the tests' counting proxy in front (the same
set-up as ``bench_s3.py``), the peers' workload appended through a held writer, then
a load by a new ``Journal`` (no cache). Request counts carry over to real S3; moto's
latencies do not, so none are reported.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import Any

from moto.server import ThreadedMotoServer

from _peers.journal_peer import KEY, events
from _peers.workload import make_turn
from journal import Journal
from tests.services.s3 import CREDENTIALS, S3Proxy, make_bucket


def _per(counts: Counter[str], n: int) -> str:
    total = sum(counts.values())
    parts = ", ".join(f"{m} {c / n:.2f}" for m, c in sorted(counts.items()))
    return f"{total / n:.2f} ({parts})"


async def s3_requests(lengths: list[int]) -> list[dict[str, Any]]:
    """For each length: requests per appended turn up to it, and per load at it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    rows: list[dict[str, Any]] = []
    try:
        async with S3Proxy(f"http://{host}:{port}") as proxy:
            bucket = await make_bucket(proxy.url)
            url = f"s3://{bucket}/journal-{uuid.uuid4().hex[:8]}"
            journal = Journal.open(url, endpoint_url=proxy.url, **CREDENTIALS)
            done = 0
            for length in lengths:
                writer = await journal.acquire(KEY, holder="bench")
                proxy.seen.clear()
                start = done
                while done < length:
                    await writer.append(events(make_turn(done)))
                    done += 1
                # Closing waits for the background checkpoint work, so that none
                # of the writer's requests are counted as the reader's.
                await writer.close()
                appends = Counter(s.method for s in proxy.seen if s.path)
                appends -= Counter(
                    s.method for s in proxy.seen if s.path.endswith("/LEASE")
                )
                reader = Journal.open(url, endpoint_url=proxy.url, **CREDENTIALS)
                proxy.seen.clear()
                state = await reader.load(KEY)
                loads = Counter(s.method for s in proxy.seen)
                await reader.aclose()
                rows.append(
                    {
                        "length": length,
                        "per_turn": _per(appends, length - start),
                        "turns_counted": f"{start + 1}-{length}",
                        "per_load": _per(loads, 1),
                        "messages": len(state.context),
                    }
                )
            await journal.aclose()
    finally:
        server.stop()
    return rows
