"""S3 object store (``s3://bucket/prefix``, ``s3a://``) on s3fs's async API.

Every primitive is one S3 request on its normal path, sent through s3fs's
``_call_s3`` (so ``s3_additional_kwargs`` and ``requester_pays`` apply):

* ``create``: ``PutObject`` with ``If-None-Match: *``. S3 applies it only if the key
  is absent, atomically, so exactly one racing creator wins.
* ``replace``: ``PutObject`` with ``If-Match: <etag>`` (a plain ``PutObject`` when
  ``if_match`` is None). The etag goes unquoted, the one form every server matches
  (Ceph RGW rejects the quoted one S3 returns). On a 412 one ``HeadObject`` tells a
  stale etag from a missing key, which RGW also answers with 412 (S3 and moto: 404).
* ``read``: one ``GetObject``. ``list``: ``ListObjectsV2`` with ``StartAfter``, one
  request per 1,000 keys (s3fs's ``ls``/``find`` never pass ``StartAfter``).
  ``children``: ``ListObjectsV2`` with ``Delimiter="/"``.
* ``delete``: ``HeadObject`` then ``DeleteObject``: S3's delete does not say whether
  the key existed, so the answer can be stale only if another client creates or
  deletes the key between the two requests.

Errors are translated once, here, from the botocore error code (found on the
exception or its ``__cause__``), never from the Python type s3fs picked: s3fs turns a
412 into ``FileExistsError`` only when it names a condition, a bare 412 into
``OSError(EINVAL)``, a 409 into ``OSError(EIO)`` and a 503 into ``OSError(EBUSY)``.

Retries happen in two layers, and in no third. Below the store, aiohttp resends a
request once when the server drops the connection, and botocore retries connection
errors and 5xx replies (tune it with ``config_kwargs={"retries": {...}}``); s3fs's
own retry loop is switched off. On top, this store retries what S3 asks
callers to retry: ``409 ConditionalRequestConflict`` and throttling (503
``SlowDown``, 429, ``Throttling``) on every operation, and any transient failure on
reads and listings, with jittered exponential backoff; then it raises
``StorageError(transient=True)``. Because a request may have been applied even when
its reply was lost, a retried ``create`` can meet its own object: that is reported as
``ObjectExistsError``, and the journal reads the slot to recognise its own batch. A
retried ``replace`` can likewise report ``PreconditionFailedError`` for a write of
its own that landed; callers whose objects name their writer (``LEASE``) re-read to
tell which.

The s3fs file system and its HTTP session are made lazily inside the running event
loop, and remade if the store is later used from another loop. Listings and
instances are never cached (``use_listings_cache=False``,
``skip_instance_cache=True``): the journal needs read-after-write consistency.
A single PUT is atomic, so interrupted writes leave no temporary objects and
``leftovers`` is always empty. Bodies go in one PUT, so each object is limited to
S3's 5 GiB single-request size.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import s3fs
from botocore.exceptions import HTTPClientError, IncompleteReadError

from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from journal.store import ObjectStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["S3Store"]

T = TypeVar("T")

_SCHEMES = ("s3://", "s3a://")
_PAGE_SIZE = 1000
_Names = list[str]  # ``list`` is a method name inside the class body

# Error codes that mean "the request was not applied, try again shortly".
_RETRY_CODES = frozenset(
    {
        "ConditionalRequestConflict",
        "OperationAborted",
        "SlowDown",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "Busy",
    }
)
# Any 429 or 503 is throttling; a 409 only with one of the codes above (a 409
# such as BucketNotEmpty will not clear by itself).
_RETRY_STATUS = frozenset({429, 503})
# Transient, but the request may have been applied: retried for reads only.
_TRANSIENT_CODES = frozenset(
    {"InternalError", "RequestTimeout", "RequestTimeoutException"}
)
_TRANSIENT_STATUS = frozenset({500, 502, 504})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# No reply came back: the request may or may not have been applied.
_NETWORK_ERRORS = (
    HTTPClientError,
    IncompleteReadError,
    aiohttp.ClientError,
    ConnectionError,
    TimeoutError,
)


@dataclass(frozen=True)
class _Failure:
    """What went wrong, as far as the store's decisions need to know."""

    code: str | None
    status: int | None
    message: str
    network: bool

    @property
    def retry_always(self) -> bool:
        """S3 asked us to retry; the request was not applied."""
        return self.code in _RETRY_CODES or self.status in _RETRY_STATUS

    @property
    def transient(self) -> bool:
        """Retrying later may succeed."""
        return (
            self.retry_always
            or self.network
            or self.code in _TRANSIENT_CODES
            or self.status in _TRANSIENT_STATUS
        )


def _botocore_error(exc: BaseException) -> Any:
    """The botocore ``ClientError`` behind ``exc`` (itself or a cause), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            return current
        current = current.__cause__ or current.__context__
    return None


def _is_network_error(exc: BaseException) -> bool:
    """A failure with no reply from S3 (connection, timeout, truncated body)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _NETWORK_ERRORS):
            return True
        current = current.__cause__ or current.__context__
    return False


def _classify(exc: BaseException) -> _Failure:
    error = _botocore_error(exc)
    if error is None:
        return _Failure(
            None, None, f"{type(exc).__name__}: {exc}", _is_network_error(exc)
        )
    response: dict[str, Any] = error.response
    code = response["Error"].get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    message = response["Error"].get("Message") or str(error)
    return _Failure(
        str(code) if code is not None else None,
        int(status) if status is not None else None,
        str(message),
        False,
    )


_CONDITIONS = ("IfNoneMatch", "IfMatch")
"""``PutObject`` parameters every exclusive create and compare-and-swap sends."""


def _check_conditional_puts(fs: Any) -> None:
    """Refuse a botocore whose ``PutObject`` model lacks S3's conditional writes.

    s3fs drops the arguments the installed model does not name (older releases
    silently), so with a botocore from before late 2024 an exclusive create and a
    compare-and-swap would go out as plain overwrites: a fenced writer could
    overwrite the records of the writer that fenced it.

    Raises:
        StorageError: Not transient; it names the versions installed.
    """
    operation = fs._s3.meta.service_model.operation_model("PutObject")
    missing = [n for n in _CONDITIONS if n not in operation.input_shape.members]
    if missing:
        import botocore

        raise StorageError(
            f"the installed botocore {botocore.__version__} does not know "
            f"PutObject's {' and '.join(missing)}: exclusive creates and "
            "compare-and-swap replaces would be sent as plain overwrites. Upgrade "
            "s3fs, aiobotocore and botocore (a botocore release from December 2024 "
            "or later)",
            transient=False,
        )


def _unquoted(etag: str) -> str:
    """``etag`` without the double quotes S3 puts around it.

    S3 and moto match ``If-Match`` against either form; Ceph RGW only against the
    bare one, so the store always sends that.
    """
    if len(etag) >= 2 and etag[0] == etag[-1] == '"':
        return etag[1:-1]
    return etag


def _split_url(url: str) -> tuple[str, str]:
    for scheme in _SCHEMES:
        if url.lower().startswith(scheme):
            rest = url[len(scheme) :]
            break
    else:
        raise ValueError(f"not an S3 URL: {url!r} (expected s3://bucket/prefix)")
    bucket, _, prefix = rest.rstrip("/").partition("/")
    if not bucket:
        raise ValueError(f"S3 URL without a bucket: {url!r}")
    return bucket, prefix.strip("/")


@functools.cache
def _known_options() -> frozenset[str]:
    """The storage options s3fs accepts.

    Its own parameters, fsspec's listing-cache ones, and the aiobotocore session's:
    s3fs hands leftovers to ``AioSession``, so a misspelled option would otherwise
    only fail at the first request, looking like a network error.
    """
    import aiobotocore.session
    import fsspec.dircache

    names: set[str] = set()
    for fn in (
        s3fs.S3FileSystem.__init__,
        fsspec.dircache.DirCache.__init__,
        aiobotocore.session.AioSession.__init__,
    ):
        names.update(
            name
            for name, param in inspect.signature(fn).parameters.items()
            if name != "self" and param.kind is not param.VAR_KEYWORD
        )
    return frozenset(names)


class S3Store(ObjectStore):
    """Objects under ``s3://bucket/prefix``.

    Args:
        bucket: The bucket.
        prefix: The key prefix all the store's keys live under ("" for the bucket
            root).
        retry_attempts: Attempts per operation at the store level (on top of
            botocore's own per-request retries) for conflicts and throttling.
        retry_base_delay: The first backoff delay in seconds; it doubles per
            attempt, with jitter, up to ``retry_max_delay``.
        retry_max_delay: The longest backoff delay in seconds.
        **storage_options: Passed to ``s3fs.S3FileSystem`` (``endpoint_url``,
            ``key``, ``secret``, ``token``, ``profile``, ``client_kwargs``,
            ``config_kwargs``, ``s3_additional_kwargs``, ``requester_pays``, ...).
            The store fixes ``asynchronous``, ``loop``, ``skip_instance_cache``
            and ``use_listings_cache`` itself and ignores them here.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        retry_attempts: int = 5,
        retry_base_delay: float = 0.05,
        retry_max_delay: float = 2.0,
        **storage_options: Any,
    ) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"invalid S3 bucket name {bucket!r}")
        if retry_attempts < 1:
            raise ValueError("retry_attempts must be at least 1")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.retry_attempts = retry_attempts
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        unknown = sorted(set(storage_options) - _known_options())
        if unknown:
            raise ValueError(
                f"unknown S3 storage option(s) {', '.join(unknown)} for {self.url}; "
                f"known: {', '.join(sorted(_known_options()))}"
            )
        options = dict(storage_options)
        for fixed in (
            "asynchronous",
            "loop",
            "skip_instance_cache",
            "use_listings_cache",
        ):
            options.pop(fixed, None)
        self._options = options
        self._fs: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3Store:
        """Open ``s3://bucket/prefix`` (or ``s3a://``).

        Args:
            url: The bucket and optional key prefix.
            **options: Store options (``retry_attempts``, ``retry_base_delay``,
                ``retry_max_delay``) and s3fs storage options.

        Raises:
            ValueError: The URL names no bucket.
        """
        bucket, prefix = _split_url(url)
        return cls(bucket, prefix, **options)

    # --- session ------------------------------------------------------------------

    async def _session(self) -> Any:
        """The s3fs file system bound to the running loop, with its session open."""
        loop = asyncio.get_running_loop()
        if self._fs is None or self._loop is not loop:
            self._abandon()
            fs = s3fs.S3FileSystem(
                asynchronous=True,
                loop=loop,
                skip_instance_cache=True,
                use_listings_cache=False,
                **self._options,
            )
            # The store owns the retry policy; s3fs's loop would multiply
            # botocore's retries and hide 409s behind OSError(EIO).
            fs.retries = 1
            await fs.set_session()
            try:
                _check_conditional_puts(fs)
            except StorageError:
                with contextlib.suppress(Exception):
                    await fs._s3.close()
                raise
            self._fs, self._loop = fs, loop
        fs = self._fs
        await fs.set_session()
        return fs

    def _abandon(self) -> None:
        """Release a session opened in another event loop (best effort)."""
        fs, loop = self._fs, self._loop
        self._fs = self._loop = None
        client = getattr(fs, "_s3", None)
        if client is None or loop is None:
            return
        with contextlib.suppress(Exception):
            if loop.is_running():
                # That loop lives in another thread: close the session there.
                asyncio.run_coroutine_threadsafe(client.close(), loop)
            else:
                # The loop is gone, so nothing can be awaited: close the sockets.
                sessions = client._endpoint.http_session._sessions or {}
                for session in sessions.values():
                    session.connector._close()

    async def aclose(self) -> None:
        if self._loop is not asyncio.get_running_loop():
            self._abandon()
            return
        fs = self._fs
        self._fs = self._loop = None
        client = getattr(fs, "_s3", None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    # --- keys ---------------------------------------------------------------------

    def _key(self, key: str) -> str:
        if not key or key.startswith("/") or key.endswith("/"):
            raise ValueError(f"invalid object key {key!r}")
        if any(part in ("", ".", "..") for part in key.split("/")) or "\x00" in key:
            raise ValueError(f"invalid object key {key!r}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _dir(self, prefix: str) -> str:
        """The full S3 prefix of a store "directory" (ending in ``/`` or empty)."""
        inner = prefix.strip("/")
        parts = [p for p in (self.prefix, inner) if p]
        return "/".join(parts) + "/" if parts else ""

    def _relative(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    # --- the one place errors are translated and retried -------------------------

    async def _run(
        self,
        op: str,
        key: str,
        call: Callable[[Any], Awaitable[T]],
        *,
        idempotent: bool,
    ) -> T:
        delay = self.retry_base_delay
        attempt = 1
        while True:
            try:
                fs = await self._session()
                return await call(fs)
            except StorageError:
                raise  # the session refused (see _check_conditional_puts)
            except Exception as exc:
                failure = _classify(exc)
                retry = failure.retry_always or (idempotent and failure.transient)
                if retry and attempt < self.retry_attempts:
                    # Jitter spreads racing writers apart (not a security use).
                    await asyncio.sleep(delay * (0.5 + random.random() / 2))  # noqa: S311
                    delay = min(delay * 2, self.retry_max_delay)
                    attempt += 1
                    continue
                raise self._translate(op, key, failure, attempt) from exc

    def _translate(
        self, op: str, key: str, failure: _Failure, attempts: int
    ) -> StorageError:
        code, status = failure.code, failure.status
        if code == "PreconditionFailed" or status == 412:
            if op == "create":
                return ObjectExistsError(key)
            if op == "replace":
                return PreconditionFailedError(key, f"S3 412 {failure.message}")
        if code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket"):
            return ObjectNotFoundError(key)
        where = f"s3://{self.bucket}/{self._dir('')}{key}".rstrip("/")
        label = code or ("network error" if failure.transient else "error")
        if status is not None:
            label = f"HTTP {status} {label}"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return StorageError(
            f"S3 {op} of {where} failed{tries}: {label}: {failure.message}",
            transient=failure.transient,
        )

    # --- the protocol -------------------------------------------------------------

    async def create(self, key: str, data: bytes) -> str:
        full = self._key(key)

        async def put(fs: Any) -> str:
            out = await fs._call_s3(
                "put_object", Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*"
            )
            return str(out["ETag"])

        return await self._run("create", key, put, idempotent=False)

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        full = self._key(key)
        match = {} if if_match is None else {"IfMatch": _unquoted(if_match)}

        async def put(fs: Any) -> str:
            out = await fs._call_s3(
                "put_object", Bucket=self.bucket, Key=full, Body=data, **match
            )
            return str(out["ETag"])

        try:
            return await self._run("replace", key, put, idempotent=if_match is None)
        except PreconditionFailedError:
            # Ceph RGW answers 412, not 404, for If-Match on a missing key; one
            # HEAD, on the failure path only, tells the two apart.
            if not await self._exists("replace", key, full):
                raise ObjectNotFoundError(key) from None
            raise

    async def read(self, key: str) -> tuple[bytes, str]:
        full = self._key(key)

        async def get(fs: Any) -> tuple[bytes, str]:
            out = await fs._call_s3("get_object", Bucket=self.bucket, Key=full)
            body = out["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
            return bytes(data), str(out["ETag"])

        return await self._run("read", key, get, idempotent=True)

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        base = self._dir(prefix)
        keys: list[str] = []
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": base,
            "MaxKeys": _PAGE_SIZE,
        }
        if start_after:
            params["StartAfter"] = self._dir("") + start_after
        token: str | None = None
        while True:
            page_params = dict(params)
            if token is not None:
                # The continuation token carries the position; StartAfter only
                # positions the first page.
                page_params.pop("StartAfter", None)
                page_params["ContinuationToken"] = token

            async def page(fs: Any, kw: dict[str, Any] = page_params) -> Any:
                return await fs._call_s3("list_objects_v2", **kw)

            out = await self._run("list", prefix, page, idempotent=True)
            keys.extend(
                self._relative(item["Key"])
                for item in out.get("Contents", ())
                if not item["Key"].endswith("/")  # folder markers are not objects
            )
            token = out.get("NextContinuationToken") if out.get("IsTruncated") else None
            if token is None:
                return keys

    async def children(self, prefix: str) -> _Names:
        base = self._dir(prefix)
        names: set[str] = set()
        token: str | None = None
        while True:
            params: dict[str, Any] = {
                "Bucket": self.bucket,
                "Prefix": base,
                "Delimiter": "/",
                "MaxKeys": _PAGE_SIZE,
            }
            if token is not None:
                params["ContinuationToken"] = token

            async def page(fs: Any, kw: dict[str, Any] = params) -> Any:
                return await fs._call_s3("list_objects_v2", **kw)

            out = await self._run("children", prefix, page, idempotent=True)
            for common in out.get("CommonPrefixes", ()):
                name = common["Prefix"][len(base) :].rstrip("/")
                if name:
                    names.add(name)
            token = out.get("NextContinuationToken") if out.get("IsTruncated") else None
            if token is None:
                return sorted(names)

    async def _exists(self, op: str, key: str, full: str) -> bool:
        """Whether ``full`` exists now (one ``HeadObject`` on behalf of ``op``)."""

        async def head(fs: Any) -> None:
            await fs._call_s3("head_object", Bucket=self.bucket, Key=full)

        try:
            await self._run(op, key, head, idempotent=True)
        except ObjectNotFoundError:
            return False
        return True

    async def delete(self, key: str) -> bool:
        full = self._key(key)

        async def remove(fs: Any) -> None:
            await fs._call_s3("delete_object", Bucket=self.bucket, Key=full)

        if not await self._exists("delete", key, full):
            return False
        await self._run("delete", key, remove, idempotent=True)
        return True
