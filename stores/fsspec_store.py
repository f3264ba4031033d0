"""Read-only object store over any other fsspec file system (gcs://, az://, ...).

The journal's safety rests on ``create`` being a real exclusive create: of any number
of racing writers of a record, exactly one may succeed. fsspec's generic
``pipe_file(path, data, mode="create")`` does not give that: the default
implementation checks whether the path exists and then writes (its own comment calls
it "non-atomic"), so two writers can both see the slot free and both "win", the later
one silently replacing the earlier commit (measured locally: several winners in 133
of 200 races). Compare-and-swap has no generic fsspec form at all.

So this store opens such file systems **read-only**: ``writable`` is False, and
``create``, ``replace`` and ``delete`` raise :class:`~journal.errors.StorageError`.
Reading, listing and ``children`` work on every fsspec file system, which is what
audit, replay, ``verify`` and export need. A journal that must be written on one of
these services needs a backend of its own whose ``create`` is a conditional request
of that service (for example, a GCS upload with ``ifGenerationMatch=0``), registered
under the ``journal.stores`` entry-point group. The allow-list of file-system
classes known to implement a real conditional create here is deliberately empty:
``s3://`` has its own backend (:mod:`stores.s3`).

Asynchronous file systems (``fs.async_impl``) are driven through their coroutine
API, created inside the running event loop; the others run in a worker thread
(``asyncio.to_thread``). Listings are not cached: each call invalidates the file
system's listing cache first. ``list`` has no generic start-after, so it lists
everything under the prefix and filters; etags are content digests (no
version-checked writes are possible here anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import fsspec

from journal.errors import ObjectExistsError, ObjectNotFoundError, StorageError
from journal.store import ObjectStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["FsspecStore"]

T = TypeVar("T")
_Names = list[str]  # ``list`` is a method name inside the class body


def _etag(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class FsspecStore(ObjectStore):
    """Read-only objects under ``root`` on an fsspec file system.

    Args:
        fs_class: The fsspec file-system class.
        root: The root path inside that file system (protocol stripped).
        url: The URL the store was opened with.
        **storage_options: Passed to the file-system constructor.
    """

    WRITABLE_CLASSES: ClassVar[frozenset[str]] = frozenset()
    """Fully qualified names of file-system classes whose ``pipe_file(mode="create")``
    is a real conditional create. Empty: no generic file system qualifies yet."""

    def __init__(
        self, fs_class: type[Any], root: str, *, url: str = "", **storage_options: Any
    ) -> None:
        self._fs_class = fs_class
        self.root = root.rstrip("/")
        self.url = url or f"{fs_class.__name__}:{self.root}"
        self._options = storage_options
        self._async = bool(getattr(fs_class, "async_impl", False))
        self._fs: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        qualified = f"{fs_class.__module__}.{fs_class.__qualname__}"
        self.writable = qualified in self.WRITABLE_CLASSES

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FsspecStore:
        """Open ``protocol://root`` on the fsspec file system of that protocol.

        Raises:
            ValueError: fsspec knows no such protocol.
            ImportError: The file system's package is not installed (the message
                names it).
        """
        protocol, _ = fsspec.core.split_protocol(url)
        if not protocol:
            raise ValueError(f"not an fsspec URL: {url!r}")
        fs_class = fsspec.get_filesystem_class(protocol)
        root = fs_class._strip_protocol(url)
        merged = {**fs_class._get_kwargs_from_urls(url), **options}
        return cls(fs_class, root, url=url, **merged)

    # --- the file system ----------------------------------------------------------

    def _make(self, loop: asyncio.AbstractEventLoop | None) -> Any:
        options = dict(self._options)
        options["skip_instance_cache"] = True
        if self._async:
            options.update(asynchronous=True, loop=loop)
        return self._fs_class(**options)

    def _sync_call(
        self, name: str, invalidate: str | None, *args: Any, **kw: Any
    ) -> Any:
        # Runs in a worker thread: a blocking constructor may connect (sftp, ...).
        if self._fs is None:
            self._fs = self._make(None)
        if invalidate is not None:
            self._fs.invalidate_cache(invalidate or None)
        return getattr(self._fs, name)(*args, **kw)

    async def _call(
        self,
        key: str,
        name: str,
        *args: Any,
        invalidate: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call file-system method ``name`` (its ``_name`` coroutine when async).

        Args:
            key: The store key or prefix, for error messages.
            name: The fsspec method.
            *args: Its arguments.
            invalidate: A path whose cached listing is dropped first.
            **kwargs: Its keyword arguments.
        """
        try:
            if not self._async:
                return await asyncio.to_thread(
                    self._sync_call, name, invalidate, *args, **kwargs
                )
            loop = asyncio.get_running_loop()
            if self._fs is None or self._loop is not loop:
                self._fs, self._loop = self._make(loop), loop
            if invalidate is not None:
                self._fs.invalidate_cache(invalidate or None)
            method: Callable[..., Awaitable[Any]] = getattr(self._fs, f"_{name}")
            return await method(*args, **kwargs)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ObjectNotFoundError(key) from exc
        except FileExistsError as exc:
            raise ObjectExistsError(key) from exc
        except Exception as exc:
            transient = isinstance(exc, (TimeoutError, ConnectionError))
            raise StorageError(
                f"{self.url}: {name} of {key!r} failed: {type(exc).__name__}: {exc}",
                transient=transient,
            ) from exc

    def _path(self, key: str) -> str:
        if not key or key.startswith("/") or key.endswith("/"):
            raise ValueError(f"invalid object key {key!r}")
        if any(part in ("", ".", "..") for part in key.split("/")):
            raise ValueError(f"invalid object key {key!r}")
        return f"{self.root}/{key}" if self.root else key

    def _dir(self, prefix: str) -> str:
        inner = prefix.strip("/")
        return "/".join(p for p in (self.root, inner) if p)

    def _relative(self, path: str) -> str:
        root = self.root
        return path[len(root) + 1 :] if root and path.startswith(root + "/") else path

    def _read_only(self, op: str, key: str) -> StorageError:
        return StorageError(
            f"{self.url} is read-only for the journal: {op} of {key!r} refused. "
            f"{self._fs_class.__name__} offers no real exclusive create (fsspec's "
            'default pipe_file(mode="create") checks and then writes, so racing '
            "writers could both succeed), so a journal here can only be read "
            "(audit, replay, verify). Write through a backend with conditional "
            "writes, such as s3://."
        )

    # --- the protocol -------------------------------------------------------------

    async def create(self, key: str, data: bytes) -> str:
        if not self.writable:
            raise self._read_only("create", key)
        await self._call(key, "pipe_file", self._path(key), data, mode="create")
        return _etag(data)

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        # No fsspec file system offers a generic compare-and-swap.
        raise self._read_only("replace", key)

    async def delete(self, key: str) -> bool:
        raise self._read_only("delete", key)

    async def read(self, key: str) -> tuple[bytes, str]:
        data = bytes(await self._call(key, "cat_file", self._path(key)))
        return data, _etag(data)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        base = self._dir(prefix)
        try:
            found = await self._call(
                prefix, "find", base, withdirs=False, invalidate=base
            )
        except ObjectNotFoundError:
            return []
        keys = sorted(self._relative(path) for path in found)
        if start_after is not None:
            keys = [k for k in keys if k > start_after]
        return keys

    async def children(self, prefix: str) -> _Names:
        base = self._dir(prefix)
        try:
            entries = await self._call(prefix, "ls", base, detail=True, invalidate=base)
        except ObjectNotFoundError:
            return []
        names = {
            entry["name"].rstrip("/").rsplit("/", 1)[-1]
            for entry in entries
            if entry.get("type") == "directory"
        }
        return sorted(n for n in names if n)

    async def aclose(self) -> None:
        """Drop the file system, closing an async one's HTTP client if it has one.

        fsspec has no common close; this awaits the ``close()`` coroutine of the
        client objects the common async implementations hold (best effort).
        """
        fs, loop = self._fs, self._loop
        self._fs = self._loop = None
        if fs is None or not self._async or loop is not asyncio.get_running_loop():
            return
        for name in ("_s3", "_session", "session"):
            client = getattr(fs, name, None)
            close = getattr(client, "close", None)
            if close is not None and inspect.iscoroutinefunction(close):
                with contextlib.suppress(Exception):
                    await close()
