"""A real Redis Cluster and a real Redis Sentinel for tests, on loopback.

``redis_cluster`` (session scope) starts three ``redis-server`` processes with
``--cluster-enabled yes`` on free 127.0.0.1 ports (each port ``P`` chosen so that its
cluster bus port ``P + 10000`` is free too), joins them into a cluster of three
masters with ``redis-cli --cluster create ... --cluster-replicas 0``, waits until
every node reports ``cluster_state:ok`` and yields a :class:`RedisClusterService`.

``redis_sentinel`` (session scope) starts one master ``redis-server`` and one sentinel
(``redis-server <conf> --sentinel``) that monitors it as ``mymaster`` with quorum 1,
waits until the sentinel is connected to the master and yields a
:class:`RedisSentinelService`. ``redis_sentinel_with_replica`` (function scope, for a
test that fails over) adds a replica of the master, which the sentinel must know
before it is yielded.

All run with persistence off in temporary directories and are stopped at the end of
the session (or test). A missing binary fails the run (it never skips): install the
binaries with ``apt-get install redis-server`` (it brings ``redis-cli``; the sentinel
is ``redis-server --sentinel``).

Tests import the fixtures explicitly::

    from tests.services.redis_cluster import redis_cluster  # noqa: F401
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
import socket
import subprocess
import time
from typing import TYPE_CHECKING

import pytest
import redis

from tests.services.redis import free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = [
    "CLUSTER_INSTALL_HINT",
    "MASTER_NAME",
    "RedisClusterService",
    "RedisSentinelService",
    "redis_cluster",
    "redis_sentinel",
    "redis_sentinel_with_replica",
    "start_redis_cluster",
    "start_redis_sentinel",
]

CLUSTER_INSTALL_HINT = (
    "{binary} is not installed; the Redis Cluster and Sentinel tests need real "
    "servers. Install them with: apt-get install redis-server  (Debian/Ubuntu, as "
    "root; it brings redis-cli, and the sentinel runs as redis-server --sentinel)"
)
MASTER_NAME = "mymaster"
"""The name under which the sentinel monitors its master."""

_NODES = 3
_BUS_OFFSET = 10000
_START_TIMEOUT = 20.0
_CLUSTER_TIMEOUT = 30.0
_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True)
class RedisClusterService:
    """A running cluster of three masters on 127.0.0.1.

    Attributes:
        ports: The nodes' client ports.
    """

    ports: tuple[int, ...]
    host: str = "127.0.0.1"

    @property
    def port(self) -> int:
        """The first node's port (any node will do as a startup node)."""
        return self.ports[0]

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<first port>/0``, for ``RedisCluster.from_url``."""
        return f"redis://{self.host}:{self.port}/0"


@dataclasses.dataclass(frozen=True)
class RedisSentinelService:
    """A master and the sentinel that monitors it, on 127.0.0.1.

    Attributes:
        master_port: The (first) master's client port.
        sentinel_port: The sentinel's port.
        replica_port: The port of the master's replica, if one was asked for.
        master_name: The service name the sentinel knows the master by.
    """

    master_port: int
    sentinel_port: int
    replica_port: int | None = None
    master_name: str = MASTER_NAME
    host: str = "127.0.0.1"

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """The argument of ``redis.asyncio.sentinel.Sentinel``."""
        return [(self.host, self.sentinel_port)]


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(CLUSTER_INSTALL_HINT.format(binary=name), pytrace=False)
    return found


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_port(taken: set[int]) -> int:
    """A free port whose cluster bus port (port + 10000) is free as well."""
    for _ in range(500):
        port = free_port()
        bus = port + _BUS_OFFSET
        if bus > 65535 or {port, bus} & taken:
            continue
        if _port_is_free(bus):
            return port
    pytest.fail("found no free port P with P + 10000 free on 127.0.0.1")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _client(port: int) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2
    )


def _wait(
    check: Callable[[], bool],
    procs: list[subprocess.Popen[bytes]],
    timeout: float,
) -> bool:
    """Poll ``check`` until true; False if a process died or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            return False
        with contextlib.suppress(redis.RedisError, OSError):
            if check():
                return True
        time.sleep(0.05)
    return False


def _answers(port: int) -> bool:
    with _client(port) as client:
        return bool(client.ping())


def _logs(paths: list[Path]) -> str:
    return "\n".join(
        f"--- {path.name}\n{path.read_text(errors='replace')}"
        for path in paths
        if path.exists()
    )


def _spawn(argv: list[str], workdir: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv,
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _server_argv(binary: str, port: int, workdir: Path) -> list[str]:
    return [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(workdir),
        "--daemonize", "no",
    ]  # fmt: skip


def _cluster_ok(port: int) -> bool:
    with _client(port) as client:
        info = client.cluster("INFO")  # parsed into a dict of str
    return bool(info.get("cluster_state") == "ok")


@contextlib.contextmanager
def start_redis_cluster(workdir: Path) -> Iterator[RedisClusterService]:
    """Run a three-master Redis Cluster while the context is open.

    Raises:
        pytest.fail.Exception: A binary is missing or the cluster did not form.
    """
    server = _binary("redis-server")
    cli = _binary("redis-cli")
    failure = ""
    for attempt in range(_ATTEMPTS):  # a free port may be taken by the time we bind
        taken: set[int] = set()
        ports: list[int] = []
        for _ in range(_NODES):
            port = _cluster_port(taken)
            taken |= {port, port + _BUS_OFFSET}
            ports.append(port)
        procs: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []
        try:
            for port in ports:
                node_dir = workdir / f"try{attempt}-{port}"
                node_dir.mkdir()
                log_path = node_dir / "redis.log"
                logs.append(log_path)
                argv = [
                    *_server_argv(server, port, node_dir),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(node_dir / f"nodes-{port}.conf"),
                    "--cluster-node-timeout", "5000",
                ]  # fmt: skip
                procs.append(_spawn(argv, node_dir, log_path))
            if not all(
                _wait(functools.partial(_answers, p), procs, _START_TIMEOUT)
                for p in ports
            ):
                failure = f"a cluster node did not start; logs:\n{_logs(logs)}"
                continue
            create_argv = [
                cli, "--cluster", "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas", "0",
                "--cluster-yes",
            ]  # fmt: skip
            create = subprocess.run(
                create_argv,
                capture_output=True,
                timeout=_CLUSTER_TIMEOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            if create.returncode != 0:
                failure = (
                    f"redis-cli --cluster create failed ({create.returncode}):\n"
                    f"{create.stdout.decode(errors='replace')}"
                    f"{create.stderr.decode(errors='replace')}\nlogs:\n{_logs(logs)}"
                )
                continue
            if not all(
                _wait(functools.partial(_cluster_ok, p), procs, _CLUSTER_TIMEOUT)
                for p in ports
            ):
                pytest.fail(
                    f"the cluster never reported cluster_state:ok; logs:\n"
                    f"{_logs(logs)}",
                    pytrace=False,
                )
            yield RedisClusterService(tuple(ports))
            return
        finally:
            _stop(procs)
    pytest.fail(f"the Redis Cluster did not start: {failure}", pytrace=False)


def _sentinel_ready(
    sentinel_port: int, master_port: int, replica_port: int | None
) -> bool:
    """The sentinel is connected to the master (and knows its replica, if any)."""
    with _client(sentinel_port) as client:
        state = client.sentinel_master(MASTER_NAME)
        replicas = client.sentinel_slaves(MASTER_NAME) if replica_port else []
    master_ok = bool(
        state["is_master"]
        and not state["is_disconnected"]
        and not state["is_sdown"]
        and not state["is_odown"]
        and int(state["port"]) == master_port
        and state.get("runid")
    )
    return master_ok and (
        replica_port is None
        or any(
            int(r["port"]) == replica_port
            and r["is_slave"]
            and not r["is_disconnected"]
            and not r["is_sdown"]
            and r.get("master-link-status") == "ok"
            for r in replicas
        )
    )


def _replica_in_sync(port: int) -> bool:
    with _client(port) as client:
        info = client.info("replication")
    return bool(info.get("master_link_status") == "up")


@contextlib.contextmanager
def start_redis_sentinel(
    workdir: Path, *, replica: bool = False
) -> Iterator[RedisSentinelService]:
    """Run a master and a sentinel that monitors it while the context is open.

    Args:
        workdir: Holds the servers' directories, logs and the sentinel's config.
        replica: Also run a replica of the master (which a failover can promote).

    Raises:
        pytest.fail.Exception: A binary is missing or the servers did not start.
    """
    server = _binary("redis-server")
    failure = ""
    for attempt in range(_ATTEMPTS):  # a free port may be taken by the time we bind
        ports = {free_port() for _ in range(3)}
        if len(ports) < 3:
            continue
        master_port, sentinel_port, spare_port = sorted(ports)
        replica_port = spare_port if replica else None
        run_dir = workdir / f"try{attempt}"
        run_dir.mkdir()
        logs = [run_dir / "master.log"]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            # A replica's first sync would otherwise wait 5 s for more replicas.
            master_argv = [
                *_server_argv(server, master_port, run_dir),
                "--repl-diskless-sync-delay", "0",
            ]  # fmt: skip
            procs.append(_spawn(master_argv, run_dir, logs[0]))
            if not _wait(
                functools.partial(_answers, master_port), procs, _START_TIMEOUT
            ):
                failure = f"the master did not start:\n{_logs(logs)}"
                continue
            if replica_port is not None:
                replica_dir = run_dir / "replica"
                replica_dir.mkdir()
                logs.append(run_dir / "replica.log")
                argv = [
                    *_server_argv(server, replica_port, replica_dir),
                    "--replicaof", "127.0.0.1", str(master_port),
                ]  # fmt: skip
                procs.append(_spawn(argv, replica_dir, logs[-1]))
                if not _wait(
                    functools.partial(_replica_in_sync, replica_port),
                    procs,
                    _START_TIMEOUT,
                ):
                    failure = f"the replica did not sync:\n{_logs(logs)}"
                    continue
            # The sentinel rewrites its configuration file, so it lives in run_dir.
            conf = run_dir / "sentinel.conf"
            conf.write_text(
                f"port {sentinel_port}\n"
                "bind 127.0.0.1\n"
                f"dir {run_dir}\n"
                "sentinel resolve-hostnames no\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 5000\n"
            )
            logs.append(run_dir / "sentinel.log")
            procs.append(_spawn([server, str(conf), "--sentinel"], run_dir, logs[-1]))
            if not _wait(
                functools.partial(
                    _sentinel_ready, sentinel_port, master_port, replica_port
                ),
                procs,
                _START_TIMEOUT,
            ):
                failure = f"the sentinel never reported its master:\n{_logs(logs)}"
                continue
            yield RedisSentinelService(master_port, sentinel_port, replica_port)
            return
        finally:
            _stop(procs)
    pytest.fail(f"Redis Sentinel did not start: {failure}", pytrace=False)


@pytest.fixture(scope="session")
def redis_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RedisClusterService]:
    """A real three-master Redis Cluster private to this test session."""
    with start_redis_cluster(tmp_path_factory.mktemp("redis-cluster")) as service:
        yield service


@pytest.fixture(scope="session")
def redis_sentinel(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RedisSentinelService]:
    """A real master and a sentinel monitoring it, private to this test session."""
    with start_redis_sentinel(tmp_path_factory.mktemp("redis-sentinel")) as service:
        yield service


@pytest.fixture
def redis_sentinel_with_replica(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RedisSentinelService]:
    """A master, its replica and a sentinel, for one test (which may fail over)."""
    workdir = tmp_path_factory.mktemp("redis-sentinel-replica")
    with start_redis_sentinel(workdir, replica=True) as service:
        yield service
