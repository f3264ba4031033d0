"""Fault injection for the local store: a writer SIGKILLed at every crash point.

Each test runs ``tests.stores._crash_child`` in a fresh process that kills itself
at one point of ``create`` (temp write, fsync, link, unlink, directory fsync) or of
``replace`` (temp write, rename, directory fsync), then checks, as a restarted
process would, that the object is whole or absent, that the slot is free exactly
when the name is absent, and that stray temporary files are reported by
``leftovers`` and hidden from ``list``.

``create`` of a record key is the file-per-record publish here (``segments=False``);
the restarted store runs either layout, since either reads what the other wrote.
Kills inside a segment append are in ``test_local_segments.py``.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from stores.local import LocalStore
from tests.stores._crash_child import (
    NOT_REACHED,
    PUBLISH_POINTS,
    REPLACE_POINTS,
    body_for,
    loop_body,
    loop_key,
    new_body_for,
)

REPO = Path(__file__).resolve().parents[2]
CHILD = "tests.stores._crash_child"
THREAD = "ns/agent/~/session/main/"


def _crash(root: Path, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", CHILD, str(root), *args],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != NOT_REACHED, "the crash point was never reached"
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


# point -> (the final name exists afterwards, a temporary file is left)
PUBLISH_OUTCOMES = {
    "mid-write": (False, True),
    "before-fsync": (False, True),
    "before-link": (False, True),
    "after-link": (True, True),
    "after-unlink": (True, False),
}


def test_every_publish_point_is_covered():
    assert set(PUBLISH_OUTCOMES) == set(PUBLISH_POINTS)


@pytest.mark.parametrize("reopen", ["files", "segments"])
@pytest.mark.parametrize("point", PUBLISH_POINTS)
async def test_crash_during_create(tmp_path, point, reopen):
    present, leftover = PUBLISH_OUTCOMES[point]
    root = tmp_path / "root"
    earlier = f"{THREAD}log/00000000000000000001.rec"
    key = f"{THREAD}log/00000000000000000002.rec"
    body = body_for(key)
    await LocalStore(root, segments=False).create(earlier, b"an earlier record")
    assert (root / earlier).read_bytes() == b"an earlier record"

    _crash(root, "publish", key, point)

    # What a restarted process opens, in the same layout or in the other one.
    store = LocalStore(root, segments=reopen == "segments")
    final = root / key
    if present:
        # Whole, never partial.
        assert final.read_bytes() == body
        assert (await store.read(key))[0] == body
    else:
        assert not final.exists()
        with pytest.raises(ObjectNotFoundError):
            await store.read(key)

    listed = await store.list(THREAD)
    assert listed == ([earlier, key] if present else [earlier])
    strays = await store.leftovers(THREAD)
    if leftover:
        assert len(strays) == 1, strays
        (stray,) = strays
        assert stray.startswith(f"{THREAD}log/.tmp-")
        assert stray not in listed
        size = (root / stray).stat().st_size
        if point == "mid-write":
            assert 0 < size < len(body)
        else:
            assert size == len(body)
    else:
        assert strays == []

    # The slot is free exactly when the name is absent.
    if present:
        with pytest.raises(ObjectExistsError):
            await store.create(key, b"a retry")
        assert (await store.read(key))[0] == body
    else:
        etag = await store.create(key, body)
        assert await store.read(key) == (body, etag)
    assert await store.list(THREAD) == [earlier, key]
    assert await store.children(THREAD) == ["log"]
    assert await store.leftovers(THREAD) == strays


# point -> (the object holds the new body afterwards, a temporary file is left)
REPLACE_OUTCOMES = {
    "mid-write": (False, True),
    "before-rename": (False, True),
    "after-rename": (True, False),
}


def test_every_replace_point_is_covered():
    assert set(REPLACE_OUTCOMES) == set(REPLACE_POINTS)


@pytest.mark.parametrize("point", REPLACE_POINTS)
async def test_crash_during_replace(tmp_path, point):
    replaced, leftover = REPLACE_OUTCOMES[point]
    root = tmp_path / "root"
    key = f"{THREAD}LEASE"
    old = b"epoch 1 " * 4096
    etag = await LocalStore(root).create(key, old)

    _crash(root, "replace", key, point, etag)

    store = LocalStore(root)
    data, current = await store.read(key)
    assert data == (new_body_for(key) if replaced else old)
    assert (root / key).read_bytes() == data
    assert await store.list(THREAD) == [key]
    strays = await store.leftovers(THREAD)
    if leftover:
        assert len(strays) == 1, strays
        assert strays[0].startswith(f"{THREAD}.tmp-")
    else:
        assert strays == []

    # The dead writer's lock died with it, and the CAS still tells etags apart.
    if replaced:
        with pytest.raises(PreconditionFailedError):
            await asyncio.wait_for(store.replace(key, b"x", if_match=etag), 60)
    else:
        assert current == etag
    new = await asyncio.wait_for(store.replace(key, b"epoch 2", if_match=current), 60)
    assert await store.read(key) == (b"epoch 2", new)
    assert await store.list(THREAD) == [key]


def test_acknowledged_creates_survive_random_kills(tmp_path):
    """A writer killed at random moments, 30 times: every ack is durable and whole."""
    rng = random.Random(20261130)  # noqa: S311 - kill times, not secrets
    root = tmp_path / "root"
    acknowledged: list[str] = []
    for _ in range(30):
        proc = subprocess.Popen(
            [sys.executable, "-m", CHILD, str(root), "loop"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        out = proc.stdout
        assert out is not None
        try:
            assert out.readline() == "ready\n"
            # Wait for one acknowledged create, so every round makes progress.
            first = out.readline()
            assert first.endswith("\n"), first
            time.sleep(rng.uniform(0.0, 0.03))
            proc.kill()
            proc.wait(timeout=60)
            rest = first + out.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()
        assert proc.returncode == -signal.SIGKILL
        # A line without its newline was cut by the kill: it was never an ack.
        acknowledged += rest.split("\n")[:-1]

    store = LocalStore(root)
    listed = asyncio.run(store.list("loop/"))
    # Each writer resumed after the last key present: no gaps, nothing doubled.
    assert listed == [loop_key(n) for n in range(len(listed))]
    assert len(acknowledged) == len(set(acknowledged))
    assert set(acknowledged) <= set(listed)
    assert acknowledged == sorted(acknowledged)
    # Every key, acknowledged or not, holds its whole body.
    bodies = asyncio.run(store.read_many(listed))
    torn = [
        key
        for n, (key, data) in enumerate(zip(listed, bodies, strict=True))
        if data != loop_body(n)
    ]
    assert torn == []
    strays = asyncio.run(store.leftovers("loop/"))
    assert all(s.startswith("loop/.tmp-") for s in strays)
    assert not set(strays) & set(listed)
    n = len(listed)
    asyncio.run(store.create(loop_key(n), loop_body(n)))
