"""Payloads: large events as blobs, unknown event types, upcasters.

A reader that lacks an optional event type skips it and keeps the record byte for
byte; one that lacks a required type fails closed; an upcaster lifts old schemas.
Event types registered here get unique names, so the suites may run in one process.
"""

# ruff: noqa: S101

from __future__ import annotations

import uuid

import pytest

from journal import (
    CorruptRecordError,
    Event,
    ToolCallCompleted,
    UnknownEvent,
    UnknownEventError,
    register_event,
    register_upcaster,
    unregister_event,
)
from journal.codec import BLOB_THRESHOLD
from journal.layout import ThreadLayout
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    all_records,
    encoded,
    forgotten,
    new_key,
    say,
    texts,
)

__all__ = ["PayloadContract"]


def _unique(name: str) -> str:
    return f"Contract{name}{uuid.uuid4().hex}"


class PayloadContract(JournalFixtures):
    """What a record carries: blobs, unknown event types, upcasted schemas."""

    async def test_large_payloads_are_blobs(self, journal: JournalFactory) -> None:
        """Events above the threshold are stored once under blobs/ and read back."""
        key = new_key()
        j = journal(checkpoint_every=0)
        big = "".join(f"{i:08d}" for i in range(80 * 1024 // 8))  # 80 KiB
        events: list[object] = [say(big), ToolCallCompleted("c1", {"out": big})]
        async with j.writer(key) as w:
            rec = await w.append(events)
            await w.append([say("small")])
        layout = ThreadLayout.of(key)
        blobs = await j.store.list(layout.blob_dir)
        assert len(blobs) == 2
        assert all(b.startswith(f"{key.prefix}/blobs/") for b in blobs)
        raw, _ = await j.store.read(layout.record_key(rec.version))
        assert len(raw) < 16 * 1024
        reader = journal(checkpoint_every=0)
        assert texts(await reader.load(key)) == [big, "small"]
        records = await all_records(reader, key)
        assert records[rec.version - 1].events == events
        assert (await reader.verify(key)).ok

    async def test_missing_blob_fails_closed(self, journal: JournalFactory) -> None:
        """A record whose blob is gone raises CorruptRecordError naming it."""
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            rec = await w.append([say("y" * (BLOB_THRESHOLD + 10))])
            await w.append([say("after")])
        layout = ThreadLayout.of(key)
        (blob,) = await j.store.list(layout.blob_dir)
        assert await j.store.delete(blob)
        reader = journal(checkpoint_every=0)
        with pytest.raises(CorruptRecordError) as info:
            await reader.load(key)
        assert info.value.version == rec.version
        assert str(key) in str(info.value)
        with pytest.raises(CorruptRecordError):
            await all_records(reader, key)
        report = await reader.verify(key)
        assert not report.ok
        assert any(p.version == rec.version for p in report.problems)

    async def test_unknown_optional_event_is_skipped_and_kept(
        self, journal: JournalFactory
    ) -> None:
        """An optional event type a reader lacks is skipped, reported and kept."""
        name = _unique("Optional")

        class Optional(Event, frozen=True):
            note: str

        register_event(Optional, name=name, required=False)
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            await w.append([say("before")])
            rec = await w.append([Optional("from a newer writer"), say("with it")])
            await w.append([say("after")])
        known = await j.load(key)
        layout = ThreadLayout.of(key)
        raw_before, _ = await j.store.read(layout.record_key(rec.version))
        with forgotten(name):
            reader = journal(checkpoint_every=0)
            state = await reader.load(key)
            assert encoded(state) == encoded(known)
            records = await all_records(reader, key)
            unknown = records[rec.version - 1].events[0]
            assert isinstance(unknown, UnknownEvent)
            assert (unknown.type, unknown.required) == (name, False)
            report = await reader.verify(key)
            assert report.ok, report.problems
            assert any(
                f.version == rec.version and name in f.message for f in report.warnings
            )
            # An older writer goes on writing; the unknown record stays byte for byte.
            async with reader.writer(key) as w:
                await w.append([say("by an older writer")])
            raw_after, _ = await reader.store.read(layout.record_key(rec.version))
            assert raw_after == raw_before
        state = await journal().load(key)
        assert texts(state) == ["before", "with it", "after", "by an older writer"]

    async def test_unknown_required_event_fails_closed(
        self, journal: JournalFactory
    ) -> None:
        """A required event type a reader lacks stops load and writers, never lost."""
        name = _unique("Required")

        class Required(Event, frozen=True):
            value: int

        register_event(Required, name=name, required=True)
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            await w.append([say("before")])
            rec = await w.append([Required(42)])
            await w.append([say("after")])
        head = await j.head(key)
        with forgotten(name):
            reader = journal(checkpoint_every=0)
            with pytest.raises(UnknownEventError) as info:
                await reader.load(key)
            assert info.value.version == rec.version
            assert info.value.type_name == name
            assert str(key) in str(info.value)
            # The state before the unknown record can still be had.
            past = await reader.load(key, at_version=rec.version - 1)
            assert texts(past) == ["before"]
            records = await all_records(reader, key)
            assert isinstance(records[rec.version - 1].events[0], UnknownEvent)
            report = await reader.verify(key)
            found = [*report.problems, *report.warnings]
            assert any(f.version == rec.version and name in f.message for f in found)
            with pytest.raises(UnknownEventError):
                await reader.acquire(key, holder="old-reader")
            assert await reader.head(key) == head
        # The failed writer released the lease; a reader that knows the type writes.
        async with journal().writer(key, holder="new-reader") as w:
            assert w.base_version == head
            await w.append([say("known again")])
        assert texts(await journal().load(key)) == ["before", "after", "known again"]

    async def test_upcaster_upgrades_old_schema(self, journal: JournalFactory) -> None:
        """A record written at schema 1 decodes as the registered schema 2."""
        name = _unique("Upcast")

        class NoteV1(Event, frozen=True):
            text: str

        class NoteV2(Event, frozen=True):
            text: str
            length: int

        register_event(NoteV1, name=name, required=False, schema=1)
        key = new_key()
        j = journal(checkpoint_every=0)
        async with j.writer(key) as w:
            old = await w.append([NoteV1("hello")])
        # A newer release: the type is now NoteV2 at schema 2, with an upcaster.
        unregister_event(name)
        register_event(NoteV2, name=name, required=False, schema=2)
        register_upcaster(name, 1, lambda f: {**f, "length": len(f["text"])})
        async with journal().writer(key) as w:
            new = await w.append([NoteV2("hi", 2)])
        records = await all_records(journal(), key)
        assert records[old.version - 1].events == [NoteV2("hello", 5)]
        assert records[new.version - 1].events == [NoteV2("hi", 2)]
        assert (await journal().verify(key)).ok
