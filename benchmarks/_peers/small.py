"""Many small threads: fill a store with N threads of 100 turns, then load or list them.

Only the loads and the listing are timed (by a fresh process, ``bench_peers.py
--child``), so the fill takes each system's fastest honest path, which stores the
same rows as turn-by-turn writing would:

- agent-journal: one ``ThreadWriter.append`` per turn, as in the main run, through
  a journal opened with ``fsync=False`` (the same records; only the fsyncs are
  skipped), eight threads filled at once;
- OpenAI SQLiteSession: one ``add_items`` per thread with all of its items (one
  transaction instead of 100: the same rows, in the same order);
- eventsourcing SQLite: the thread's method calls (one domain event each), then one
  ``Application.save`` per thread (the same stored events; the snapshot at version
  400 is taken by that save, as a turn-by-turn save would take it).

Thread ``i`` belongs to user ``i % 100`` (agent-journal's key: agent ``bench``, user
``u00``..``u99``, session ``s0000``..; OpenAI: session id ``u07-s0007``). The
loader visits the threads in one shuffled order (seed 16), the same for every system.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

from _peers.base import du, made
from _peers.workload import make_turn, text_bytes

TURNS = 100
SEED = 16
FILL_TASKS = 8


def user_of(i: int) -> str:
    return f"u{i % 100:02d}"


def session_of(i: int) -> str:
    return f"s{i:04d}"


def order(n: int) -> list[int]:
    """The order in which the loader visits the threads (the same for all)."""
    out = list(range(n))
    random.Random(SEED).shuffle(out)  # noqa: S311 (benchmark order)
    return out


def text_of_threads(n: int, turns: int = TURNS) -> int:
    """Text bytes handed over for ``n`` threads of ``turns`` turns each."""
    return n * sum(text_bytes(make_turn(i)) for i in range(turns))


# --- agent-journal ----------------------------------------------------------------


def aj_key(i: int) -> Any:
    from journal import ThreadKey

    return ThreadKey("bench", session_of(i), user_of(i))


async def fill_aj(
    root: Path, n: int, compression: str | None, log_spans: str = "dense"
) -> dict[str, Any]:
    from _peers.journal_peer import events
    from journal import Journal

    turns = [events(make_turn(t)) for t in range(TURNS)]
    journal = Journal.open(
        root, fsync=False, compression=compression, log_spans=log_spans
    )
    queue = list(range(n))

    async def worker() -> None:
        while queue:
            i = queue.pop()
            writer = await journal.acquire(aj_key(i), holder="fill")
            for batch in turns:
                await writer.append(batch)
            await writer.close()

    try:
        await asyncio.gather(*(worker() for _ in range(FILL_TASKS)))
    finally:
        await journal.aclose()
    return {"root": str(root), "n": n}


async def aj_load_many(spec: dict[str, Any]) -> dict[str, Any]:
    from journal import Journal

    t0 = time.perf_counter()
    journal = Journal.open(Path(spec["root"]))
    open_s = time.perf_counter() - t0
    loads, bad = [], 0
    for i in order(spec["n"]):
        t1 = time.perf_counter()
        state = await journal.load(aj_key(i))
        loads.append(time.perf_counter() - t1)
        bad += len(state.context) != TURNS * 4
    await journal.aclose()
    return {"open_s": open_s, "loads": loads, "bad": bad}


async def aj_list(spec: dict[str, Any]) -> dict[str, Any]:
    from journal import Journal

    t0 = time.perf_counter()
    journal = Journal.open(Path(spec["root"]))
    t1 = time.perf_counter()
    keys = [key async for key in journal.threads()]
    t2 = time.perf_counter()
    await journal.aclose()
    return {"open_s": t1 - t0, "list_s": t2 - t1, "count": len(set(keys))}


# --- OpenAI Agents SDK SQLiteSession ----------------------------------------------


def openai_session(i: int) -> str:
    return f"{user_of(i)}-{session_of(i)}"


async def fill_openai(directory: Path, n: int) -> dict[str, Any]:
    from agents import SQLiteSession

    from _peers.openai_peer import items

    made(directory)
    db = str(directory / "sessions.db")
    for i in range(n):
        session = SQLiteSession(openai_session(i), db)
        thread = [it for t in range(TURNS) for it in items(make_turn(t))]
        await session.add_items(thread)
        session.close()
    return {"db": db, "n": n}


async def openai_load_many(spec: dict[str, Any]) -> dict[str, Any]:
    from agents import SQLiteSession

    # One session object per thread (the SDK's unit), all on the one file; opening
    # the file (connection, schema check) is paid by the first, as in a server.
    t0 = time.perf_counter()
    first = SQLiteSession(openai_session(0), spec["db"])
    await first.get_items(limit=1)
    open_s = time.perf_counter() - t0
    loads, bad = [], 0
    for i in order(spec["n"]):
        t1 = time.perf_counter()
        session = SQLiteSession(openai_session(i), spec["db"])
        found = await session.get_items()
        loads.append(time.perf_counter() - t1)
        session.close()
        bad += len(found) != TURNS * 5
    first.close()
    return {"open_s": open_s, "loads": loads, "bad": bad}


async def openai_list(spec: dict[str, Any]) -> dict[str, Any]:
    """The SDK has no call that lists sessions: one SQL query is the floor."""
    t0 = time.perf_counter()
    with closing(sqlite3.connect(spec["db"])) as conn:
        t1 = time.perf_counter()
        rows = conn.execute("SELECT DISTINCT session_id FROM agent_messages").fetchall()
        t2 = time.perf_counter()
    return {"open_s": t1 - t0, "list_s": t2 - t1, "count": len(rows)}


# --- eventsourcing SQLite ---------------------------------------------------------


async def fill_es(directory: Path, n: int) -> dict[str, Any]:
    from _peers.eventsourcing_peer import Thread, Threads, apply_turn

    made(directory)
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(directory / "events.sqlite"),
    }
    app = Threads(env=env)
    ids = []
    for i in range(n):
        thread = Thread(name=openai_session(i))
        for t in range(TURNS):
            apply_turn(thread, make_turn(t))
        app.save(thread)
        ids.append(str(thread.id))
    app.close()
    return {"env": env, "ids": ids, "n": n}


async def es_load_many(spec: dict[str, Any]) -> dict[str, Any]:
    from _peers.eventsourcing_peer import Threads

    t0 = time.perf_counter()
    app = Threads(env=spec["env"])
    open_s = time.perf_counter() - t0
    ids = [uuid.UUID(x) for x in spec["ids"]]
    loads, bad = [], 0
    for i in order(spec["n"]):
        t1 = time.perf_counter()
        found = app.repository.get(ids[i])
        loads.append(time.perf_counter() - t1)
        bad += len(found.messages) != TURNS * 4
    app.close()
    return {"open_s": open_s, "loads": loads, "bad": bad}


# --- the systems ------------------------------------------------------------------

# key -> (name, fill, load_many, list or None, why not listed)
SYSTEMS: dict[str, tuple[str, Any, Any, Any, str]] = {
    "aj-fsync": (
        "agent-journal: local disk",
        lambda d, n: fill_aj(d, n, None),
        aj_load_many,
        aj_list,
        "",
    ),
    "aj-zstd": (
        "agent-journal: local disk, compression=zstd",
        lambda d, n: fill_aj(d, n, "zstd"),
        aj_load_many,
        aj_list,
        "",
    ),
    "aj-blobs": (
        "agent-journal: local disk, log_spans=never",
        lambda d, n: fill_aj(d, n, None, "never"),
        aj_load_many,
        aj_list,
        "",
    ),
    "openai-sqlite": (
        "OpenAI Agents SDK: SQLiteSession (file)",
        fill_openai,
        openai_load_many,
        openai_list,
        "",
    ),
    "es-sqlite": (
        "eventsourcing: SQLite (eventsourcing.sqlite)",
        fill_es,
        es_load_many,
        None,
        "eventsourcing has no call that lists aggregates (an application keeps "
        "its own index, e.g. a process application)",
    ),
}
LEFT_OUT = (
    "LangGraph and Google ADK are left out here: their stores write a turn in "
    "several commits (ADK: four append_event, each fsynced) or the whole "
    "conversation per turn (LangGraph), and no bulk path stores the same rows, "
    "so 100,000 turns would take far longer than the minute this section allows."
)


# Imported before the timed open, as the main run's loaders do.
PRELOADS = {
    "aj-fsync": ("journal", "stores.registry", "stores.local"),
    "aj-zstd": ("journal", "stores.registry", "stores.local", "zstandard"),
    "aj-blobs": ("journal", "stores.registry", "stores.local"),
    "openai-sqlite": ("agents",),
    "es-sqlite": ("_peers.eventsourcing_peer", "eventsourcing.sqlite"),
}


async def child_op(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec["op"]`` ("load_many" or "list") for ``spec["system"]``."""
    import importlib

    for name in PRELOADS[spec["system"]]:
        importlib.import_module(name)
    _, _, load_many, lister, _ = SYSTEMS[spec["system"]]
    if spec["op"] == "load_many":
        result: dict[str, Any] = await load_many(spec)
        return result
    assert lister is not None
    listed: dict[str, Any] = await lister(spec)
    return listed


def footprint(directory: Path) -> tuple[int, int]:
    return du(directory)
