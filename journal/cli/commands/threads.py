"""Finding the threads a command works on, and working on many at once."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeVar

from journal.cli.errors import CommandError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from journal.cli.options import ThreadFilter
    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = ["CONCURRENCY", "existing_head", "map_bounded", "select_threads"]

CONCURRENCY = 16
"""Threads read at the same time by commands that visit many."""

_T = TypeVar("_T")
_R = TypeVar("_R")


async def existing_head(journal: Journal, key: ThreadKey, root: str) -> int:
    """The head of ``key``, which must have records.

    Raises:
        CommandError: The thread has no records under ``root``.
    """
    head = await journal.head(key)
    if head == 0:
        raise CommandError(f"{key} does not exist under {root}")
    return head


def _order(key: ThreadKey) -> tuple[str, str, str, str, str]:
    return (
        key.namespace,
        key.agent_id,
        key.user_id or "",
        key.session_id,
        key.thread_id,
    )


async def select_threads(journal: Journal, selection: ThreadFilter) -> list[ThreadKey]:
    """The threads matching ``selection``, sorted by namespace, agent, user, ...

    Raises:
        InvalidKeyError: A given id is not valid.
    """
    selection.check()
    keys = [
        key
        async for key in journal.threads(
            namespace=selection.namespace,
            agent_id=selection.agent_id,
            user_id=selection.user_id if selection.user_id is not None else ...,
            session_id=selection.session_id,
        )
        if selection.thread_id is None or key.thread_id == selection.thread_id
    ]
    return sorted(keys, key=_order)


async def map_bounded(
    items: Sequence[_T],
    fn: Callable[[_T], Awaitable[_R]],
    progress: Progress,
    label: str,
) -> list[_R]:
    """``fn`` of every item, at most :data:`CONCURRENCY` at a time, in order.

    ``progress`` hears of each item done under ``label``.
    """
    semaphore = asyncio.Semaphore(CONCURRENCY)
    progress.begin(label, len(items))

    async def one(item: _T) -> _R:
        async with semaphore:
            result = await fn(item)
        progress.step()
        return result

    try:
        return list(await asyncio.gather(*(one(item) for item in items)))
    finally:
        progress.end()
