"""``import``: turn a snapshot-mode state slot into a new journal thread."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from journal import events as ev
from journal.cli.errors import CommandError, usage_error
from journal.cli.reports import ImportReport
from journal.errors import VersionConflictError
from projections.agent_state import encode_state

if TYPE_CHECKING:
    from journal.cli.options import ImportOptions
    from journal.engine import Journal
    from stores.state.protocol import AgentStateStore

__all__ = ["import_slot", "open_state_store"]


def open_state_store(url: str | None, agent_id: str) -> AgentStateStore:
    """Open the snapshot-mode store that ``import --from`` names.

    Args:
        url: A directory or ``file://`` URL (the JSON-file store's root),
            ``redis://`` / ``rediss://`` / ``unix://`` (Redis), or an SQLAlchemy
            async URL such as ``sqlite+aiosqlite:///state.db`` (SQL). None: the
            JSON-file store at its default root for ``agent_id``.
        agent_id: The agent, for the JSON-file store's default root.

    Raises:
        CommandError: The URL's scheme is not a state store (exit 2).
        ImportError: The store's optional dependency is missing.
    """
    from stores import state

    if url is None:
        return state.JsonFileAgentStateStore(agent_id=agent_id)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return state.JsonFileAgentStateStore(url)
    scheme = scheme.lower()
    if scheme == "file":
        return state.JsonFileAgentStateStore("/" + rest.lstrip("/"))
    if scheme in ("redis", "rediss", "unix"):
        return state.RedisAgentStateStore(url)
    dialect = scheme.split("+", 1)[0]
    if dialect == "sqlite":
        # The SQL store would create a missing database file: refuse instead.
        path = rest[1:].split("?", 1)[0] if rest.startswith("/") else rest
        if path and path != ":memory:" and not os.path.exists(path):
            raise CommandError(f"--from {url!r}: no database file at {path}")
    if dialect in ("sqlite", "postgresql", "postgres", "mysql"):
        return state.SqlAgentStateStore(url)
    raise usage_error(
        f"--from {url!r}: not a state store URL (a directory, file://, redis://, "
        "sqlite+aiosqlite://, postgresql+asyncpg://)"
    )


async def import_slot(journal: Journal, options: ImportOptions) -> ImportReport:
    """``import``: create the thread with the slot's state as its first record.

    Raises:
        CommandError: The thread already exists, the slot is missing or the
            source is not a state store.
        ImportError: The store's optional dependency is missing.
    """
    key = options.key
    # Refuse before taking the lease, so an existing thread is not touched at all.
    head = await journal.head(key)
    if head:
        raise CommandError(
            f"{key} already exists (head {head}); import only creates new threads"
        )
    store = open_state_store(options.source, key.agent_id)
    try:
        entry = key.state_entry("agent_state")
        loaded = await store.load(key.user_id, key.session_id, entry)
    finally:
        await store.aclose()
    user = "~" if key.user_id is None else key.user_id
    where = options.source or f"the JSON-file store of agent {key.agent_id!r}"
    if loaded is None:
        raise CommandError(
            f"no state slot for user {user}, session {key.session_id!r}, "
            f"entry {entry!r} in {where}; nothing written"
        )
    state, slot_version = loaded
    baseline: list[object] = [
        ev.AgentStateReplaced(
            "migrated",
            encode_state(state.without_context()),
            messages=list(state.context),
        )
    ]
    # Tool calls the slot still waited on stay uncertain in the journal, so they are
    # reconciled rather than forgotten.
    baseline += [
        ev.ToolCallRequested(p.call_id, p.name, p.input, run_id=p.run_id)
        for p in state.tool_context.pending_calls.values()
    ]
    try:
        async with journal.writer(
            key, options.holder, fence_events=baseline, create_only=True
        ) as writer:
            version, epoch = writer.version, writer.epoch
    except VersionConflictError as exc:
        raise CommandError(f"{key} was created meanwhile: {exc}") from None
    notes: list[str] = []
    if state.active_run_id is not None:
        notes.append(
            f"the slot's run {state.active_run_id} had not finished; it is not resumed"
        )
    if state.tool_context.pending_calls:
        notes.append(
            f"{len(state.tool_context.pending_calls)} pending tool calls kept as "
            "uncertain; reconcile them"
        )
    return ImportReport(
        key, version, epoch, where, slot_version, len(state.context), notes
    )
