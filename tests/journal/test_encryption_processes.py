"""kill -9 on an encrypted journal: nothing acknowledged is lost, nothing is readable.

The children of ``test_processes`` run with ``AJ_CHILD_KEK`` set, so every record,
checkpoint and chunk they write is encrypted (and each process unwraps the data key
itself). After each kill a fresh reader with the key checks every acknowledged
commit; at the end the root holds no plaintext and verifies with and without keys.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import signal
import uuid

import pytest

from journal import EnvKey, Journal, ThreadKey
from journal.crypto import generate_key
from tests.journal._child import KEK_ENV
from tests.journal._procs import Child, check_acknowledged

KILLS = int(os.environ.get("AJ_CRYPT_KILLS", "10"))
"""Kills per layout (small in CI: the plain suite does the volume)."""


@pytest.mark.parametrize("layout", ["segments", "files"])
async def test_encrypted_writer_killed_at_random_moments(tmp_path, monkeypatch, layout):
    monkeypatch.setenv(KEK_ENV, base64.b64encode(generate_key()).decode())
    root = tmp_path / "journal"
    key = ThreadKey("proc-agent", f"s-{uuid.uuid4().hex[:12]}", user_id="u")
    seed = int(os.environ.get("AJ_KILL_SEED", uuid.uuid4().int % 2**32))
    rng = random.Random(seed)  # noqa: S311 - test scheduling, not cryptography
    segments = layout == "segments"
    reader = Journal.open(root, segments=segments, encryption=EnvKey(KEK_ENV, ""))
    acked: dict[str, int] = {}
    for round_ in range(KILLS):
        child = Child("crash", root, key, round_, rng.choice([0, 1, 2, 5]), layout)
        try:
            child.wait_for("READY" if rng.random() < 0.7 else "START")
            await asyncio.sleep(rng.uniform(0.0, 0.05))
            child.kill()
            assert child.finish() == -signal.SIGKILL, (seed, child.stderr())
        finally:
            child.close()
        acked |= child.acks()
        await check_acknowledged(reader, key, acked, {b: b for b in acked})
    assert acked, f"no commit was acknowledged (seed {seed})"
    report = await reader.verify(key)
    assert report.ok, [str(p) for p in report.problems]
    assert report.encryption == "on"
    keyless = await Journal.open(root, segments=segments).verify(key)
    assert keyless.ok, [str(p) for p in keyless.problems]
    assert keyless.encryption == "locked"
    stored = b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
    # Each message's text is its batch id: it may appear nowhere as stored
    # plaintext would hold it (a msgpack string, header and all, or a JSON one).
    # The bare id ("r8-7", four bytes) is no test: ciphertext, being random,
    # holds any given four bytes now and then (once in a CI run, ~50 KB).
    assert not [b for b in acked if any(f in stored for f in _plaintext_forms(b))]


def _plaintext_forms(text: str) -> set[bytes]:
    raw = text.encode()
    assert len(raw) < 32  # a msgpack fixstr: one header byte
    return {bytes([0xA0 | len(raw)]) + raw, b'"' + raw + b'"'}
