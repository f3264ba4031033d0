"""A key object naming an id of a form no writer makes is refused, the id escaped.

A key object's ids are clear JSON that whoever can write the keyring store chooses.
Control characters there must not reach errors, warnings or the CLI's output raw
(``"\\n\\x1b[32mALL OK"`` would forge a line of ``verify``). Data key ids must be
the keyring's own form; KEK ids, which a KMS makes, need only be printable. Every
id the library writes, and a KMS provider's own KEK ids, still pass.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.crypto import (
    KeyFile,
    StaticKeys,
    aead_open,
    aead_seal,
    generate_key,
    is_data_key_id,
    is_kek_id,
)
from journal.errors import ErasedError, KeyUnavailableError
from journal.keyring import Keyring
from stores.local import LocalStore
from tests.journal._keyrings import FORGED, KEY, assert_escaped, journal_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

OWNER = "default/agent/alice"
KEY_OBJECT = f"@keyring/threads/{OWNER}.key"
MARKER = "grebe-andesite-7741"


async def fill(journal: Journal, key: ThreadKey = KEY) -> None:
    async with journal.writer(key) as w:
        for i in range(3):
            await w.append([MessageAppended(Msg("user", f"{MARKER} {i}"))])


def _key_id(obj: dict[str, object]) -> None:
    obj["keys"][0]["id"] = FORGED  # type: ignore[index]


def _erased_id(obj: dict[str, object]) -> None:
    obj["erased"] = ["d-0123456789abcdef", FORGED]


def _kek_id(obj: dict[str, object]) -> None:
    obj["keys"][0]["kek"] = FORGED  # type: ignore[index]


EDITS: dict[str, Callable[[dict[str, object]], None]] = {
    "keys[].id": _key_id,
    "erased": _erased_id,
    "keys[].kek": _kek_id,
}


def edit_key_object(root: Path, change: Callable[[dict[str, object]], None]) -> None:
    path = root / KEY_OBJECT
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


@pytest.mark.parametrize("field", sorted(EDITS))
async def test_a_key_object_naming_a_malformed_id_is_refused(tmp_path, field):
    provider = StaticKeys([generate_key()])
    await fill(journal_of(tmp_path, provider))
    edit_key_object(tmp_path, EDITS[field])

    with pytest.raises(KeyUnavailableError, match="malformed key id") as caught:
        await Keyring(LocalStore(tmp_path, segments=False), provider).load(OWNER)
    assert caught.value.owner == OWNER
    assert caught.value.key_id == ""  # printed raw by the error: never the id
    assert_escaped(str(caught.value))

    with pytest.raises(KeyUnavailableError) as caught:
        await journal_of(tmp_path, provider).load(KEY)
    assert_escaped(str(caught.value))
    # A writer does not take (or add to) such an object either.
    with pytest.raises(KeyUnavailableError) as caught:
        await fill(journal_of(tmp_path, provider))
    assert_escaped(str(caught.value))


async def test_erasure_destroys_the_keys_of_a_key_object_naming_a_malformed_id(
    tmp_path,
):
    """A malformed id planted in ``erased`` must not keep an owner's keys alive."""
    provider = StaticKeys([generate_key()])
    await fill(journal_of(tmp_path, provider))
    edit_key_object(tmp_path, _erased_id)
    assert await journal_of(tmp_path, provider).erase(user_id="alice") == [KEY]
    obj = json.loads((tmp_path / KEY_OBJECT).read_text())
    assert obj["keys"] == []
    assert obj["erased"]
    assert all(is_data_key_id(i) for i in obj["erased"])  # the forged one dropped
    keys = await Keyring(LocalStore(tmp_path, segments=False), provider).load(OWNER)
    assert keys.status == "erased"


@pytest.mark.parametrize("damage", ['{"format": 1,', "[]", '{"format": "x"}'])
async def test_a_shred_goes_past_a_key_object_that_does_not_decode(tmp_path, damage):
    """A torn or altered key object neither stops a shred nor keeps its keys."""
    provider = StaticKeys([generate_key()])
    other = ThreadKey("agent2", "s1", user_id="alice")  # alice's under agent2
    for key in (KEY, other):
        await fill(journal_of(tmp_path, provider), key)
    (tmp_path / KEY_OBJECT).write_text(damage)  # listed before agent2's
    shredded = await journal_of(tmp_path, provider).shred(user_id="alice")
    assert shredded == [OWNER, "default/agent2/alice"]
    obj = json.loads((tmp_path / KEY_OBJECT).read_text())
    assert (obj["owner"], obj["keys"], obj["erased"]) == (OWNER, [], [])
    ring = Keyring(LocalStore(tmp_path, segments=False), provider)
    for owner in (OWNER, "default/agent2/alice"):
        assert (await ring.load(owner)).status == "erased"
    for key in (KEY, other):  # what they encrypted reads as erased
        with pytest.raises(ErasedError):
            await journal_of(tmp_path, provider).load(key)


async def test_every_id_the_library_writes_is_accepted(tmp_path):
    """Made, erased, made again, rotated: every id read back passes the checks."""
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)
    root = tmp_path / "journal"
    await fill(journal_of(root, KeyFile(kek)))
    assert await journal_of(root, KeyFile(kek)).erase(user_id="alice") == [KEY]
    await fill(journal_of(root, KeyFile(kek)))  # alice back: a new data key
    old = KeyFile(kek).key_id
    KeyFile.rotate(kek)
    assert await journal_of(root, KeyFile(kek)).rotate_keys() == 1
    KeyFile.retire(kek, old)
    obj = json.loads((root / KEY_OBJECT).read_text())
    assert obj["erased"]
    assert obj["keys"]
    assert all(is_data_key_id(i) for i in obj["erased"])
    for entry in obj["keys"]:
        assert is_data_key_id(entry["id"])
        assert is_kek_id(entry["kek"])
    keys = await Keyring(LocalStore(root, segments=False), KeyFile(kek)).load(OWNER)
    assert keys.status == "ok"
    assert keys.erased
    journal = journal_of(root, KeyFile(kek))
    assert (await journal.verify(KEY)).ok


class ArnKeys:
    """A KMS-like provider: its KEK ids are its own (ARNs), not ``k-`` ids."""

    key_id = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234"

    def __init__(self) -> None:
        self.key = generate_key()

    async def wrap(self, data_key: bytes, context: bytes) -> tuple[str, bytes]:
        return self.key_id, aead_seal(self.key, data_key, context)

    async def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        if key_id != self.key_id:
            raise LookupError(key_id)
        return aead_open(self.key, wrapped, context)


async def test_a_providers_own_printable_kek_ids_are_accepted(tmp_path):
    provider = ArnKeys()
    await fill(journal_of(tmp_path, provider))
    obj = json.loads((tmp_path / KEY_OBJECT).read_text())
    assert obj["keys"][0]["kek"] == ArnKeys.key_id
    journal = journal_of(tmp_path, provider)
    await journal.load(KEY)
    assert (await journal.verify(KEY)).ok


def test_errors_show_an_owner_or_key_id_escaped():
    """Owners come from a store's listing: a control character in one is escaped."""
    for error in (
        KeyUnavailableError(f"default/agent/{FORGED}", "", "no key object"),
        KeyUnavailableError(OWNER, FORGED, "not held"),
        ErasedError(f"default/agent/{FORGED}", 0.0, "record 3"),
    ):
        assert_escaped(str(error))
    assert str(KeyUnavailableError(OWNER, "d-0123456789abcdef", "x")) == (
        f"no usable key for {OWNER} (key id d-0123456789abcdef): x"
    )
