"""A second real S3 server for tests: Ceph RGW on loopback.

RGW is strict where moto is lenient (it matches ``If-Match`` only against the
unquoted etag and answers 412 for ``If-Match`` on a missing key), so the store and
journal contracts run against both.

Ceph 18.2 comes from Debian trixie; it needs trixie's libraries, so it lives in a
root of its own that ``.ci/build-rgw.sh`` makes (``AJ_RGW_ROOT``, by default
``/var/cache/agent-journal/rgw``, where ``.ci/run`` builds it once).
``rgw_server`` (session scope) starts one monitor, one memstore OSD and radosgw
inside that root, in a private mount namespace
(``unshare``: its ``/proc`` and ``/dev`` mounts vanish with it), with no
authentication and a pool size of one, and yields the endpoint URL; the
credentials are ``CREDENTIALS`` of ``tests.services.s3``. It fails the run, naming
the log to read, if the root is missing or the server does not answer in time:
nothing skips silently. Needs root (``unshare``, ``chroot``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["RGW_ROOT_ENV", "rgw_root", "rgw_server"]

RGW_ROOT_ENV = "AJ_RGW_ROOT"
_DEFAULT_ROOT = Path("/var/cache/agent-journal/rgw")
_START_TIMEOUT = 120.0
_ACCESS = "testing"

# Runs inside the root: $1 run dir (as the root sees it), $2 monitor port, $3 RGW
# port. The daemons detach and write their pid files to $D/run, which is how the
# fixture stops them; this shell then idles so the mount namespace has a holder.
_START_SCRIPT = r"""#!/bin/sh
set -eu
D=$1; MP=$2; GP=$3
mkdir -p "$D/mon" "$D/osd" "$D/log" "$D/run"
fsid=$(cat /proc/sys/kernel/random/uuid)
cat >"$D/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$MP]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
# radosgw asks for a secure monitor session by default, which needs cephx.
ms mon client mode = crc secure
keyring = /dev/null
osd objectstore = memstore
memstore device bytes = 1073741824
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
osd crush chooseleaf type = 0
mon data = $D/mon
osd data = $D/osd
run dir = $D/run
pid file = $D/run/\$name.pid
log file = $D/log/\$name.log
admin socket = $D/run/\$name.asok
[client]
rgw frontends = beast endpoint=127.0.0.1:$GP
CONF
C="-c $D/ceph.conf"
monmaptool --create --addv a "[v2:127.0.0.1:$MP]" --fsid "$fsid" "$D/monmap" >/dev/null
ceph-mon $C --mkfs -i a --monmap "$D/monmap"
ceph-mon $C -i a
osd=$(ceph $C --connect-timeout 60 osd create)
ceph-osd $C -i "$osd" --mkfs 2>/dev/null
ceph-osd $C -i "$osd" 2>/dev/null
radosgw-admin $C user create --uid testing --display-name testing \
    --access-key testing --secret-key testing >/dev/null
radosgw $C -n client.admin
exec sleep infinity
"""


def rgw_root() -> Path:
    """Where the Ceph root lives (``AJ_RGW_ROOT`` or ``.ci/cache/rgw``)."""
    return Path(os.environ.get(RGW_ROOT_ENV) or _DEFAULT_ROOT)


def _free_port() -> int:
    # Ceph takes its ports from its configuration, not from the kernel, so a port
    # is probed and released; another process could take it in between, which
    # shows as a start failure naming the log.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310
            reply.read()
    except urllib.error.HTTPError:
        return True  # an S3 error document is an answer
    except OSError:
        return False
    return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


@pytest.fixture(scope="session")
def rgw_server() -> Iterator[str]:
    """Ceph RGW on free loopback ports; yields its endpoint URL."""
    root = rgw_root()
    if not (root / "usr" / "bin" / "radosgw").exists():
        pytest.fail(
            f"no Ceph root at {root} (set {RGW_ROOT_ENV}): build it with "
            f"'bash .ci/build-rgw.sh {root}' (.ci/run does)"
        )
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("Ceph RGW tests need root and unshare (util-linux)")
    inner = f"/tmp/aj-rgw-{uuid.uuid4().hex[:12]}"  # noqa: S108 (inside the root)
    run_dir = root / inner.lstrip("/")
    run_dir.mkdir(parents=True)
    (run_dir / "start.sh").write_text(_START_SCRIPT)
    mon_port, rgw_port = _free_port(), _free_port()
    output = run_dir / "start.log"
    shell = (
        'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && '
        'exec chroot "$0" sh "$1/start.sh" "$1" "$2" "$3"'
    )
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                shell,
                str(root),
                inner,
                str(mon_port),
                str(rgw_port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{rgw_port}"
    started = False
    try:
        deadline = time.monotonic() + _START_TIMEOUT
        while not _answers(url):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"Ceph RGW did not start (exit {process.returncode}); the "
                    f"daemons' logs are kept in {run_dir}/log:\n{_tail(output)}"
                )
            time.sleep(0.2)
        started = True
        yield url
    finally:
        _stop_group(process, run_dir)
        if started:
            shutil.rmtree(run_dir, ignore_errors=True)


def _stop_group(process: subprocess.Popen[bytes], run_dir: Path) -> None:
    """Kill the daemons (by their pid files) and the launcher.

    The cluster keeps nothing worth a clean shutdown (the OSD is in memory), and
    radosgw takes seconds to stop on SIGTERM, so every process gets SIGKILL.
    """
    for pid_file in (run_dir / "run").glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
