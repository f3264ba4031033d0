"""agent-journal beside the stores users pick instead, on one workload, in one run.

Run: ``python benchmarks/bench_peers.py [--quick] [--only NAMES] [--sections NAMES]
[--out PATH]`` (sections: main, s3, small, list, cli, concurrency; default all)
(from a ``pip install -e '.[bench]'`` checkout). It writes ``benchmarks/RESULTS.md``.

Systems (``--only`` takes these keys, or a prefix such as ``lg`` or ``adk``)::

    aj-fsync aj-nofsync aj-memory              agent-journal, local disk / memory://
    aj-zstd aj-blobs aj-agent                  (compression=zstd; log_spans="never";
    aj-agent-hold                              Agent.call writes; the same with
                                               hold_lease=, no LEASE writes per call)
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
filled to that length and given one more turn, untimed (an ``Agent`` lets a thread's
lease go after 30 s idle, and the loads take longer: its next call reloads the thread),
then ~100 turns are timed there in blocks of 10, the systems
taking turns block by block (in an order that rotates), so that machine noise hits
all of them alike; before each block, an untimed ``os.sync()`` writes back what the
systems before it left in the page cache, and an untimed ``gc.collect()`` collects
what they left (all of them share this process). At 1,000 and 5,000 turns each
persistent system's thread is loaded by a fresh process (``sys.executable`` running
this file with ``--child``), which times its own open + load after its imports; at
1,000 turns the bytes on disk are counted.
PostgreSQL peers run on a private cluster (``tests/services/postgres.py``) restarted
with the server's default, durable settings. agent-journal's S3 request counts come
from moto behind the tests' counting proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
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

from _peers.workload import make_turn, text_bytes  # noqa: E402

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
    "aj-blobs": (
        "journal_peer",
        "JournalPeer",
        {"fsync": True, "log_spans": "never"},
        "root",
    ),
    "aj-memory": ("journal_peer", "JournalPeer", {}, "memory"),
    "aj-agent": ("agent_peer", "AgentPeer", {}, "root"),
    "aj-agent-hold": ("agent_peer", "AgentPeer", {"hold_lease": 30.0}, "root"),
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
    "zlib-ng",
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
SHORT_LOADS: list[str] = []
"""Peers' loads that returned fewer items than written (reported in the load table)."""

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
    small_threads: int = 1000
    """Section small/list: how many threads of 100 turns."""
    list_reps: int = 5
    cli_reps: int = 5
    cli_length: int = 5000
    cli_timeout: float = 60.0
    concurrency: list[int] = dataclasses.field(default_factory=lambda: [1, 8, 64])
    concurrency_turns: int = 50
    concurrency_rounds: int = 2


FULL = Plan([100, 1000, 5000], 100, 10, [1000, 5000], 5, 1000, [1000, 5000])
QUICK = Plan(
    [20, 100], 20, 5, [100], 1, 100, [100],
    small_threads=100, list_reps=3, cli_reps=3, cli_length=100, cli_timeout=20.0,
    concurrency_turns=10, concurrency_rounds=1,
)  # fmt: skip
# --sections: "main" is the persist / load / bytes run (aliases below).
SECTIONS = ("main", "s3", "small", "list", "cli", "concurrency")
SECTION_ALIASES = {"persist": "main", "load": "main", "bytes": "main"}


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
    footprint_checkpointed: tuple[int, int] | None = None
    """SQLite in WAL mode: the footprint once the WAL is checkpointed (TRUNCATE)."""
    payload: int = 0
    text: int = 0
    journal_mode: str = ""
    parts: dict[str, int] | None = None
    """agent-journal: where the footprint's bytes go (``byte_parts``)."""

    def mean(self, length: int) -> float:
        """Total time spent on the timed turns (background work included) / turns."""
        samples = self.latencies[length]
        return (sum(samples) + self.background.get(length, 0.0)) / len(samples)

    def median(self, length: int) -> float:
        return statistics.median(self.latencies[length])

    def p99(self, length: int) -> float:
        return pct(self.latencies[length], 0.99)

    def smallest_footprint(self) -> tuple[int, int] | None:
        """The footprint, or the checkpointed one where that is smaller (per field)."""
        if self.footprint is None or self.footprint_checkpointed is None:
            return self.footprint
        return (
            min(self.footprint[0], self.footprint_checkpointed[0]),
            min(self.footprint[1], self.footprint_checkpointed[1]),
        )

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
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The small, list, cli and concurrency sections' results, by section."""


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
    return await run_child(adapter.module, adapter.loader_spec(), adapter.name)


async def run_child(module: str, spec: dict[str, Any], what: str) -> dict[str, Any]:
    """Run ``--child MODULE SPEC`` in a fresh process; return the JSON it prints."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), "--child", module, json.dumps(spec),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(
            f"child for {what} failed: {err.decode(errors='replace')[-2000:]}"
        )
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def load_in_process(adapter: Adapter) -> dict[str, float]:
    t0 = time.perf_counter()
    items = await adapter.load()
    return {"open_s": 0.0, "load_s": time.perf_counter() - t0, "items": items}


_COPY_TREE = "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])"


def checkpointed_footprint(directory: Path, db_name: str) -> tuple[int, int] | None:
    """(bytes, du) of a copy of ``directory`` after ``PRAGMA wal_checkpoint(TRUNCATE)``.

    A SQLite database in WAL mode keeps the newest pages in its -wal file until a
    checkpoint copies them into the database (SQLite does that every 1,000 pages):
    the WAL then holds a second copy of recent rows. The copy is checkpointed from a
    separate connection, so that the peer's own files and connection are untouched.
    """
    with tempfile.TemporaryDirectory(prefix="aj-walckpt-") as tmp:
        copy = Path(tmp) / "db"
        # In another process: closing any descriptor of the database file drops
        # every POSIX lock this process holds on it, the peer's SQLite connections'
        # included (its next writes then failed with "disk I/O error", and a load
        # missed rows). A child's descriptors are its own.
        subprocess.run(
            [sys.executable, "-c", _COPY_TREE, str(directory), str(copy)], check=True
        )
        try:
            with contextlib.closing(sqlite3.connect(copy / db_name)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:  # pragma: no cover - reported as missing
            return None
        from _peers.base import du

        return du(copy)


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
                text = sum(text_bytes(make_turn(i)) for i in range(length))
                for adapter in adapters:
                    row = rows[adapter.key]
                    row.footprint = adapter.footprint()
                    row.parts = await adapter.byte_parts()
                    row.payload = payload
                    row.text = text
                    sqlite_file = SQLITE_FILES.get(adapter.key)
                    if sqlite_file and getattr(adapter, "path", None):
                        row.journal_mode = journal_mode(adapter.path / sqlite_file)  # type: ignore[attr-defined]
                        if row.journal_mode.lower() == "wal":
                            row.footprint_checkpointed = checkpointed_footprint(
                                adapter.path,  # type: ignore[attr-defined]
                                sqlite_file,
                            )
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
                            if adapter.key.startswith("aj"):
                                raise RuntimeError(
                                    f"{adapter.name} loaded {result['items']} "
                                    f"items, expected {expected}"
                                )
                            # A peer's own shortfall is reported, not hidden.
                            SHORT_LOADS.append(
                                f"{adapter.name} at {length:,} turns: loaded "
                                f"{result['items']:,} items, expected {expected:,}"
                            )
                            log(f"  [{SHORT_LOADS[-1]}]")
                        rows[adapter.key].loads.setdefault(length, []).append(result)
                log(f"  loads at {length} done")
            for adapter in adapters:
                rows[adapter.key].latencies[length] = []
                rows[adapter.key].background[length] = 0.0
                # One untimed turn first: the loads above take over a minute, past
                # the 30 s an Agent keeps a thread's lease by default, and its
                # first call after that acquires and reloads the thread (24 ms at
                # 5,000 turns), a cold turn, where the rows measure warm ones.
                await fill(adapter, adapter.turns + 1)
            rounds = max(1, plan.samples // plan.block)
            for r in range(rounds):
                order = adapters[r % len(adapters) :] + adapters[: r % len(adapters)]
                for adapter in order:
                    # Untimed: the page cache's dirty data goes to disk first, so
                    # that no block's syncs wait on writing back another system's
                    # (LangGraph's SqliteSaver writes megabytes a turn at 1,000).
                    # And a full collection: with every framework imported into
                    # this process, one takes 90-200 ms (the OpenAI Agents SDK's
                    # import alone makes it 36 ms, agent-journal's 3), and it
                    # otherwise fell inside whichever block allocated enough to
                    # trigger it: a single turn's time, ten to a hundred times
                    # its median, owed to every system's objects.
                    gc.collect()
                    os.sync()
                    samples, background = await timed_block(adapter, plan.block)
                    rows[adapter.key].latencies[length] += samples
                    rows[adapter.key].background[length] += background
            log(f"length {length}: timed {rounds * plan.block} turns per system")
    finally:
        for adapter in adapters:
            with contextlib.suppress(Exception):
                await adapter.close()
    return rows, left_out


# --- small threads, listing, cold CLI, concurrency ----------------------------------


async def run_small(
    plan: Plan,
    workdir: Path,
    *,
    loads: bool,
    listing: bool,
    log: Callable[[str], None] = lambda _msg: None,
) -> dict[str, Any]:
    """Fill each system with ``plan.small_threads`` threads; time loads and listing."""
    import _peers.small as small

    n = plan.small_threads
    out: dict[str, Any] = {"n": n, "rows": {}, "left_out": [], "text": 0}
    out["text"] = small.text_of_threads(n)
    specs: dict[str, dict[str, Any]] = {}
    for key, (name, fill_fn, _load, _list, _why) in small.SYSTEMS.items():
        directory = workdir / "small" / key
        t0 = time.perf_counter()
        try:
            spec = await fill_fn(directory, n)
        except ImportError as exc:
            out["left_out"].append((name, f"cannot import its package ({exc})"))
            log(f"[small {key} left out: {exc}]")
            continue
        fill_s = time.perf_counter() - t0
        row: dict[str, Any] = {"name": name, "fill_s": fill_s}
        row["footprint"] = small.footprint(directory)
        db = SQLITE_FILES.get(key)
        if db and journal_mode(directory / db).lower() == "wal":
            row["footprint_checkpointed"] = checkpointed_footprint(directory, db)
        out["rows"][key] = row
        specs[key] = {**spec, "system": key}
        log(f"  small {key}: filled {n} x {small.TURNS} turns in {fill_s:.1f} s")
    if loads:
        # Rounds in an order that rotates: the system loaded first in a round reads
        # slower (measured: the same store 3.9 ms first, 1.8 ms third), so each one
        # takes every place once and its loads pool over the rounds.
        keys = list(specs)
        pooled: dict[str, list[float]] = {k: [] for k in keys}
        opens: dict[str, list[float]] = {k: [] for k in keys}
        for rep in range(len(keys)):
            for key in keys[rep:] + keys[:rep]:
                spec = {**specs[key], "op": "load_many"}
                result = await run_child("small", spec, key)
                if result["bad"]:
                    raise RuntimeError(
                        f"small {key}: {result['bad']} threads loaded short"
                    )
                pooled[key] += result["loads"]
                opens[key].append(result["open_s"])
        for key in keys:
            row = out["rows"][key]
            row["open_s"] = statistics.median(opens[key])
            row["p50"] = statistics.median(pooled[key])
            row["p99"] = pct(pooled[key], 0.99)
            row["rounds"] = len(opens[key])
            log(
                f"  small {key}: open {ms(row['open_s'])} ms, load p50 "
                f"{ms(row['p50'])} ms, p99 {ms(row['p99'])} ms"
            )
    if listing:
        listers = [k for k in specs if small.SYSTEMS[k][3] is not None]
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in listers}
        for rep in range(plan.list_reps):
            for key in listers[rep % len(listers) :] + listers[: rep % len(listers)]:
                result = await run_child("small", {**specs[key], "op": "list"}, key)
                if result["count"] != n:
                    raise RuntimeError(f"list {key}: {result['count']} of {n} threads")
                runs[key].append(result)
        out["list"] = {
            key: {
                "total_s": statistics.median(r["open_s"] + r["list_s"] for r in rs),
                "open_s": statistics.median(r["open_s"] for r in rs),
                "count": rs[0]["count"],
                "reps": len(rs),
            }
            for key, rs in runs.items()
        }
        out["not_listed"] = [
            (small.SYSTEMS[k][0], small.SYSTEMS[k][4])
            for k in specs
            if small.SYSTEMS[k][3] is None
        ]
        log(f"  list: {out['list']}")
    return out


async def fill_cli_thread(root: Path, length: int) -> None:
    """A thread of ``length`` turns for the CLI section when the main run is skipped."""
    from _peers.journal_peer import KEY, events

    from journal import Journal

    journal = Journal.open(root, fsync=False)
    writer = await journal.acquire(KEY, holder="bench")
    for i in range(length):
        await writer.append(events(make_turn(i)))
    await writer.close()
    await journal.aclose()


SLOW_CLI = 2.0


def run_cli(root: Path, length: int, reps: int, timeout: float) -> dict[str, Any]:
    """Wall time of cold CLI commands on the thread at ``root``, beside two floors."""
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env.pop("AGENT_JOURNAL_HOME", None)
    # An installed package has its bytecode cached; with this set, every timed run
    # would compile the modules again (the untimed first round writes the caches).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    thread = ["--root", str(root), "--agent", "bench", "--session", "peers"]
    thread += ["--user", "bench"]
    py = sys.executable
    commands: dict[str, list[str]] = {
        "python -c pass": [py, "-c", "pass"],
        'python -c "import journal"': [py, "-c", "import journal"],
        "python -m journal state --json":
            [py, "-m", "journal", "state", "--json", *thread],
        "python -m journal state": [py, "-m", "journal", "state", *thread],
    }  # fmt: skip
    script = Path(py).parent / "agent-journal"
    if script.exists():
        name = "agent-journal state --json (console script)"
        commands[name] = [str(script), "state", "--json", *thread]
    times: dict[str, list[float]] = {name: [] for name in commands}
    sizes: dict[str, int] = {}
    timed_out: dict[str, float] = {}
    # A command whose untimed first run took over SLOW_CLI seconds is timed twice,
    # not ``reps`` times; one that runs past the timeout is reported as such.
    wanted = dict.fromkeys(commands, reps)
    for rep in range(reps + 1):  # the first round warms the page cache, untimed
        for name, argv in commands.items():
            if name in timed_out or len(times[name]) >= wanted[name]:
                continue
            t0 = time.perf_counter()
            try:
                done = subprocess.run(
                    argv, capture_output=True, env=env, check=False, timeout=timeout
                )
            except subprocess.TimeoutExpired:
                timed_out[name] = timeout
                continue
            took = time.perf_counter() - t0
            if done.returncode != 0:
                raise RuntimeError(
                    f"{name} failed ({done.returncode}): "
                    f"{done.stderr.decode(errors='replace')[-1500:]}"
                )
            sizes[name] = len(done.stdout)
            if rep:
                times[name].append(took)
            elif took > SLOW_CLI:
                wanted[name] = min(reps, 2)
    counting = (
        "import sys, io, contextlib\n"
        "import journal\n"
        "a = len(sys.modules)\n"
        "import journal.cli\n"
        "b = len(sys.modules)\n"
        "from journal.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main({['state', '--json', *thread]!r})\n"
        "print(a, b, len(sys.modules))\n"
    )
    counted = subprocess.run(
        [py, "-c", counting], capture_output=True, env=env, check=True, text=True
    )
    base = subprocess.run(
        [py, "-c", "import sys; print(len(sys.modules))"],
        capture_output=True, env=env, check=True, text=True,
    )  # fmt: skip
    a, b, c = (int(x) for x in counted.stdout.split())
    return {
        "length": length,
        "reps": reps,
        "median": {name: statistics.median(ts) for name, ts in times.items() if ts},
        "runs": {name: len(ts) for name, ts in times.items()},
        "timed_out": timed_out,
        "stdout_bytes": sizes,
        "modules": {
            "python": int(base.stdout),
            "import journal": a,
            "import journal.cli": b,
            "after state": c,
        },
    }


async def run_concurrency(
    plan: Plan, workdir: Path, log: Callable[[str], None] = lambda _msg: None
) -> dict[str, Any]:
    """S sessions writing at once, for each S; systems alternate round by round."""
    import _peers.concurrency as conc

    keys = []
    left_out = []
    for key in conc.SYSTEMS:
        module = {"openai-sqlite": "agents", "es-sqlite": "eventsourcing"}.get(key)
        if module is not None:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                left_out.append((conc.SYSTEMS[key][0], f"cannot import ({exc})"))
                continue
        keys.append(key)
    acc: dict[tuple[int, str], dict[str, Any]] = {}
    turns = plan.concurrency_turns
    for rnd in range(plan.concurrency_rounds):
        for level in plan.concurrency:
            shift = (rnd + level) % len(keys)
            for key in keys[shift:] + keys[:shift]:
                _name, runner = conc.SYSTEMS[key]
                # Untimed, before each system's run: what the runs before left for
                # the cyclic collector and the disk is settled here, so that no
                # system pays for another's garbage (a full collection of this
                # process, which holds every peer's modules, takes 30-120 ms and
                # holds every session in flight) or writeback.
                gc.collect()
                os.sync()
                result = await runner(
                    workdir / "concurrency" / key, level, turns, f"r{rnd}s{level}"
                )
                cell = acc.setdefault(
                    (level, key),
                    {"wall_s": 0.0, "latencies": [], "cpu_s": 0.0, "switches": 0},
                )
                cell["wall_s"] += result["wall_s"]
                cell["latencies"] += result["latencies"]
                cell["cpu_s"] += result["cpu_s"]
                cell["switches"] += result["switches"]
                loop_cpu = result["loop_cpu_s"]
                if loop_cpu is not None:
                    cell["loop_cpu_s"] = cell.get("loop_cpu_s", 0.0) + loop_cpu
        log(f"  concurrency round {rnd + 1} done")
    table: dict[int, dict[str, dict[str, float]]] = {}
    for (level, key), cell in acc.items():
        lat = cell["latencies"]
        loop_cpu = cell.get("loop_cpu_s")
        table.setdefault(level, {})[key] = {
            "turns_s": len(lat) / cell["wall_s"],
            "p50": statistics.median(lat),
            "p99": pct(lat, 0.99),
            "turns": len(lat),
            # Per turn: what the event loop's thread and the whole process spent.
            "loop_cpu": None if loop_cpu is None else loop_cpu / len(lat),
            "cpu": cell["cpu_s"] / len(lat),
            "switches": cell["switches"] / len(lat),
        }
    return {
        "turns": turns,
        "rounds": plan.concurrency_rounds,
        "levels": plan.concurrency,
        "names": {k: conc.SYSTEMS[k][0] for k in keys},
        "table": table,
        "left_out": left_out,
    }


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
    """Each measurement where a peer beats the agent-journal row it is compared with.

    Durable peers are also held against the runtime-written row (``aj-agent``): it is
    what users of ``journal.Agent`` store. Persist times compare the mean, the median
    and the p99; bytes compare the peer's smaller footprint (after its WAL checkpoint
    where that is smaller) with agent-journal's.
    """
    out = []
    rows = res.rows
    for row in rows.values():
        if row.key.startswith("aj-"):
            continue
        bases = [rows.get(BASELINES[row.durable])]
        if row.durable == "durable" and not row.key.endswith("-journal"):
            bases.append(rows.get("aj-agent"))  # the journal's adapters: not peers
        for base in bases:
            if base is not None:
                out += _losses_against(res, row, base)
    out += extra_losses(res)
    return out


def _losses_against(res: Results, row: Row, base: Row) -> list[str]:
    out = []
    rows = res.rows
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
    peer = row.smallest_footprint()
    if peer and base.footprint:
        checkpointed = (
            " (after its WAL checkpoint)"
            if row.footprint_checkpointed and peer != row.footprint
            else ""
        )
        for i, what in ((0, "bytes"), (1, "allocated (du)")):
            if peer[i] < base.footprint[i]:
                also = ""
                if zstd is not None and zstd.footprint is not None:
                    z = zstd.footprint[i]
                    also = f"; agent-journal with compression=zstd: {mib(z)}, " + (
                        f"{peer[i] / z:.2f}x smaller than the peer"
                        if z < peer[i]
                        else f"the peer is {z / peer[i]:.2f}x smaller still"
                    )
                out.append(
                    f"{label}: {what} at {res.plan.bytes_at:,} turns "
                    f"{mib(peer[i])}{checkpointed} vs {mib(base.footprint[i])} "
                    f"({base.footprint[i] / peer[i]:.2f}x smaller{also})"
                )
    return out


def extra_losses(res: Results) -> list[str]:
    """Losses in the small, list and concurrency sections (vs agent-journal fsync)."""
    out: list[str] = []
    small = res.extra.get("small")
    if small:
        n = small["n"]
        rows = small["rows"]
        ours = rows.get("aj-fsync")
        for key, row in rows.items():
            if key.startswith("aj-") or ours is None:
                continue
            label = f"{row['name']} vs agent-journal local disk"
            out.extend(
                f"{label}: load one of {n:,} 100-turn threads, {what} "
                f"{ms(row[what])} ms vs {ms(ours[what])} ms "
                f"({ours[what] / row[what]:.2f}x faster)"
                for what in ("p50", "p99")
                if what in row and what in ours and row[what] < ours[what]
            )
            peer = _smallest(row)
            if peer[1] < ours["footprint"][1]:
                out.append(
                    f"{label}: du of {n:,} 100-turn threads {mib(peer[1])} vs "
                    f"{mib(ours['footprint'][1])} "
                    f"({ours['footprint'][1] / peer[1]:.2f}x smaller)"
                )
        listed = small.get("list", {})
        mine = listed.get("aj-fsync")
        for key, cell in listed.items():
            if key.startswith("aj-") or mine is None:
                continue
            if cell["total_s"] < mine["total_s"]:
                out.append(
                    f"{rows[key]['name']} (one SQL query) vs agent-journal: list "
                    f"{n:,} threads in a fresh process {ms(cell['total_s'])} ms vs "
                    f"{ms(mine['total_s'])} ms "
                    f"({mine['total_s'] / cell['total_s']:.2f}x faster)"
                )
    conc = res.extra.get("concurrency")
    if conc:
        from _peers.concurrency import FLOOR as conc_floor

        for level, cells in conc["table"].items():
            ours = cells.get("aj-fsync")
            if ours is None:
                continue
            for key, cell in cells.items():
                if key in ("aj-fsync", conc_floor):
                    continue
                name = conc["names"][key]
                if cell["turns_s"] > ours["turns_s"]:
                    out.append(
                        f"{name} vs agent-journal fsync=True: {level} concurrent "
                        f"sessions, {cell['turns_s']:,.0f} turns/s vs "
                        f"{ours['turns_s']:,.0f}"
                    )
                out.extend(
                    f"{name} vs agent-journal fsync=True: {level} concurrent "
                    f"sessions, {what} {ms(cell[what])} ms vs {ms(ours[what])} ms "
                    f"({ours[what] / cell[what]:.2f}x faster)"
                    for what in ("p50", "p99")
                    if cell[what] < ours[what]
                )
    return out


def _smallest(row: dict[str, Any]) -> tuple[int, int]:
    size, alloc = row["footprint"]
    ckpt = row.get("footprint_checkpointed")
    if ckpt:
        return min(size, ckpt[0]), min(alloc, ckpt[1])
    return size, alloc


def render_extra(res: Results) -> list[str]:
    """The small-threads, listing, cold-CLI and concurrency sections."""
    lines: list[str] = []
    small = res.extra.get("small")
    if small and any("p50" in row for row in small["rows"].values()):
        import _peers.small as small_mod

        n, rows = small["n"], small["rows"]
        ours = rows.get("aj-fsync", {})
        lines += [
            "",
            f"## Many small threads: {n:,} threads of {small_mod.TURNS} turns",
            "",
            f"Each system's store is filled with {n:,} threads of "
            f"{small_mod.TURNS} turns (the workload's first {small_mod.TURNS}). Only "
            "loads are timed, so the fill takes each system's fastest path that "
            "stores the same rows (fill column): agent-journal appends turn by turn "
            "with fsync=False (the same records as with fsync=True), eight "
            "threads at once; OpenAI one `add_items` per thread with all its items; "
            "eventsourcing one `save` per thread with all its events. Then a fresh "
            "process opens the store once (open column, after its imports) and "
            f"loads every thread in one shuffled order (seed {small_mod.SEED}, the "
            "same for every system), checking each one's message count. That is "
            "one round; there are as many rounds as systems, in an order that "
            "rotates so that each system is loaded first once (the first one "
            "loaded in a round reads slower); p50 and p99 of all rounds' loads, "
            "the open column's median. Bytes: the store's files, x text = bytes "
            "(after the WAL checkpoint where that is smaller) / the text handed over "
            f"({small['text']:,} B). x compares with agent-journal (local disk).",
            "",
            "| system | filled in (s) | open (ms) | load p50 (ms) | x | load p99 "
            "(ms) | x | bytes | du -B1 | after WAL checkpoint | x text |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: |",
        ]
        for key, row in rows.items():
            if "p50" not in row:
                continue
            same = key == "aj-fsync" or "p50" not in ours
            ckpt = row.get("footprint_checkpointed")
            lines.append(
                f"| {row['name']} | {row['fill_s']:.1f} | {ms(row['open_s'])} | "
                f"{ms(row['p50'])} | "
                + ("-" if same else ratio(row["p50"], ours["p50"]))
                + f" | {ms(row['p99'])} | "
                + ("-" if same else ratio(row["p99"], ours["p99"]))
                + f" | {row['footprint'][0]:,} | {row['footprint'][1]:,} | "
                + (f"{ckpt[0]:,} / {ckpt[1]:,}" if ckpt else "-")
                + f" | {_smallest(row)[0] / small['text']:.2f}x |"
            )
        lines += ["", small_mod.LEFT_OUT]
        lines += [f"- {name}: {why}" for name, why in small["left_out"]]
    if small and small.get("list"):
        n, listed = small["n"], small["list"]
        mine = listed.get("aj-fsync")
        reps = next(iter(listed.values()))["reps"]
        lines += [
            "",
            f"## Listing {n:,} threads",
            "",
            "A fresh process opens the store filled above and lists its threads; "
            f"median of {reps} such processes, open + list (of which open), after "
            "the imports; the count returned is checked. agent-journal: "
            "`Journal.open(root)` then `[k async for k in journal.threads()]` (it "
            "reads the store's thread index: one listing of `~threads/`, then a "
            "stat of each thread's LEASE). OpenAI Agents SDK: sessions have no "
            "listing call, so the "
            "floor is one SQL query on its database through `sqlite3`: "
            "`SELECT DISTINCT session_id` on its `agent_messages` table (open = "
            "`sqlite3.connect`).",
            "",
            "| system | how | open + list (ms) | of which open | threads | x |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for key, cell in listed.items():
            how = "Journal.threads()" if key.startswith("aj-") else "one SQL query"
            same = key == "aj-fsync" or mine is None
            lines.append(
                f"| {small['rows'][key]['name']} | {how} | {ms(cell['total_s'])} | "
                f"{ms(cell['open_s'])} | {cell['count']:,} | "
                + ("-" if same else ratio(cell["total_s"], mine["total_s"]))  # type: ignore[index]
                + " |"
            )
        for name, why in small.get("not_listed", []):
            lines.append(f"\n{name}: not listed: {why}.")
    cli = res.extra.get("cli")
    if cli:
        mods = cli["modules"]
        lines += [
            "",
            f"## Cold CLI on a {cli['length']:,}-turn thread",
            "",
            "End-to-end wall time of `subprocess.run` of each command (a new "
            "interpreter, imports, open, load, render, exit), output to a pipe, on "
            "the agent-journal (fsync=True) thread the persist section wrote; median "
            f"of {cli['reps']} runs after one untimed run (page cache warm); a "
            f"command whose untimed run took over {SLOW_CLI:.0f} s is timed twice. "
            "`state` rebuilds the thread's full state at its head and prints it "
            "(`--json`: one JSON document; without: the text tables); the two "
            "`python -c` lines are the floors any Python command pays.",
            "",
            "| command | wall (ms) | runs | stdout bytes |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name in cli["runs"]:
            if name in cli["timed_out"]:
                lines.append(
                    f"| `{name}` | > {cli['timed_out'][name] * 1e3:,.0f} (timed out) "
                    "| 0 | - |"
                )
                continue
            lines.append(
                f"| `{name}` | {ms(cli['median'][name])} | {cli['runs'][name]} | "
                f"{cli['stdout_bytes'][name]:,} |"
            )
        lines += [
            "",
            f"Modules in `sys.modules`: {mods['python']} at start, "
            f"{mods['import journal']} after `import journal`, "
            f"{mods['import journal.cli']} after `import journal.cli`, "
            f"{mods['after state']} after running `state --json` in process.",
        ]
    conc = res.extra.get("concurrency")
    if conc:
        levels = conc["levels"]
        lines += [
            "",
            "## Sessions writing at once",
            "",
            "S asyncio tasks in one process, each writing "
            f"{conc['turns']} turns to its own session, with durable settings "
            f"(rounds: {conc['rounds']}, the systems alternating within each; "
            "before each system's run, untimed, a full collection of Python's "
            "cyclic garbage collector and an `os.sync()`, so that none pays for "
            "collecting or writing back what another left). "
            "Each cell: total turns/s (all turns / wall time) and p50 / p99 of the "
            "turns' latencies (ms); x: agent-journal's turns/s over the peer's. "
            "How each keeps the loop free: agent-journal writes each record on the "
            "loop and hands its `fdatasync` to the kernel (Linux native AIO, "
            "`stores/_kernel_sync.py`; to worker threads where it cannot), one "
            "segment file per thread, so the syncs of several sessions overlap; "
            "OpenAI's SQLiteSession runs each `add_items` in `asyncio.to_thread` "
            "under one lock per database file, shared by the sessions on that file "
            "(so its writes go one at a time); eventsourcing's `save` is "
            "synchronous and blocks the loop for each commit. The floor row is no "
            "system: S threads, each writing a turn's bytes to its own file and "
            "`fdatasync`-ing it, what the disk allows; x against it shows how much "
            "of that a system's own work leaves.",
            "",
        ]
        head, rule = "| system |", "| --- |"
        for level in levels:
            head += f" {level} turns/s | p50 / p99 | x |"
            rule += " ---: | ---: | ---: |"
        lines += [head, rule]
        for key, name in conc["names"].items():
            cells = f"| {name} |"
            for level in levels:
                cell = conc["table"].get(level, {}).get(key)
                ours = conc["table"].get(level, {}).get("aj-fsync")
                if cell is None:
                    cells += " - | - | - |"
                    continue
                x = (
                    "-"
                    if key == "aj-fsync" or ours is None
                    else ratio(ours["turns_s"], cell["turns_s"])
                )
                cells += (
                    f" {cell['turns_s']:,.0f} | {ms(cell['p50'])} / "
                    f"{ms(cell['p99'])} | {x} |"
                )
            lines.append(cells)
        lines += render_concurrency_costs(conc)
        lines += [f"\n- {name} left out: {why}" for name, why in conc["left_out"]]
    return lines


def render_concurrency_costs(conc: dict[str, Any]) -> list[str]:
    """What each turn cost in the concurrency runs: the event loop's CPU, and
    so the most turns/s one loop could carry, beside the process's CPU."""
    lines = [
        "",
        "What a turn cost, in the same runs: CPU time of the event loop's thread "
        "per turn (ms), the process's CPU time per turn (ms, every thread, user "
        "and system), and the process's context switches per turn. The loop runs "
        "one thing at a time, so 1 / its CPU per turn bounds the turns/s of all "
        "the sessions together, however the syncs overlap: the *ceiling* column, "
        "for the largest S. The floor has no loop. The process's CPU leaves out "
        "the kernel's own workers, which sync agent-journal's concurrent appends "
        "(Linux native AIO); a peer's syncs run in its threads and are counted.",
        "",
    ]
    levels = conc["levels"]
    head, rule = "| system |", "| --- |"
    for level in levels:
        head += f" {level}: loop / process ms | switches |"
        rule += " ---: | ---: |"
    lines += [head + " ceiling turns/s |", rule + " ---: |"]
    for key, name in conc["names"].items():
        cells = f"| {name} |"
        last = None
        for level in levels:
            cell = conc["table"].get(level, {}).get(key)
            if cell is None:
                cells += " - | - |"
                continue
            loop = "-" if cell["loop_cpu"] is None else f"{cell['loop_cpu'] * 1e3:.3f}"
            cells += f" {loop} / {cell['cpu'] * 1e3:.3f} | {cell['switches']:.1f} |"
            last = cell
        ceiling = (
            "-"
            if last is None or not last["loop_cpu"]
            else f"{1 / last['loop_cpu']:,.0f}"
        )
        lines.append(cells + f" {ceiling} |")
    return lines


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
        f"{plan.block} alternating between systems, each block after an untimed "
        f"`gc.collect()` and `os.sync()`, the first after one untimed turn; "
        f"{plan.load_reps} fresh-process "
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
        "checkpoints in a background task, 100 to 400 records apart: the time "
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
    if SHORT_LOADS:
        lines += [
            "A peer's load that returned fewer items than were written (checked "
            "after every load; its time is still shown): "
            + "; ".join(dict.fromkeys(SHORT_LOADS))
            + ".",
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
        "the same for every system; x payload = bytes / payload. Text = the UTF-8 "
        "bytes of every string the application handed over (user text, preamble, "
        "tool name, tool arguments as compact JSON, tool result, answer, and the "
        "side state's strings: todos, summary, plan file; `text_bytes` in "
        "`_peers/workload.py`): x text = bytes / text, what a user pays per byte "
        "stored, whatever the system's encoding (OpenAI sessions store no side "
        "state: their x text is a little lower for it). *After WAL checkpoint*: "
        "SQLite databases in WAL mode keep recent pages in the -wal file, a second "
        "copy until SQLite checkpoints it; this column is a copy of the files "
        "after `PRAGMA wal_checkpoint(TRUNCATE)` from a separate connection (bytes "
        "/ du). x compares du, the peer's smaller of the two against agent-journal.",
        "",
        "| system | vs | bytes | du -B1 | after WAL checkpoint | x payload | x text "
        "| x |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows.values():
        if not row.persistent or row.footprint is None:
            continue
        base = rows.get(BASELINES[row.durable])
        vs = {"durable": "fsync", "not durable": "no fsync", "memory": "memory"}[
            row.durable
        ]
        size, alloc = row.footprint
        ckpt = (
            f"{row.footprint_checkpointed[0]:,} / {row.footprint_checkpointed[1]:,}"
            if row.footprint_checkpointed
            else "-"
        )
        smallest = row.smallest_footprint() or row.footprint
        same = base is row or base is None or base.footprint is None
        lines.append(
            f"| {row.name} | {vs} | {size:,} | {alloc:,} | {ckpt} | "
            f"{size / row.payload:.2f}x | {smallest[0] / row.text:.2f}x | "
            + ("- |" if same else f"{ratio(smallest[1], base.footprint[1])} |")  # type: ignore[union-attr,index]
        )
    parted = [row for row in rows.values() if row.parts and row.footprint]
    if parted:
        lines += [
            "",
            "### Where agent-journal's bytes go",
            "",
            "The rows above, their files' bytes by part, each as x text: the log "
            "(segment files), of which the events' own bytes (MessagePack of each "
            "event, as its record's envelope holds it) and the rest, its framing "
            "(segment frames, record frames, headers with the hash chain, envelopes; "
            "also per record); message chunks (`blobs/`), checkpoints, seals, "
            "and the rest (LEASE, hints, the thread index). Chunks hold messages "
            "the log holds too: a checkpoint names log spans instead where "
            "`log_spans` allows (see `journal.checkpoint.LOG_SPANS`). The rest of "
            "the log also counts the unused reserve at the end of its last segment. "
            "With compression the events are counted before it and the log after, "
            "so there is no rest to show.",
            "",
            "| system | records | log | of which events | the rest | the rest per "
            "record (B) | chunks | checkpoints | seals | other |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in parted:
            p = row.parts
            assert p is not None
            framing = p["log"] - p["events"]

            def x(n: int, text: int = row.text) -> str:
                return f"{n / text:.2f}x"

            rest = (
                f"{x(framing)} | {framing / max(p['records'], 1):.0f}"
                if framing >= 0
                else "- | -"
            )
            lines.append(
                f"| {row.name} | {p['records']:,} | {x(p['log'])} | "
                f"{x(p['events'])} | {rest} | {x(p['blobs'])} | "
                f"{x(p['checkpoints'])} | {x(p['seals'])} | {x(p['other'])} |"
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
    lines += render_extra(res)
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
        "(100 to 400 records apart, at a chunk boundary). Load: `Journal.load`.",
        "- agent-journal, runtime (`aj-agent`): one `Agent.call(user text)` on one "
        "warm `Agent` (lease kept between calls, the default) with an instant "
        "model that answers the preamble and the tool call, then the answer; the "
        "read-only `search` tool returns the result and sets the turn's side state "
        "(`ctx.tasks.write_todos`, `ctx.update_state` for plan mode and the "
        "summary). The time is the runtime's own overhead plus its records "
        "(run start, message and write-ahead tool call, tool completion, answer "
        "and run end: four or five fsynced appends) and two `LEASE` writes, which "
        "mark the kept lease busy, then idle (overwritten in place, unsynced). "
        "`aj-agent-hold`: the same with `hold_lease=30`, the lease busy between "
        "calls and no `LEASE` write. Its background checkpoints are not waited "
        "for (the runtime keeps its writer to itself).",
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
    run = module.child_op if "op" in spec else module.child_load
    result = asyncio.run(run(spec))
    sys.stdout.write(json.dumps(result) + "\n")


def sections_of(value: str | None) -> list[str]:
    if not value:
        return list(SECTIONS)
    out = []
    for word in (w.strip() for w in value.split(",")):
        if not word:
            continue
        name = SECTION_ALIASES.get(word, word)
        if name not in SECTIONS:
            raise SystemExit(
                f"unknown section {word!r}; choose from "
                f"{', '.join([*SECTIONS, *SECTION_ALIASES])}"
            )
        if name not in out:
            out.append(name)
    return out


async def main_async(args: argparse.Namespace) -> Results:
    plan = QUICK if args.quick else FULL
    sections = sections_of(args.sections)
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
    rows: dict[str, Row] = {}
    postgres: dict[str, str] = {}
    left_out: list[tuple[str, str]] = []
    extra: dict[str, Any] = {}
    try:
        if "main" in sections:
            with contextlib.ExitStack() as stack:
                server, left = None, []
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
        if "cli" in sections:
            root = workdir / "aj-fsync"
            length = max(plan.lengths) if rows else plan.cli_length
            if not rows:
                await fill_cli_thread(root, length)
            extra["cli"] = run_cli(root, length, plan.cli_reps, plan.cli_timeout)
            log(f"cli: {extra['cli']}")
        if "small" in sections or "list" in sections:
            extra["small"] = await run_small(
                plan,
                workdir,
                loads="small" in sections,
                listing="list" in sections,
                log=log,
            )
        if "concurrency" in sections:
            extra["concurrency"] = await run_concurrency(plan, workdir, log=log)
            log(f"concurrency: {extra['concurrency']['table']}")
        if "s3" not in sections:
            s3_note = "the s3 section was not selected (--sections)."
        elif args.no_s3:
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
    if args.sections:
        command += f" --sections {args.sections}"
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
        extra=extra,
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
        "--sections",
        help="comma-separated sections to run (default: all): main (the persist, "
        "load and bytes tables; also 'persist', 'load', 'bytes'), s3, small, list, "
        "cli, concurrency",
    )
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
    partial = args.quick or args.only or args.sections
    out = args.out or (None if partial else DEFAULT_OUT)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
