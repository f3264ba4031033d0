"""Key ids read from storage are the library's own forms, or the object is damaged.

A container names its data key in bytes that whoever can write the storage chooses;
control characters there must not reach warnings, errors or the CLI's output raw
(``"\\n\\x1b[32mALL OK"`` would forge a line of ``verify``). Every id the library
makes (data keys ``d-`` and 16 hex digits, KEKs ``k-`` and 16 hex digits) passes.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ToolCallCompleted
from journal.cli import main
from journal.crypto import (
    BLOB_MAGIC,
    CHECKPOINT_MAGIC,
    KeyFile,
    StaticKeys,
    container_key_id,
    generate_key,
    is_container,
    is_data_key_id,
    is_kek_id,
    seal_container,
)
from journal.errors import CorruptRecordError
from tests.journal._keyrings import FORGED as FORGED_TEXT
from tests.journal._keyrings import KEY, RAW, THREAD, journal_of

FORGED = FORGED_TEXT.encode()

if TYPE_CHECKING:
    from pathlib import Path


async def fill(journal: Journal) -> None:
    async with journal.writer(KEY) as w:
        for i in range(3):
            await w.append([MessageAppended(Msg("user", f"message {i}"))])
        await w.append([ToolCallCompleted("c1", "x" * 100_000)])  # a blob
        await w.checkpoint()


def rename_key(path: Path, ident: bytes) -> None:
    """Make the container at ``path`` name the data key ``ident`` instead."""
    data = path.read_bytes()
    n = data[4]
    path.write_bytes(data[:4] + bytes([len(ident)]) + ident + data[5 + n :])


def assert_escaped(text: str, *, shown: bool = True) -> None:
    for raw in RAW:
        assert raw not in text
    if shown:
        assert "\\x1b" in text  # shown, escaped (repr)


async def test_every_id_the_library_makes_has_its_form(tmp_path):
    provider = StaticKeys([generate_key(), generate_key()])
    assert all(is_kek_id(i) for i in provider.key_ids)
    key_file = KeyFile.create(tmp_path / "kek.json")
    KeyFile.rotate(key_file.path)
    assert all(is_kek_id(i) for i in KeyFile(key_file.path).key_ids)
    root = tmp_path / "journal"
    await fill(journal_of(root, provider))
    key_object = json.loads(
        (root / "@keyring/threads/default/agent/alice.key").read_text()
    )
    assert key_object["keys"]
    for entry in key_object["keys"]:
        assert is_data_key_id(entry["id"])
        assert is_kek_id(entry["kek"])
    stored = [
        p.read_bytes()
        for p in (root / THREAD).rglob("*")
        if p.is_file() and p.parent.name in {"blobs", "checkpoints"}
    ]
    containers = [
        d
        for d in stored
        if is_container(d, BLOB_MAGIC) or is_container(d, CHECKPOINT_MAGIC)
    ]
    assert len(containers) >= 2
    for data in containers:
        assert container_key_id(data) == key_object["keys"][0]["id"]


@pytest.mark.parametrize(
    "form",
    [
        "",
        "{}",
        "{}0123456789abcde",
        "{}0123456789abcdef0",
        "{}0123456789ABCDEF",
        "{}0123456789abcdeg",
        " {}0123456789abcdef",
        "{}0123456789abcdef\n",
        "{}0123456789abcde\x1b",
    ],
)
def test_other_forms_are_not_key_ids(form):
    assert not is_data_key_id(form.format("d-"))
    assert not is_kek_id(form.format("k-"))


def test_a_data_key_id_is_not_a_kek_id():
    assert is_data_key_id("d-0123456789abcdef")
    assert not is_kek_id("d-0123456789abcdef")
    assert is_kek_id("k-0123456789abcdef")
    assert not is_data_key_id("k-0123456789abcdef")


def test_a_container_naming_a_malformed_key_is_damaged():
    sealed = seal_container(BLOB_MAGIC, "d-0123456789abcdef", generate_key(), b"x", b"")
    assert container_key_id(sealed) == "d-0123456789abcdef"
    forged = sealed[:4] + bytes([len(FORGED)]) + FORGED + sealed[5 + 18 :]
    with pytest.raises(ValueError, match="malformed data key id") as caught:
        container_key_id(forged)
    assert_escaped(str(caught.value))
    not_ascii = sealed[:4] + bytes([3]) + b"d-\xff" + sealed[5 + 18 :]
    with pytest.raises(ValueError, match="malformed data key id"):
        container_key_id(not_ascii)


def test_a_container_is_never_sealed_under_a_malformed_id():
    with pytest.raises(ValueError, match="malformed data key id"):
        seal_container(BLOB_MAGIC, "\x1b[32m", generate_key(), b"x", b"")


async def test_a_malformed_kek_id_is_damage_shown_escaped():
    provider = StaticKeys([generate_key()])
    with pytest.raises(LookupError, match="k-0123456789abcdef"):
        await provider.unwrap("k-0123456789abcdef", b"x" * 40, b"owner")
    with pytest.raises(ValueError, match="malformed") as caught:
        await provider.unwrap(FORGED.decode(), b"x" * 40, b"owner")
    assert not isinstance(caught.value, LookupError)
    assert_escaped(str(caught.value))


async def test_a_forged_checkpoint_key_id_is_escaped_in_warnings(tmp_path):
    provider = StaticKeys([generate_key()])
    await fill(journal_of(tmp_path, provider))
    checkpoint = max((tmp_path / THREAD / "checkpoints").iterdir())
    rename_key(checkpoint, FORGED)
    _, warnings = await journal_of(tmp_path, provider).load_with_warnings(KEY)
    assert warnings
    assert_escaped(" ".join(warnings))


async def test_a_forged_blob_key_id_is_escaped_in_errors(tmp_path):
    provider = StaticKeys([generate_key()])
    await fill(journal_of(tmp_path, provider))
    for blob in (tmp_path / THREAD / "blobs").iterdir():
        rename_key(blob, FORGED)
    (tmp_path / THREAD / "checkpoints").rename(tmp_path / "aside")
    with pytest.raises(CorruptRecordError) as caught:
        await journal_of(tmp_path, provider).load(KEY)
    assert_escaped(str(caught.value), shown=False)


def test_verify_prints_a_forged_key_id_escaped(tmp_path, monkeypatch, capsys):
    key = generate_key()
    provider = StaticKeys([key])
    asyncio.run(fill(journal_of(tmp_path, provider)))
    rename_key(max((tmp_path / THREAD / "checkpoints").iterdir()), FORGED)
    monkeypatch.setenv("AGENT_JOURNAL_KEK", base64.b64encode(key).decode())
    code = main(["--root", str(tmp_path), "verify"])
    out = capsys.readouterr().out
    assert code == 1
    assert_escaped(out)
