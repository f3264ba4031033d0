"""A key object that cannot be rotated does not stop the rotation of the others.

Someone who can write the keyring store (and holds no KEK) can plant a key object
that does not decode, or whose data keys do not unwrap: a copy of another owner's
object with its clear ``owner`` field edited to match its new path, a KEK id the
provider does not hold, bytes that are not JSON. A rotation that raised there would
leave every owner listed after it wrapped by the old KEK, and retiring that KEK
would then lock them out. Each such object is left as it is, reported as a warning
naming its path and why, and not counted.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import pytest

from journal import Journal
from journal.crypto import Encryption, KeyFile
from journal.errors import KeyRotationIncompleteError, PreconditionFailedError
from journal.keyring import Keyring
from stores.local import LocalStore
from stores.memory import MemoryStore
from stores.state import JsonFileAgentStateStore
from stores.testing.state_contract import full_state
from tests.journal._keyrings import (
    FORGED,
    KEYRING,
    MARKER,
    kek_of,
    key_of,
    local,
    say,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "journal"
    ]


def edited(source: Path, change: Callable[[dict[str, object]], None]) -> bytes:
    obj = json.loads(source.read_text())
    change(obj)
    return json.dumps(obj).encode()


def first_key(obj: dict[str, object]) -> dict[str, object]:
    keys = obj["keys"]
    assert isinstance(keys, list)
    entry = keys[0]
    assert isinstance(entry, dict)
    return entry


def _owner_fixed(obj: dict[str, object]) -> None:
    # A copy of alice's object that names the owner of the path it was put at:
    # the data key was wrapped for alice, so it does not unwrap for aaa.
    obj["owner"] = "default/agent/aaa"


def _unknown_kek(obj: dict[str, object]) -> None:
    obj["owner"] = "default/agent/aaa"
    first_key(obj)["kek"] = "k-0000000000000000"


def _altered_wrapping(obj: dict[str, object]) -> None:
    obj["owner"] = "default/agent/aaa"
    first_key(obj)["wrapped"] = "not base64!"


def _malformed_id(obj: dict[str, object]) -> None:
    obj["owner"] = "default/agent/aaa"
    first_key(obj)["id"] = FORGED


# (how the planted object at aaa.key is made, what the warning says about it)
DAMAGE: dict[str, tuple[Callable[[Path], bytes], str]] = {
    "not json": (lambda _: b"this is not a key object", "does not decode"),
    "wrong types": (lambda _: b'{"format": 1, "owner": 7}', "does not decode"),
    "nested too deep": (
        lambda _: (
            b'{"format": 1, "owner": "default/agent/aaa", "x": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}"
        ),
        "does not decode",
    ),
    # alice's object as it is, its owner field naming alice: refused at aaa.
    "copied from another owner": (
        lambda alice: alice.read_bytes(),
        "names the owner 'default/agent/alice'",
    ),
    "owner field edited": (
        lambda alice: edited(alice, _owner_fixed),
        "does not unwrap",
    ),
    "unknown kek": (
        lambda alice: edited(alice, _unknown_kek),
        "does not hold this key-encryption key",
    ),
    "altered wrapping": (
        lambda alice: edited(alice, _altered_wrapping),
        "does not unwrap",
    ),
    "malformed key id": (
        lambda alice: edited(alice, _malformed_id),
        "malformed key id",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_a_key_object_that_cannot_be_rotated_is_skipped(tmp_path, caplog, damage):
    make, why = DAMAGE[damage]
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)
    root = tmp_path / "journal"
    await say(Journal(local(root), encryption=KeyFile(kek)), key_of("alice"))
    await say(Journal(local(root), encryption=KeyFile(kek)), key_of("zed"))
    ring = root / KEYRING
    # Listed before alice and zed: a rotation that stopped there leaves both.
    planted = make(ring / "alice.key")
    (ring / "aaa.key").write_bytes(planted)

    for rotation in range(2):
        old = KeyFile(kek).key_id
        new = KeyFile.rotate(kek)
        journal = Journal(local(root), encryption=KeyFile(kek))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="journal"):
            with pytest.raises(KeyRotationIncompleteError) as raised:
                await journal.rotate_keys()
            assert raised.value.rewritten == 2  # alice's and zed's only
            [(path, _)] = raised.value.skipped
            assert path.endswith("aaa.key")
        [skipped] = warnings_of(caplog)
        assert "@keyring/threads/default/agent/aaa.key" in skipped
        if rotation == 0:  # after that, the KEK that wrapped it is retired
            assert why in skipped
        for raw in ("\x1b", "\nALL OK"):
            assert raw not in skipped  # a forged id is shown escaped
        assert (ring / "aaa.key").read_bytes() == planted  # left as it was
        for owner in ("alice", "zed"):
            assert kek_of(ring / f"{owner}.key") == new
        KeyFile.retire(kek, old)
        journal = Journal(local(root), encryption=KeyFile(kek))
        for owner in ("alice", "zed"):
            assert (await journal.load(key_of(owner))).summary == MARKER


async def test_a_damaged_slot_key_object_does_not_stop_the_state_rotation(
    tmp_path, caplog
):
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)

    def state_store() -> JsonFileAgentStateStore:
        keyring = LocalStore(tmp_path / "keys", fsync=False)
        return JsonFileAgentStateStore(tmp_path / "state", fsync=False).use_encryption(
            Encryption(KeyFile(kek), keyring=keyring)
        )

    state = full_state()
    state.summary = MARKER
    for user in ("bob", "zed"):
        await state_store().save(user, "s1", "main", state)
    slots = tmp_path / "keys/@keyring/slots"
    (slots / "aaa.key").write_bytes(b"{")

    old = KeyFile(kek).key_id
    new = KeyFile.rotate(kek)
    with caplog.at_level(logging.WARNING, logger="journal"):
        with pytest.raises(KeyRotationIncompleteError) as raised:
            await state_store().rotate_keys()
        assert raised.value.rewritten == 2
    [skipped] = warnings_of(caplog)
    assert "@keyring/slots/aaa.key" in skipped
    assert "does not decode" in skipped
    for user in ("bob", "zed"):
        assert kek_of(slots / f"{user}.key") == new
    KeyFile.retire(kek, old)
    for user in ("bob", "zed"):
        loaded = await state_store().load(user, "s1", "main")
        assert loaded is not None
        assert loaded[0].summary == MARKER


class ContendedStore(MemoryStore):
    """A memory store on which every replace of one object loses its race."""

    def __init__(self, contended: str) -> None:
        super().__init__()
        self.contended = contended

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        if key == self.contended:
            raise PreconditionFailedError(key)
        return await super().replace(key, data, if_match=if_match)


async def test_a_key_object_that_keeps_changing_is_reported(tmp_path, caplog):
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)
    store = ContendedStore("@keyring/threads/default/agent/aaa.key")
    for user in ("aaa", "zed"):
        await say(Journal(store, encryption=KeyFile(kek)), key_of(user))
    KeyFile.rotate(kek)
    with caplog.at_level(logging.WARNING, logger="journal"):
        with pytest.raises(KeyRotationIncompleteError) as raised:
            await Keyring(store, KeyFile(kek)).rotate()
        assert raised.value.rewritten == 1  # zed's
    [skipped] = warnings_of(caplog)
    assert "@keyring/threads/default/agent/aaa.key" in skipped
    assert "kept changing" in skipped


async def test_the_rotation_of_sound_key_objects_logs_nothing(tmp_path, caplog):
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)
    root = tmp_path / "journal"
    for user in ("alice", "zed"):
        await say(Journal(local(root), encryption=KeyFile(kek)), key_of(user))
    KeyFile.rotate(kek)
    with caplog.at_level(logging.WARNING, logger="journal"):
        assert await Journal(local(root), encryption=KeyFile(kek)).rotate_keys() == 2
        assert await Journal(local(root), encryption=KeyFile(kek)).rotate_keys() == 0
    assert not warnings_of(caplog)
