"""An OpenAI Agents SDK session on the journal (the ``openai-agents`` extra).

``JournalSession`` is a ``Session``: each SDK session is a journal thread
(``thread_key`` maps the ``session_id``). ``add_items`` commits one record of the
items; ``pop_item``, ``clear_session`` and compaction commit events that say what
they removed (``AgentsItemPopped``, ``AgentsSessionCleared``,
``AgentsItemsCompacted``), so the live items shrink while the log keeps every item
ever added.

It is compaction-aware: ``OpenAIResponsesCompactionSession`` wrapping it reads a
bounded snapshot and replaces the compacted suffix atomically, the replacement
committing only if the newest items are still the very items the snapshot saw (the
thread's writer holds the lease and checks them against the head, so a concurrent
append cannot be compacted away). An item is known by the version of the record that
added it and its place in that record, as ``SQLiteSession`` knows a row by its id:
items equal to the snapshot's, appended since, are other items. Every method takes
the run context (``wrapper``) the SDK passes.

Writes hold the thread's writer lease; a writer taken over, a lease held elsewhere
past ``lease_wait``, or a conflicting commit raise :class:`SessionConflictError`, an
``AgentsException``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from agents.exceptions import AgentsException
from agents.memory import SessionABC
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from journal.adapters.threads import ThreadFolds, ThreadLeases
from journal.codec import register_event
from journal.errors import ConflictError, LeaseError
from journal.events import Event
from journal.keys import ThreadKey

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterator,
        Awaitable,
        Callable,
        Coroutine,
        Generator,
    )

    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper

    from journal.codec import Record
    from journal.engine import Journal, ThreadWriter

__all__ = [
    "AgentsItemPopped",
    "AgentsItemsAdded",
    "AgentsItemsCompacted",
    "AgentsSessionCleared",
    "CompactionSnapshot",
    "JournalSession",
    "SessionConflictError",
    "default_thread_key",
]

T = TypeVar("T")


class SessionConflictError(AgentsException):
    """The session's writer lease was lost or is held elsewhere, or a commit raced.

    The journal's error is the ``__cause__``: ``FencedError`` means stop this run
    (another process took the session over), ``LeaseHeldError`` that another process
    is writing it now.
    """


class AgentsItemsAdded(Event, frozen=True, kw_only=True):
    """Items appended to the session, each as its JSON text."""

    items: list[str]


class AgentsItemPopped(Event, frozen=True, kw_only=True):
    """The newest live item removed (it stays in the log)."""

    position: int


class AgentsSessionCleared(Event, frozen=True, kw_only=True):
    """Every live item removed (they stay in the log)."""

    removed: int


class AgentsItemsCompacted(Event, frozen=True, kw_only=True):
    """Live items ``[start, stop)`` replaced by ``items`` (compaction or pruning)."""

    start: int
    stop: int
    items: list[str]
    reason: str


for _event in (
    AgentsItemsAdded,
    AgentsItemPopped,
    AgentsSessionCleared,
    AgentsItemsCompacted,
):
    register_event(_event, required=False)


class _Item(NamedTuple):
    """A live item: its JSON text and its identity in the thread.

    ``version`` is the record that added the item and ``place`` its place among the
    items that record added, so two equal items are still two items (the identity
    the compaction check compares, as ``SQLiteSession`` compares row ids). It is
    folded from the log, so every process gives an item the same identity.
    """

    version: int
    place: int
    text: str


@dataclass
class _Items:
    live: list[_Item] = field(default_factory=list)


def _apply(view: _Items, record: Record) -> None:
    added: list[_Item] = []  # the items this record added so far

    def identified(texts: list[str]) -> list[_Item]:
        items = [
            _Item(record.version, len(added) + i, text) for i, text in enumerate(texts)
        ]
        added.extend(items)
        return items

    for event in record.events:
        if isinstance(event, AgentsItemsAdded):
            view.live.extend(identified(event.items))
        elif isinstance(event, AgentsItemPopped):
            del view.live[event.position :]
        elif isinstance(event, AgentsSessionCleared):
            view.live.clear()
        elif isinstance(event, AgentsItemsCompacted):
            view.live[event.start : event.stop] = identified(event.items)


def default_thread_key(session_id: str) -> ThreadKey:
    """The journal thread of an SDK ``session_id``: agent ``openai-agents``."""
    return ThreadKey(agent_id="openai-agents", session_id=session_id)


@dataclass(frozen=True)
class CompactionSnapshot:
    """A bounded view of the newest items, with an atomic replacement of its suffix.

    The shape ``OpenAIResponsesCompactionSession`` reads from a backend's
    ``_get_compaction_snapshot``.

    Attributes:
        items: The newest live items, oldest first.
        complete: Whether ``items`` is the whole live history.
        replace_suffix: ``await replace_suffix(start, output)`` replaces
            ``items[start:]`` with ``output`` if they are still the newest items,
            returning whether it did.
    """

    items: list[TResponseInputItem]
    complete: bool
    replace_suffix: Callable[[int, list[TResponseInputItem]], Awaitable[bool]]


class JournalSession(SessionABC):
    """An SDK session whose items are journal records.

    Args:
        session_id: The SDK session id.
        journal: The journal (any URL).
        thread_key: The journal thread of a ``session_id``; replace it to scope sessions
            by user or tenant. Must be one-to-one.
        holder: The writer lease holder id (default: unique per session object).
        lease_ttl: Writer lease duration in seconds.
        lease_wait: Seconds a write waits for another holder's lease.
        keep: Keep the lease between writes (``aclose`` releases it); False (the
            default) takes and releases it per write, so several processes can
            take turns on one session.
        session_settings: The SDK's settings (a ``SessionSettings`` or a dict); its
            ``limit`` is the default of ``get_items``.
    """

    def __init__(
        self,
        session_id: str,
        journal: Journal,
        *,
        thread_key: Callable[[str], ThreadKey] = default_thread_key,
        holder: str | None = None,
        lease_ttl: float = 30.0,
        lease_wait: float = 5.0,
        keep: bool = False,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.journal = journal
        self.key = thread_key(session_id)
        self.leases = ThreadLeases(
            journal, holder=holder, lease_ttl=lease_ttl, wait=lease_wait, keep=keep
        )
        self.folds: ThreadFolds[_Items] = ThreadFolds(journal, _Items, _apply)
        self._closed = False

    # --- reading ---

    async def get_items(
        self,
        limit: int | None = None,
        *,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> list[TResponseInputItem]:
        """The live items, oldest first: the newest ``limit`` of them if given.

        Without ``limit``, ``session_settings.limit`` applies (None: all). A negative
        limit is no limit and 0 none, as in ``SQLiteSession``.
        """
        self._check_open()
        wanted = resolve_session_limit(limit, self.session_settings)
        with _framework_errors():
            view = await self.folds.read(self.key)
        live = view.live
        # As SQLiteSession (SQLite's LIMIT): a negative limit is no limit, not a
        # slice that drops the oldest items.
        if wanted is not None and wanted >= 0:
            live = live[-wanted:] if wanted else []
        return [_load(item.text) for item in live]

    # --- writing ---

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[tuple[ThreadWriter, _Items]]:
        with _framework_errors():
            async with self.leases.writing(self.key) as writer:
                yield writer, await self.folds.upto(self.key, writer.version)

    async def _commit(self, writer: ThreadWriter, events: list[object]) -> None:
        record = await writer.append(events)
        self.folds.committed(self.key, record)

    async def add_items(
        self,
        items: list[TResponseInputItem],
        *,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        """Append ``items`` in one record."""
        self._check_open()
        if not items:
            return
        texts = [json.dumps(item) for item in items]

        async def add() -> None:
            async with self._writing() as (writer, _):
                await self._commit(writer, [AgentsItemsAdded(items=texts)])

        await _settled(add())

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Remove the newest live item and return it (None when there is none)."""
        self._check_open()

        async def pop() -> TResponseInputItem | None:
            async with self._writing() as (writer, view):
                if not view.live:
                    return None
                text = view.live[-1].text
                await self._commit(
                    writer, [AgentsItemPopped(position=len(view.live) - 1)]
                )
                return _load(text)

        return await _settled(pop())

    async def clear_session(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Remove every live item (the log keeps them)."""
        self._check_open()

        async def clear() -> None:
            async with self._writing() as (writer, view):
                if view.live:
                    await self._commit(
                        writer, [AgentsSessionCleared(removed=len(view.live))]
                    )

        await _settled(clear())

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[TResponseInputItem], bool] | None = None,
    ) -> CompactionSnapshot | None:
        """The compaction hook ``OpenAIResponsesCompactionSession`` looks for.

        Args:
            limit: How many of the newest items to read.
            prune_prefix: On replacement, the leading items before the suffix for
                which this is true are removed too, up to the first that is not.
        """
        self._check_open()
        with _framework_errors():
            view = await self.folds.read(self.key)
        total = len(view.live)
        rows = list(view.live[-limit:]) if limit > 0 else []
        first = total - len(rows)
        items = [_load(item.text) for item in rows]

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = rows[start:]
            if not expected:
                return False
            texts = [json.dumps(item) for item in output]

            async def replace() -> bool:
                async with self._writing() as (writer, current):
                    # The same items by identity, not by text: equal items another
                    # writer appended since are not the snapshot's.
                    if current.live[-len(expected) :] != expected:
                        return False
                    stop = len(current.live)
                    begin = stop - len(expected)
                    events: list[object] = []
                    pruned = 0
                    if prune_prefix is not None:
                        while pruned < begin and prune_prefix(
                            _load(current.live[pruned].text)
                        ):
                            pruned += 1
                    if pruned:
                        events.append(
                            AgentsItemsCompacted(
                                start=0, stop=pruned, items=[], reason="pruned"
                            )
                        )
                    events.append(
                        AgentsItemsCompacted(
                            start=begin - pruned,
                            stop=stop - pruned,
                            items=texts,
                            reason="compacted",
                        )
                    )
                    await self._commit(writer, events)
                    return True

            return await _settled(replace())

        return CompactionSnapshot(items, first == 0, replace_suffix)

    # --- lifetime ---

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"JournalSession {self.session_id!r} is closed")

    def close(self) -> None:
        """Refuse further calls (a kept lease is released by :meth:`aclose`)."""
        self._closed = True

    async def aclose(self) -> None:
        """Refuse further calls and release the writer lease."""
        self._closed = True
        await self.leases.aclose()


def _load(text: str) -> TResponseInputItem:
    return cast("TResponseInputItem", json.loads(text))


async def _settled(coro: Coroutine[Any, Any, T]) -> T:
    """Run a write to its end even when the caller is cancelled meanwhile.

    A cancelled caller must not leave the outcome of a commit unknown: the write
    finishes, and the cancellation is re-raised after it.
    """
    task = asyncio.ensure_future(coro)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        # The outcome is settled; a failure is logged by the task, the cancel wins.
        with contextlib.suppress(BaseException):
            task.result()
        raise cancelled
    return task.result()


@contextlib.contextmanager
def _framework_errors() -> Generator[None, None, None]:
    try:
        yield
    except (LeaseError, ConflictError) as exc:
        raise SessionConflictError(str(exc)) from exc
