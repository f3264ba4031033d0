"""A damaged ``LEASE``: detected, reported by ``verify``, survived without hand edits.

One flipped digit of ``expires_at`` must not lock a thread for centuries, and the next
fence must still outrank every epoch in the log. ``LEASE`` objects written before the
checksum existed keep working. Each test runs on the memory store (damaged through
the store) and on the local store (damaged in the file on disk).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import (
    FencedError,
    Journal,
    LeaseAcquired,
    LeaseHeldError,
    MessageAppended,
    Msg,
    ThreadKey,
)
from journal.engine.lease import LeaseRecord, encode_lease, lease_checksum
from journal.engine.log import ThreadLog

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class Where:
    """A journal's URL and how its ``LEASE`` bytes are read and replaced."""

    url: str
    root: Path | None = None  # the local store's root: damage the file itself

    def open(self) -> Journal:
        return Journal.open(self.url, checkpoint_every=0)

    async def lease_bytes(self, key: ThreadKey) -> bytes:
        j = self.open()
        return (await j.store.read(ThreadLog(j.store, key).lease_key))[0]

    async def put_lease(self, key: ThreadKey, data: bytes) -> None:
        j = self.open()
        lease_key = ThreadLog(j.store, key).lease_key
        if self.root is not None:
            (self.root / lease_key).write_bytes(data)
        else:
            await j.store.replace(lease_key, data, if_match=None)


@pytest.fixture(params=["memory", "local"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    if request.param == "memory":
        return Where(f"memory://lease-damage-{uuid.uuid4().hex}")
    return Where(str(tmp_path / "journal"), tmp_path / "journal")


def new_key() -> ThreadKey:
    return ThreadKey("lease-agent", f"s-{uuid.uuid4().hex[:12]}")


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text, id=f"id-{text}"))


async def build(where: Where, key: ThreadKey) -> list[int]:
    """Three writers in turn (closed); the epochs of the log."""
    j = where.open()
    for holder in ("node-a", "node-b", "node-c"):
        async with j.writer(key, holder=holder) as w:
            await w.append([say(holder)])
    return [r.epoch async for r in _records(j, key)]


async def _records(j: Journal, key: ThreadKey):  # type: ignore[no-untyped-def]
    async for record in j.records(key):
        yield record


def flip_expiry_digit(data: bytes) -> bytes:
    """Turn the leading digit of ``expires_at`` into a 9: centuries from now.

    A released lease's expiry is 0.0, which a 9 there leaves in the past: its
    leading digit becomes a 9 followed by ten more digits, still centuries ahead.
    """
    marker = b'"expires_at":'
    at = data.index(marker) + len(marker)
    if data[at : at + 4] == b"0.0,":
        return data[:at] + b"99999999999" + data[at + 1 :]
    assert data[at : at + 1] == b"1", data
    return data[:at] + b"9" + data[at + 1 :]


def lease_findings(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(w) for w in report.warnings + report.problems if "LEASE" in str(w)]


async def assert_one_writer_wins(
    where: Where, key: ThreadKey, before: list[int], holder: str = "node-new"
) -> int:
    """``holder`` acquires at once, above every earlier epoch, and appends."""
    j = where.open()
    async with j.writer(key, holder=holder) as w:  # wait=0: fails if locked
        assert w.epoch > max(before)
        await w.append([say(holder)])
        epoch = w.epoch
    records = [r async for r in _records(j, key)]
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs)
    assert len(set(epochs[len(before) :])) == 1  # our fence and append, one epoch
    assert isinstance(records[len(before)].events[0], LeaseAcquired)
    report = await j.verify(key)
    assert report.ok, [str(p) for p in report.problems]
    assert lease_findings(report) == []  # the new writer's LEASE is sound
    return epoch


async def test_new_leases_carry_a_ttl_and_a_checksum(where: Where) -> None:
    key = new_key()
    await build(where, key)
    raw = msgspec.json.decode(await where.lease_bytes(key))
    assert set(raw) == {"holder", "epoch", "expires_at", "acquired_at", "ttl", "sha256"}
    assert raw["ttl"] == 30.0
    record = LeaseRecord(
        raw["holder"], raw["epoch"], raw["expires_at"], raw["acquired_at"], raw["ttl"]
    )
    assert raw["sha256"] == lease_checksum(record)

    # A reader that knows only the four original fields still reads it.
    class OldLease(msgspec.Struct):
        holder: str
        epoch: int
        expires_at: float
        acquired_at: float

    old = msgspec.json.decode(await where.lease_bytes(key), type=OldLease)
    assert (old.holder, old.epoch) == ("node-c", raw["epoch"])


async def test_a_flipped_expiry_digit_does_not_lock_the_thread(where: Where) -> None:
    key = new_key()
    before = await build(where, key)
    await where.put_lease(key, flip_expiry_digit(await where.lease_bytes(key)))
    report = await where.open().verify(key)
    assert report.ok  # no record is at risk
    findings = lease_findings(report)
    assert len(findings) == 1, findings
    assert "checksum mismatch" in findings[0]
    await assert_one_writer_wins(where, key, before)


async def test_damage_to_a_held_lease_fences_the_holder(where: Where) -> None:
    """The lease stops proving its live holder: the takeover fences it, once."""
    key = new_key()
    before = await build(where, key)
    j = where.open()
    held = await j.acquire(key, holder="node-held")
    try:
        await held.append([say("held")])
        before = [r.epoch async for r in _records(j, key)]
        data = await where.lease_bytes(key)
        damaged = data.replace(b'"holder":"node-held"', b'"holder":"node-helx"')
        await where.put_lease(key, damaged)
        await assert_one_writer_wins(where, key, before)
        with pytest.raises(FencedError):
            await held.append([say("zombie")])
    finally:
        await held.close()
    texts = [m.content for m in (await j.load(key)).context]
    assert texts == ["node-a", "node-b", "node-c", "held", "node-new"]


async def test_a_damaged_epoch_never_lowers_the_next_fence(where: Where) -> None:
    key = new_key()
    before = await build(where, key)
    data = await where.lease_bytes(key)
    top = max(before)
    assert f'"epoch":{top},'.encode() in data
    await where.put_lease(key, data.replace(f'"epoch":{top},'.encode(), b'"epoch":0,'))
    findings = lease_findings(await where.open().verify(key))
    assert any("checksum mismatch" in f for f in findings), findings
    await assert_one_writer_wins(where, key, before)


async def test_an_unreadable_lease_is_reported(where: Where) -> None:
    key = new_key()
    before = await build(where, key)
    await where.put_lease(key, b'{"holder": "node-c", "epo')
    findings = lease_findings(await where.open().verify(key))
    assert len(findings) == 1, findings
    assert "unreadable" in findings[0]
    await assert_one_writer_wins(where, key, before)


def legacy(holder: str, epoch: int, expires_at: float) -> bytes:
    """A ``LEASE`` as written before the ttl and checksum fields existed."""
    return msgspec.json.encode(
        {
            "holder": holder,
            "epoch": epoch,
            "expires_at": expires_at,
            "acquired_at": time.time() - 5,
        }
    )


async def test_a_live_legacy_lease_is_still_honoured(where: Where) -> None:
    key = new_key()
    before = await build(where, key)
    top = max(before)
    await where.put_lease(key, legacy("node-old", top, time.time() + 30))
    report = await where.open().verify(key)
    assert lease_findings(report) == []
    with pytest.raises(LeaseHeldError) as info:
        await where.open().acquire(key, holder="node-new")
    assert info.value.holder == "node-old"
    # Its holder (restarted) takes it over, and rewrites it with a checksum.
    epoch = await assert_one_writer_wins(where, key, before, holder="node-old")
    assert epoch == top + 1
    assert b'"sha256":' in await where.lease_bytes(key)


async def test_an_expired_legacy_lease_is_taken_over(where: Where) -> None:
    key = new_key()
    before = await build(where, key)
    await where.put_lease(key, legacy("node-old", max(before), time.time() - 1))
    assert lease_findings(await where.open().verify(key)) == []
    await assert_one_writer_wins(where, key, before)


async def test_a_legacy_lease_centuries_ahead_is_not_believed(where: Where) -> None:
    key = new_key()
    before = await build(where, key)
    damaged = flip_expiry_digit(legacy("node-old", max(before), time.time() + 30))
    await where.put_lease(key, damaged)
    findings = lease_findings(await where.open().verify(key))
    assert len(findings) == 1, findings
    assert "not believed" in findings[0]
    await assert_one_writer_wins(where, key, before)


async def test_an_expiry_beyond_the_recorded_ttl_is_not_believed(where: Where) -> None:
    """Even with a valid checksum (a holder whose clock was years off)."""
    key = new_key()
    before = await build(where, key)
    now = time.time()
    far = LeaseRecord("node-off", max(before), now + 10 * 365 * 86400, now, 30.0)
    await where.put_lease(key, encode_lease(far))
    findings = lease_findings(await where.open().verify(key))
    assert len(findings) == 1, findings
    assert "not believed" in findings[0]
    assert "ttl (30 s)" in findings[0]
    await assert_one_writer_wins(where, key, before)


async def test_a_lease_with_an_absurd_ttl_is_reported(where: Where) -> None:
    """A huge ttl asked for is honoured, but verify says the thread is locked."""
    key = new_key()
    before = await build(where, key)
    now = time.time()
    ttl = 10 * 365 * 86400.0
    await where.put_lease(
        key, encode_lease(LeaseRecord("node-slow", max(before), now + ttl, now, ttl))
    )
    findings = lease_findings(await where.open().verify(key))
    assert len(findings) == 1, findings
    assert "expires in 36" in findings[0]
    with pytest.raises(LeaseHeldError):
        await where.open().acquire(key, holder="node-new")


async def test_a_lease_below_the_log_epoch_is_reported(where: Where) -> None:
    key = new_key()
    before = await build(where, key)
    now = time.time()
    await where.put_lease(key, encode_lease(LeaseRecord("node-x", 1, now, now, 30.0)))
    findings = lease_findings(await where.open().verify(key))
    assert len(findings) == 1, findings
    assert f"below epoch {max(before)}" in findings[0]
    await assert_one_writer_wins(where, key, before)
