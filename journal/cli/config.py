"""Where the journal is: the root URL and its storage options, from flags and env."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from journal.cli.errors import usage_error

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DEFAULT_ROOT",
    "ROOT_ENV",
    "STORAGE_OPTIONS_ENV",
    "parse_storage_options",
    "resolve_root",
]

ROOT_ENV = "AGENT_JOURNAL_HOME"
"""Environment variable naming the journal root when ``--root`` is not given."""

DEFAULT_ROOT = "~/.agent-journal/journal"
"""The journal root when neither ``--root`` nor :data:`ROOT_ENV` is set."""

STORAGE_OPTIONS_ENV = "AGENT_JOURNAL_STORAGE_OPTIONS"
"""Environment variable holding a JSON object of storage options for the root."""


def resolve_root(root: str | None = None) -> str:
    """The journal root URL: ``root``, else ``$AGENT_JOURNAL_HOME``, else the default.

    A plain path has ``~`` expanded; URLs are returned unchanged.
    """
    value = root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    if "://" not in value:
        value = os.path.expanduser(value)
    return value


def parse_storage_options(pairs: Sequence[str]) -> dict[str, Any]:
    """Storage options from :data:`STORAGE_OPTIONS_ENV` and ``--option`` pairs.

    ``key=value`` sets a string, ``key:=json`` a typed value; ``a.b=value`` nests.
    Later pairs win over earlier ones and over the environment.

    Raises:
        CommandError: A pair or the environment variable is malformed (exit 2).
    """
    options: dict[str, Any] = {}
    env = os.environ.get(STORAGE_OPTIONS_ENV, "").strip()
    if env:
        import json  # only a command given options pays for the module

        try:
            loaded = json.loads(env)
        except json.JSONDecodeError as exc:
            raise usage_error(f"${STORAGE_OPTIONS_ENV} is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise usage_error(f"${STORAGE_OPTIONS_ENV} must hold a JSON object")
        options.update(loaded)
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name or name == ":":
            raise usage_error(f"--option needs KEY=VALUE or KEY:=JSON, not {pair!r}")
        value: Any = raw
        if name.endswith(":"):
            import json

            name = name[:-1]
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise usage_error(f"--option {name}:= needs JSON: {exc}") from None
        *parents, leaf = name.split(".")
        target = options
        for part in parents:
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                raise usage_error(f"--option {name}: {part!r} is not an object")
            target = nested
        target[leaf] = value
    return options
