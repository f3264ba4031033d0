"""Finding the threads a command works on, and working on many at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from journal.cli.errors import EXIT_USAGE, CommandError
from journal.cli.options import ThreadFilter
from journal.layout import ThreadLayout
from journal.loopless import gather, limiter

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = [
    "CONCURRENCY",
    "existing_head",
    "map_bounded",
    "resolve_thread",
    "select_threads",
]

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
        lease = ThreadLayout.of(key).lease_key
        if (await journal.store.exist_many([lease]))[0]:
            # Listed (it has its LEASE), but its first writer stopped before its
            # first record: say that, not that it is not there.
            raise CommandError(
                f"{key} has no records under {root}: its first writer stopped "
                "before writing one"
            )
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
            user_id=selection.user_id if selection.user_given else ...,
            session_id=selection.session_id,
        )
        if selection.thread_id is None or key.thread_id == selection.thread_id
    ]
    return sorted(keys, key=_order)


def _describe(selection: ThreadFilter) -> str:
    flags = [
        ("--namespace", selection.namespace),
        ("--agent", selection.agent_id),
        ("--user", "~" if selection.anonymous else selection.user_id),
        ("--session", selection.session_id),
        ("--thread", selection.thread_id),
    ]
    return " ".join(f"{flag} {value}" for flag, value in flags if value is not None)


async def resolve_thread(
    journal: Journal, selection: ThreadFilter, root: str
) -> ThreadKey:
    """The one thread ``selection`` names, for a command that works on one thread.

    The namespace and thread left out are ``default`` and ``main``; a user left
    out is any user (as for ``ls``), so the thread must then be the only one of
    that agent and session.

    Raises:
        CommandError: No agent or session is given (exit 2), or a user left out
            matches several threads (exit 2, naming them).
        InvalidKeyError: An id is not valid.
    """
    if selection.agent_id is None or selection.session_id is None:
        missing = [
            flag
            for flag, value in (
                ("--agent", selection.agent_id),
                ("--session", selection.session_id),
            )
            if value is None
        ]
        raise CommandError(
            "name a thread: its path as `ls` prints it "
            "(namespace/agent/user/session/thread), or "
            f"{' and '.join(missing)} (with --user, --thread, --namespace)",
            EXIT_USAGE,
        )
    if selection.user_given:
        return selection.key()
    exact = selection.key()  # validates the ids given
    full = ThreadFilter(
        exact.namespace,
        exact.agent_id,
        None,
        exact.session_id,
        exact.thread_id,
    )
    matches = await select_threads(journal, full)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        # A thread of the anonymous user that does not exist: say so plainly.
        return exact
    from journal.cli.describe import thread_label

    names = ", ".join(thread_label(k) for k in matches[:5])
    more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
    raise CommandError(
        f"{_describe(selection)} matches {len(matches)} threads of different "
        f"users ({names}{more}); add --user (~ for the anonymous user) or give "
        "the thread's path",
        EXIT_USAGE,
    )


async def map_bounded(
    items: Sequence[_T],
    fn: Callable[[_T], Awaitable[_R]],
    progress: Progress,
    label: str,
) -> list[_R]:
    """``fn`` of every item, at most :data:`CONCURRENCY` at a time, in order.

    ``progress`` hears of each item done under ``label``.
    """
    semaphore = limiter(CONCURRENCY)
    progress.begin(label, len(items))

    async def one(item: _T) -> _R:
        async with semaphore:
            result = await fn(item)
        progress.step()
        return result

    try:
        return await gather(*(one(item) for item in items))
    finally:
        progress.end()
