"""The house rules of docs/LAYERS.md, checked on the source.

Every import of a project module by another (including imports inside functions and
under ``TYPE_CHECKING``) must point to the same layer or a lower one; there is no
import cycle among project modules; no module imports another module's private name
or reaches into one through a module alias; and importing a foundation module loads
the foundation only.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("journal", "projections", "stores")

FOUNDATION = 0
PROJECTIONS = 1
STORES = 2
ENGINE = 3
RUNTIME = 4
DURABLE = 5
FACES = 6

# Longest prefix wins.
LAYERS: dict[str, int] = {
    "journal": FOUNDATION,
    "journal.errors": FOUNDATION,
    "journal.keys": FOUNDATION,
    "journal.events": FOUNDATION,
    "journal.codec": FOUNDATION,
    "journal.compression": FOUNDATION,
    "journal.store": FOUNDATION,
    "journal.layout": FOUNDATION,
    "journal.policy": FOUNDATION,
    "journal.checkpoint": FOUNDATION,
    "journal.chunk_index": FOUNDATION,
    "projections": PROJECTIONS,
    "stores": STORES,
    "journal.engine": ENGINE,
    "journal.runtime": RUNTIME,
    "journal.durable": DURABLE,
    "journal.models": RUNTIME,
    "journal.cli": FACES,
    "journal.adapters": FACES,
    "journal.web": FACES,
    "journal.demo": FACES,
    "journal._demo_child": FACES,
    "journal.__main__": FACES,
    "stores.testing": FACES,
}
NAMES = [
    "foundation",
    "projections",
    "stores",
    "engine",
    "runtime",
    "durable",
    "faces",
]

# The package roots re-export names lazily; their TYPE_CHECKING imports only type
# those names and load nothing.
LAZY_ROOTS = {"journal", "stores", "projections"}


def layer_of(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and LAYERS.md")


def module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = module_files()


def is_project(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    type_only: bool
    private_names: tuple[str, ...] = ()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(base: str, name: str) -> str:
    """The module that ``from base import name`` depends on."""
    candidate = f"{base}.{name}"
    if candidate in MODULES:
        return candidate
    if base in LAZY_ROOTS and name != "*":
        # A lazily re-exported name depends on the module that defines it.
        value = getattr(importlib.import_module(base), name, None)
        defined = getattr(value, "__module__", None)
        if isinstance(defined, str) and defined in MODULES:
            return defined
    return base


def _package_of(module: str) -> str:
    return module if is_package(module) else module.rpartition(".")[0]


def imports_of(module: str) -> list[Import]:
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    found: list[Import] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            found.extend(
                Import(module, alias.name, node.lineno, type_only)
                for alias in node.names
                if is_project(alias.name)
            )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module).split(".")
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if is_project(base):
                for alias in node.names:
                    private = (alias.name,) if _private(alias.name) else ()
                    target = _resolve(base, alias.name)
                    found.append(
                        Import(module, target, node.lineno, type_only, private)
                    )
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(tree, False)
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


ALL_IMPORTS = [imp for module in MODULES for imp in imports_of(module)]


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_point_down():
    wrong = []
    for imp in ALL_IMPORTS:
        if imp.source in LAZY_ROOTS and imp.type_only:
            continue
        if imp.target not in MODULES:
            continue
        have, want = layer_of(imp.source), layer_of(imp.target)
        if want > have:
            wrong.append(
                f"{imp.source}:{imp.line} ({NAMES[have]}) imports "
                f"{imp.target} ({NAMES[want]})"
            )
    assert not wrong, "imports pointing up:\n" + "\n".join(wrong)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in ALL_IMPORTS:
        if imp.source in LAZY_ROOTS and imp.type_only:
            continue
        if imp.target in MODULES and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_private_names_across_modules():
    wrong = [
        f"{imp.source}:{imp.line} imports {', '.join(imp.private_names)} "
        f"from {imp.target}"
        for imp in ALL_IMPORTS
        if imp.private_names and imp.target != imp.source
    ]
    # ``import x.y as z`` then ``z._name``: the same reach-in, spelled differently.
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if is_project(alias.name):
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in MODULES:
                        aliases[alias.asname or alias.name] = (
                            f"{node.module}.{alias.name}"
                        )
        wrong.extend(
            f"{module}:{node.lineno} reads {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
            and aliases[node.value.id] != module
        )
    assert not wrong, "private names used across modules:\n" + "\n".join(wrong)


def _loaded_after(statement: str) -> set[str]:
    code = (
        f"import sys\n{statement}\n"
        "print('\\n'.join(m for m in sys.modules if m.split('.')[0] in "
        f"{PACKAGES!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


@pytest.mark.parametrize(
    "module",
    [
        "journal.errors",
        "journal.keys",
        "journal.events",
        "journal.codec",
        "journal.store",
        "journal.layout",
    ],
)
def test_a_foundation_module_loads_the_foundation_only(module):
    loaded = _loaded_after(f"import {module}")
    above = sorted(m for m in loaded if layer_of(m) != FOUNDATION)
    assert not above, f"import {module} loaded {above}"


def test_the_engine_does_not_load_the_runtime_or_the_faces():
    loaded = _loaded_after(
        "import asyncio, journal\n"
        "async def main():\n"
        "    j = journal.Journal.open('memory://layering')\n"
        "    await j.head(journal.ThreadKey('a', 's'))\n"
        "asyncio.run(main())"
    )
    above = sorted(m for m in loaded if layer_of(m) > ENGINE)
    assert not above, f"opening a journal loaded {above}"
    state_stores = sorted(m for m in loaded if m.startswith("stores.state"))
    assert not state_stores, f"opening a journal loaded {state_stores}"
