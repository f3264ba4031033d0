"""Signed seals: ``verify(trust=...)`` fails on any history that does not extend them.

The forgeries are made the way someone with write access to the storage and this
project's code would make them: with a ``Journal`` (its own codec, its own hash
chain), so that every record and chain check still passes and only the seals can
tell.
"""

from __future__ import annotations

import shutil

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.crypto import StaticKeys, generate_key
from journal.errors import CorruptRecordError
from journal.seals import decode_seal, encode_seal, load_public_key, public_key_text
from stores.local import LocalStore

KEY = ThreadKey("agent", "s1", user_id="alice")
OTHER = ThreadKey("agent", "s2", user_id="alice")
SIGNER = Ed25519PrivateKey.generate()
TRUST = SIGNER.public_key()


def journal_at(root, *, signed=True, provider=None, every=5):
    return Journal(
        LocalStore(root, segments=False, fsync=False),
        checkpoint_every=every,
        encryption=provider,
        signing_key=SIGNER if signed else None,
    )


async def write(journal, key, texts):
    async with journal.writer(key) as w:
        for text in texts:
            await w.append([MessageAppended(Msg("user", text))])


def log_dir(root, key=KEY):
    return root / "default/agent/alice" / key.session_id / "main"


async def forge_keeping_seals(root, provider, turns):
    """Rewrite KEY's thread with the project's own code, then put its seals back.

    Returns the forger's journal, and whether its chain verified before the seals
    came back (it does: the chain alone cannot tell).
    """
    seals = log_dir(root) / "seals"
    kept = root / "kept-seals"
    shutil.copytree(seals, kept)
    for child in log_dir(root).iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    forger = journal_at(root, signed=False, provider=provider)
    await write(forger, KEY, [f"forged {i}" for i in range(turns)])
    chain_ok = (await forger.verify(KEY)).ok
    shutil.copytree(kept, seals)
    return forger, chain_ok


@pytest.fixture(params=["plain", "encrypted"])
def provider(request):
    return StaticKeys([generate_key()]) if request.param == "encrypted" else None


async def test_a_sealed_history_verifies(tmp_path, provider):
    journal = journal_at(tmp_path, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(12)])
    report = await journal.verify(KEY, trust=TRUST)
    assert report.ok, report.problems
    # Every checkpoint was sealed (closing the writer may have taken one at 13).
    assert 5 <= report.sealed <= 13
    seal = await journal.seal(KEY)
    assert seal.version == 13
    report = await journal.verify(KEY, trust=TRUST)
    assert report.sealed == 13
    assert report.ok
    # An auditor with the public key only (no data keys) checks the same.
    report = await Journal.open(tmp_path).verify(KEY, trust=TRUST)
    assert report.ok, report.problems
    assert report.sealed == 13
    # The printed seal round-trips and works as an anchor.
    printed = encode_seal(await journal.latest_seal(KEY, TRUST))
    anchor = decode_seal(printed)
    report = await journal.verify(KEY, trust=TRUST, anchor=anchor)
    assert report.ok
    assert load_public_key(public_key_text(TRUST)) == TRUST


async def test_a_consistent_rewrite_is_caught(tmp_path, provider):
    journal = journal_at(tmp_path, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(12)])
    forger, chain_ok = await forge_keeping_seals(tmp_path, provider, 12)
    assert chain_ok  # the chain alone cannot tell
    seals = log_dir(tmp_path) / "seals"
    report = await forger.verify(KEY, trust=TRUST)
    assert not report.ok
    assert any("rewritten" in str(p) for p in report.problems)
    # And with the seals deleted as well: no seal is a failure too.
    shutil.rmtree(seals)
    report = await forger.verify(KEY, trust=TRUST)
    assert not report.ok
    assert any("no seal signed by" in str(p) for p in report.problems)


async def test_a_truncation_rechained_is_caught(tmp_path, provider):
    journal = journal_at(tmp_path, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(12)])
    anchor = await journal.seal(KEY)
    logs = log_dir(tmp_path) / "log"
    for record in sorted(logs.iterdir())[7:]:
        record.unlink()  # keep versions 1-7 (sealed up to 5)
    (log_dir(tmp_path) / "LAST_CHECKPOINT").unlink()
    for ckpt in (log_dir(tmp_path) / "checkpoints").iterdir():
        if ckpt.name > "00000000000000000007":
            ckpt.unlink()
    forger = journal_at(tmp_path, signed=False, provider=provider, every=0)
    await write(forger, KEY, [f"other {i}" for i in range(8)])
    assert (await forger.verify(KEY)).ok
    report = await forger.verify(KEY, trust=TRUST)
    assert not report.ok
    # Deleting the newer seals too leaves a history that extends the seal at 5,
    # which only the anchor kept elsewhere can refute.
    for seal in (log_dir(tmp_path) / "seals").iterdir():
        if seal.name > "00000000000000000007":
            seal.unlink()
    assert (await forger.verify(KEY, trust=TRUST)).ok
    report = await forger.verify(KEY, trust=TRUST, anchor=anchor)
    assert not report.ok


async def test_a_seal_replayed_from_another_thread_is_caught(tmp_path, provider):
    journal = journal_at(tmp_path, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(6)])
    unsigned = journal_at(tmp_path, signed=False, provider=provider)
    await write(unsigned, OTHER, [f"m{i}" for i in range(6)])
    shutil.copytree(log_dir(tmp_path) / "seals", log_dir(tmp_path, OTHER) / "seals")
    report = await unsigned.verify(OTHER, trust=TRUST)
    assert not report.ok
    assert any("another thread" in str(p) for p in report.problems)


async def test_a_seal_by_another_key_is_caught(tmp_path):
    journal = journal_at(tmp_path)
    await write(journal, KEY, [f"m{i}" for i in range(6)])
    report = await journal.verify(KEY, trust=Ed25519PrivateKey.generate().public_key())
    assert not report.ok
    assert any("does not verify" in str(p) for p in report.problems)


async def test_seal_needs_a_signing_key(tmp_path):
    journal = journal_at(tmp_path, signed=False)
    await write(journal, KEY, ["m"])
    with pytest.raises(ValueError, match="signing_key"):
        await journal.seal(KEY)


async def test_an_on_demand_seal_refuses_a_history_rewritten_after_its_seals(
    tmp_path, provider
):
    journal = journal_at(tmp_path, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(12)])
    last = await journal.latest_seal(KEY, TRUST)
    assert last is not None
    await forge_keeping_seals(tmp_path, provider, 14)
    seals = log_dir(tmp_path) / "seals"
    before = sorted(p.name for p in seals.iterdir())
    # The signer must not vouch for a head whose history does not extend what it
    # sealed before.
    with pytest.raises(CorruptRecordError, match="sealed") as caught:
        await journal.seal(KEY)
    assert caught.value.version == last.version
    assert sorted(p.name for p in seals.iterdir()) == before


async def test_an_on_demand_seal_refuses_a_thread_cut_short_below_its_seal(
    tmp_path, provider
):
    journal = journal_at(tmp_path, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(12)])
    last = await journal.seal(KEY)
    assert last.version > 7
    for record in sorted((log_dir(tmp_path) / "log").iterdir())[7:]:
        record.unlink()
    (log_dir(tmp_path) / "LAST_CHECKPOINT").unlink()
    reopened = journal_at(tmp_path, provider=provider)
    assert await reopened.head(KEY) < last.version
    with pytest.raises(CorruptRecordError, match="cut short") as caught:
        await reopened.seal(KEY)
    assert caught.value.version == last.version


async def test_an_on_demand_seal_refuses_a_broken_chain(tmp_path, provider):
    # No seal yet (written unsigned): the whole chain is checked before the first.
    unsigned = journal_at(tmp_path, signed=False, provider=provider)
    await write(unsigned, KEY, [f"m{i}" for i in range(8)])
    record = log_dir(tmp_path) / "log" / f"{3:020d}.rec"
    data = bytearray(record.read_bytes())
    data[len(data) // 2] ^= 0x01
    record.write_bytes(bytes(data))
    signer = journal_at(tmp_path, provider=provider)
    with pytest.raises(CorruptRecordError) as caught:
        await signer.seal(KEY)
    assert caught.value.version == 3
    assert not (log_dir(tmp_path) / "seals").exists() or not any(
        (log_dir(tmp_path) / "seals").iterdir()
    )
    # Mended (the record put back as it was), the thread seals at its head.
    data[len(data) // 2] ^= 0x01
    record.write_bytes(bytes(data))
    seal = await signer.seal(KEY)
    assert seal.version == await signer.head(KEY)
    assert (await signer.verify(KEY, trust=TRUST)).ok


def clocked(root, now, *, signed=True, provider=None, every=5):
    return Journal(
        LocalStore(root, segments=False, fsync=False),
        checkpoint_every=every,
        encryption=provider,
        signing_key=SIGNER if signed else None,
        clock=lambda: now[0],
    )


async def test_a_rewrite_hidden_behind_retention_is_caught(tmp_path, provider):
    """A forger rewrites the thread, has retention remove everything the kept
    seals (and the anchor) vouch for, then puts the seals back: seals of removed
    versions vouch for nothing kept, so the history has no valid seal."""
    now = [1_000_000.0]
    journal = clocked(tmp_path, now, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(12)])
    anchor = await journal.seal(KEY)
    seals = log_dir(tmp_path) / "seals"
    kept = tmp_path / "kept-seals"
    shutil.copytree(seals, kept)
    for child in log_dir(tmp_path).iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    forger = clocked(tmp_path, now, signed=False, provider=provider)
    await write(forger, KEY, [f"forged {i}" for i in range(30)])
    now[0] += 8 * 24 * 3600
    marker = await forger.retain(KEY)
    assert marker is not None
    assert marker.first_retained > anchor.version
    shutil.copytree(kept, seals, dirs_exist_ok=True)
    report = await forger.verify(KEY, trust=TRUST)
    assert not report.ok, report.warnings
    assert report.sealed == 0
    report = await forger.verify(KEY, trust=TRUST, anchor=anchor)
    assert not report.ok
    assert any("anchor" in str(p) for p in report.problems)


async def test_a_retained_signed_thread_still_verifies(tmp_path, provider):
    """Retention keeps a sealed checkpoint: the seal there vouches for what was
    kept, and the seals of removed versions are only warnings."""
    now = [1_000_000.0]
    journal = clocked(tmp_path, now, provider=provider)
    await write(journal, KEY, [f"m{i}" for i in range(30)])
    now[0] += 8 * 24 * 3600
    await write(journal, KEY, ["newer"])
    marker = await journal.retain(KEY)
    assert marker is not None
    report = await journal.verify(KEY, trust=TRUST)
    assert report.ok, report.problems
    assert report.sealed >= marker.first_retained
    assert any("retention removed" in str(w) for w in report.warnings)
