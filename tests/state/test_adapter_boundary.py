"""Only stores.state.adapter knows AgentState; the other state modules move bytes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.codec import MAX_NESTING
from journal.errors import CorruptRecordError
from projections.agent_state import AgentState
from stores.state import adapter
from stores.state.jsonfile import JsonFileAgentStateStore
from stores.testing.state_contract import full_state

REPO = Path(__file__).resolve().parents[2]
STATE_PACKAGE = REPO / "stores" / "state"

ADAPTER = "adapter.py"
# The public protocol's signatures name AgentState, so these may import it for
# type checkers (and only for them).
TYPE_ONLY_ALLOWED = {ADAPTER, "protocol.py", "base.py"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _names_projections(module: str | None) -> bool:
    return module is not None and (
        module == "projections" or module.startswith("projections.")
    )


def _projection_imports(tree: ast.Module) -> list[tuple[int, bool]]:
    """(line, only for type checkers) of every import of projections in ``tree``."""
    found: list[tuple[int, bool]] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            if any(_names_projections(alias.name) for alias in node.names):
                found.append((node.lineno, type_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and _names_projections(node.module):
                found.append((node.lineno, type_only))
        elif isinstance(node, ast.Call):
            # importlib.import_module("projections...") / __import__("projections...")
            callee = node.func
            name = callee.attr if isinstance(callee, ast.Attribute) else None
            if isinstance(callee, ast.Name):
                name = callee.id
            if (
                name in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and _names_projections(node.args[0].value)
            ):
                found.append((node.lineno, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(tree, False)
    return found


def _state_modules() -> list[Path]:
    return sorted(STATE_PACKAGE.rglob("*.py"))


def test_the_state_package_has_an_adapter():
    assert (STATE_PACKAGE / ADAPTER).is_file()
    tree = ast.parse((STATE_PACKAGE / ADAPTER).read_text())
    assert any(not type_only for _, type_only in _projection_imports(tree))


@pytest.mark.parametrize(
    "path", _state_modules(), ids=lambda p: str(p.relative_to(STATE_PACKAGE))
)
def test_only_the_adapter_imports_projections(path: Path):
    name = str(path.relative_to(STATE_PACKAGE))
    imports = _projection_imports(ast.parse(path.read_text(), filename=str(path)))
    if name == ADAPTER:
        return
    runtime = [line for line, type_only in imports if not type_only]
    assert not runtime, f"stores/state/{name} imports projections at line {runtime}"
    if name not in TYPE_ONLY_ALLOWED:
        assert not imports, (
            f"stores/state/{name} names projections (line {imports[0][0]}); "
            "backends handle bytes, stores.state.adapter handles AgentState"
        )


# --- the adapter itself ---------------------------------------------------------


def test_the_encoder_stamps_a_copy():
    state = full_state()
    state.version = 7
    encode = adapter.state_encoder(state)
    assert AgentState.from_json(encode(3)).version == 3
    assert state.version == 7
    assert encode(3) == adapter.with_version(state, 3).to_json()


def test_decoding_takes_the_slots_version():
    data = adapter.state_encoder(full_state())(1)
    state = adapter.decode_state(data, 5, label="slot x")
    assert state.version == 5
    assert state.summary == full_state().summary


@pytest.mark.parametrize("data", [b"{not json", b'{"context": 3}', b"[]"])
def test_undecodable_bytes_name_the_slot(data: bytes):
    with pytest.raises(CorruptRecordError, match="slot x version 4: /a/b: ") as caught:
        adapter.decode_state(data, 4, label="slot x", origin="/a/b")
    assert caught.value.key == "slot x"
    assert caught.value.version == 4


def test_only_states_are_accepted():
    with pytest.raises(TypeError, match="AgentState"):
        adapter.check_state({"context": []})


async def test_a_corrupt_state_inside_a_slot_file_names_the_slot(tmp_path):
    store = JsonFileAgentStateStore(tmp_path)
    await store.save("u", "s", "e", full_state())
    path = tmp_path / "u/s/e.json"
    body = json.loads(path.read_text())
    body["state"] = {"context": "not a list"}
    path.write_text(json.dumps(body))
    with pytest.raises(CorruptRecordError, match=r"entry='e' version 1: .*e\.json"):
        await store.load("u", "s", "e")


DEEP = 100_000


def test_bytes_nested_too_deeply_name_the_slot():
    data = full_state().to_json()
    deep = b"[" * DEEP + b"]" * DEEP
    data = data.replace(b'"metadata":{', b'"metadata":{"deep":' + deep + b",", 1)
    with pytest.raises(CorruptRecordError, match="slot x version 4"):
        adapter.decode_state(data, 4, label="slot x")


def _nested(levels: int) -> list:
    """A list ``levels`` deep (``[]`` is one level)."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _deep_state(levels: int) -> AgentState:
    """A state nested ``levels`` deep: state, context, message, metadata, value."""
    state = full_state()
    state.context[0].metadata = {"deep": _nested(levels - 4)}
    return state


async def _from_deeper_frames(frames: int, call):
    """``await call()`` from ``frames`` coroutine frames further down the stack."""
    if frames == 0:
        return await call()
    return await _from_deeper_frames(frames - 1, call)


async def test_a_state_too_deep_to_load_back_is_refused(tmp_path):
    # The store used to accept it, and then the acknowledged slot did not load
    # for a caller 120 frames deeper: msgspec's decoder recurses per level.
    store = JsonFileAgentStateStore(tmp_path)
    with pytest.raises(ValueError, match="nested deeper than"):
        await store.save("u", "s", "e", _deep_state(900))
    with pytest.raises(ValueError, match="nested deeper than"):
        await store.save("u", "s", "e", _deep_state(5000))  # too deep to encode
    assert await store.load("u", "s", "e") is None


async def test_a_state_as_deep_as_the_journal_allows_is_saved(tmp_path):
    # A message nests one level deeper in a state than in the event appending it.
    assert adapter.MAX_STATE_NESTING == MAX_NESTING + 1
    store = JsonFileAgentStateStore(tmp_path)
    assert await store.save("u", "s", "e", _deep_state(MAX_NESTING + 1)) == 1
    loaded = await _from_deeper_frames(120, lambda: store.load("u", "s", "e"))
    assert loaded is not None
    assert (
        loaded[0].context[0].metadata
        == _deep_state(MAX_NESTING + 1).context[0].metadata
    )
    with pytest.raises(ValueError, match="nested deeper than"):
        await store.save("u", "s", "e", _deep_state(MAX_NESTING + 2))
    # Brackets inside strings are text, not nesting.
    state = full_state()
    state.summary = "[" * 1000 + '"\\' + "{" * 1000
    assert await store.save("u", "s", "e", state) == 2


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_TEXT = st.text(alphabet='[]{}"\\ab\n', max_size=8)
_JSON = st.recursive(
    st.none() | st.integers() | _TEXT,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3)
    ),
    max_leaves=200,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_the_nesting_check_counts_containers_not_text(value: object):
    data = msgspec.json.encode(value)
    assert adapter._too_deep(data) == (_depth(value) > adapter.MAX_STATE_NESTING)
    if _depth(value) > adapter.MAX_STATE_NESTING:
        return
    # At the limit and one past it, with brackets in text at every level.
    wrapped: object = value
    while _depth(wrapped) < adapter.MAX_STATE_NESTING:
        wrapped = [wrapped, "]]", {"}": "["}]
    assert not adapter._too_deep(msgspec.json.encode(wrapped))
    assert adapter._too_deep(msgspec.json.encode({"\\": [wrapped]}))
