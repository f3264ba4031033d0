"""Lazy re-exports (PEP 562): a package names its public objects, imports on demand.

The package root and the CLI's packages list where each public name lives and
import that module the first time the name is asked for, so that importing the
package (or one of its light modules) stays cheap for a cold command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    public: Iterable[str],
    namespace: dict[str, object],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of a lazily re-exporting package.

    Args:
        package: The package's ``__name__`` (for the error message).
        exports: Each public name and the module it is imported from.
        public: The package's ``__all__``.
        namespace: The package's ``globals()``: a name imported once is stored
            there, so later lookups never reach ``__getattr__`` again.

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's top level.
    """
    names = frozenset(public)

    def getattr_(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | names)

    return getattr_, dir_
