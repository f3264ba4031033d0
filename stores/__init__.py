"""Storage backends: object stores for the log, and snapshot-mode state stores.

Object stores (``stores.memory``, ``stores.local``, ``stores.s3``, ...) are opened by
URL through ``stores.registry.open_store`` (what ``Journal.open`` calls). The
snapshot-mode ``AgentStateStore`` protocol, ``ConflictPolicy`` and the four stores are
re-exported here; the Redis and SQL stores import their drivers only when first used.
"""

from __future__ import annotations

import typing

from stores.state import (
    AgentStateStore,
    AgentStateStoreBase,
    ConflictPolicy,
    InMemoryAgentStateStore,
    JsonFileAgentStateStore,
)

if typing.TYPE_CHECKING:
    from stores.state import RedisAgentStateStore, SqlAgentStateStore

__all__ = [
    "AgentStateStore",
    "AgentStateStoreBase",
    "ConflictPolicy",
    "InMemoryAgentStateStore",
    "JsonFileAgentStateStore",
    "RedisAgentStateStore",
    "SqlAgentStateStore",
]


def __getattr__(name: str) -> typing.Any:
    if name in ("RedisAgentStateStore", "SqlAgentStateStore"):
        import stores.state

        return getattr(stores.state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
