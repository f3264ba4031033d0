"""Power loss once a journal that syncs continues a thread one that does not wrote.

A journal opened with ``fsync=False`` on a directory promises nothing across a power
cut. One opened on the same directory with ``fsync=True`` promises that what it
acknowledged survives one, and its records are only readable with the records they
chain on: its writer makes what the other left durable before its first commit.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey

if TYPE_CHECKING:
    from pathlib import Path

    from tests.powerloss._lazyfs import LazyFS

pytestmark = pytest.mark.powerloss

KEY = ThreadKey("agent", "sess", "user")


async def _append(root: Path, *, fsync: bool, texts: list[str]) -> list[int]:
    """Append one message per text through a writer of a journal on ``root``."""
    async with Journal.open(root, fsync=fsync) as journal:
        writer = await journal.acquire(KEY, holder="durable" if fsync else "fast")
        acked = []
        for text in texts:
            record = await writer.append([MessageAppended(Msg("user", text))])
            acked.append(record.version)
        await writer.close()
    return acked


async def _messages(root: Path) -> list[str]:
    async with Journal.open(root) as journal:
        state = await journal.load(KEY)
        assert (await journal.verify(KEY)).ok
    return [str(m.content) for m in state.context]


@pytest.mark.parametrize(
    "fast",
    [
        # Past the first segment of the log (1,024 records).
        [f"fast {i}" for i in range(1030)],
        # A message large enough to go to the thread's blobs.
        ["x" * 70_000, "fast 1"],
    ],
    ids=["segments", "blob"],
)
def test_a_syncing_writer_makes_what_a_fast_one_left_durable(
    lazyfs: LazyFS, fast: list[str]
) -> None:
    root = lazyfs.mount_point / "journal"
    asyncio.run(_append(root, fsync=False, texts=fast))
    durable = ["durable 0", "durable 1", "durable 2"]
    acked = asyncio.run(_append(root, fsync=True, texts=durable))
    lazyfs.clear_cache()  # the power cut
    messages = asyncio.run(_messages(root))
    assert messages == fast + durable
    assert acked[-1] >= len(fast) + len(durable)


def test_a_fast_writer_after_a_syncing_one_flags_the_thread_again(
    lazyfs: LazyFS,
) -> None:
    root = lazyfs.mount_point / "journal"
    first = [f"fast {i}" for i in range(1030)]
    asyncio.run(_append(root, fsync=False, texts=first))
    asyncio.run(_append(root, fsync=True, texts=["durable 0"]))
    second = [f"again {i}" for i in range(1030)]
    asyncio.run(_append(root, fsync=False, texts=second))
    asyncio.run(_append(root, fsync=True, texts=["durable 1"]))
    lazyfs.clear_cache()
    assert asyncio.run(_messages(root)) == [*first, "durable 0", *second, "durable 1"]
