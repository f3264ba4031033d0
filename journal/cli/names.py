"""Naming threads on the command line: a path as ``ls`` prints it, or flags.

``ls`` prints a thread as ``namespace/agent/user/session/thread`` (``~`` for the
anonymous user, ``%2F`` for a ``/`` inside an id). Every command that takes a thread
accepts that path as its positional argument, as well as the ``--namespace``,
``--agent``, ``--user``, ``--session`` and ``--thread`` flags; ``ls`` and ``verify``
also take a shorter path (``demo/assistant``) as a filter.
"""

from __future__ import annotations

from journal.cli.errors import usage_error
from journal.cli.options import ThreadFilter

__all__ = ["ANONYMOUS", "PATH_PARTS", "merge_filter", "parse_thread_path"]

ANONYMOUS = "~"
"""How a path or ``--user`` names the anonymous user (as ``ls`` prints it)."""

PATH_PARTS = ("namespace", "agent", "user", "session", "thread")
"""The parts of a thread path, in order."""


def _part(text: str, name: str, path: str) -> str:
    if not text:
        raise usage_error(f"thread path {path!r} has an empty {name}")
    if "%" not in text:
        return text
    from urllib.parse import unquote  # 3 ms a cold command pays only for a %XX

    return unquote(text, errors="strict")


def parse_thread_path(path: str, *, prefix: bool = False) -> ThreadFilter:
    """The thread (or, with ``prefix``, the threads) a path names.

    Args:
        path: ``namespace/agent/user/session/thread`` as ``ls`` prints it; with
            ``prefix``, its first one to five parts.
        prefix: Accept fewer than five parts (a filter).

    Raises:
        CommandError: The path has the wrong number of parts or an empty one
            (exit 2).
    """
    parts = path.strip("/").split("/")
    if len(parts) > 5 or (not prefix and len(parts) != 5):
        raise usage_error(
            f"thread path {path!r} has {len(parts)} parts; a thread is named "
            "namespace/agent/user/session/thread, as `ls` prints it (~ for the "
            "anonymous user; an id holding / is written %2F)"
        )
    try:
        ids = [_part(p, name, path) for p, name in zip(parts, PATH_PARTS, strict=False)]
    except UnicodeDecodeError:
        raise usage_error(f"thread path {path!r} has a bad %-escape") from None
    ids += [None] * (5 - len(ids))  # type: ignore[list-item]
    namespace, agent, raw_user, session, thread = ids
    user: str | None
    anonymous = False
    if len(parts) >= 3 and parts[2] == ANONYMOUS:
        user, anonymous = None, True
    else:
        user = raw_user
    return ThreadFilter(namespace, agent, user, session, thread, anonymous=anonymous)


def merge_filter(
    path: str | None, flags: ThreadFilter, *, prefix: bool
) -> ThreadFilter:
    """The thread filter of a command: its positional path, else its flags.

    Raises:
        CommandError: Both a path and id flags are given (exit 2).
    """
    if path is None:
        return flags
    if flags.given:
        raise usage_error(
            f"name the thread either as a path ({path!r}) or with "
            "--namespace/--agent/--user/--session/--thread, not both"
        )
    return parse_thread_path(path, prefix=prefix)
