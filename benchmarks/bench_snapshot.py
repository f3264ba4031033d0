"""Snapshot-mode state stores side by side: save + load of a 200-message state.

Run: ``python benchmarks/bench_snapshot.py [--quick] [--rounds N]
[--redis URL] [--postgres URL]``

Every store runs in this one process, in interleaved rounds (store A, B, C, ..., then
again), so machine noise hits all of them alike; the report gives medians and each
store's ratio to the in-memory store. Without ``--redis`` / ``--postgres`` the script
starts private servers (``redis-server``; ``initdb`` + ``pg_ctl``) the way the tests do,
and leaves a store out, saying why, when its server cannot be had.

One round of a store is: a compare-and-swap save at the version it last saw, then a
load. A turn of an agent in snapshot mode costs exactly that. Beside them, the journal
(journal mode) on local disk: one round is the append of the turn's four new messages
(a writer holds the thread, as an agent does during a call), so the rows show what
snapshot mode pays for rewriting the whole state every turn as the history grows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from journal import (
    Journal,
    MessageAppended,
    Msg,
    TextBlock,
    ThreadKey,
    ToolResultBlock,
    ToolUseBlock,
)
from projections.agent_state import AgentState
from stores.state import (
    InMemoryAgentStateStore,
    JsonFileAgentStateStore,
    RedisAgentStateStore,
    SqlAgentStateStore,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from stores.state import AgentStateStore


def state_of(messages: int, start: int = 0) -> AgentState:
    """A state of ``messages`` messages shaped like real turns (~500 B each)."""
    context: list[Msg] = []
    for i in range(start, start + messages // 4 + 1):
        call = f"call-{i}"
        context += [
            Msg("user", f"Question {i}: " + "please look this up " * 9),
            Msg(
                "assistant",
                [TextBlock("Let me check."), ToolUseBlock(call, "search", {"q": i})],
            ),
            Msg("tool", [ToolResultBlock(call, "result " * 60)]),
            Msg("assistant", f"Answer {i}: " + "the answer is here. " * 8),
        ]
    return AgentState(session_id="bench", user_id="bench", context=context[:messages])


@contextlib.contextmanager
def private_server(kind: str, workdir: Path) -> Iterator[str | None]:
    """Start a test server of ``kind``; yield its URL, or None (and say why)."""
    try:
        if kind == "redis":
            from tests.services.redis import start_redis

            with start_redis(workdir) as service:
                yield service.url
        else:
            from tests.services.postgres import start_postgres

            with start_postgres() as url:
                yield url
    except BaseException as exc:  # pytest.fail raises a BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        print(f"[{kind} left out: {str(exc).splitlines()[0]}]")
        yield None


async def one_round(store: AgentStateStore, state: AgentState, version: int) -> int:
    new = await store.save("bench", "s1", "main", state, expected_version=version)
    found = await store.load("bench", "s1", "main")
    assert found is not None
    assert found[1] == new
    return new


class JournalTurns:
    """The journal-mode counterpart of a snapshot round: append one turn."""

    def __init__(self, root: Path, state: AgentState, *, fsync: bool) -> None:
        self.journal = Journal.open(root, fsync=fsync)
        self.key = ThreadKey("bench", f"journal-{fsync}", "bench")
        self.state = state
        self.turn = 0

    async def __aenter__(self) -> JournalTurns:
        self.writer = await self.journal.acquire(self.key, holder="bench")
        # The same history as the snapshot stores hold, committed once.
        context = self.state.context
        for i in range(0, len(context), 4):
            await self.writer.append([MessageAppended(m) for m in context[i : i + 4]])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.writer.close()

    async def round(self) -> None:
        self.turn += 1
        await self.writer.append(
            [MessageAppended(m) for m in state_of(4, start=self.turn).context]
        )


async def run(
    stores: dict[str, AgentStateStore],
    journals: dict[str, JournalTurns],
    state: AgentState,
    rounds: int,
) -> dict[str, list[float]]:
    versions = dict.fromkeys(stores, 0)
    for name, store in stores.items():  # warm up: connections, tables, scripts
        versions[name] = await one_round(store, state, versions[name])
    times: dict[str, list[float]] = {name: [] for name in [*stores, *journals]}
    for _ in range(rounds):
        for name, store in stores.items():
            start = time.perf_counter()
            versions[name] = await one_round(store, state, versions[name])
            times[name].append(time.perf_counter() - start)
        for name, turns in journals.items():
            start = time.perf_counter()
            await turns.round()
            times[name].append(time.perf_counter() - start)
    return times


def report(times: dict[str, list[float]], state: AgentState, rounds: int) -> str:
    base = statistics.median(times["memory"])
    lines = [
        f"# Snapshot stores: save + load of a {len(state.context)}-message state "
        f"({len(state.to_json()) / 1024:.0f} KiB of JSON), {rounds} rounds",
        "",
        f"python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}",
        "",
        "| store | median ms | p90 ms | x memory |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, samples in times.items():
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else median
        lines.append(
            f"| {name} | {median * 1e3:.2f} | {p90 * 1e3:.2f} | {median / base:.1f} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> str:
    sizes = [int(n) for n in str(args.messages).split(",")]
    reports = [await one_size(args, state_of(n)) for n in sizes]
    return "\n\n".join(reports)


async def one_size(args: argparse.Namespace, state: AgentState) -> str:
    rounds = 20 if args.quick else args.rounds
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        redis_url = args.redis or stack.enter_context(private_server("redis", workdir))
        postgres_url = args.postgres or stack.enter_context(
            private_server("postgres", workdir)
        )
        stores: dict[str, AgentStateStore] = {
            "memory": InMemoryAgentStateStore(),
            "json file (fsync)": JsonFileAgentStateStore(workdir / "json-fsync"),
            "json file (no fsync)": JsonFileAgentStateStore(
                workdir / "json-nofsync", fsync=False
            ),
            "sqlite (WAL)": SqlAgentStateStore(
                f"sqlite+aiosqlite:///{workdir / 'state.db'}"
            ),
        }
        if redis_url:
            stores["redis"] = RedisAgentStateStore(
                redis_url, prefix=f"bench-{uuid.uuid4().hex[:8]}"
            )
        if postgres_url:
            stores["postgresql"] = SqlAgentStateStore(
                postgres_url, table=f"bench_{uuid.uuid4().hex[:8]}"
            )
        journals = {
            "journal append, one turn (fsync)": JournalTurns(
                workdir / "journal-fsync", state, fsync=True
            ),
            "journal append, one turn (no fsync)": JournalTurns(
                workdir / "journal-nofsync", state, fsync=False
            ),
        }
        try:
            async with contextlib.AsyncExitStack() as open_journals:
                for turns in journals.values():
                    await open_journals.enter_async_context(turns)
                times = await run(stores, journals, state, rounds)
        finally:
            for store in stores.values():
                await store.aclose()
    return report(times, state, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 rounds")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--messages",
        default="200,2000",
        help="state sizes in messages, comma-separated (default: 200,2000)",
    )
    parser.add_argument("--redis", help="a Redis URL (default: a private server)")
    parser.add_argument(
        "--postgres", help="a postgresql+asyncpg URL (default: a private cluster)"
    )
    parser.add_argument("--out", help="also write the report (markdown) here")
    args = parser.parse_args()
    text = asyncio.run(main_async(args))
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
