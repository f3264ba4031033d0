"""Checkpoints that loads must refuse, cheaply and without failing the load.

A checkpoint is derived data: one that cannot be decrypted, names chunks it cannot
hold, or claims more than it holds is skipped with a warning, and ``verify`` reports
what loads refuse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey, codec, compression
from journal.crypto import KeyFile
from journal.errors import CompressionUnavailableError, KeyUnavailableError

if TYPE_CHECKING:
    from pathlib import Path


def key_of(user: str = "alice") -> ThreadKey:
    return ThreadKey("agent", "s1", user_id=user)


async def fill(journal: Journal, key: ThreadKey, n: int = 6) -> None:
    """``n - 1`` messages, then a checkpoint at version ``n``."""
    async with journal.writer(key, holder="w") as w:
        for i in range(n - 1):
            text = f"{key.user_id}{i}"
            await w.append([MessageAppended(Msg("user", text, id=text))])
        await w.checkpoint()


def encrypted(tmp_path: Path, name: str = "j") -> Journal:
    kek = tmp_path / "kek.json"
    if not kek.exists():
        KeyFile.create(str(kek))
    return Journal.open(
        str(tmp_path / name), checkpoint_every=0, encryption=KeyFile(str(kek))
    )


async def assert_skipped(
    journal: Journal, key: ThreadKey, version: int, messages: int
) -> None:
    """Loads, writers and verify all get past the checkpoint at ``version``."""
    state, warnings = await journal.load_with_warnings(key)
    assert len(state.context) == messages
    assert any(f"checkpoint {version}" in w and "skipped" in w for w in warnings), (
        warnings
    )
    async with journal.writer(key, holder="next") as w:
        assert w.version == version + 1  # its own first record
    report = await journal.verify(key)
    assert any(p.version == version for p in report.problems + report.warnings), (
        report.problems,
        report.warnings,
    )


# --- checkpoints that cannot be decrypted -----------------------------------------


async def test_a_checkpoint_copied_from_another_users_thread_is_skipped(tmp_path):
    journal = encrypted(tmp_path)
    alice, bob = key_of("alice"), key_of("bob")
    await fill(journal, alice)
    await fill(journal, bob)
    stolen, _ = await journal.store.read(journal._log(bob).checkpoint_key(6))
    target = journal._log(alice).checkpoint_key(6)
    await journal.store.replace(target, stolen, if_match=None)
    await assert_skipped(journal, alice, 6, 5)


async def test_a_forged_encrypted_container_in_a_plain_journal_is_skipped(tmp_path):
    journal = Journal.open(str(tmp_path / "p"), checkpoint_every=0)
    key = key_of("carol")
    await fill(journal, key)
    forged = b"AJEC\x01x" + b"junk" * 8
    await journal.store.replace(
        journal._log(key).checkpoint_key(6), forged, if_match=None
    )
    await assert_skipped(journal, key, 6, 5)


async def test_a_checkpoint_a_keyless_reader_cannot_decrypt_is_skipped(tmp_path):
    url = str(tmp_path / "j")
    key = key_of()
    plain = Journal.open(url, checkpoint_every=0)
    async with plain.writer(key, holder="w") as w:
        for i in range(5):
            await w.append([MessageAppended(Msg("user", f"m{i}", id=f"m{i}"))])
    # A journal opened with keys checkpoints the plain thread: the log stays plain.
    assert await encrypted(tmp_path).checkpoint(key) == 6
    await assert_skipped(Journal.open(url, checkpoint_every=0), key, 6, 5)


async def test_encrypted_records_still_need_their_key_after_retention(tmp_path):
    journal = encrypted(tmp_path)
    key = key_of()
    await fill(journal, key)
    async with journal.writer(key, holder="w") as w:
        await w.append([MessageAppended(Msg("user", "after", id="after"))])
    assert await journal.retain(key, window=0) is not None
    keyless = Journal.open(str(tmp_path / "j"), checkpoint_every=0)
    # The retained checkpoint is all that is left before its record: the error is
    # the key's, not a missing history's.
    with pytest.raises(KeyUnavailableError):
        await keyless.load(key)
    with pytest.raises(KeyUnavailableError):
        await keyless.load(key, at_version=7)


async def test_checkpointing_replaces_a_checkpoint_it_cannot_decrypt(tmp_path):
    journal = Journal.open(str(tmp_path / "p"), checkpoint_every=0)
    key = key_of()
    await fill(journal, key)
    async with journal.writer(key, holder="w") as w:
        await w.append([MessageAppended(Msg("user", "more", id="more"))])
    head = w.version
    forged = b"AJEC\x01x" + b"junk" * 8
    await journal.store.replace(
        journal._log(key).checkpoint_key(head), forged, if_match=None
    )
    assert await journal.checkpoint(key) == head
    state, warnings = await journal.load_with_warnings(key)
    assert (len(state.context), warnings) == (6, [])


async def test_a_checkpoint_with_chunks_this_reader_cannot_decompress_is_skipped(
    tmp_path, monkeypatch
):
    url = str(tmp_path / "j")
    key = key_of()
    plain = Journal.open(url, checkpoint_every=0, log_spans="never")
    async with plain.writer(key, holder="w") as w:
        for i in range(5):
            await w.append([MessageAppended(Msg("user", f"m{i}", id=f"m{i}"))])
    zstd = Journal.open(url, checkpoint_every=0, compression="zstd", log_spans="never")
    assert await zstd.checkpoint(key) == 6

    def missing() -> None:
        raise CompressionUnavailableError

    # The records are plain: only the checkpoint's chunks need zstandard.
    monkeypatch.setattr(compression, "_zstd", missing)
    await assert_skipped(Journal.open(url, checkpoint_every=0), key, 6, 5)


# --- verify reports what loads refuse ---------------------------------------------


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        (
            lambda b: msgspec.structs.replace(b, message_count=b.message_count + 1),
            "message",
        ),
        (lambda b: msgspec.structs.replace(b, batches=b.batches[5:]), "batch window"),
    ],
    ids=["count", "window"],
)
async def test_verify_reports_a_checkpoint_loads_refuse(change, finding):
    journal = Journal.open(f"memory://refused-{finding}", checkpoint_every=0)
    key = key_of()
    await fill(journal, key, 8)
    log = journal._log(key)
    body = codec.decode_checkpoint(await log.read_checkpoint(8))
    await journal.store.replace(
        log.checkpoint_key(8), codec.encode_checkpoint(change(body)), if_match=None
    )
    _, warnings = await journal.load_with_warnings(key)
    assert any("checkpoint 8 is corrupt" in w for w in warnings), warnings
    report = await journal.verify(key)
    assert not report.ok
    assert [(p.version, finding in p.message) for p in report.problems] == [
        (8, True)
    ], [str(p) for p in report.problems]
