"""A flipped-bit sweep over every file a thread keeps on local disk.

For each of many seeded flips (one bit, anywhere in any file of the thread: segments
and their reserves, record files, blobs, checkpoints, the hint, the lease), readers
must either refuse (``CorruptRecordError``) or load exactly the state they loaded
before; and ``verify`` may be clean only when the records still read back as they
were. A flip that changes what a reader sees without a word is the failure.

``AJ_FLIPS`` sets the number of flips per layout (CI runs 500 per layout, 1,000 in
all; ``AJ_FLIPS=5000`` gives the full 10,000). ``AJ_FLIP_SEED`` replays one seed.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import CorruptRecordError, Journal, MessageAppended, Msg, ThreadKey
from journal.errors import UnknownEventError

if TYPE_CHECKING:
    from pathlib import Path

FLIPS = int(os.environ.get("AJ_FLIPS", "500"))
ONE_SEED = os.environ.get("AJ_FLIP_SEED")
BIG = "x" * (70 * 1024)  # above the blob threshold: stored as a blob


async def build(root: Path, segments: bool) -> tuple[ThreadKey, Journal]:
    j = Journal.open(str(root), checkpoint_every=4, segments=segments)
    key = ThreadKey("flip-agent", "s1", user_id="u")
    async with j.writer(key, holder="builder") as w:
        for i in range(11):
            text = BIG if i == 5 else f"message {i} " * (i + 1)
            await w.append([MessageAppended(Msg("user", text, id=f"m{i}"))])
        await w.checkpoint()
        await w.append([MessageAppended(Msg("assistant", "after", id="last"))])
    return key, j


def encoded(value: object) -> bytes:
    return msgspec.msgpack.encode(value)


async def observe(root: Path, segments: bool, key: ThreadKey):
    """What a fresh reader sees: the state, the records, and verify's verdict."""
    j = Journal.open(str(root), checkpoint_every=0, segments=segments)
    try:
        state: bytes | None = encoded(await j.load(key))
    except (CorruptRecordError, UnknownEventError):
        state = None
    try:
        records: bytes | None = encoded([r async for r in j.records(key)])
    except (CorruptRecordError, UnknownEventError):
        records = None
    report = await j.verify(key)
    return state, records, report


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("segments", [True, False], ids=["segments", "files"])
async def test_no_flip_changes_what_readers_see_silently(tmp_path, segments):
    root = tmp_path / "journal"
    key, _ = await build(root, segments)
    want_state, want_records, report = await observe(root, segments, key)
    assert report.ok, [str(p) for p in report.problems]
    assert want_state is not None
    assert want_records is not None
    files = files_of(root)
    sizes = [f.stat().st_size for f in files]
    seeds = [int(ONE_SEED)] if ONE_SEED else range(FLIPS)
    failures: list[str] = []
    for seed in seeds:
        rng = random.Random(seed)  # noqa: S311 - reproducible damage, not secrets
        # Files in proportion to their size, so every byte is as likely.
        (path,) = rng.choices(files, weights=[max(s, 1) for s in sizes])
        original = path.read_bytes()
        if not original:
            continue
        offset = rng.randrange(len(original))
        bit = 1 << rng.randrange(8)
        damaged = bytearray(original)
        damaged[offset] ^= bit
        path.write_bytes(bytes(damaged))
        try:
            state, records, report = await observe(root, segments, key)
        finally:
            path.write_bytes(original)
        where = f"seed {seed}: bit {bit:#04x} at {offset} of {path.relative_to(root)}"
        if state is not None and state != want_state:
            failures.append(f"{where}: load returned another state without an error")
        if report.ok and records != want_records:
            failures.append(f"{where}: verify is clean but the records differ")
    assert not failures, f"{len(failures)} silent flips:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("spot", [1, 4, 6, 8, 20])
async def test_a_flipped_bit_in_the_last_header_is_read_and_reported(tmp_path, spot):
    """The last frame's header rotted: readers still read it, verify says so."""
    root = tmp_path / "journal"
    key, _ = await build(root, True)
    want_state, want_records, _ = await observe(root, True, key)
    (segment,) = (root / key.prefix / "log").glob(".seg-*")
    data = bytearray(segment.read_bytes())
    last = data.rfind(b"AJF1")  # the last frame starts there (its magic)
    data[last + spot] ^= 0x04
    segment.write_bytes(bytes(data))
    state, records, report = await observe(root, True, key)
    assert state == want_state
    assert records == want_records
    assert not report.ok
    (problem,) = report.problems
    assert problem.version == 13
    assert "damaged frame" in problem.message
    # A writer goes on after it and keeps it.
    j = Journal.open(str(root), checkpoint_every=0)
    async with j.writer(key) as w:
        await w.append([MessageAppended(Msg("user", "later", id="later"))])
    assert [r.version async for r in j.records(key)][-3:] == [13, 14, 15]
