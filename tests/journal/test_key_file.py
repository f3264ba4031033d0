"""KeyFile on disk: the KEK lands only in a 0600 file of its own, never elsewhere.

Someone who can write the key file's directory (or a crash that left a temporary
behind) must not get the key-encryption key written into a file they can read, nor
make the key file a symlink; ``create`` never overwrites a key file, even one that
appears while it runs.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from typing import TYPE_CHECKING

import pytest

from journal import crypto
from journal.crypto import KeyFile, generate_key, kek_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def names(directory: Path) -> set[str]:
    """The directory's entries, but the key file's update lock (which stays)."""
    return {p.name for p in directory.iterdir() if not p.name.endswith(".json.lock")}


@pytest.fixture
def strict_umask() -> Iterator[None]:
    # A umask that would strip even the owner's read bit from a 0600 file.
    old = os.umask(0o377)
    try:
        yield
    finally:
        os.umask(old)


def test_a_leftover_temporary_does_not_set_the_mode(tmp_path):
    path = tmp_path / "kek.json"
    leftover = tmp_path / ".kek.json.tmp"
    leftover.write_text("leftover")
    leftover.chmod(0o644)
    KeyFile.create(path)
    assert mode(path) == 0o600
    KeyFile.rotate(path)
    assert mode(path) == 0o600
    assert len(KeyFile(path).key_ids) == 2


@pytest.mark.parametrize("operation", ["create", "rotate", "retire"])
def test_a_planted_symlink_never_receives_the_key(tmp_path, operation):
    path = tmp_path / "kek.json"
    if operation != "create":
        KeyFile.create(path)
        old = KeyFile(path).key_id
        if operation == "retire":
            KeyFile.rotate(path)
    leak = tmp_path / "readable-by-others.txt"
    leak.write_text("")
    leak.chmod(0o666)
    (tmp_path / ".kek.json.tmp").symlink_to(leak)
    if operation == "create":
        KeyFile.create(path)
    elif operation == "rotate":
        KeyFile.rotate(path)
    else:
        KeyFile.retire(path, old)
    assert leak.read_text() == ""
    assert not path.is_symlink()
    assert mode(path) == 0o600
    assert KeyFile(path).key_ids  # still a key file


def test_create_refuses_a_symlink_at_the_key_file_path(tmp_path):
    path = tmp_path / "kek.json"
    target = tmp_path / "elsewhere.json"
    path.symlink_to(target)  # dangling: exists() says no
    with pytest.raises(FileExistsError, match="exists"):
        KeyFile.create(path)
    assert not target.exists()
    assert path.is_symlink()
    assert names(tmp_path) == {"kek.json"}


def test_the_mode_is_0600_whatever_the_umask(tmp_path, strict_umask):
    path = tmp_path / "kek.json"
    KeyFile.create(path)
    assert mode(path) == 0o600
    KeyFile.rotate(path)
    assert mode(path) == 0o600


def test_create_never_overwrites_a_key_file_made_while_it_runs(tmp_path, monkeypatch):
    """Another process's create lands between the existence check and the write."""
    path = tmp_path / "kek.json"
    other = generate_key()
    theirs = json.dumps(
        {
            "current": kek_id(other),
            "keys": {kek_id(other): base64.b64encode(other).decode()},
        }
    ).encode()
    real = crypto.generate_key

    def racing_generate_key() -> bytes:
        if not path.exists():
            path.write_bytes(theirs)  # after create() saw no file
        return real()

    monkeypatch.setattr(crypto, "generate_key", racing_generate_key)
    with pytest.raises(FileExistsError, match="exists"):
        KeyFile.create(path)
    monkeypatch.undo()
    assert path.read_bytes() == theirs  # their KEK is still there
    assert KeyFile(path).key_id == kek_id(other)
    assert names(tmp_path) == {"kek.json"}  # no temporary left behind


@pytest.mark.parametrize(
    ("action", "failing"),
    [
        ("create", "fsync"),
        ("create", "link"),
        ("rotate", "fsync"),
        ("rotate", "replace"),
    ],
)
def test_a_failed_write_leaves_no_temporary(tmp_path, monkeypatch, action, failing):
    path = tmp_path / "kek.json"
    operation: Callable[[Path], object]
    if action == "create":
        operation = KeyFile.create
    else:
        KeyFile.create(path)
        operation = KeyFile.rotate
    before = path.read_bytes() if path.exists() else None

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError, match="disk on fire"):
        operation(path)
    monkeypatch.undo()
    if before is None:
        assert names(tmp_path) == set()
    else:
        assert names(tmp_path) == {"kek.json"}
        assert path.read_bytes() == before


def test_two_rotations_at_once_keep_both_keys(tmp_path, monkeypatch):
    """Each rotation reads the file and writes it whole: they take turns."""
    import threading
    import time

    from journal import crypto

    path = tmp_path / "kek.json"
    KeyFile.create(path)
    real = crypto.generate_key
    first = threading.Event()

    def slow_key() -> bytes:
        # The first rotation holds on between its read and its write, long
        # enough for the second to have read the file without the lock.
        if not first.is_set():
            first.set()
            time.sleep(0.3)
        return real()

    monkeypatch.setattr(crypto, "generate_key", slow_key)
    ids: list[str] = []
    one = threading.Thread(target=lambda: ids.append(KeyFile.rotate(path)))
    one.start()
    first.wait()
    ids.append(KeyFile.rotate(path))
    one.join()
    kept = set(json.loads(path.read_text())["keys"])
    assert set(ids) <= kept
    assert len(kept) == 3
