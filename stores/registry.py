"""URL scheme → object-store class, resolved lazily.

Third-party backends register under the entry-point group ``journal.stores`` with a
value of ``"module:Class"``; the class is constructed as ``Class(url, **options)``
through its ``from_url`` classmethod.
"""

from __future__ import annotations

import importlib
import os
import types
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from journal.store import ObjectStore

__all__ = ["ENTRY_POINT_GROUP", "STORES", "is_local", "open_store"]

ENTRY_POINT_GROUP = "journal.stores"


class _Backend(NamedTuple):
    target: str
    hint: str


_BUILTIN: dict[str, _Backend] = {
    "memory": _Backend("stores.memory:MemoryStore", ""),
    "file": _Backend("stores.local:LocalStore", ""),
    "s3": _Backend("stores.s3:S3Store", "pip install 'agent-journal[s3]'"),
    "s3a": _Backend("stores.s3:S3Store", "pip install 'agent-journal[s3]'"),
}

STORES = types.MappingProxyType(_BUILTIN)
"""The built-in schemes (read-only). Other fsspec schemes open read-only through
``stores.fsspec_store`` unless the file system offers a real exclusive create."""


def _load(target: str, hint: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = f"; install it with: {hint}" if hint else ""
        raise ImportError(
            f"cannot load storage backend {target}: {exc}{extra}"
        ) from exc
    return getattr(module, attr)


def is_local(url: str | os.PathLike[str]) -> bool:
    """Whether :func:`open_store` opens ``url`` as a local directory.

    A plain path or a ``file://`` URL (the CLI runs reading commands on one
    without an event loop: the local store's I/O needs none).
    """
    scheme, sep, _ = os.fspath(url).partition("://")
    return not sep or scheme.lower() == "file"


def open_store(url: str | os.PathLike[str], **options: Any) -> ObjectStore:
    """Open the object store named by ``url``.

    Args:
        url: ``memory://name``, ``file:///path``, a plain path, ``s3://bucket/prefix``,
            or any scheme registered by an entry point or known to fsspec.
        **options: Passed to the backend (e.g. ``fsync=False`` locally; for S3 the
            s3fs options such as ``endpoint_url``, ``key``, ``secret``).

    Raises:
        ValueError: The URL is malformed.
        ImportError: The backend's optional dependencies are missing (with the
            command that installs them).
    """
    text = os.fspath(url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        from stores.local import LocalStore

        return LocalStore(text, **options)
    scheme = scheme.lower()
    if scheme == "memory":
        from stores.memory import MemoryStore

        if options:
            raise ValueError(f"memory:// takes no options, got {sorted(options)}")
        return MemoryStore.named(rest.strip("/"))
    if scheme == "file":
        from stores.local import LocalStore

        if not rest:
            # "file://" names no path at all; "file:///" is the file system's root.
            raise ValueError(f"{text!r} names no root directory: use file:///path")
        return LocalStore("/" + rest.lstrip("/"), **options)
    backend = _BUILTIN.get(scheme)
    if backend is None:
        # Imported here: importlib.metadata costs ~30 ms, and the built-in schemes
        # (every local journal) never need it.
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == scheme:
                backend = _Backend(ep.value, "")
                break
    if backend is None:
        backend = _Backend("stores.fsspec_store:FsspecStore", "pip install fsspec")
    cls = _load(backend.target, backend.hint)
    store: ObjectStore = cls.from_url(text, **options)
    return store
