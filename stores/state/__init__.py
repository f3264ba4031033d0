"""Snapshot-mode state stores: one serialized ``AgentState`` per slot, versioned.

``InMemoryAgentStateStore`` and ``JsonFileAgentStateStore`` need nothing beyond the
core dependencies. ``RedisAgentStateStore`` (extra ``[redis]``) and
``SqlAgentStateStore`` (extra ``[sql]``) import their driver only when first used, and
say what to install when it is missing.
"""

from __future__ import annotations

import importlib
import typing

from stores.state.base import AgentStateStore, AgentStateStoreBase, ConflictPolicy
from stores.state.jsonfile import JsonFileAgentStateStore
from stores.state.memory import InMemoryAgentStateStore

if typing.TYPE_CHECKING:
    from stores.state.redis import RedisAgentStateStore
    from stores.state.sql import SqlAgentStateStore

__all__ = [
    "AgentStateStore",
    "AgentStateStoreBase",
    "ConflictPolicy",
    "InMemoryAgentStateStore",
    "JsonFileAgentStateStore",
    "RedisAgentStateStore",
    "SqlAgentStateStore",
]

_LAZY = {
    "RedisAgentStateStore": (
        "stores.state.redis",
        "pip install 'agent-journal[redis]'",
    ),
    "SqlAgentStateStore": ("stores.state.sql", "pip install 'agent-journal[sql]'"),
}


def __getattr__(name: str) -> typing.Any:
    try:
        module_name, hint = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"{name} needs a missing package ({exc}); {hint}") from exc
    return getattr(module, name)
