"""A real S3 endpoint for tests: moto's threaded server on loopback.

``s3_server`` (session scope) starts ``ThreadedMotoServer`` on 127.0.0.1 at a port
the kernel picks and yields its endpoint URL; it fails the run if the server does
not answer. ``s3_store`` (function scope) is an ``S3Store`` on a fresh bucket.

``S3Proxy`` is a loopback HTTP/1.1 proxy to put in front of moto: it records every
request that reaches the wire and can inject faults (answer with an error instead
of forwarding, or forward and then drop the reply), which is how the tests count
requests and exercise the lost-acknowledgement and 409/503 paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import threading
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from moto.server import ThreadedMotoServer

from stores.s3 import S3Store

if TYPE_CHECKING:
    import socket

__all__ = [
    "BIG_DIRS",
    "BIG_PREFIX",
    "CREDENTIALS",
    "Fault",
    "S3Proxy",
    "Seen",
    "big_key",
    "journal_options",
    "make_bucket",
    "make_s3_store",
    "open_s3_store",
    "s3_big_bucket",
    "s3_server",
    "s3_store",
]

CREDENTIALS: dict[str, Any] = {
    "key": "testing",
    "secret": "testing",
    "client_kwargs": {"region_name": "us-east-1"},
}
_START_TIMEOUT = 30.0


@functools.cache
def _botocore_session() -> Any:
    """One botocore session for every test store: it caches the parsed service
    model, which each new session would load again (about 0.1 s per client)."""
    import aiobotocore.session

    return aiobotocore.session.AioSession()


def _wait_until_answering(url: str, deadline: float) -> None:
    import time

    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=2) as reply:  # noqa: S310
                reply.read()
            return
        except Exception as exc:  # the server may still be binding
            last = exc
            time.sleep(0.05)
    pytest.fail(f"moto S3 server at {url} does not answer: {last!r}")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Moto's S3 server on a free loopback port; yields its endpoint URL."""
    import logging
    import time

    # One log line per request would drown the test output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # Port 0: the kernel picks a free port at bind time, so there is no window in
    # which another process could take a port we probed.
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    starter = threading.Thread(target=server.start, daemon=True)
    starter.start()
    # ThreadedMotoServer.start() blocks forever if binding fails: bound the wait.
    starter.join(_START_TIMEOUT)
    if starter.is_alive():
        pytest.fail(f"moto S3 server did not start within {_START_TIMEOUT} s")
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    _wait_until_answering(url, time.monotonic() + _START_TIMEOUT)
    try:
        yield url
    finally:
        server.stop()


def journal_options(endpoint: str, **options: Any) -> dict[str, Any]:
    """Storage options for ``Journal.open("s3://<bucket>/<prefix>", **options)``.

    The endpoint and the test credentials, plus the shared botocore session (which
    only saves parsing the service model again for every store a test opens).
    """
    return {
        "endpoint_url": endpoint,
        "session": _botocore_session(),
        **CREDENTIALS,
        **options,
    }


async def make_bucket(endpoint: str, bucket: str | None = None) -> str:
    """Create a bucket on ``endpoint`` and return its name."""
    import s3fs

    name = bucket or f"test-{uuid.uuid4().hex[:20]}"
    fs = s3fs.S3FileSystem(
        asynchronous=True,
        skip_instance_cache=True,
        endpoint_url=endpoint,
        session=_botocore_session(),
        **CREDENTIALS,
    )
    client = await fs.set_session()
    try:
        await client.create_bucket(Bucket=name)
    finally:
        await client.close()
    return name


def open_s3_store(
    endpoint: str, bucket: str, *, prefix: str = "journal", **options: Any
) -> S3Store:
    """An ``S3Store`` on an existing ``bucket`` at ``endpoint``."""
    url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    options = {"session": _botocore_session(), **CREDENTIALS, **options}
    return S3Store.from_url(url, endpoint_url=endpoint, **options)


async def make_s3_store(
    endpoint: str,
    *,
    bucket: str | None = None,
    prefix: str = "journal",
    **options: Any,
) -> S3Store:
    """An ``S3Store`` at ``endpoint`` on a new bucket (``bucket`` or a random name)."""
    name = await make_bucket(endpoint, bucket)
    return open_s3_store(endpoint, name, prefix=prefix, **options)


@pytest.fixture
async def s3_store(s3_server: str) -> AsyncIterator[S3Store]:
    """An ``S3Store`` on a fresh bucket, closed after the test."""
    store = await make_s3_store(s3_server)
    try:
        yield store
    finally:
        await store.aclose()


# --- a counting, fault-injecting loopback proxy ---------------------------------


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request that reached the proxy."""

    method: str
    path: str
    query: str
    headers: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Fault:
    """What the proxy does with one request instead of relaying it faithfully.

    Attributes:
        status: Answer with this HTTP status and an S3 error body, without
            forwarding the request (the request was not applied).
        code: The S3 error code in that body.
        drop_reply: Forward the request to moto (so it is applied), then close the
            client connection without sending the reply: a lost acknowledgement.
    """

    status: int = 0
    code: str = ""
    drop_reply: bool = False


Rule = Callable[[Seen], Fault | None]


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        raw = bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            raw += line
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                # Trailers, if any, end with an empty line.
                while True:
                    trailer = await reader.readuntil(b"\r\n")
                    raw += trailer
                    if trailer == b"\r\n":
                        return bytes(raw)
            raw += await reader.readexactly(size + 2)
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    path, _, query = target.partition("?")
    pairs = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            pairs.append((name.strip(), value.strip()))
    return method, path, query, pairs


def _error_reply(status: int, code: str) -> bytes:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>injected by the test proxy</Message>"
        f"<RequestId>{uuid.uuid4().hex}</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} Injected\r\n"
        "Content-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    ).encode()
    return head + body


class S3Proxy:
    """A loopback HTTP proxy in front of an S3 endpoint, run in the test's loop.

    Every request is recorded in :attr:`seen`. A rule (see :meth:`inject`) may turn a
    request into a :class:`Fault`. Upstream connections are one per request.

    Args:
        upstream: The real endpoint, ``http://host:port``.
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(port))
        self._server: asyncio.Server | None = None
        self._rules: list[Rule] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.seen: list[Seen] = []
        self.url = ""

    async def __aenter__(self) -> S3Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        sock: socket.socket = self._server.sockets[0]
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            # Closing the client connections ends each handler at its next read.
            for writer in list(self._writers):
                writer.transport.abort()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def inject(self, rule: Rule) -> None:
        """Add a rule; the first rule returning a Fault for a request wins."""
        self._rules.append(rule)

    def clear(self) -> None:
        """Forget the recorded requests and the rules."""
        self.seen.clear()
        self._rules.clear()

    def count(self, method: str | None = None) -> int:
        """How many requests (of ``method``) reached the proxy."""
        return sum(1 for s in self.seen if method is None or s.method == method)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        try:
            while True:
                head = await _read_head(reader)
                if head is None:
                    return
                method, path, query, pairs = _parse_head(head)
                headers = {name.lower(): value for name, value in pairs}
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                    pairs = [(n, v) for n, v in pairs if n.lower() != "expect"]
                body = await _read_body(reader, headers)
                seen = Seen(method, path, query, headers)
                self.seen.append(seen)
                fault = next((f for rule in self._rules if (f := rule(seen))), None)
                if fault is not None and fault.status:
                    writer.write(_error_reply(fault.status, fault.code))
                    await writer.drain()
                    continue
                reply = await self._forward(method, path, query, pairs, body)
                if fault is not None and fault.drop_reply:
                    writer.transport.abort()
                    return
                writer.write(reply)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            if task is not None:
                self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _forward(
        self,
        method: str,
        path: str,
        query: str,
        pairs: list[tuple[str, str]],
        body: bytes,
    ) -> bytes:
        reader, writer = await asyncio.open_connection(*self._upstream)
        try:
            target = f"{path}?{query}" if query else path
            lines = [f"{method} {target} HTTP/1.1"]
            lines += [f"{n}: {v}" for n, v in pairs if n.lower() != "connection"]
            lines.append("Connection: close")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            _, _, _, reply_pairs = _parse_head(head)
            reply_headers = {n.lower(): v for n, v in reply_pairs}
            if method == "HEAD" or head.split(b" ", 2)[1] in (b"204", b"304"):
                reply_body = b""
            elif (
                "content-length" in reply_headers
                or "transfer-encoding" in reply_headers
            ):
                reply_body = await _read_body(reader, reply_headers)
            else:
                reply_body = await reader.read()
            if "content-length" not in reply_headers and (
                "transfer-encoding" not in reply_headers
            ):
                # The reply was delimited by the connection close; re-frame it.
                head = head[:-2] + f"Content-Length: {len(reply_body)}\r\n\r\n".encode()
            return head + reply_body
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


# --- a shared bucket holding more keys than one listing page --------------------

BIG_PREFIX = "journal"
BIG_DIRS = 1050
"""``s3_big_bucket`` holds ``journal/p/t0000/x`` ... ``journal/p/t1049/x``: more keys,
and more immediate sub-directories of ``p/``, than one 1,000-key listing page."""


def big_key(i: int) -> str:
    """The ``i``-th key of ``s3_big_bucket``, relative to ``BIG_PREFIX``."""
    return f"p/t{i:04d}/x"


@pytest.fixture(scope="session")
def s3_big_bucket(s3_server: str) -> str:
    """A bucket with ``BIG_DIRS`` keys (see ``big_key``); tests must not write to it."""

    async def fill() -> str:
        store = await make_s3_store(s3_server, prefix=BIG_PREFIX)
        gate = asyncio.Semaphore(10)

        async def one(i: int) -> None:
            async with gate:
                await store.create(big_key(i), big_key(i).encode())

        try:
            await asyncio.gather(*(one(i) for i in range(BIG_DIRS)))
        finally:
            await store.aclose()
        return store.bucket

    # A session fixture outlives the per-test event loops: fill in a loop of its own.
    return asyncio.run(fill())
