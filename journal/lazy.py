"""Lazy re-exports (PEP 562): a package names its public objects, imports on demand.

The package root and the CLI's packages list where each public name lives and
import that module the first time the name is asked for, so that importing the
package (or one of its light modules) stays cheap for a cold command. The engine's
logger is lazy the same way (:func:`lazy_logger`): :mod:`logging` is imported when
something is first logged.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import logging
    from collections.abc import Callable, Iterable, Mapping

__all__ = ["lazy_exports", "lazy_logger"]


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


class _LazyLogger:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> object:
        import logging

        return getattr(logging.getLogger(self._name), attr)


def lazy_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, with :mod:`logging` imported on first use.

    Importing :mod:`logging` (with the traceback and tokenizer modules it loads)
    was about a twentieth of a cold CLI command that logs nothing. Each attribute
    is looked up on the real logger, so its level and handlers are the ones the
    application configured.
    """
    return cast("logging.Logger", _LazyLogger(name))
