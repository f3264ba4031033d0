"""Version checks and idempotency: stale ``expected_version`` and ``batch_id`` retries.

A retry with the same ``batch_id`` returns the first commit, also when the reply to
that commit was lost (a transient or a final storage error).
"""

# ruff: noqa: S101

from __future__ import annotations

import pytest

from journal import StorageError, ToolGroupActivated, VersionConflictError
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    RecordingStore,
    all_records,
    batch_ids,
    new_key,
    say,
    texts,
)

__all__ = ["VersionsContract"]


class VersionsContract(JournalFixtures):
    """Version conflicts write nothing; a ``batch_id`` retry never commits twice."""

    async def test_expected_version_mismatch_writes_nothing(
        self, journal: JournalFactory
    ) -> None:
        """A stale expected_version raises VersionConflictError and commits nothing."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            rec = await w.append([say("one")], expected_version=w.version)
            before = await all_records(j, key)
            for stale in (rec.version - 1, rec.version + 1, 0):
                with pytest.raises(VersionConflictError) as info:
                    await w.append([say("never")], expected_version=stale)
                assert info.value.expected == stale
                assert info.value.actual == rec.version
                assert str(key) in str(info.value)
            assert w.version == rec.version
            assert await j.head(key) == rec.version
            assert batch_ids(await all_records(j, key)) == batch_ids(before)
            # The writer is still usable.
            rec2 = await w.append([say("two")], expected_version=rec.version)
            assert rec2.version == rec.version + 1
        state = await journal().load(key)
        assert texts(state) == ["one", "two"]
        assert (await journal().verify(key)).ok

    async def test_batch_id_retry_is_idempotent(self, journal: JournalFactory) -> None:
        """The same batch_id and events return the first record and write nothing."""
        key = new_key()
        j = journal()
        async with j.writer(key) as w:
            events: list[object] = [say("exactly once"), ToolGroupActivated("files")]
            first = await w.append(events, batch_id="batch-1")
            again = await w.append(list(events), batch_id="batch-1")
            assert again.version == first.version
            assert again.hash == first.hash
            assert again.batch_id == "batch-1"
            assert w.version == first.version
            await w.append([say("later")], batch_id="batch-2")
            # A retry after later commits still finds the original.
            late = await w.append(list(events), batch_id="batch-1")
            assert late.version == first.version
            with pytest.raises(ValueError, match="batch-1"):
                await w.append([say("something else")], batch_id="batch-1")
            head = w.version
        records = await all_records(journal(), key)
        assert len(records) == head
        assert batch_ids(records).count("batch-1") == 1
        assert texts(await journal().load(key)) == ["exactly once", "later"]

    @pytest.mark.parametrize("transient", [False, True])
    async def test_batch_id_retry_after_a_lost_acknowledgement(
        self, journal: JournalFactory, transient: bool
    ) -> None:
        """A commit whose reply was lost is recognised, never duplicated."""
        key = new_key()
        lose_next = [False]

        async def lose_reply(store_key: str) -> None:
            if lose_next[0] and "/log/" in store_key:
                lose_next[0] = False
                raise StorageError("the reply was lost", transient=transient)

        j = journal(wrap=lambda s: RecordingStore(s, after_create=lose_reply))
        landed: list[object] = [say("landed")]
        second: list[object] = [say("second")]
        async with j.writer(key) as w:
            base = w.version
            lose_next[0] = True
            if transient:
                # The writer retries by itself and finds its own record.
                rec = await w.append(landed, batch_id="b-lost")
            else:
                with pytest.raises(StorageError):
                    await w.append(landed, batch_id="b-lost")
                rec = await w.append(landed, batch_id="b-lost")
            assert rec.version == base + 1
            assert w.version == base + 1
            # The same batch id with other events is refused, even after a loss.
            lose_next[0] = True
            if transient:
                await w.append(second, batch_id="b-2")
            else:
                with pytest.raises(StorageError):
                    await w.append(second, batch_id="b-2")
            with pytest.raises(ValueError, match="b-2"):
                await w.append([say("not the second")], batch_id="b-2")
            rec3 = await w.append([say("third")])
            assert rec3.version == base + 3
        records = await all_records(journal(), key)
        assert batch_ids(records).count("b-lost") == 1
        assert batch_ids(records).count("b-2") == 1
        assert texts(await journal().load(key)) == ["landed", "second", "third"]
        assert (await journal().verify(key)).ok
