"""The local store and a journal's reads driven without an event loop.

``journal.loopless.run_sync`` runs a coroutine on the calling thread; the local
store's reads and blocking calls (``stores._offload.run_blocking``) then run right
there, including a read whose bytes are not in the page cache, which under a loop
goes to a worker thread. A state loaded so equals the one loaded under asyncio.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.loopless import run_sync
from stores._offload import run_blocking
from stores.local import LocalStore
from tests.stores.test_local_inline_reads import (
    PLAIN,
    PLAIN_DATA,
    RECORD,
    _evict,
    _filled,
)

if TYPE_CHECKING:
    from pathlib import Path

KEY = ThreadKey("agent", "session", "user")


def _traced_reads(store: LocalStore) -> list[tuple[str, int]]:
    """Each call of the store's read functions: its name and the thread it ran on."""
    calls: list[tuple[str, int]] = []
    for name in ("_read", "_read_many"):
        real = getattr(store, name)

        def traced(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append((_name, threading.get_ident()))
            return _real(*args)

        setattr(store, name, traced)
    return calls


def test_without_a_loop_uncached_bytes_are_read_once_on_the_calling_thread(
    tmp_path: Path,
) -> None:
    """No no-wait attempt first: with no loop to keep free, a read of bytes not in
    the page cache would fail that attempt and then be read all over again."""
    asyncio.run(_filled(tmp_path))
    _evict(tmp_path)
    store = LocalStore(tmp_path)
    calls = _traced_reads(store)

    assert run_sync(store.read(RECORD))[0] == b"record one" * 50
    assert run_sync(store.read_many([PLAIN, "t/none"])) == [PLAIN_DATA, None]
    run_sync(store.aclose())
    here = threading.get_ident()
    # read runs _read, which reads through _read_many; read_many runs _read_many.
    assert calls == [("_read", here), ("_read_many", here), ("_read_many", here)]


def test_without_a_loop_a_blocking_call_runs_on_the_calling_thread() -> None:
    assert run_sync(run_blocking(threading.get_ident)) == threading.get_ident()


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
