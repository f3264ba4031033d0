"""A real PostgreSQL server for tests: a private cluster on a free loopback port.

``postgres_server`` (session scope) runs ``initdb`` into a temporary directory,
starts the cluster with ``pg_ctl`` on 127.0.0.1 (its unix socket in the same
directory), creates a database and yields an asyncpg SQLAlchemy URL
(``postgresql+asyncpg://postgres@127.0.0.1:<port>/agent_journal_test``); it stops the
cluster and removes the directory at the end of the session.

PostgreSQL refuses to run as root, so as root the cluster runs as the ``postgres``
system user (which Debian's ``postgresql`` package creates), else as ``nobody``. The
binaries are looked up in ``$AGENT_JOURNAL_PG_BINDIR``, on ``PATH`` and under
``/usr/lib/postgresql/<version>/bin`` (Debian's layout). Missing binaries fail the
run (it never skips): install them with ``apt-get install postgresql``.

Tests import the fixture explicitly::

    from tests.services.postgres import postgres_server  # noqa: F401
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.services.redis import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["BINDIR_ENV", "INSTALL_HINT", "postgres_server", "start_postgres"]

BINDIR_ENV = "AGENT_JOURNAL_PG_BINDIR"
"""Environment variable naming the directory of ``initdb`` and ``pg_ctl``."""

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found; the PostgreSQL "
    "tests need a real server. Install them with: apt-get install postgresql  "
    f"(Debian/Ubuntu, as root), or point {BINDIR_ENV} at their directory"
)
DATABASE = "agent_journal_test"
_SUPERUSER = "postgres"


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.parent.name
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def find_bindir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``createdb``.

    Raises:
        pytest.fail.Exception: They are not installed.
    """
    candidates: list[Path] = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(Path(os.environ[BINDIR_ENV]))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent)
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key, reverse=True
    )
    candidates += [Path(p).parent for p in debian]
    for bindir in candidates:
        if all((bindir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    pytest.fail(INSTALL_HINT, pytrace=False)


def _run_as() -> dict[str, Any]:
    """subprocess options that drop root to an unprivileged user (else none)."""
    if os.geteuid() != 0:
        return {}
    for name in (_SUPERUSER, "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    pytest.fail(
        "running as root, and neither a 'postgres' nor a 'nobody' user exists to "
        "run PostgreSQL as; apt-get install postgresql creates 'postgres'",
        pytrace=False,
    )


def _run(
    args: list[str], as_user: dict[str, Any], cwd: Path, what: str, *, fail: bool = True
) -> bool:
    """Run a PostgreSQL tool; on failure fail the test run (or return False)."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    env.pop("PGDATA", None)
    done = subprocess.run(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **as_user,
    )
    if done.returncode != 0 and fail:
        pytest.fail(
            f"{what} failed (exit {done.returncode}): {' '.join(args)}\n"
            f"{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return done.returncode == 0


@contextlib.contextmanager
def start_postgres() -> Iterator[str]:
    """Run a private PostgreSQL cluster while the context is open; yield its URL.

    Raises:
        pytest.fail.Exception: The binaries are missing or the cluster did not start.
    """
    bindir = find_bindir()
    as_user = _run_as()
    # Not under pytest's tmp_path (nor $TMPDIR, as root): its parents may be private
    # to root, and the server runs as another user that must reach its directory.
    base = Path(
        tempfile.mkdtemp(prefix="agent-journal-pg-", dir="/tmp" if as_user else None)  # noqa: S108
    )
    if as_user:
        os.chown(base, as_user["user"], as_user["group"])
    data = base / "data"
    log = base / "server.log"
    started = False
    try:
        _run(
            [
                str(bindir / "initdb"),
                "-D", str(data),
                "-U", _SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
            ],
            as_user, base, "initdb",
        )  # fmt: skip
        for attempt in range(3):  # the free port may be taken by the time we bind
            port = free_port()
            options = (
                f"-p {port} -c listen_addresses=127.0.0.1 -k {base} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200"
            )
            started = _run(
                [
                    str(bindir / "pg_ctl"),
                    "-D", str(data),
                    "-l", str(log),
                    "-o", options,
                    "-w", "-t", "60",
                    "start",
                ],
                as_user, base, "pg_ctl start", fail=False,
            )  # fmt: skip
            if started:
                break
            if attempt == 2:
                detail = log.read_text(errors="replace") if log.exists() else ""
                pytest.fail(
                    f"PostgreSQL did not start; its log:\n{detail}", pytrace=False
                )
        createdb = bindir / "createdb"
        _run(
            [
                str(createdb if createdb.is_file() else "createdb"),
                "-h", str(base),
                "-p", str(port),
                "-U", _SUPERUSER,
                DATABASE,
            ],
            as_user, base, "createdb",
        )  # fmt: skip
        yield f"postgresql+asyncpg://{_SUPERUSER}@127.0.0.1:{port}/{DATABASE}"
    finally:
        if started:
            stop = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
            _run(stop, as_user, base, "pg_ctl stop", fail=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The asyncpg SQLAlchemy URL of a PostgreSQL database private to the session."""
    with start_postgres() as url:
        yield url
