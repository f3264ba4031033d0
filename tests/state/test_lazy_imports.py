"""The package roots load lazily: an object store never pulls in the state stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _loaded_after(statement: str) -> list[str]:
    code = (
        "import json, sys\n"
        f"{statement}\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('journal', 'stores', 'projections'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
        timeout=120,
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def _state_modules_in(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m == "stores.state" or m.startswith("stores.state.")]


@pytest.mark.parametrize("module", ["stores", "stores.memory", "stores.registry"])
def test_an_object_store_import_does_not_load_the_state_stores(module: str):
    loaded = _loaded_after(f"import {module}")
    assert module in loaded
    assert _state_modules_in(loaded) == []


def test_the_registry_loads_neither_projections_nor_the_engine():
    loaded = _loaded_after("import stores.registry")
    assert sorted(loaded) == ["stores", "stores.registry"]


def test_the_byte_level_modules_do_not_load_the_adapter():
    loaded = _loaded_after("import stores.state.slots, stores.state.protocol")
    assert "stores.state.adapter" not in loaded
    assert _state_modules_in(loaded) == [
        "stores.state",
        "stores.state.protocol",
        "stores.state.slots",
    ]


def test_the_lazy_roots_still_export_every_name():
    import stores
    import stores.state

    names = [
        "AgentStateStore",
        "AgentStateStoreBase",
        "ConflictPolicy",
        "InMemoryAgentStateStore",
        "JsonFileAgentStateStore",
        "RedisAgentStateStore",
        "SqlAgentStateStore",
    ]
    for package in (stores, stores.state):
        assert set(names) <= set(dir(package))
        assert sorted(package.__all__) == names
        for name in names:
            assert getattr(package, name) is getattr(stores.state, name)
    from stores import (  # noqa: F401
        AgentStateStore,
        AgentStateStoreBase,
        ConflictPolicy,
        InMemoryAgentStateStore,
        JsonFileAgentStateStore,
        RedisAgentStateStore,
        SqlAgentStateStore,
    )

    assert isinstance(InMemoryAgentStateStore(), AgentStateStore)
    with pytest.raises(AttributeError):
        _ = stores.NoSuchStore
    with pytest.raises(AttributeError):
        _ = stores.state.NoSuchStore


def test_a_missing_driver_says_what_to_install():
    code = (
        "import sys\n"
        "sys.modules['redis'] = None\n"
        "import stores\n"
        "try:\n"
        "    stores.RedisAgentStateStore\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
        timeout=120,
    )
    assert "pip install 'agent-journal[redis]'" in done.stdout
