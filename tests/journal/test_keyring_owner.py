"""A key object serves only the owner its path names.

Someone who can write the keyring store but holds no key-encryption key can copy a
key object to another owner's path (or edit its clear ``owner`` field). Such an
object must not unwrap there, must not be rewrapped by a rotation (which would keep
an erased owner's data key alive under the new KEK), and must not stop a rotation
of the other owners.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from journal import Journal
from journal.crypto import KeyFile
from journal.errors import KeyRotationIncompleteError, KeyUnavailableError
from journal.keyring import Keyring
from tests.journal._keyrings import KEYRING, MARKER, kek_of, key_of, local, say


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_key_object_copied_to_another_owner_is_refused(tmp_path):
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)
    root = tmp_path / "journal"
    journal = Journal(local(root), encryption=KeyFile(kek))
    await say(journal, key_of("alice"))
    ring = root / KEYRING
    shutil.copyfile(ring / "alice.key", ring / "zz.key")

    keys = await Keyring(local(root), KeyFile(kek)).load("default/agent/zz")
    assert keys.status == "unavailable"
    assert not keys.keys
    assert isinstance(keys.error, KeyUnavailableError)
    assert keys.error.owner == "default/agent/zz"
    assert "default/agent/alice" in keys.error.detail

    # A writer of that owner does not take alice's data key to encrypt with.
    with pytest.raises(KeyUnavailableError, match="default/agent/alice") as caught:
        await say(Journal(local(root), encryption=KeyFile(kek)), key_of("zz"))
    assert caught.value.owner == "default/agent/zz"

    # Made self-consistent by editing its clear owner field, it still does not
    # unwrap: the wrapped key is bound to the owner it was made for.
    obj = json.loads((ring / "zz.key").read_text())
    obj["owner"] = "default/agent/zz"
    (ring / "zz.key").write_text(json.dumps(obj))
    keys = await Keyring(local(root), KeyFile(kek)).load("default/agent/zz")
    assert keys.status == "unavailable"
    assert not keys.keys

    # Alice's own key object is untouched by all this.
    assert (await journal.load(key_of("alice"))).summary == MARKER


async def test_erase_rotate_retire_leaves_no_copy_of_the_key(tmp_path, caplog):
    """The documented remedy for stray copies works on a copy in the keyring too."""
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)
    root = tmp_path / "journal"
    journal = Journal(local(root), encryption=KeyFile(kek))
    await say(journal, key_of("alice"))
    await say(journal, key_of("bob"))
    backup = tmp_path / "backup"
    shutil.copytree(root / "default", backup / "default")  # e.g. old S3 versions
    ring = root / KEYRING
    shutil.copyfile(ring / "alice.key", ring / "zz.key")  # the attacker's copy

    assert await journal.erase(user_id="alice") == [key_of("alice")]
    old = KeyFile(kek).key_id
    new = KeyFile.rotate(kek)
    journal = Journal(local(root), encryption=KeyFile(kek))
    with caplog.at_level(logging.WARNING, logger="journal"):
        with pytest.raises(KeyRotationIncompleteError) as raised:
            await journal.rotate_keys()
        assert raised.value.rewritten == 1  # bob's; alice's is erased
    [refused] = refusals(caplog)
    assert "default/agent/zz" in refused
    assert "default/agent/alice" in refused
    assert kek_of(ring / "zz.key") == old  # not rewrapped under the new KEK
    assert kek_of(ring / "bob.key") == new
    KeyFile.retire(kek, old)

    # The attacker fixes up the copy's owner field: the KEK that wraps it is gone.
    obj = json.loads((ring / "zz.key").read_text())
    for owner in ("default/agent/zz", "default/agent/alice"):
        obj["owner"] = owner
        (ring / "zz.key").write_text(json.dumps(obj))
        keys = await Keyring(local(root), KeyFile(kek)).load("default/agent/zz")
        assert keys.status == "unavailable"
        assert not keys.keys

    # ... and put at alice's path beside the backup of her erased thread, it
    # opens nothing of it.
    (backup / KEYRING).mkdir(parents=True)
    (backup / KEYRING / "alice.key").write_text(json.dumps(obj))
    restored = Journal(local(backup), encryption=KeyFile(kek))
    with pytest.raises(KeyUnavailableError):
        await restored.load(key_of("alice"))
    assert (await journal.load(key_of("bob"))).summary == MARKER
    alice = await Keyring(local(root), KeyFile(kek)).load("default/agent/alice")
    assert alice.status == "erased"


async def test_owners_with_hashed_path_segments(tmp_path, caplog):
    """A long user id is hashed in the path and in the owner field alike."""
    kek = tmp_path / "kek.json"
    KeyFile.create(kek)
    root = tmp_path / "journal"
    journal = Journal(local(root), encryption=KeyFile(kek))
    long_user, other_user = "u" * 200, "v" * 200
    await say(journal, key_of(long_user))
    owner = journal.owner_of(key_of(long_user))
    other = journal.owner_of(key_of(other_user))
    assert "%%" in owner.rsplit("/", 1)[1]  # the hashed long form
    ring = root / KEYRING
    [path] = ring.glob("*.key")
    assert json.loads(path.read_text())["owner"] == owner
    # Copied to another long user's (hashed) path: refused there.
    shutil.copyfile(path, root / f"@keyring/threads/{other}.key")
    keys = await Keyring(local(root), KeyFile(kek)).load(other)
    assert keys.status == "unavailable"
    assert isinstance(keys.error, KeyUnavailableError)
    assert keys.error.owner == other
    assert owner in keys.error.detail

    # Its own object is not refused: it rotates and still opens the thread.
    old = KeyFile(kek).key_id
    KeyFile.rotate(kek)
    journal = Journal(local(root), encryption=KeyFile(kek))
    with caplog.at_level(logging.WARNING, logger="journal"):
        with pytest.raises(KeyRotationIncompleteError) as raised:
            await journal.rotate_keys()
        assert raised.value.rewritten == 1
    [refused] = refusals(caplog)
    assert other in refused
    KeyFile.retire(kek, old)
    journal = Journal(local(root), encryption=KeyFile(kek))
    assert (await journal.load(key_of(long_user))).summary == MARKER
