"""Smoke test of benchmarks/bench_peers.py: its agent-journal rows at a tiny size.

The peers (LangGraph, ADK, ...) are installed only by the ``[bench]`` extra, so this
drives the harness with the agent-journal adapter alone: fill, timed blocks, a
fresh-process load, bytes on disk, and the rendered report. No timing assertions.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench_peers(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("bench_peers")


async def test_journal_rows_are_well_formed(bench_peers: Any, tmp_path: Path) -> None:
    plan = bench_peers.Plan(
        lengths=[3, 10],
        samples=4,
        block=2,
        load_lengths=[10],
        load_reps=1,
        bytes_at=10,
        s3_lengths=[],
    )
    rows, left_out = await bench_peers.run_benchmark(
        ["aj-fsync", "aj-memory"], plan, tmp_path
    )
    assert left_out == []
    row = rows["aj-fsync"]
    assert row.name == "agent-journal: local disk, fsync=True"
    assert row.durable == "durable"
    assert row.persistent
    assert sorted(row.latencies) == [3, 10]
    for samples in row.latencies.values():
        assert len(samples) == 4
        assert all(s > 0 for s in samples)
    assert row.median(3) > 0
    assert row.mean(10) > 0
    assert row.p99(10) >= row.median(10)

    # One fresh-process load at 10 turns: the child checked out 40 messages.
    [load] = row.loads[10]
    assert load["items"] == 40
    assert load["open_s"] >= 0
    assert load["load_s"] > 0
    assert row.load(10) == pytest.approx(load["open_s"] + load["load_s"])

    size, allocated = row.footprint
    assert size > row.payload > 0
    assert allocated > 0
    # Its bytes by part add up to the footprint, and the log holds its events.
    parts = row.parts
    files = ("log", "blobs", "checkpoints", "seals", "other")
    assert sum(parts[p] for p in files) == size
    assert parts["records"] >= 10  # a record per turn, at least
    assert 0 < parts["events"] < parts["log"]

    memory = rows["aj-memory"]
    assert not memory.persistent
    assert memory.footprint is None
    assert memory.loads[10][0]["items"] == 40

    results = bench_peers.Results(
        rows=rows,
        plan=plan,
        left_out=[("lg-sqlite", "not installed")],
        postgres={},
        s3=None,
        s3_note="skipped in the smoke test.",
        started=time.time(),
        elapsed=1.0,
        loadavg=((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
        command="python benchmarks/bench_peers.py --only aj",
        workdir_fs="tmpfs",
    )
    text = bench_peers.render(results)
    persist = [
        line
        for line in text.splitlines()
        if line.startswith("| agent-journal: local disk, fsync=True | fsync |")
    ]
    # persist table, load table, bytes table: each a row of the right width.
    assert len(persist) == 3
    assert persist[0].count("|") == 2 + 1 + 2 * len(plan.lengths)
    assert persist[1].count("|") == 2 + 1 + 2 * len(plan.load_lengths)
    assert persist[2].count("|") == 9
    assert row.text > 0
    [parted] = [
        line
        for line in text.splitlines()
        if line.startswith(
            f"| agent-journal: local disk, fsync=True | {parts['records']} |"
        )
    ]
    assert parted.count("|") == 11
    assert "## Where agent-journal loses" in text
    assert "`lg-sqlite`: not installed" in text


async def test_small_list_and_concurrency_sections(
    bench_peers: Any, tmp_path: Path
) -> None:
    """The small-threads, listing and concurrency sections at a tiny size."""
    plan = bench_peers.Plan(
        lengths=[3],
        samples=2,
        block=1,
        load_lengths=[],
        load_reps=1,
        bytes_at=3,
        s3_lengths=[],
        small_threads=3,
        list_reps=1,
        concurrency=[1, 2],
        concurrency_turns=2,
        concurrency_rounds=1,
    )
    small = await bench_peers.run_small(plan, tmp_path, loads=True, listing=True)
    row = small["rows"]["aj-fsync"]
    assert row["p99"] >= row["p50"] > 0
    assert row["footprint"][0] > 0
    assert small["list"]["aj-fsync"]["count"] == 3
    conc = await bench_peers.run_concurrency(plan, tmp_path)
    assert conc["table"][2]["aj-fsync"]["turns"] == 4
    floor = conc["table"][2]["fsync-floor"]
    assert floor["turns"] == 4
    assert floor["p99"] >= floor["p50"] > 0
    # What a turn cost: the loop's CPU is part of the process's (the two clocks
    # round differently: a microsecond a turn of slack); the floor has no loop.
    ours = conc["table"][2]["aj-fsync"]
    assert 0 < ours["loop_cpu"] <= ours["cpu"] + 1e-6
    assert ours["switches"] >= 0
    assert floor["loop_cpu"] is None
    assert floor["cpu"] > 0
    results = bench_peers.Results(
        rows={},
        plan=plan,
        left_out=[],
        postgres={},
        s3=None,
        s3_note="skipped",
        started=time.time(),
        elapsed=1.0,
        loadavg=((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
        command="python benchmarks/bench_peers.py --sections small,list,concurrency",
        workdir_fs="tmpfs",
        extra={"small": small, "concurrency": conc},
    )
    text = bench_peers.render(results)
    assert "## Many small threads: 3 threads of 100 turns" in text
    assert "## Listing 3 threads" in text
    assert "## Sessions writing at once" in text
    assert "| floor: pwrite + fdatasync per turn" in text
    ceiling = f"{1 / ours['loop_cpu']:,.0f} |"
    assert any(
        line.startswith("| agent-journal") and line.endswith(ceiling)
        for line in text.splitlines()
    ), "the cost table ends agent-journal's row with 1 / its loop CPU a turn"
    # The floor is no system: never a loss, even when it is faster.
    floor["turns_s"] = 1e9
    floor["p50"] = floor["p99"] = 1e-9
    assert not any("floor" in loss for loss in bench_peers.extra_losses(results))


async def test_bench_agent_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_agent.py at a tiny size: a warm call adds no fence; on S3 no GET."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = importlib.import_module("bench_agent")
    local = await bench.run_local(2)
    assert local["local plain warm"]["fences"] == 0
    assert local["local plain warm"]["records"] == 2
    assert local["local tool cold"]["fences"] == 1
    s3 = await bench.run_s3(1)
    assert s3["s3 plain warm"]["GET"] == 0
    assert s3["s3 plain warm, hold_lease=5"]["PUT"] == 2
    text = bench.render(s3, None, "")
    assert "| s3 tool cold |" in text
