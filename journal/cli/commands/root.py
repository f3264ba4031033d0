"""Refusing a root that is not a journal, before a command reads it as empty.

A mistyped ``--root`` must not look like an empty journal (``ls`` printing "no
threads", a cron ``verify`` printing "ok"): a missing directory, and a root one
level (or more) above a journal root, are errors that say what is wrong.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from journal.cli.errors import usage_error
from journal.layout import LOG_DIR

if TYPE_CHECKING:
    from journal.engine import Journal

__all__ = ["check_root", "probe_root"]

# What a thread directory holds once it has records or a lease.
_THREAD_MARKS = frozenset({LOG_DIR})
_DEPTH = 5  # namespace/agent/user/session/thread


def _local_problem(path: str, root: str) -> str | None:
    # Plain stat calls on the operator's own path: cheap, done once per command.
    if os.path.isdir(path):
        return None
    if os.path.exists(path):
        return f"{root} is not a directory"
    return f"{root} does not exist (no such directory)"


async def probe_root(journal: Journal, root: str) -> str | None:
    """What is wrong with ``root`` as a journal root, or None if nothing is.

    Checks that a local root is an existing directory, then follows the first
    directory at each level down to a thread: a thread directory that holds no
    log but a directory that does means the root is one level too high. An empty
    root, or one with a thread that has no records yet, is a journal.
    """
    local = journal.store.local_directory
    if local is not None:
        problem = _local_problem(local, root)
        if problem is not None:
            return problem
    prefix = ""
    for _ in range(_DEPTH):
        children = await journal.store.children(prefix)
        if not children:
            return None
        prefix = f"{prefix}/{children[0]}" if prefix else children[0]
    inside = await journal.store.children(prefix)
    if not inside or _THREAD_MARKS & set(inside):
        return None
    deeper = await journal.store.children(f"{prefix}/{inside[0]}")
    if _THREAD_MARKS & set(deeper):
        first = prefix.split("/", 1)[0]
        return (
            f"{root} is not a journal root: it is one level above one "
            f"(try --root {root.rstrip('/')}/{first})"
        )
    return f"{root} is not a journal root: {prefix} holds neither records nor threads"


async def check_root(journal: Journal, root: str) -> None:
    """Refuse ``root`` unless it is a journal (see :func:`probe_root`).

    Raises:
        CommandError: It is not (exit 2), naming the root and what is wrong.
    """
    problem = await probe_root(journal, root)
    if problem is not None:
        raise usage_error(problem)
