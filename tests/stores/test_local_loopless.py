"""The local store and a journal's reads driven without an event loop.

``journal.loopless.run_sync`` runs a coroutine on the calling thread; the local
store's blocking calls (``stores._offload.run_blocking``) then run right there,
including a read whose bytes are not in the page cache, which under a loop goes to a
worker thread. A state loaded so equals the one loaded under asyncio.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import stores.local as local_module
from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.loopless import run_sync
from stores.local import LocalStore
from tests.stores.test_local_inline_reads import (
    PLAIN,
    PLAIN_DATA,
    RECORD,
    _evict,
    _filled,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

KEY = ThreadKey("agent", "session", "user")


def _threads_of_blocking_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread each blocking call handed to ``run_blocking`` ran on."""
    ran_on: list[int] = []
    real = local_module.run_blocking

    async def traced(fn: Callable[..., Any], *args: Any) -> Any:
        def call() -> Any:
            ran_on.append(threading.get_ident())
            return fn(*args)

        return await real(call)

    monkeypatch.setattr(local_module, "run_blocking", traced)
    return ran_on


def test_without_a_loop_uncached_bytes_are_read_on_the_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_filled(tmp_path))
    _evict(tmp_path)
    ran_on = _threads_of_blocking_calls(monkeypatch)
    store = LocalStore(tmp_path)

    assert run_sync(store.read(RECORD))[0] == b"record one" * 50
    assert run_sync(store.read_many([PLAIN, "t/none"])) == [PLAIN_DATA, None]
    run_sync(store.aclose())
    # Not in the page cache: each read went the blocking way, on this thread.
    assert ran_on
    assert set(ran_on) == {threading.get_ident()}


async def _write(root: Path, turns: int) -> None:
    async with Journal.open(root) as journal, journal.writer(KEY) as writer:
        for i in range(turns):
            await writer.append(
                [
                    MessageAppended(Msg("user", f"question {i} " * 40)),
                    MessageAppended(Msg("assistant", f"answer {i} " * 60)),
                ]
            )


async def _load(root: Path) -> Any:
    async with Journal.open(root) as journal:
        return await journal.load(KEY)


def test_a_load_without_a_loop_equals_the_load_under_asyncio(tmp_path: Path) -> None:
    asyncio.run(_write(tmp_path, 300))  # checkpoints, chunk blobs and a tail
    expected = asyncio.run(_load(tmp_path))
    _evict(tmp_path)
    loaded = run_sync(_load(tmp_path))
    assert loaded.version == expected.version == 301  # the fence, then 300 turns
    assert len(loaded.context) == 600
    assert loaded.to_json() == expected.to_json()
