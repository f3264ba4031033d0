"""A real Redis server for tests: ``redis-server`` on a free loopback port.

``redis_service`` (session scope) starts ``redis-server`` with persistence off in a
temporary directory, listening on 127.0.0.1 and on a unix socket there, waits until it
answers ``PING`` and yields a :class:`RedisService` with both URLs; it stops the
server at the end of the session. ``redis_server`` (session scope) is its TCP URL,
``redis://127.0.0.1:<port>/0``. A
missing binary fails the run (it never skips): install it with
``apt-get install redis-server``.

Tests import the fixture explicitly::

    from tests.services.redis import redis_server  # noqa: F401
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import socket
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = [
    "INSTALL_HINT",
    "RedisService",
    "free_port",
    "redis_server",
    "redis_service",
    "start_redis",
]

INSTALL_HINT = (
    "redis-server is not installed; the Redis tests need a real server. "
    "Install it with: apt-get install redis-server  (Debian/Ubuntu, as root)"
)
_START_TIMEOUT = 20.0


@dataclasses.dataclass(frozen=True)
class RedisService:
    """A running server's addresses.

    Attributes:
        url: ``redis://127.0.0.1:<port>/0``.
        unix_url: ``unix://<dir>/redis.sock?db=0``.
    """

    url: str
    unix_url: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def start_redis(workdir: Path) -> Iterator[RedisService]:
    """Run a private ``redis-server`` while the context is open; yield its addresses.

    ``workdir`` should have a short path: it holds the unix socket (about 100 bytes
    at most).

    Raises:
        pytest.fail.Exception: The binary is missing or the server did not start.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    last_log = ""
    for attempt in range(3):  # the free port may be taken by the time we bind
        port = free_port()
        log_path = workdir / f"redis-{attempt}.log"
        socket_path = workdir / "redis.sock"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    binary,
                    "--port", str(port),
                    "--bind", "127.0.0.1",
                    "--save", "",
                    "--appendonly", "no",
                    "--dir", str(workdir),
                    "--unixsocket", str(socket_path),
                    "--unixsocketperm", "700",
                    "--daemonize", "no",
                ],
                cwd=workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + _START_TIMEOUT
            while proc.poll() is None and time.monotonic() < deadline:
                if _answers_ping(port):
                    break
                time.sleep(0.02)
            else:
                last_log = log_path.read_text(errors="replace")
                _stop(proc)
                continue
            yield RedisService(
                f"redis://127.0.0.1:{port}/0", f"unix://{socket_path}?db=0"
            )
            return
        finally:
            _stop(proc)
    pytest.fail(f"redis-server did not start; its log:\n{last_log}", pytrace=False)


@pytest.fixture(scope="session")
def redis_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisService]:
    """A real Redis server private to this test session."""
    with start_redis(tmp_path_factory.mktemp("redis")) as service:
        yield service


@pytest.fixture(scope="session")
def redis_server(redis_service: RedisService) -> str:
    """The TCP URL of the session's Redis server."""
    return redis_service.url
