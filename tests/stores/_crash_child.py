"""A child process that SIGKILLs itself at a chosen point of a local-store write.

``python -m tests.stores._crash_child ROOT publish KEY POINT`` creates ``KEY`` with
the file-per-object publish (``segments=False``: a record key would otherwise be
appended to a segment file, see ``tests.stores._segment_child``);
``... ROOT replace KEY POINT ETAG`` replaces it with a CAS on ``ETAG``. POINT names
the crash point (see ``PUBLISH_POINTS`` and ``REPLACE_POINTS``). The body written
is ``body_for(KEY)`` (publish) or ``new_body_for(KEY)`` (replace). If the crash
point is never reached the child exits with status 3, so the parent can tell a
missed injection from a crash.

``python -m tests.stores._crash_child ROOT loop`` creates ``loop/<n>`` objects
(n counting on from the highest one present), printing each key once ``create``
has returned, until it is killed from outside.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import stat
import sys
from typing import Any

from stores.local import LocalStore

PUBLISH_POINTS = (
    "mid-write",  # half of the temporary file written
    "before-fsync",  # temporary file written, not yet synced
    "before-link",  # temporary file synced, not yet linked to the final name
    "after-link",  # final name linked, temporary not yet unlinked
    "after-unlink",  # temporary unlinked, directory not yet synced
)
REPLACE_POINTS = (
    "mid-write",
    "before-rename",  # temporary file written and synced, not yet renamed
    "after-rename",  # renamed over the final name, directory not yet synced
)
NOT_REACHED = 3


def body_for(key: str) -> bytes:
    seed = hashlib.sha256(key.encode()).digest()
    return seed * 8192  # 256 KiB


def new_body_for(key: str) -> bytes:
    return bytes(b ^ 0xFF for b in body_for(key)[:4096]) * 48  # 192 KiB


def loop_body(n: int) -> bytes:
    seed = hashlib.sha256(f"loop-{n}".encode()).digest()
    size = 1024 * (1 + (n * 37) % 384)  # 1 KiB .. 384 KiB
    return (seed * (size // len(seed) + 1))[:size]


def loop_key(n: int) -> str:
    return f"loop/{n:08d}"


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _install(point: str) -> None:
    """Patch the ``os`` functions the store calls so that it dies at ``point``."""
    real_write, real_fsync = os.write, os.fsync
    real_link, real_unlink, real_rename = os.link, os.unlink, os.rename

    def is_temp(path: Any) -> bool:
        return os.path.basename(os.fsdecode(path)).startswith(".tmp-")

    def write(fd: int, data: Any) -> int:
        if point == "mid-write" and len(data) > 1:
            real_write(fd, bytes(data[: len(data) // 2]))
            _die()
        return real_write(fd, data)

    def fsync(fd: Any) -> None:
        # Only the temporary file is a regular file: directory syncs pass.
        if point == "before-fsync" and stat.S_ISREG(os.fstat(fd).st_mode):
            _die()
        real_fsync(fd)

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        if point == "before-link":
            _die()
        real_link(src, dst, **kwargs)
        if point == "after-link":
            _die()

    def unlink(path: Any, **kwargs: Any) -> None:
        real_unlink(path, **kwargs)
        if point == "after-unlink" and is_temp(path):
            _die()

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        if point == "before-rename":
            _die()
        real_rename(src, dst, **kwargs)
        if point == "after-rename":
            _die()

    os.write, os.fsync = write, fsync
    os.link, os.unlink, os.rename = link, unlink, rename


async def _loop(store: LocalStore) -> None:
    present = await store.list("loop/")
    n = int(present[-1].rsplit("/", 1)[1]) + 1 if present else 0
    print("ready", flush=True)
    while True:
        await store.create(loop_key(n), loop_body(n))
        print(loop_key(n), flush=True)
        n += 1


def main(argv: list[str]) -> int:
    root, mode = argv[0], argv[1]
    store = LocalStore(root)
    if mode == "loop":
        asyncio.run(_loop(store))
        return 0
    key, point = argv[2], argv[3]
    _install(point)
    if mode == "publish":
        files = LocalStore(root, segments=False)
        asyncio.run(files.create(key, body_for(key)))
    elif mode == "replace":
        asyncio.run(store.replace(key, new_body_for(key), if_match=argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return NOT_REACHED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
