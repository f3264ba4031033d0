"""A pydantic-ai conversation store on the journal (the ``pydantic-ai`` extra).

``JournalConversationStore`` is a ``pydantic_ai.conversation_store.ConversationStore``:
each conversation is a journal thread (``thread_key`` maps the ``conversation_id``); a
save is one record holding the conversation's record and the entries it adds, a
delete one record saying so. The record's ``revision`` is the journal's: the version
and hash of the record that saved it, so the store's compare-and-swap is the
journal's own (the writer, holding the thread's lease, checks the revision against
the head and appends at exactly the version it read). A conversation deleted and
saved again gets a new revision, as the contract asks.

Entries stay in the log of the conversation that first stored them: forks point
into it, and a delete keeps them (``Journal.erase`` removes a conversation's
thread for good). Lease and conflict errors of the journal surface as pydantic-ai's
``ConversationConflict`` (load again, then retry), with the journal's error as the
``__cause__``.

The store keeps each conversation's record and entries as the JSON it committed and
decodes them again on every read, so what a caller changes in place on what it
loaded stays in its copy until it is saved, as with pydantic-ai's
``InMemoryConversationStore`` (which deep-copies; decoding costs about a quarter of
a ``deepcopy`` of the same entries).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import msgspec
from pydantic import TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from journal.adapters.threads import ThreadFolds, ThreadLeases
from journal.codec import register_event
from journal.errors import ConflictError, LeaseError
from journal.events import Event
from journal.keys import ThreadKey

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Sequence

    from journal.codec import Record
    from journal.engine import Journal

__all__ = [
    "ConversationDeleted",
    "ConversationSaved",
    "JournalConversationStore",
    "default_thread_key",
]

_RECORD: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)
_ENTRY: TypeAdapter[ConversationEntry] = TypeAdapter(ConversationEntry)


class ConversationSaved(Event, frozen=True, kw_only=True):
    """A conversation's record (JSON, without its revision) and its new entries."""

    record: bytes
    entries: list[bytes]


class ConversationDeleted(Event, frozen=True, kw_only=True):
    """The conversation's record removed (its entries stay, for forks)."""

    conversation_id: str


for _event in (ConversationSaved, ConversationDeleted):
    register_event(_event, required=False)


class _EntryId(msgspec.Struct):
    """The id of a stored entry, read without decoding its message."""

    id: str


_ENTRY_ID = msgspec.json.Decoder(_EntryId)


@dataclass
class _Conversation:
    """A conversation as committed: its record's and entries' JSON, never objects.

    Every read decodes what it returns, so a caller's objects share nothing mutable
    with the view (a cached object edited in place would change later loads, and
    hide a rewritten history from a save's ``==`` comparison).
    """

    record: bytes | None = None
    revision: str | None = None
    entries: dict[str, bytes] = field(default_factory=dict)

    def decode_record(self) -> ConversationRecord | None:
        """A new copy of the stored record, its revision the journal's."""
        if self.record is None or self.revision is None:
            return None
        return replace(_RECORD.validate_json(self.record), revision=self.revision)


def _revision(record: Record) -> str:
    return f"{record.version}-{record.hash[:16]}"


def _apply(view: _Conversation, record: Record) -> None:
    for event in record.events:
        if isinstance(event, ConversationSaved):
            for raw in event.entries:
                view.entries[_ENTRY_ID.decode(raw).id] = raw
            view.record = event.record
            view.revision = _revision(record)
        elif isinstance(event, ConversationDeleted):
            view.record = None
            view.revision = None


def default_thread_key(conversation_id: str) -> ThreadKey:
    """The journal thread of a ``conversation_id``: agent ``pydantic-ai``."""
    return ThreadKey(agent_id="pydantic-ai", session_id=conversation_id)


class JournalConversationStore(ConversationStore):
    """pydantic-ai conversations as journal threads.

    Args:
        journal: The journal (any URL).
        thread_key: The journal thread of a ``conversation_id``; replace it to scope
            conversations by user or tenant. Must be one-to-one.
        holder: The writer lease holder id (default: unique per store).
        lease_ttl: Writer lease duration in seconds.
        lease_wait: Seconds a save waits for another holder's lease.
        keep: Keep each conversation's lease between saves (``aclose`` releases
            them); False (the default) takes and releases it per save.
    """

    def __init__(
        self,
        journal: Journal,
        *,
        thread_key: Callable[[str], ThreadKey] = default_thread_key,
        holder: str | None = None,
        lease_ttl: float = 30.0,
        lease_wait: float = 5.0,
        keep: bool = False,
    ) -> None:
        self.journal = journal
        self.thread_key = thread_key
        self.leases = ThreadLeases(
            journal, holder=holder, lease_ttl=lease_ttl, wait=lease_wait, keep=keep
        )
        self.folds: ThreadFolds[_Conversation] = ThreadFolds(
            journal, _Conversation, _apply
        )
        # Where each entry seen so far lives, for read_entry.
        self._entry_threads: dict[str, ThreadKey] = {}

    async def aclose(self) -> None:
        """Release every writer lease this store keeps."""
        await self.leases.aclose()

    async def _view(self, key: ThreadKey) -> _Conversation:
        with _conflicts(key.session_id):
            view = await self.folds.read(key)
        for entry_id in view.entries:
            self._entry_threads.setdefault(entry_id, key)
        return view

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's record, its revision the journal's, or None."""
        view = await self._view(self.thread_key(conversation_id))
        return view.decode_record()

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """The stored records (of ``scope``), newest ``updated_at`` first."""
        records: list[ConversationRecord] = []
        async for key in self.journal.threads():
            record = (await self._view(key)).decode_record()
            if record is not None and (scope is None or record.scope == scope):
                records.append(record)
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Commit the record and its new entries if the revision is still current.

        On success ``record.revision`` is set to the journal's revision of the
        commit (the store's base class hands that on to the conversation).

        Raises:
            ConversationConflict: The stored revision is not ``expected_revision``,
                ``record.head_id`` names an entry the store does not have, another
                holder's lease is live past ``lease_wait``, or this store's lease was
                taken over.
        """
        conversation_id = record.conversation_id
        key = self.thread_key(conversation_id)
        new_ids = {entry.id for entry in new_entries}
        head = record.head_id
        with _conflicts(conversation_id):
            async with self.leases.writing(key) as writer:
                view = await self.folds.upto(key, writer.version)
                if view.revision != expected_revision:
                    raise ConversationConflict(conversation_id)
                if (
                    head is not None
                    and head not in new_ids
                    and await self._find_entry(head, key) is None
                ):
                    raise ConversationConflict(conversation_id)
                event = ConversationSaved(
                    record=_RECORD.dump_json(replace(record, revision="")),
                    entries=[_ENTRY.dump_json(entry) for entry in new_entries],
                )
                committed = await writer.append(
                    [event], expected_version=writer.version
                )
                self.folds.committed(key, committed)
        for entry_id in new_ids:
            self._entry_threads[entry_id] = key
        record.revision = _revision(committed)

    async def delete_record(
        self, conversation_id: str, *, expected_revision: str
    ) -> None:
        """Remove the conversation's record if its revision is still current.

        Its entries stay in the log (a fork may point into them).

        Raises:
            ConversationConflict: No record with ``expected_revision`` is stored.
        """
        key = self.thread_key(conversation_id)
        with _conflicts(conversation_id):
            async with self.leases.writing(key) as writer:
                view = await self.folds.upto(key, writer.version)
                if view.revision != expected_revision:
                    raise ConversationConflict(conversation_id)
                committed = await writer.append(
                    [ConversationDeleted(conversation_id=conversation_id)],
                    expected_version=writer.version,
                )
                self.folds.committed(key, committed)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry with this id, from whichever conversation stored it.

        Raises:
            KeyError: No conversation in the journal holds it.
        """
        raw = await self._find_entry(entry_id, None)
        if raw is None:
            raise KeyError(f"no conversation in the journal holds entry {entry_id!r}")
        return _ENTRY.validate_json(raw)

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The entries up to ``head_id``, oldest first (the last ``limit`` of them).

        Walks the views already folded (one head check per conversation thread
        on the way), not one read per entry.
        """
        entries: list[ConversationEntry] = []
        entry_id = head_id
        views: list[_Conversation] = []
        while entry_id is not None and (limit is None or len(entries) < limit):
            raw = next(
                (v.entries[entry_id] for v in views if entry_id in v.entries), None
            )
            if raw is None:
                entry = await self.read_entry(entry_id)
                key = self._entry_threads.get(entry_id)
                if key is not None:
                    views.append(await self._view(key))
            else:
                entry = _ENTRY.validate_json(raw)
            entries.append(entry)
            entry_id = entry.parent_id
        entries.reverse()
        return entries

    async def _find_entry(self, entry_id: str, hint: ThreadKey | None) -> bytes | None:
        """The stored JSON of the entry with this id, or None."""
        known = self._entry_threads.get(entry_id)
        for key in (known, hint):
            if key is not None:
                view = await self._view(key)
                if entry_id in view.entries:
                    return view.entries[entry_id]
        # An entry stored by another process (a fork's source): look everywhere.
        async for key in self.journal.threads():
            view = await self._view(key)
            if entry_id in view.entries:
                return view.entries[entry_id]
        return None


@contextlib.contextmanager
def _conflicts(conversation_id: str) -> Generator[None, None, None]:
    try:
        yield
    except (LeaseError, ConflictError) as exc:
        raise ConversationConflict(conversation_id) from exc
