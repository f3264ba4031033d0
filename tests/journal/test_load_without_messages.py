"""``load(key, messages=False)``: the state without its context, for a cheap look.

Everything but the context must be what a full load gives, at the head and at
any version, whatever the history (runs, tool calls, compaction, replacement of
the whole state, checkpoints with chunk blobs or log spans); the checkpoint's
chunks are not read, so a missing one goes unnoticed (``verify`` finds it) where
a full load skips the checkpoint.
"""

from __future__ import annotations

import random
import shutil
import uuid
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import (
    ContextCleared,
    ContextCompacted,
    Journal,
    MessageAppended,
    Msg,
    PermissionRuleSet,
    PlanModeEntered,
    PlanModeExited,
    RunCompleted,
    RunStarted,
    SummarySet,
    ThreadKey,
    TodosWritten,
    ToolCallCompleted,
    ToolCallRequested,
)
from journal.crypto import StaticKeys, generate_key
from journal.engine.log import ThreadLog

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from journal import AgentState


def without_context(state: AgentState) -> bytes:
    return msgspec.msgpack.encode(msgspec.structs.replace(state, context=[]))


async def _history(j: Journal, key: ThreadKey, rng: random.Random) -> None:
    n = 0
    async with j.writer(key) as w:
        for _ in range(rng.randint(30, 90)):
            n += 1
            roll = rng.random()
            if roll < 0.04 and w.state.context:
                ids = [m.id for m in w.state.context if rng.random() < 0.3]
                await w.append([ContextCompacted(f"c{n}", ids)])
            elif roll < 0.06:
                await w.append([ContextCleared()])
            elif roll < 0.08:
                await w.checkpoint()
            elif roll < 0.10:
                replaced = msgspec.structs.replace(
                    w.state, context=[Msg("user", f"kept {n}", id=f"k{n}")]
                )
                await w.replace_state(replaced, reason="test")
            elif roll < 0.25:
                run = f"r{n}"
                await w.append(
                    [RunStarted(run), ToolCallRequested(f"c{n}", "t", {"n": n}, run)]
                )
                if rng.random() < 0.7:  # else left pending: an uncertain call
                    await w.append(
                        [ToolCallCompleted(f"c{n}", f"o{n}", message_id=f"t{n}")]
                    )
                if rng.random() < 0.7:  # else an unfinished run
                    await w.append([RunCompleted(run)])
            elif roll < 0.35:
                side: list[object] = [
                    SummarySet(f"s{n}"),
                    TodosWritten([{"content": f"do {n}"}], n),
                    PermissionRuleSet(f"tool{n % 3}", "allow"),
                    PlanModeEntered(f"plan{n}.md") if n % 2 else PlanModeExited(),
                ]
                await w.append([rng.choice(side)])
            else:
                await w.append(
                    [
                        MessageAppended(Msg("user", f"m {n} " + "x" * (n % 40)))
                        for _ in range(rng.randint(1, 4))
                    ]
                )


def _opener(kind: str, tmp_path: Path) -> Callable[..., Journal]:
    """Open the same journal again and again, as ``kind`` says."""
    if kind == "memory":
        url = f"memory://light-{uuid.uuid4().hex[:8]}"
        return lambda **options: Journal.open(url, **options)
    if kind == "encrypted":
        keys = StaticKeys([generate_key()])
        return lambda **options: Journal.open(tmp_path, encryption=keys, **options)
    if kind == "zstd":
        return lambda **options: Journal.open(tmp_path, compression="zstd", **options)
    return lambda **options: Journal.open(tmp_path, **options)


@pytest.mark.parametrize(
    ("kind", "seed"),
    [("local", seed) for seed in range(6)]
    + [("memory", 6), ("encrypted", 7), ("zstd", 8)],
)
async def test_all_but_the_context_is_what_a_full_load_gives(
    tmp_path: Path, kind: str, seed: int
) -> None:
    rng = random.Random(seed)  # noqa: S311 (test data)
    key = ThreadKey("light", f"s-{uuid.uuid4().hex[:8]}")
    open_journal = _opener(kind, tmp_path)
    writer = open_journal(
        checkpoint_every=rng.choice([3, 10, 25]),
        log_spans=rng.choice(["never", "dense", "always"]),
    )
    await _history(writer, key, rng)
    reader = open_journal()
    head = await reader.head(key)
    assert await ThreadLog(reader.store, key).checkpoint_versions()
    for version in sorted({head, *rng.sample(range(1, head + 1), 8)}):
        full = await reader.load(key, at_version=version)
        light, warnings = await reader.load_with_warnings(
            key, at_version=version, messages=False
        )
        assert warnings == []
        assert light.context == []
        assert light.version == full.version == version
        assert without_context(light) == without_context(full), version
    at_head = await reader.load(key, messages=False)
    assert without_context(at_head) == without_context(await reader.load(key))


async def test_the_chunks_are_not_read(tmp_path: Path) -> None:
    """A checkpoint whose chunk blobs are gone: a full load skips it with a
    warning; a load without messages never reads them and starts from it."""
    key = ThreadKey("light", "chunks")
    j = Journal.open(tmp_path, checkpoint_every=0, log_spans="never")
    async with j.writer(key) as w:
        for i in range(40):
            await w.append([MessageAppended(Msg("user", f"m{i}", id=f"m{i}"))])
        await w.append([RunStarted("r1"), ToolCallRequested("c1", "t", None, "r1")])
        await w.checkpoint()
        await w.append([SummarySet("after the checkpoint")])
    layout = ThreadLog(j.store, key)
    assert await layout.checkpoint_versions() == [42]
    blobs = next(tmp_path.rglob("blobs"))
    shutil.rmtree(blobs)
    reader = Journal.open(tmp_path)
    full, warnings = await reader.load_with_warnings(key)
    assert len(warnings) == 1
    assert "checkpoint 42" in warnings[0]
    assert len(full.context) == 40  # replayed from version 1 instead
    light, light_warnings = await reader.load_with_warnings(key, messages=False)
    assert light_warnings == []
    assert light.context == []
    assert light.active_run_id == "r1"
    assert list(light.tool_context.pending_calls) == ["c1"]
    assert light.summary == "after the checkpoint"
    assert without_context(light) == without_context(full)


async def test_a_thread_without_a_checkpoint(tmp_path: Path) -> None:
    key = ThreadKey("light", "none")
    j = Journal.open(tmp_path, checkpoint_every=0)
    async with j.writer(key) as w:
        await w.append([MessageAppended(Msg("user", "hi")), RunStarted("r")])
    light = await j.load(key, messages=False)
    assert light.context == []
    assert light.active_run_id == "r"
    assert light.version == 2
