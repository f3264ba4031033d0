"""Engine defects the simulation found, and now regression tests for their fixes.

Defect "writer-wedged-on-own-commit" (seeds 280, 359, 389 of the default run,
among others). A writer's commit lands but the writer cannot tell: then every later
append of that writer raises ``VersionConflictError`` ("slot taken by another
writer claiming epoch N") for a slot that holds its own commit, until it is closed
and the thread re-acquired. Nothing committed is lost and nothing is written twice,
but the writer is wedged, and the error blames another writer where there is none:
only one writer ever holds an epoch. ``ThreadWriter._taken`` recognises its own
record by batch id, or by ``_uncertain[version]``, which remembers one batch per
version and is filled only when ``publish`` itself raised. Two ways to lose it:

* S3: the reply to the create is lost and the resend reports
  ``ObjectExistsError``; reading the taken slot then fails (a transient
  ``StorageError`` out of ``_taken``), so the attempt is never recorded as
  uncertain (seed 280);
* any store: the record's reply is lost and the retry fails before applying (the
  attempt is recorded), then the next append's first publish fails in its blob
  write, and ``_uncertain[version]`` is overwritten with the new batch (seed 359).

Defect "verify-races-a-writer" (seeds 2861, 4554, 6221, 8319, 8472 of the default
run; local seed 223). ``verify`` of a healthy thread while a writer appends reports
the problem "checkpoint covers a version that is not in the log": it lists the
records first and the checkpoints afterwards, so a record and its checkpoint
written between the two listings look like an orphan checkpoint. Listing the
checkpoints first would not see this (a checkpoint is written after its record).
Seed 8319 shows it with no injected fault at all, only delays.

Fixed: ``_taken`` takes a record at the writer's own epoch under its own holder id
for an earlier attempt of its own (only one writer holds an epoch), and ``verify``
lists checkpoints before records. ``tests/sim/known.py`` no longer tolerates either.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.errors import ObjectExistsError, StorageError
from stores.memory import MemoryStore
from tests.sim.simulator import run_seed

KEY = ThreadKey("agent", "s", user_id="u")


class ScriptedStore(MemoryStore):
    """A memory store that plays scripted faults on the record and blob keys.

    Each rule is ``(op, key fragment, action)`` and fires once, in order:
    ``"fail"`` raises before applying, ``"lost"`` applies and raises a transient
    error, ``"resent"`` applies and raises ``ObjectExistsError`` (S3's resend).
    """

    def __init__(self) -> None:
        super().__init__()
        self.rules: list[tuple[str, str, str]] = []

    def _rule(self, op: str, key: str) -> str | None:
        if self.rules and self.rules[0][0] == op and self.rules[0][1] in key:
            return self.rules.pop(0)[2]
        return None

    async def create(self, key: str, data: bytes) -> str:
        action = self._rule("create", key)
        if action == "fail":
            raise StorageError(f"scripted: create {key} failed", transient=False)
        etag = await super().create(key, data)
        if action == "lost":
            raise StorageError(f"scripted: reply to {key} lost", transient=True)
        if action == "resent":
            raise ObjectExistsError(key)
        return etag

    async def read(self, key: str) -> tuple[bytes, str]:
        if self._rule("read", key) == "fail":
            raise StorageError(f"scripted: read {key} failed", transient=True)
        return await super().read(key)


def _summary(state: object) -> None:
    state.summary = "changed"  # type: ignore[attr-defined]


async def test_defect_writer_wedged_when_reading_its_own_taken_slot_fails() -> None:
    """S3: the create lands, the resend says it exists, the slot read fails."""
    store = ScriptedStore()
    j = Journal(store, checkpoint_every=0)
    w = await j.acquire(KEY, "w", lease_ttl=30.0)
    store.rules = [
        ("create", "/log/", "resent"),  # v2 lands; the resend meets it
        ("read", "/log/", "fail"),  # reading the taken slot fails
    ]
    with pytest.raises(StorageError):
        await w.update("sim", _summary)
    # The update's record is at v2, by this writer, at its epoch; the writer only
    # has to read it. It calls it another writer's, on every append from now on.
    record = await w.append([MessageAppended(Msg("user", "hi", id="m1"))])
    assert record.version == 3
    await w.close()


async def test_defect_writer_wedged_when_a_blob_failure_overwrites_doubt() -> None:
    """A lost reply, a failed retry, then the next append's blob write fails."""
    store = ScriptedStore()
    j = Journal(store, checkpoint_every=0, blob_threshold=48)
    w = await j.acquire(KEY, "w", lease_ttl=30.0)
    store.rules = [
        ("create", "/log/", "lost"),  # v2 lands, reply lost
        ("create", "/log/", "fail"),  # the retry fails before applying
    ]
    with pytest.raises(StorageError):
        await w.update("sim", _summary)
    store.rules = [("create", "/blobs/", "lost")]  # the next append's blob
    record = await w.append(
        [MessageAppended(Msg("user", "x" * 200, id="m1"))], batch_id="b1"
    )
    assert record.version == 3
    await w.close()


class ListHookStore(MemoryStore):
    """A memory store that runs ``hook`` once, right after listing ``log/``."""

    hook: Any = None

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        keys = await super().list(prefix, start_after=start_after)
        if prefix.endswith("/log/") and self.hook is not None:
            hook, self.hook = self.hook, None
            await hook()
        return keys


async def test_defect_verify_reports_a_problem_on_a_healthy_thread_being_written() -> (
    None
):
    """A record and its checkpoint land between verify's two listings."""
    store = ListHookStore()
    j = Journal(store, checkpoint_every=0)
    w = await j.acquire(KEY, "w", lease_ttl=30.0)

    async def writer_goes_on() -> None:
        await w.append([MessageAppended(Msg("user", "hi", id="m1"))])
        await w.checkpoint()

    store.hook = writer_goes_on
    report = await j.verify(KEY)
    await w.close()
    assert (await j.verify(KEY)).ok  # the thread is healthy
    assert report.ok, report.problems


@pytest.mark.parametrize("seed", [280, 359, 8319])
def test_defect_seeds(seed: int) -> None:
    """The seeds where the simulation found it, with their traces."""
    logging.disable(logging.WARNING)
    try:
        result = run_seed(seed)
    finally:
        logging.disable(logging.NOTSET)
    assert not result.violations, result.report()
