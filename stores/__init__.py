"""Storage backends: object stores for the log, and snapshot-mode state stores.

Object stores (``stores.memory``, ``stores.local``, ``stores.s3``, ...) are opened by
URL through ``stores.registry.open_store`` (what ``Journal.open`` calls). The
snapshot-mode ``AgentStateStore`` protocol, ``ConflictPolicy`` and the four stores are
re-exported here from :mod:`stores.state`, loaded on first use: importing an object
store does not load the state stores, and the Redis and SQL stores import their
drivers only when first used.
"""

from __future__ import annotations

import typing

if typing.TYPE_CHECKING:
    from stores.state import (
        AgentStateStore,
        AgentStateStoreBase,
        ConflictPolicy,
        InMemoryAgentStateStore,
        JsonFileAgentStateStore,
        RedisAgentStateStore,
        SqlAgentStateStore,
    )

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
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import stores.state

    value = getattr(stores.state, name)
    # Cache it: later lookups skip this hook.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
