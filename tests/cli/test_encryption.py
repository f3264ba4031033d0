"""The CLI on encrypted, sealed journals: status, ``verify --trust``, ``seal``."""

from __future__ import annotations

import asyncio
import json

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.cli import main
from journal.crypto import KeyFile
from journal.seals import public_key_text

KEY = ThreadKey("agent", "s1", user_id="alice")
THREAD = ["--agent", "agent", "--session", "s1", "--user", "alice"]


def setup(tmp_path, monkeypatch):
    key_file = tmp_path / "kek.json"
    KeyFile.create(key_file)
    signer = Ed25519PrivateKey.generate()
    pem = tmp_path / "signing.pem"
    pem.write_bytes(
        signer.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    root = tmp_path / "journal"

    async def fill() -> None:
        journal = Journal.open(
            root, encryption=KeyFile(key_file), signing_key=pem, checkpoint_every=3
        )
        async with journal.writer(KEY) as w:
            for i in range(7):
                await w.append([MessageAppended(Msg("user", f"m{i}"))])

    asyncio.run(fill())
    monkeypatch.setenv("AGENT_JOURNAL_SIGNING_KEY", str(pem))
    return root, key_file, public_key_text(signer.public_key())


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_verify_reports_encryption_and_seals(tmp_path, monkeypatch, capsys):
    root, key_file, public = setup(tmp_path, monkeypatch)
    code, out, _ = run(capsys, "--root", str(root), "verify", *THREAD)
    assert code == 0
    assert "encryption locked" in out  # no key in the environment
    monkeypatch.setenv("AGENT_JOURNAL_KEY_FILE", str(key_file))
    code, out, _ = run(capsys, "--root", str(root), "verify", "--trust", public)
    assert code == 0, out
    assert "encryption on" in out
    assert "sealed to " in out
    code, out, _ = run(
        capsys, "--root", str(root), "--json", "verify", *THREAD, "--trust", public
    )
    document = json.loads(out)
    assert document["threads"][0]["encryption"] == "on"
    assert document["threads"][0]["sealed"] >= 3

    other = public_key_text(Ed25519PrivateKey.generate().public_key())
    code, out, _ = run(capsys, "--root", str(root), "verify", "--trust", other)
    assert code == 1
    assert "does not verify" in out


def test_seal_prints_an_anchor(tmp_path, monkeypatch, capsys):
    root, key_file, public = setup(tmp_path, monkeypatch)
    monkeypatch.setenv("AGENT_JOURNAL_KEY_FILE", str(key_file))
    code, out, _ = run(capsys, "--root", str(root), "seal", *THREAD, "--new")
    assert code == 0
    seal = json.loads(out)
    assert seal["version"] == 8
    anchor = tmp_path / "anchor.json"
    anchor.write_text(out)
    code, out, _ = run(
        capsys,
        "--root",
        str(root),
        "verify",
        *THREAD,
        "--trust",
        public,
        "--anchor",
        str(anchor),
    )
    assert code == 0, out
    assert "sealed to 8" in out
    # Without a signing key, --new is refused, and plain `seal` still prints.
    monkeypatch.delenv("AGENT_JOURNAL_SIGNING_KEY")
    code, _, err = run(capsys, "--root", str(root), "seal", *THREAD, "--new")
    assert code == 2
    assert "AGENT_JOURNAL_SIGNING_KEY" in err
    code, out, _ = run(capsys, "--root", str(root), "seal", *THREAD)
    assert json.loads(out)["version"] == 8
