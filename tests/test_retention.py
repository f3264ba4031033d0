"""Retention (removing records covered by an old checkpoint) and erasure."""

from __future__ import annotations

import asyncio
import itertools

import msgspec
import pytest

from journal import (
    CorruptRecordError,
    Journal,
    MessageAppended,
    Msg,
    SummarySet,
    ThreadKey,
)
from journal.engine.log import ThreadLog
from journal.layout import ThreadLayout
from stores.memory import MemoryStore

_names = itertools.count()


class Clock:
    """A wall clock the test moves by hand (expiry and retention windows)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def journal(clock: Clock) -> Journal:
    return Journal(
        MemoryStore(f"retention-{next(_names)}"), checkpoint_every=10, clock=clock
    )


async def fill(j: Journal, key: ThreadKey, n: int) -> None:
    async with j.writer(key) as w:
        for i in range(n):
            await w.append([MessageAppended(Msg("user", f"m{i}"))])


def encoded(state: object) -> bytes:
    return msgspec.msgpack.encode(state)


async def test_retention_keeps_state_and_verify_clean(journal: Journal, clock: Clock):
    key = ThreadKey("a", "s")
    await fill(journal, key, 35)
    before = await journal.load(key)
    clock.now += 8 * 24 * 3600
    await fill(journal, key, 5)  # newer records, inside the window
    expected = await journal.load(key)

    marker = await journal.retain(key)

    assert marker is not None
    log = ThreadLog(journal.store, key)
    remaining = await log.versions()
    assert remaining[0] == marker.first_retained == marker.checkpoint
    assert marker.checkpoint <= before.version
    assert all(v >= marker.checkpoint for v in await log.checkpoint_versions())
    assert encoded(await journal.load(key)) == encoded(expected)
    fresh = Journal(journal.store)
    assert encoded(await fresh.load(key)) == encoded(expected)
    report = await journal.verify(key)
    assert report.ok, [str(p) for p in report.problems]
    assert report.head == expected.version
    # Time travel before the retained checkpoint is refused clearly.
    with pytest.raises(ValueError, match="removed by retention"):
        await journal.load(key, at_version=1)
    # A writer continues after retention.
    async with journal.writer(key) as w:
        await w.append([SummarySet("after")])
    assert (await journal.load(key)).summary == "after"


async def test_retention_respects_the_window(journal: Journal, clock: Clock):
    key = ThreadKey("a", "young")
    await fill(journal, key, 30)
    assert await journal.retain(key) is None
    assert (await ThreadLog(journal.store, key).versions())[0] == 1


async def test_missing_record_without_marker_is_a_problem(
    journal: Journal, clock: Clock
):
    key = ThreadKey("a", "loss")
    await fill(journal, key, 30)
    log = ThreadLog(journal.store, key)
    await journal.store.delete(log.record_key(3))
    report = await journal.verify(key)
    assert not report.ok
    assert any(p.version == 3 and "missing" in p.message for p in report.problems)


async def test_retention_marker_without_its_checkpoint_fails_closed(
    journal: Journal, clock: Clock
):
    key = ThreadKey("a", "broken")
    await fill(journal, key, 30)
    clock.now += 8 * 24 * 3600
    marker = await journal.retain(key)
    assert marker is not None
    log = ThreadLog(journal.store, key)
    for version in await log.checkpoint_versions():
        await journal.store.delete(log.checkpoint_key(version))
    with pytest.raises(CorruptRecordError, match="removed by retention"):
        await Journal(journal.store).load(key)
    report = await journal.verify(key)
    assert not report.ok


async def test_erase_a_user_removes_only_their_threads(journal: Journal):
    alice = [ThreadKey("a", "s1", "alice"), ThreadKey("a", "s2", "alice")]
    bob = ThreadKey("a", "s1", "bob")
    anonymous = ThreadKey("a", "s1")
    for key in [*alice, bob, anonymous]:
        await fill(journal, key, 3)

    erased = await journal.erase(user_id="alice")

    assert sorted(erased, key=str) == sorted(alice, key=str)
    for key in alice:
        assert await journal.head(key) == 0
        assert await journal.store.list(key.prefix + "/") == []
    assert await journal.head(bob) == 4
    assert await journal.head(anonymous) == 4
    assert [k async for k in journal.threads(user_id="alice")] == []
    with pytest.raises(ValueError, match="user_id or session_id"):
        await journal.erase()


async def test_erase_removes_long_id_threads_that_cannot_be_named(
    journal: Journal, clock: Clock, caplog: pytest.LogCaptureFixture
):
    """A thread whose path hashes an id too long for it is named by its first
    record, its ``IDS`` object, and after retention its ``RETENTION`` marker.
    Retention removed that record here, and neither the marker nor an ``IDS``
    names it (as earlier versions wrote them): erase still deletes the thread
    (its path matches), and says it could not name it."""
    named = ThreadKey("a", "s1", "alice")
    long = ThreadKey("a", "S" * 200, "alice")
    other = ThreadKey("a", "S" * 200, "bob")
    for key in (named, long, other):
        await fill(journal, key, 35)
    clock.now += 8 * 24 * 3600
    assert await journal.retain(long) is not None
    assert await journal.retain(other) is not None
    assert await journal.first_version(long) > 1
    retention = ThreadLayout.of(long).retention_key
    data, etag = await journal.store.read(retention)
    earlier = {k: v for k, v in msgspec.json.decode(data).items() if k != "key"}
    await journal.store.replace(retention, msgspec.json.encode(earlier), if_match=etag)
    assert await journal.store.delete(ThreadLayout.of(long).ids_key)

    with caplog.at_level("WARNING"):
        erased = await journal.erase(user_id="alice")

    assert erased == [named]
    for key in (named, long):
        assert await journal.store.list(key.prefix + "/") == []
    assert any(long.prefix in r.getMessage() for r in caplog.records)
    assert await journal.head(other) == 36
    assert len((await journal.load(other)).context) == 35


async def test_erase_after_shred_removes_long_id_threads(tmp_path):
    """The documented two steps, shred then erase: after the shred, a long-id
    thread's first record cannot be decrypted to name it; erase deletes it
    anyway."""
    from journal.crypto import StaticKeys, generate_key

    j = Journal.open(tmp_path / "j", encryption=StaticKeys([generate_key()]))
    short = ThreadKey("a", "s1", "alice")
    long = ThreadKey("a", "S" * 200, "alice")
    for key in (short, long):
        await fill(j, key, 2)
    assert await j.shred(user_id="alice")
    await j.erase(user_id="alice")
    for key in (short, long):
        assert await j.store.list(key.prefix + "/") == []
    await j.aclose()


async def test_erase_the_anonymous_user(journal: Journal):
    await fill(journal, ThreadKey("a", "s1"), 2)
    await fill(journal, ThreadKey("a", "s1", "~"), 2)
    erased = await journal.erase(user_id=None)
    assert erased == [ThreadKey("a", "s1")]
    assert await journal.head(ThreadKey("a", "s1", "~")) == 3


async def test_first_version_and_ls_count_what_retention_kept(tmp_path):
    """After retention, ls counts the records kept, not the head."""
    from journal.cli.commands.ls import summarize_thread

    now = [1_000_000.0]
    j = Journal.open(str(tmp_path / "j"), checkpoint_every=10)
    j = Journal(j.store, checkpoint_every=10, clock=lambda: now[0])
    key = ThreadKey("a", "s")
    await fill(j, key, 35)
    assert await j.first_version(key) == 1
    now[0] += 8 * 24 * 3600
    await fill(j, key, 5)
    marker = await j.retain(key)
    assert marker is not None
    head = await j.head(key)
    assert await j.first_version(key) == marker.first_retained > 1
    summary = await summarize_thread(j, key)
    assert summary.head == head
    assert summary.records == head - marker.first_retained + 1
    kept = [r async for r in j.records(key, marker.first_retained)]
    assert summary.records == len(kept)


async def test_records_start_where_retention_left_the_log(
    journal: Journal, clock: Clock
):
    """Records removed on purpose are not reported as missing: iteration from
    below the first kept version starts at it; a record missing above it is still
    corruption."""
    key = ThreadKey("a", "records")
    await fill(journal, key, 35)
    clock.now += 8 * 24 * 3600
    await fill(journal, key, 5)
    marker = await journal.retain(key)
    assert marker is not None
    head = await journal.head(key)
    for start in (1, marker.first_retained - 1, marker.first_retained):
        versions = [r.version async for r in journal.records(key, start)]
        assert versions == list(range(marker.first_retained, head + 1))
    later = [r.version async for r in journal.records(key, head - 1)]
    assert later == [head - 1, head]
    log = ThreadLog(journal.store, key)
    await journal.store.delete(log.record_key(marker.first_retained + 2))
    with pytest.raises(CorruptRecordError, match="missing"):
        _ = [r async for r in journal.records(key)]


async def test_the_cli_reads_runs_and_exports_a_retained_thread(tmp_path):
    """``runs``, ``recover`` and ``export`` read from where retention left the log."""
    from journal.cli.app import main as cli_main

    now = [1_000_000.0]
    root = str(tmp_path / "j")
    j = Journal(Journal.open(root).store, checkpoint_every=10, clock=lambda: now[0])
    key = ThreadKey("a", "s")
    await fill(j, key, 35)
    now[0] += 8 * 24 * 3600
    await fill(j, key, 5)
    assert await j.retain(key) is not None
    await j.aclose()
    thread = ["--root", root, "--agent", "a", "--session", "s"]
    for argv in (
        ["runs", *thread],
        ["recover", *thread],
        ["export", *thread, "--output", str(tmp_path / "out.jsonl")],
    ):
        assert await asyncio.to_thread(cli_main, argv) == 0, argv
    exported = (tmp_path / "out.jsonl").read_text().splitlines()
    again = Journal.open(root)
    assert len(exported) == await again.head(key) - await again.first_version(key) + 1
