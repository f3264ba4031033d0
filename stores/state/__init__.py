"""Snapshot-mode state stores: one serialized ``AgentState`` per slot, versioned.

``InMemoryAgentStateStore`` and ``JsonFileAgentStateStore`` need nothing beyond the
core dependencies. ``RedisAgentStateStore`` (extra ``[redis]``) and
``SqlAgentStateStore`` (extra ``[sql]``) import their driver only when first used, and
say what to install when it is missing.

Every name here is loaded on first use, so importing one submodule (say
``stores.state.slots``) does not load every backend.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from stores.state.base import AgentStateStoreBase, ConflictPolicy
    from stores.state.jsonfile import JsonFileAgentStateStore
    from stores.state.memory import InMemoryAgentStateStore
    from stores.state.protocol import AgentStateStore
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

# name -> (module, what to install when importing it fails; "" for core modules)
_LAZY: dict[str, tuple[str, str]] = {
    "AgentStateStore": ("stores.state.protocol", ""),
    "AgentStateStoreBase": ("stores.state.base", ""),
    "ConflictPolicy": ("journal.policy", ""),
    "InMemoryAgentStateStore": ("stores.state.memory", ""),
    "JsonFileAgentStateStore": ("stores.state.jsonfile", ""),
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
        if not hint:
            raise
        raise ImportError(f"{name} needs a missing package ({exc}); {hint}") from exc
    value = getattr(module, name)
    # Cache it: later lookups skip this hook.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
