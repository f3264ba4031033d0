"""What one ``Agent.call`` costs the journal: records, bytes, PUTs and GETs.

Run (from a ``pip install -e '.[test]'`` checkout):
``python benchmarks/bench_agent.py [--quick] [--baseline REV] [--out FILE]``

Every scenario runs a series of calls on one session and reports, per call, what
it added to the log (records, their encoded bytes, fence records) and, on S3, the
requests that went over the wire (counted by a loopback proxy in front of moto's
server). Two shapes of call: ``plain`` (the model answers at once) and ``tool``
(the model calls one tool, then answers). Two ways to call:

- ``warm``: one ``Agent`` instance serves the whole series (its lease kept between
  calls, idle, with the state it holds);
- ``cold``: a fresh ``Agent`` over a freshly opened journal for every call, as a
  new replica would be (it takes the lease and loads the thread).

``--baseline REV`` also runs the same scenarios on the code of commit ``REV``
(checked out into a temporary git worktree, run in a child process) and prints
both side by side: the before and after of a change, in one run. A checkout that
predates an option (``hold_lease``) skips the rows needing it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
# The code measured: this checkout, or the baseline's worktree (set by the parent).
CODE = Path(os.environ.get("AJ_BENCH_CODE", HERE))
sys.path.insert(0, str(CODE))

from journal import (  # noqa: E402
    Agent,
    Journal,
    ModelResponse,
    RuntimeContext,
    ScriptedModel,
    ThreadKey,
    ToolCall,
)

Row = dict[str, Any]


def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"{city}: 18 C and sunny, light wind from the west, no rain expected"


def script(shape: str, calls: int) -> ScriptedModel:
    items: list[Any] = []
    for i in range(calls):
        if shape == "tool":
            items.append(
                ModelResponse(
                    "checking", [ToolCall("lookup", {"city": "Paris"}, id=f"c{i}")]
                )
            )
        items.append(f"reply {i}: it is sunny in Paris today, 18 degrees")
    return ScriptedModel(items)


def agent_for(journal: Journal, model: ScriptedModel, **options: Any) -> Agent:
    accepted = inspect.signature(Agent).parameters
    given = {k: v for k, v in options.items() if k in accepted}
    return Agent("A", "assistant", model, tools=[lookup], journal=journal, **given)


CTX = RuntimeContext(user_id="alice", session_id="s1")
KEY = ThreadKey("assistant", "s1", "alice")


async def log_figures(journal: Journal) -> tuple[int, int, int]:
    records = [r async for r in journal.records(KEY, 1)]
    fences = sum(
        1 for r in records for e in r.events if type(e).__name__ == "LeaseAcquired"
    )
    return len(records), sum(r.size for r in records), fences


async def series(
    open_journal: Any,
    shape: str,
    mode: str,
    calls: int,
    proxy: Any = None,
    **options: Any,
) -> Row:
    """Run ``calls`` calls and return the per-call figures of the last ones."""
    warmup = 2  # the thread's creation is not a typical call
    model = script(shape, calls + warmup)
    journal = open_journal()
    agent = agent_for(journal, model, **options) if mode == "warm" else None
    counts: Counter[str] = Counter()
    start: tuple[int, int, int] | None = None
    for i in range(calls + warmup):
        if i == warmup:
            start = await log_figures(journal)
            if proxy is not None:
                proxy.clear()
        if mode == "warm":
            assert agent is not None
            await agent.call("weather in Paris?", CTX)
        else:
            fresh = open_journal()
            replica = agent_for(fresh, model, **options)
            await replica.call("weather in Paris?", CTX)
            await replica.close()
            await fresh.aclose()
    if proxy is not None:
        counts.update(s.method for s in proxy.seen)
        counts["LIST"] = sum(
            1 for s in proxy.seen if s.method == "GET" and "list-type" in s.query
        )
        counts["GET"] -= counts["LIST"]
    if agent is not None:
        await agent.close()
    end = await log_figures(journal)
    await journal.aclose()
    assert start is not None
    records, size, fences = (b - a for a, b in zip(start, end, strict=True))
    row: Row = {
        "records": records / calls,
        "bytes": size / calls,
        "fences": fences / calls,
    }
    if proxy is not None:
        for method in ("PUT", "GET", "HEAD", "LIST", "DELETE"):
            row[method] = counts.get(method, 0) / calls
    return row


SCENARIOS = [
    ("plain", "warm", {}),
    ("plain", "cold", {}),
    ("plain", "warm, hold_lease=5", {"hold_lease": 5.0}),
    ("tool", "warm", {}),
    ("tool", "cold", {}),
    ("tool", "warm, hold_lease=5", {"hold_lease": 5.0}),
]


def supported(options: dict[str, Any]) -> bool:
    accepted = inspect.signature(Agent).parameters
    return all(k in accepted for k in options)


async def run_local(calls: int) -> dict[str, Row]:
    out: dict[str, Row] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape, how, options in SCENARIOS:
            if not supported(options):
                continue
            root = Path(tmp) / uuid.uuid4().hex
            mode = how.split(",")[0]
            out[f"local {shape} {how}"] = await series(
                lambda root=root: Journal.open(str(root)), shape, mode, calls, **options
            )
    return out


async def run_s3(calls: int) -> dict[str, Row]:
    import logging

    from moto.server import ThreadedMotoServer

    from tests.services.s3 import S3Proxy, journal_options, make_bucket

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    starter = threading.Thread(target=server.start, daemon=True)
    starter.start()
    starter.join(30)
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    out: dict[str, Row] = {}
    try:
        await asyncio.sleep(0.3)
        async with S3Proxy(endpoint) as proxy:
            for shape, how, options in SCENARIOS:
                if not supported(options):
                    continue
                bucket = await make_bucket(endpoint)
                url = f"s3://{bucket}/j"
                mode = how.split(",")[0]
                out[f"s3 {shape} {how}"] = await series(
                    lambda url=url: Journal.open(url, **journal_options(proxy.url)),
                    shape,
                    mode,
                    calls,
                    proxy,
                    **options,
                )
    finally:
        server.stop()
    return out


async def measure(calls: int, s3_calls: int) -> dict[str, Row]:
    rows = await run_local(calls)
    rows.update(await run_s3(s3_calls))
    return rows


def baseline_rows(rev: str, quick: bool) -> dict[str, Row]:
    """The same scenarios on commit ``rev``, in a child process."""
    git = shutil.which("git") or "git"
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(
            [git, "-C", str(HERE), "worktree", "add", "--detach", str(tree), rev],
            check=True,
            capture_output=True,
        )
        try:
            env = {**os.environ, "AJ_BENCH_CODE": str(tree)}
            argv = [sys.executable, str(Path(__file__).resolve()), "--json"]
            if quick:
                argv.append("--quick")
            done = subprocess.run(
                argv, check=True, capture_output=True, text=True, env=env
            )
            rows: dict[str, Row] = json.loads(done.stdout)
            return rows
        finally:
            subprocess.run(
                [git, "-C", str(HERE), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )


COLUMNS = ["records", "fences", "bytes", "PUT", "GET", "HEAD", "LIST"]


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def render(after: dict[str, Row], before: dict[str, Row] | None, rev: str) -> str:
    lines = [
        "| scenario | " + " | ".join(COLUMNS) + " |",
        "| --- | " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    for name, row in after.items():
        cells = []
        for column in COLUMNS:
            now = row.get(column)
            was = before.get(name, {}).get(column) if before else None
            if was is not None and now is not None and was != now:
                cells.append(f"{fmt(now)} (was {fmt(was)})")
            else:
                cells.append(fmt(now))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    note = f"per `Agent.call`; (was X): commit {rev}" if before else "per `Agent.call`"
    return note + "\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--baseline", metavar="REV", help="compare with this commit")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    calls, s3_calls = (5, 3) if args.quick else (60, 20)
    rows = asyncio.run(measure(calls, s3_calls))
    if args.json:
        print(json.dumps(rows))
        return
    before = baseline_rows(args.baseline, args.quick) if args.baseline else None
    text = render(rows, before, args.baseline or "")
    print(text)
    if args.out is not None:
        with contextlib.suppress(FileNotFoundError):
            args.out.unlink()
        args.out.write_text(
            "# Requests and bytes per Agent.call\n\n"
            f"`python benchmarks/bench_agent.py --baseline {args.baseline or 'REV'}`"
            f" ({calls} calls per scenario on local disk, {s3_calls} on S3 through "
            "a counting proxy in front of moto).\n\n" + text
        )


if __name__ == "__main__":
    main()
