"""agent-journal beside the stores users pick instead, on one workload, in one run.

Run: ``python benchmarks/bench_peers.py [--quick] [--only NAMES] [--out PATH]``
(from a ``pip install -e '.[bench]'`` checkout). It writes ``benchmarks/RESULTS.md``.

Systems (``--only`` takes these keys, or a prefix such as ``lg`` or ``adk``)::

    aj-fsync aj-nofsync aj-memory              agent-journal, local disk / memory://
    lg-memory lg-sqlite lg-sqlite-normal       LangGraph InMemorySaver / SqliteSaver
    lg-postgres                                (default, and synchronous=NORMAL) /
                                               PostgresSaver
    lg-journal openai-journal pai-journal      the journal's adapters (journal.adapters)
    adk-journal
    pai-memory                                 pydantic-ai InMemoryConversationStore
    adk-memory adk-sqlite adk-db-sqlite        Google ADK InMemorySessionService /
    adk-db-postgres                            SqliteSessionService /
                                               DatabaseSessionService
    openai-sqlite openai-sa-sqlite             OpenAI Agents SDK SQLiteSession /
    openai-sa-postgres                         SQLAlchemySession
    es-popo es-sqlite es-postgres              eventsourcing Application + Aggregate

Every system holds one thread open and persists the same turns (``_peers/workload.py``)
through its own public API (``_peers/<system>_peer.py`` says how and why). For each
thread length (100, 1,000, 5,000 turns; ``--quick``: 20, 100) every system's thread is
filled to that length, then ~100 turns are timed there in blocks of 10, the systems
taking turns block by block (in an order that rotates), so that machine noise hits
all of them alike. At 1,000 and 5,000 turns each persistent system's thread is loaded
by a fresh process (``sys.executable`` running this file with ``--child``), which times
its own open + load after its imports; at 1,000 turns the bytes on disk are counted.
PostgreSQL peers run on a private cluster (``tests/services/postgres.py``) restarted
with the server's default, durable settings. agent-journal's S3 request counts come
from moto behind the tests' counting proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _peers.workload import make_turn  # noqa: E402

if TYPE_CHECKING:
    from _peers.base import Adapter

DEFAULT_OUT = HERE / "RESULTS.md"
SCRIPT = Path(__file__).resolve()

# key -> (adapter module, class, kwargs builder needs: "path" | "server" | None)
SYSTEMS: dict[str, tuple[str, str, dict[str, Any], str | None]] = {
    "aj-fsync": ("journal_peer", "JournalPeer", {"fsync": True}, "root"),
    "aj-nofsync": ("journal_peer", "JournalPeer", {"fsync": False}, "root"),
    "aj-zstd": (
        "journal_peer",
        "JournalPeer",
        {"fsync": True, "compression": "zstd"},
        "root",
    ),
    "aj-memory": ("journal_peer", "JournalPeer", {}, "memory"),
    "lg-memory": ("langgraph_peer", "LangGraphPeer", {"kind": "memory"}, None),
    "lg-sqlite": ("langgraph_peer", "LangGraphPeer", {"kind": "sqlite"}, "path"),
    "lg-sqlite-normal": (
        "langgraph_peer",
        "LangGraphPeer",
        {"kind": "sqlite-normal"},
        "path",
    ),
    "lg-postgres": ("langgraph_peer", "LangGraphPeer", {"kind": "postgres"}, "server"),
    "adk-memory": ("adk_peer", "AdkPeer", {"kind": "memory"}, None),
    "adk-sqlite": ("adk_peer", "AdkPeer", {"kind": "sqlite"}, "path"),
    "adk-db-sqlite": ("adk_peer", "AdkPeer", {"kind": "db-sqlite"}, "path"),
    "adk-db-postgres": ("adk_peer", "AdkPeer", {"kind": "db-postgres"}, "server"),
    "openai-sqlite": ("openai_peer", "OpenAIPeer", {"kind": "sqlite"}, "path"),
    "openai-sa-sqlite": ("openai_peer", "OpenAIPeer", {"kind": "sa-sqlite"}, "path"),
    "openai-sa-postgres": (
        "openai_peer",
        "OpenAIPeer",
        {"kind": "sa-postgres"},
        "server",
    ),
    "lg-journal": ("langgraph_peer", "LangGraphPeer", {"kind": "journal"}, "path"),
    "openai-journal": ("openai_peer", "OpenAIPeer", {"kind": "journal"}, "path"),
    "pai-memory": ("pydantic_ai_peer", "PydanticAIPeer", {"kind": "memory"}, None),
    "pai-journal": ("pydantic_ai_peer", "PydanticAIPeer", {"kind": "journal"}, "path"),
    "adk-journal": ("adk_peer", "AdkPeer", {"kind": "journal"}, "path"),
    "es-popo": ("eventsourcing_peer", "EventsourcingPeer", {"kind": "popo"}, None),
    "es-sqlite": (
        "eventsourcing_peer",
        "EventsourcingPeer",
        {"kind": "sqlite"},
        "path",
    ),
    "es-postgres": (
        "eventsourcing_peer",
        "EventsourcingPeer",
        {"kind": "postgres"},
        "server",
    ),
}
BASELINES = {"durable": "aj-fsync", "not durable": "aj-nofsync", "memory": "aj-memory"}
MEMORY_KEYS = {"lg-memory", "adk-memory", "es-popo", "aj-memory", "pai-memory"}
SQLITE_FILES = {
    "lg-sqlite": "checkpoints.sqlite",
    "lg-sqlite-normal": "checkpoints.sqlite",
    "adk-sqlite": "sessions.db",
    "adk-db-sqlite": "sessions.db",
    "openai-sqlite": "sessions.db",
    "openai-sa-sqlite": "sessions.db",
    "es-sqlite": "events.sqlite",
}
PACKAGES = (
    "agent-journal",
    "msgspec",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langchain-core",
    "google-adk",
    "google-genai",
    "openai-agents",
    "pydantic-ai-slim",
    "eventsourcing",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
    "psycopg",
    "moto",
)
# LangGraph re-stores the whole conversation at every turn: threads longer than this
# start from one seeded checkpoint instead of being filled (see LangGraphPeer.seed).
SEED_ABOVE = 1500


@dataclasses.dataclass
class Plan:
    lengths: list[int]
    samples: int
    block: int
    load_lengths: list[int]
    load_reps: int
    bytes_at: int
    s3_lengths: list[int]


FULL = Plan([100, 1000, 5000], 100, 10, [1000, 5000], 5, 1000, [1000, 5000])
QUICK = Plan([20, 100], 20, 5, [100], 1, 100, [100])


@dataclasses.dataclass
class Row:
    """Everything measured for one system."""

    key: str
    name: str
    durability: str
    durable: str
    persistent: bool
    items_per_turn: int
    latencies: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    background: dict[int, float] = dataclasses.field(default_factory=dict)
    loads: dict[int, list[dict[str, float]]] = dataclasses.field(default_factory=dict)
    seeded: list[int] = dataclasses.field(default_factory=list)
    footprint: tuple[int, int] | None = None
    payload: int = 0
    journal_mode: str = ""

    def mean(self, length: int) -> float:
        """Total time spent on the timed turns (background work included) / turns."""
        samples = self.latencies[length]
        return (sum(samples) + self.background.get(length, 0.0)) / len(samples)

    def median(self, length: int) -> float:
        return statistics.median(self.latencies[length])

    def p99(self, length: int) -> float:
        return pct(self.latencies[length], 0.99)

    def load(self, length: int) -> float | None:
        runs = self.loads.get(length)
        if not runs:
            return None
        return statistics.median(r["open_s"] + r["load_s"] for r in runs)

    def load_open(self, length: int) -> float | None:
        runs = self.loads.get(length)
        if not runs:
            return None
        return statistics.median(r["open_s"] for r in runs)


@dataclasses.dataclass
class Results:
    rows: dict[str, Row]
    plan: Plan
    left_out: list[tuple[str, str]]
    postgres: dict[str, str]
    s3: list[dict[str, Any]] | None
    s3_note: str
    started: float
    elapsed: float
    loadavg: tuple[tuple[float, ...], tuple[float, ...]]
    command: str
    workdir_fs: str


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def selected(only: str | None) -> list[str]:
    if not only:
        return list(SYSTEMS)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    keys = [k for k in SYSTEMS if any(k == w or k.startswith(w + "-") for w in wanted)]
    unknown = [
        w for w in wanted if not any(k == w or k.startswith(w + "-") for k in SYSTEMS)
    ]
    if unknown:
        raise SystemExit(f"unknown system(s): {', '.join(unknown)}; see --help")
    return keys


# --- PostgreSQL -----------------------------------------------------------------


@contextlib.contextmanager
def postgres_server() -> Iterator[tuple[Any, str]]:
    """A private cluster with PostgreSQL's default (durable) settings.

    ``tests.services.postgres.start_postgres`` starts it with fsync, synchronous
    commit and full-page writes off (test speed); the cluster is restarted here
    without those three options, so the server runs with its defaults. Yields
    (``_peers.pg.Server``, "") or (None, the reason it could not be had).
    """
    try:
        from _peers.pg import Server

        from tests.services.postgres import find_bindir, start_postgres
    except ImportError as exc:
        yield None, f"cannot import the PostgreSQL helpers ({exc})"
        return
    try:
        stack = contextlib.ExitStack()
        url = stack.enter_context(start_postgres())
    except BaseException as exc:  # pytest.fail raises a BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        yield None, f"no PostgreSQL server: {str(exc).splitlines()[0]}"
        return
    with stack:
        hostport = url.split("@", 1)[1].split("/", 1)[0]
        host, port = hostport.rsplit(":", 1)
        server = Server(host, int(port))
        try:
            _restart_with_defaults(server, find_bindir())
        except Exception as exc:
            yield None, f"could not restart PostgreSQL with its defaults: {exc}"
            return
        yield server, ""


def _restart_with_defaults(server: Any, bindir: Path) -> None:
    import psycopg

    with psycopg.connect(server.dsn("postgres")) as conn:
        data = str(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        sockets = str(conn.execute("SHOW unix_socket_directories").fetchone()[0])  # type: ignore[index]
    run_as: dict[str, Any] = {}
    if os.geteuid() == 0:  # the cluster belongs to the user it runs as
        st = os.stat(data)
        run_as = {"user": st.st_uid, "group": st.st_gid, "extra_groups": []}
    log = str(Path(data).parent / "server.log")
    options = (
        f"-p {server.port} -c listen_addresses={server.host} -k {sockets} "
        "-c max_connections=200"
    )
    subprocess.run(
        [str(bindir / "pg_ctl"), "-D", data, "-l", log,
         "-o", options, "-w", "-t", "60", "-m", "fast", "restart"],
        check=True, capture_output=True, text=True, timeout=120, cwd="/",
        env={**os.environ, "LC_ALL": "C", "LANG": "C"}, **run_as,
    )  # fmt: skip


# --- building and driving the systems -------------------------------------------


def build(key: str, workdir: Path, server: Any) -> tuple[Adapter | None, str]:
    module_name, class_name, kwargs, needs = SYSTEMS[key]
    try:
        module = importlib.import_module(f"_peers.{module_name}")
    except ImportError as exc:
        return None, f"cannot import its package ({exc})"
    cls = getattr(module, class_name)
    kwargs = dict(kwargs)
    if needs == "root":
        kwargs = {"root": workdir / key, **kwargs}
    elif needs == "memory":
        kwargs = {"root": None}
    elif needs == "path":
        kwargs["path"] = workdir / key
    elif needs == "server":
        if server is None:
            return None, "no PostgreSQL server (see above)"
        kwargs["server"] = server
    adapter: Adapter = cls(**kwargs)
    adapter.key = key
    if key in MEMORY_KEYS:
        adapter.durable = "memory"
    return adapter, ""


async def fill(adapter: Adapter, length: int) -> None:
    while adapter.turns < length:
        await adapter.put_turn(make_turn(adapter.turns))
        await asyncio.sleep(0)  # let other systems' background tasks run
    await adapter.settle()


async def timed_block(adapter: Adapter, n: int) -> tuple[list[float], float]:
    out = []
    for _ in range(n):
        turn = make_turn(adapter.turns)
        t0 = time.perf_counter()
        await adapter.put_turn(turn)
        out.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    await adapter.settle()
    return out, time.perf_counter() - t0


async def load_in_child(adapter: Adapter) -> dict[str, float]:
    spec = json.dumps(adapter.loader_spec())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), "--child", adapter.module, spec,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(
            f"loader for {adapter.name} failed: {err.decode(errors='replace')[-2000:]}"
        )
    result: dict[str, float] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def load_in_process(adapter: Adapter) -> dict[str, float]:
    t0 = time.perf_counter()
    items = await adapter.load()
    return {"open_s": 0.0, "load_s": time.perf_counter() - t0, "items": items}


def journal_mode(path: Path) -> str:
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    except sqlite3.Error as exc:  # pragma: no cover - reported, not fatal
        return f"? ({exc})"


async def run_benchmark(
    keys: list[str],
    plan: Plan,
    workdir: Path,
    *,
    server: Any = None,
    postgres: dict[str, str] | None = None,
    left_out: list[tuple[str, str]] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> tuple[dict[str, Row], list[tuple[str, str]]]:
    """Run every selected system through the plan; return their rows."""
    from _peers.journal_peer import payload_bytes

    left_out = list(left_out or [])
    adapters: list[Adapter] = []
    for key in keys:
        adapter, why = build(key, workdir, server)
        if adapter is None:
            left_out.append((key, why))
            log(f"[{key} left out: {why}]")
            continue
        try:
            await adapter.open()
        except Exception as exc:
            left_out.append((key, f"could not open: {exc!r}"))
            log(f"[{key} left out: could not open: {exc!r}]")
            continue
        if adapter.key.endswith("postgres") and postgres:
            durable = postgres.get("fsync") == "on" and postgres.get(
                "synchronous_commit"
            ) in ("on", "remote_apply", "remote_write", "local")
            adapter.durable = "durable" if durable else "not durable"
            adapter.durability = (
                f"PostgreSQL server: fsync={postgres.get('fsync')}, "
                f"synchronous_commit={postgres.get('synchronous_commit')}, "
                f"full_page_writes={postgres.get('full_page_writes')}"
                + (" (the defaults)" if durable else "")
                + "; loopback TCP"
            )
        adapters.append(adapter)
    rows = {
        a.key: Row(
            a.key, a.name, a.durability, a.durable, a.persistent, a.items_per_turn
        )
        for a in adapters
    }
    try:
        for length in plan.lengths:
            for adapter in adapters:
                t0 = time.perf_counter()
                if length > SEED_ABOVE and await adapter.seed(length):
                    rows[adapter.key].seeded.append(length)
                    how = "seeded"
                else:
                    await fill(adapter, length)
                    how = "filled"
                took = time.perf_counter() - t0
                log(f"  {adapter.key}: {how} to {length} in {took:.1f} s")
            if length == plan.bytes_at:
                payload = sum(payload_bytes(make_turn(i)) for i in range(length))
                for adapter in adapters:
                    row = rows[adapter.key]
                    row.footprint = adapter.footprint()
                    row.payload = payload
                    sqlite_file = SQLITE_FILES.get(adapter.key)
                    if sqlite_file and getattr(adapter, "path", None):
                        row.journal_mode = journal_mode(adapter.path / sqlite_file)  # type: ignore[attr-defined]
            if length in plan.load_lengths:
                for rep in range(plan.load_reps):
                    order = (
                        adapters[rep % len(adapters) :]
                        + adapters[: rep % len(adapters)]
                    )
                    for adapter in order:
                        if adapter.persistent:
                            result = await load_in_child(adapter)
                        else:
                            result = await load_in_process(adapter)
                        expected = adapter.turns * adapter.items_per_turn
                        if result["items"] != expected:
                            raise RuntimeError(
                                f"{adapter.name} loaded {result['items']} items, "
                                f"expected {expected}"
                            )
                        rows[adapter.key].loads.setdefault(length, []).append(result)
                log(f"  loads at {length} done")
            for adapter in adapters:
                rows[adapter.key].latencies[length] = []
                rows[adapter.key].background[length] = 0.0
            rounds = max(1, plan.samples // plan.block)
            for r in range(rounds):
                order = adapters[r % len(adapters) :] + adapters[: r % len(adapters)]
                for adapter in order:
                    samples, background = await timed_block(adapter, plan.block)
                    rows[adapter.key].latencies[length] += samples
                    rows[adapter.key].background[length] += background
            log(f"length {length}: timed {rounds * plan.block} turns per system")
    finally:
        for adapter in adapters:
            with contextlib.suppress(Exception):
                await adapter.close()
    return rows, left_out


# --- the report -------------------------------------------------------------------


def ms(seconds: float) -> str:
    value = seconds * 1e3
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def ratio(peer: float | None, ours: float | None) -> str:
    if peer is None or ours is None or ours == 0:
        return "-"
    r = peer / ours
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.0f} KiB"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        total_kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {total_kb / 2**20:.0f} GiB RAM"
    return (
        f"{platform.system()} {platform.release()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs ({cpu}){mem}"
    )


def filesystem_of(path: Path) -> str:
    """The type of the filesystem holding ``path`` (ext4, xfs, tmpfs, ...)."""
    best = ("", "?")
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            mnt, fstype = line.split()[1:3]
            if str(path).startswith(mnt) and len(mnt) >= len(best[0]):
                best = (mnt, fstype)
    return f"{best[1]} (the scratch directory's filesystem)"


def versions() -> str:
    parts = []
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            parts.append(f"{name} {importlib.metadata.version(name)}")
    parts.append(f"SQLite {sqlite3.sqlite_version}")
    return ", ".join(parts)


def losses(res: Results) -> list[str]:
    """Each measurement where a peer beats the agent-journal row it is compared with."""
    out = []
    rows = res.rows
    for row in rows.values():
        if row.key.startswith("aj-"):
            continue
        base = rows.get(BASELINES[row.durable])
        if base is None:
            continue
        label = f"{row.name} vs agent-journal {base.name.split(': ', 1)[1]}"
        for length in res.plan.lengths:
            if length not in row.latencies or length not in base.latencies:
                continue
            for what, get in (
                ("mean", Row.mean),
                ("median", Row.median),
                ("p99", Row.p99),
            ):
                p, o = get(row, length), get(base, length)
                if p < o:
                    out.append(
                        f"{label}: persist a turn at {length:,} turns, {what} "
                        f"{ms(p)} ms vs {ms(o)} ms ({o / p:.2f}x faster)"
                    )
        for length in res.plan.load_lengths:
            p2, o2 = row.load(length), base.load(length)
            if p2 is not None and o2 is not None and p2 < o2:
                where = "fresh process" if row.persistent else "in process"
                out.append(
                    f"{label}: load at {length:,} turns ({where}) {ms(p2)} ms vs "
                    f"{ms(o2)} ms ({o2 / p2:.2f}x faster)"
                )
        zstd = rows.get("aj-zstd") if row.durable == "durable" else None
        if row.footprint and base.footprint:
            for i, what in ((0, "bytes"), (1, "allocated (du)")):
                if row.footprint[i] < base.footprint[i]:
                    also = ""
                    if zstd is not None and zstd.footprint is not None:
                        z = zstd.footprint[i]
                        also = f"; agent-journal with compression=zstd: {mib(z)}, " + (
                            f"{row.footprint[i] / z:.2f}x smaller than the peer"
                            if z < row.footprint[i]
                            else f"the peer is {z / row.footprint[i]:.2f}x "
                            "smaller still"
                        )
                    out.append(
                        f"{label}: {what} at {res.plan.bytes_at:,} turns "
                        f"{mib(row.footprint[i])} vs {mib(base.footprint[i])} "
                        f"({base.footprint[i] / row.footprint[i]:.2f}x smaller"
                        f"{also})"
                    )
    return out


def render(res: Results) -> str:
    plan, rows = res.plan, res.rows
    lines = [
        "# agent-journal beside its peers",
        "",
        "Written by `benchmarks/bench_peers.py`; do not edit by hand, rerun it. "
        "How to run it and what each system does: `benchmarks/README.md` "
        "(section *Peers*) and the docstrings of `benchmarks/_peers/*.py`.",
        "",
        f"- Command: `{res.command}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(res.started))}, "
        f"run time {res.elapsed / 60:.1f} min",
        f"- Machine: {machine()}; storage: {res.workdir_fs}",
        f"- Load average (1, 5, 15 min) at start {res.loadavg[0]}, at end "
        f"{res.loadavg[1]} (other work shared the machine; the blocks alternate so "
        "that it hits every system alike)",
        f"- Python {platform.python_version()}; {versions()}"
        + (
            f"; PostgreSQL {res.postgres.get('server_version', '?')}"
            if res.postgres
            else ""
        ),
        f"- Plan: thread lengths {', '.join(f'{n:,}' for n in plan.lengths)} turns; "
        f"{plan.samples} timed turns per system at each length, in blocks of "
        f"{plan.block} alternating between systems; {plan.load_reps} fresh-process "
        f"load(s) per system at {', '.join(f'{n:,}' for n in plan.load_lengths)} "
        f"turns; bytes on disk at {plan.bytes_at:,} turns.",
        "",
        "**Workload.** One turn = a user message (~200 B), an assistant message with "
        "a short preamble and one tool call, a tool result (~1 KB) and a final reply "
        "(~300 B): 4 messages, "
        f"{rows_payload_per_turn(res)} B of payload. Side state changes now and then: "
        "the todo list is rewritten every 10th turn, plan mode toggles every 20th, "
        "the running summary is set every 50th.",
        "",
        "**x columns** divide the peer's number by the agent-journal row of the same "
        "durability class (named in *vs*: `fsync` = agent-journal on local disk with "
        "fsync=True, `no fsync` = fsync=False, `memory` = memory://). Above 1, "
        "agent-journal is faster or smaller; below 1, the peer is.",
        "",
        "## Time to persist one turn (ms)",
        "",
        "Each cell: median / mean / p99 of the timed turns at that thread length. "
        "The mean is the total time the system spent on them divided by their "
        "number, including work it finished in the background (agent-journal "
        "checkpoints in a background task, 100 to 200 records apart: the time "
        "to finish it is added); x compares means. With "
        f"{plan.samples} samples the p99 (the sample at rank 0.99 n) is the slowest "
        "turn; it catches the turn that takes a checkpoint or a snapshot.",
        "",
    ]
    head = "| system | vs |"
    rule = "| --- | --- |"
    for length in plan.lengths:
        head += f" {length:,} turns | x |"
        rule += " ---: | ---: |"
    lines += [head, rule]
    for row in rows.values():
        base = rows.get(BASELINES[row.durable])
        vs = {"durable": "fsync", "not durable": "no fsync", "memory": "memory"}[
            row.durable
        ]
        cells = f"| {row.name} | {vs} |"
        for length in plan.lengths:
            if length not in row.latencies:
                cells += " - | - |"
                continue
            mark = " (s)" if length in row.seeded else ""
            cells += (
                f" {ms(row.median(length))} / {ms(row.mean(length))} / "
                f"{ms(row.p99(length))}{mark} |"
            )
            same = base is row or base is None
            cells += (
                " - |" if same else f" {ratio(row.mean(length), base.mean(length))} |"  # type: ignore[union-attr]
            )
        lines.append(cells)
    if any(row.seeded for row in rows.values()):
        lines += [
            "",
            "(s) LangGraph's thread at this length starts from one checkpoint that "
            "already holds the history (as if older checkpoints had been pruned): "
            "filling it turn by turn would write the whole conversation again at "
            "every turn, about 30 GB for 5,000 turns. A put and a load only touch "
            "the newest checkpoint, so the time is what that length costs.",
        ]
    lines += [
        "",
        "## Time to load the full state (ms)",
        "",
        "A fresh process (`sys.executable` running this script with `--child`) "
        "imports the library, then times opening the storage (connection, engine, "
        "journal handle) plus loading the thread's full state, and checks the count "
        "of messages or events it got. Each cell: median of the runs, open + load "
        "(of which open). In-memory systems cannot be loaded by another process: "
        "their cells (marked (i)) are the load inside the writing process, from the "
        "store itself (InMemorySaver.get_tuple, get_session, repository.get, a "
        "second memory:// Journal).",
        "",
    ]
    head, rule = "| system | vs |", "| --- | --- |"
    for length in plan.load_lengths:
        head += f" {length:,} turns | x |"
        rule += " ---: | ---: |"
    lines += [head, rule]
    for row in rows.values():
        base = rows.get(BASELINES[row.durable])
        vs = {"durable": "fsync", "not durable": "no fsync", "memory": "memory"}[
            row.durable
        ]
        cells = f"| {row.name} | {vs} |"
        for length in plan.load_lengths:
            value = row.load(length)
            if value is None:
                cells += " - | - |"
                continue
            mark = " (s)" if length in row.seeded else ""
            if row.persistent:
                cells += f" {ms(value)} ({ms(row.load_open(length) or 0.0)}){mark} |"
            else:
                cells += f" {ms(value)} (i){mark} |"
            same = base is row or base is None
            cells += (
                " - |" if same else f" {ratio(value, base.load(length))} |"  # type: ignore[union-attr]
            )
        lines.append(cells)
    lines += [
        "",
        f"## Bytes on disk after {plan.bytes_at:,} turns",
        "",
        "Sum of the files' sizes and the blocks allocated (`du -B1`) in the "
        "system's own directory (SQLite: the database with its -wal and -shm "
        "files, as left after the last commit; agent-journal: records, "
        "checkpoints, chunks, hints, LEASE). PostgreSQL: `pg_total_relation_size` "
        "of the system's tables (heap, TOAST, indexes) in its own database, WAL "
        "not counted. Payload = the messages' own bytes (msgpack of each message, "
        "as `bench_commit.py` counts them), "
        "the same for every system; x payload = bytes / payload; x compares du.",
        "",
        "| system | vs | bytes | du -B1 | x payload | x |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows.values():
        if not row.persistent or row.footprint is None:
            continue
        base = rows.get(BASELINES[row.durable])
        vs = {"durable": "fsync", "not durable": "no fsync", "memory": "memory"}[
            row.durable
        ]
        size, alloc = row.footprint
        same = base is row or base is None or base.footprint is None
        lines.append(
            f"| {row.name} | {vs} | {size:,} | {alloc:,} | "
            f"{size / row.payload:.2f}x | "
            + ("- |" if same else f"{ratio(alloc, base.footprint[1])} |")  # type: ignore[union-attr,index]
        )
    lines += ["", "## agent-journal on S3: requests", ""]
    if res.s3:
        lines += [
            "Moto's S3 server on loopback behind the tests' counting proxy; the same "
            "workload appended through a held writer, then a load by a new `Journal` "
            "(no cache). Per turn: requests while appending the turns counted, "
            "checkpoints included, LEASE traffic excluded (holding a thread costs "
            "one conditional PUT of LEASE per renewal, every lease_ttl/2 = 15 s, "
            "plus one to acquire and one to release). Counts carry over to real S3; "
            "moto's latencies do not, so none are given. A load reads the "
            "LAST_CHECKPOINT hint, the checkpoint, its message chunks (about 64 "
            "messages each, one GET apiece) and the records after it, so its GETs "
            "grow with the length of the context.",
            "",
            "| thread length | requests per turn (turns counted) | requests per load "
            "| messages loaded |",
            "| ---: | --- | --- | ---: |",
        ]
        for r in res.s3:
            lines.append(
                f"| {r['length']:,} | {r['per_turn']} ({r['turns_counted']}) | "
                f"{r['per_load']} | {r['messages']:,} |"
            )
    else:
        lines.append(f"Not measured: {res.s3_note}")
    lost = losses(res)
    lines += [
        "",
        "## Where agent-journal loses",
        "",
        "Every measurement above where a peer is faster or smaller than the "
        "agent-journal row it is compared with:",
        "",
    ]
    lines += [f"- {item}" for item in lost] or ["- none in this run"]
    lines += [
        "",
        "## Durability of each row",
        "",
        "| system | durability as run |",
        "| --- | --- |",
    ]
    for row in rows.values():
        extra = (
            f" Observed in the file: journal_mode={row.journal_mode}."
            if (row.journal_mode)
            else ""
        )
        lines.append(f"| {row.name} | {row.durability}.{extra} |")
    lines += [
        "",
        "SQLite's `synchronous` is a per-connection setting no peer changes (their "
        "sources set only `journal_mode`, `foreign_keys` and `busy_timeout`); "
        f"Python's sqlite3 (SQLite {sqlite3.sqlite_version}) opens connections with "
        "synchronous=FULL.",
        "",
        "## What each system does per turn",
        "",
        "- agent-journal: one `ThreadWriter.append` of the turn's MessageAppended "
        "events (plus TodosWritten / PlanModeEntered / PlanModeExited / SummarySet "
        "when side state changes) through a held writer; default checkpoints "
        "(100 to 200 records apart, at a chunk boundary). Load: `Journal.load`.",
        "- LangGraph: one `put` of the checkpoint a MessagesState graph writes at "
        'the end of an `invoke(..., durability="exit")`: the whole message list and '
        "the side-state channels as channel values, the bumped channel versions as "
        "`new_versions`, the previous checkpoint as parent. The default durability "
        '("async") writes a checkpoint per super-step plus `put_writes` (five and '
        "four for this turn): these rows are LangGraph's cheapest case. Load: "
        "`get_tuple` of the thread's newest checkpoint.",
        "- Google ADK: four `append_event` calls on the held `Session` (user, model "
        "with a function_call, function response, final model event carrying "
        "`state_delta` for side state), as a Runner appends them. Load: "
        "`get_session`.",
        "- OpenAI Agents SDK: one `add_items` with the turn's five Responses-API "
        "items (user message, assistant message, function_call, "
        "function_call_output, assistant message); sessions have no side state, "
        "so none is stored. Load: `get_items()`.",
        "- eventsourcing: one `Thread` aggregate; a method call (one domain event) "
        "per message and per side-state change, then `Application.save`; "
        "`snapshotting_intervals = {Thread: 400}` (400 message events = 100 turns). "
        "Load: `repository.get`.",
    ]
    if res.left_out:
        lines += ["", "## Left out", ""]
        lines += [f"- `{key}`: {why}" for key, why in res.left_out]
    return "\n".join(lines) + "\n"


def rows_payload_per_turn(res: Results) -> str:
    for row in res.rows.values():
        if row.payload:
            return f"{row.payload / res.plan.bytes_at:,.0f}"
    return "~2,000"


# --- entry points -----------------------------------------------------------------


def preload(module: Any, spec: dict[str, Any]) -> None:
    """Import what the backend would import lazily on first use (a SQLAlchemy
    dialect and its driver, an eventsourcing persistence module, agent-journal's
    local store), so that the timed open + load excludes imports for everyone."""
    names = list(getattr(module, "PRELOAD", ()))
    url = str(spec.get("url", ""))
    if url.startswith("sqlite+aiosqlite"):
        names += ["aiosqlite", "sqlalchemy.dialects.sqlite.aiosqlite"]
    elif url.startswith("postgresql+asyncpg"):
        names += ["asyncpg", "sqlalchemy.dialects.postgresql.asyncpg"]
    persistence = spec.get("env", {}).get("PERSISTENCE_MODULE")
    if persistence:
        names.append(persistence)
    for name in names:
        importlib.import_module(name)


def child(module_name: str, spec_json: str) -> None:
    """Fresh-process loader: import, then time open + load, print JSON."""
    module = importlib.import_module(f"_peers.{module_name}")
    spec = json.loads(spec_json)
    preload(module, spec)
    result = asyncio.run(module.child_load(spec))
    sys.stdout.write(json.dumps(result) + "\n")


async def main_async(args: argparse.Namespace) -> Results:
    plan = QUICK if args.quick else FULL
    keys = selected(args.only)
    for base in ("aj-fsync", "aj-nofsync", "aj-memory"):
        if base not in keys:  # the ratios need them
            keys.insert(0, base)
    started = time.time()
    load_start = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="aj-peers-"))
    log = print
    s3_rows: list[dict[str, Any]] | None = None
    s3_note = ""
    try:
        with contextlib.ExitStack() as stack:
            server, postgres, left = None, {}, []
            if any(k.endswith("postgres") for k in keys):
                server, why = stack.enter_context(postgres_server())
                if server is None:
                    log(f"[PostgreSQL peers left out: {why}]")
                    left.append(("PostgreSQL peers", why))
                else:
                    postgres = server.settings()
                    log(f"PostgreSQL: {postgres}")
            rows, left_out = await run_benchmark(
                keys,
                plan,
                workdir,
                server=server,
                postgres=postgres,
                left_out=left,
                log=log,
            )
        if args.no_s3:
            s3_note = "--no-s3 was given."
        else:
            try:
                from _peers.s3_requests import s3_requests
            except ImportError as exc:
                s3_note = f"moto or the tests' S3 helpers are not importable ({exc})."
            else:
                s3_rows = await s3_requests(plan.s3_lengths)
                log(f"S3: {s3_rows}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    command = "python benchmarks/bench_peers.py" + (" --quick" if args.quick else "")
    if args.only:
        command += f" --only {args.only}"
    return Results(
        rows=rows,
        plan=plan,
        left_out=left_out,
        postgres=postgres,
        s3=s3_rows,
        s3_note=s3_note,
        started=started,
        elapsed=time.time() - started,
        loadavg=(
            tuple(round(x, 2) for x in load_start),
            tuple(round(x, 2) for x in os.getloadavg()),
        ),
        command=command,
        workdir_fs=filesystem_of(workdir),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Systems: " + " ".join(SYSTEMS),
    )
    parser.add_argument("--quick", action="store_true", help="lengths 20 and 100")
    parser.add_argument(
        "--only", help="comma-separated keys or prefixes (lg, adk, ...)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"where to write the report (default: {DEFAULT_OUT.name} beside this "
        "script for a full run; a --quick or --only run writes no file unless asked)",
    )
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 counts")
    parser.add_argument(
        "--child", nargs=2, metavar=("MODULE", "SPEC"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    results = asyncio.run(main_async(args))
    text = render(results)
    sys.stdout.write(text)
    out = args.out or (None if args.quick or args.only else DEFAULT_OUT)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
