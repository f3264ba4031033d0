"""A plain-file create and a framed create of one key exclude each other.

``LocalStore(segments=False)`` publishes records as plain files and a default store
as frames of a segment; both read each other, so exactly one create of a key may be
acknowledged whichever layout makes it, including for the first record of a
segment, whose file does not exist yet while the plain writer works.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import stores.local as local_module
from journal.errors import ObjectExistsError
from stores.local import LocalStore

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

KEY = "ns/t/log/00000000000000000001.rec"


def test_a_framed_create_waits_for_a_plain_create_of_the_same_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails when the plain writer holds no lock while the segment file is missing:
    the framed create checked for the plain file before it was linked, appended its
    frame, and both creates were acknowledged (readers then served the frame)."""
    root = str(tmp_path)
    plain = LocalStore(root, segments=False, lock_timeout=5.0)
    framed = LocalStore(root, lock_timeout=5.0)
    asyncio.run(framed.create("ns/t/LEASE", b"lease"))  # the thread's directory
    writing, go = threading.Event(), threading.Event()
    real = local_module.write_temp

    def paused_write_temp(directory: str, data: bytes, **kw: Any) -> str:
        if data == b"plain":
            writing.set()
            go.wait(10)
        return real(directory, data, **kw)

    monkeypatch.setattr(local_module, "write_temp", paused_write_temp)
    results: dict[str, object] = {}

    def create(name: str, store: LocalStore, data: bytes) -> None:
        try:
            results[name] = asyncio.run(store.create(KEY, data))
        except ObjectExistsError as exc:
            results[name] = exc

    first = threading.Thread(target=create, args=("plain", plain, b"plain"))
    first.start()
    assert writing.wait(10)
    second = threading.Thread(target=create, args=("framed", framed, b"framed"))
    second.start()
    second.join(0.5)  # it must wait for the plain writer's lock, not go ahead
    go.set()
    first.join(10)
    second.join(10)
    assert not isinstance(results["plain"], Exception)
    assert isinstance(results["framed"], ObjectExistsError)
    for store in (LocalStore(root), LocalStore(root, segments=False)):
        assert asyncio.run(store.read(KEY))[0] == b"plain"
