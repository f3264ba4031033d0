"""What every part of the journal contract shares: the fixtures and the helpers.

:class:`JournalFixtures` holds the fixtures a binding overrides (``journal_url``,
``storage_options``) and the ``journal`` factory the tests open journals through
(a :class:`JournalFactory`). The helpers build keys and events, read records back
and compare states by their canonical bytes; :class:`RecordingStore` is a proxy
store that records every call and can run hooks around ``create``.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from journal import (
    Journal,
    MessageAppended,
    Msg,
    ObjectStore,
    Record,
    ThreadKey,
    register_event,
    unregister_event,
)
from journal.checkpoint import ends_chunk
from journal.codec import BLOB_THRESHOLD
from projections import AgentState, AgentStateProjection, fold

if TYPE_CHECKING:
    import builtins
    from collections.abc import (
        AsyncIterator,
        Awaitable,
        Callable,
        Iterator,
        Mapping,
        Sequence,
    )

    from journal.events import Role

__all__ = [
    "JournalFactory",
    "JournalFixtures",
    "RecordingStore",
    "all_records",
    "batch_ids",
    "chunk_ending_ids",
    "empty_state",
    "encoded",
    "forgotten",
    "new_key",
    "replay",
    "say",
    "texts",
]


class RecordingStore(ObjectStore):
    """A proxy store that records every call and can run hooks around ``create``.

    Attributes:
        inner: The store that does the work.
        calls: ``(operation, key or prefix, start_after)`` per call, in order;
            ``read_many`` is recorded as one ``read`` per key.
        before_create: Awaited with the key before each ``create`` is passed on.
        after_create: Awaited with the key after each ``create`` succeeded (it may
            raise, to simulate a reply lost after the write landed).
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        before_create: Callable[[str], Awaitable[None]] | None = None,
        after_create: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.inner = inner
        self.url = inner.url
        self.writable = inner.writable
        self.reads_log_in_bulk = inner.reads_log_in_bulk
        self.calls: list[tuple[str, str, str | None]] = []
        self.before_create = before_create
        self.after_create = after_create

    async def create(self, key: str, data: bytes) -> str:
        """Record, run the hooks and pass on."""
        self.calls.append(("create", key, None))
        if self.before_create is not None:
            await self.before_create(key)
        etag = await self.inner.create(key, data)
        if self.after_create is not None:
            await self.after_create(key)
        return etag

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        """Record and pass on."""
        self.calls.append(("replace", key, None))
        return await self.inner.replace(key, data, if_match=if_match)

    async def read(self, key: str) -> tuple[bytes, str]:
        """Record and pass on."""
        self.calls.append(("read", key, None))
        return await self.inner.read(key)

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        """Record one ``read`` per key and pass on."""
        self.calls.extend(("read", key, None) for key in keys)
        return await self.inner.read_many(keys, concurrency=concurrency)

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        """Record and pass on."""
        self.calls.append(("list", prefix, start_after))
        return await self.inner.list(prefix, start_after=start_after)

    async def delete(self, key: str) -> bool:
        """Record and pass on."""
        self.calls.append(("delete", key, None))
        return await self.inner.delete(key)

    async def children(self, prefix: str) -> builtins.list[str]:
        """Record and pass on."""
        self.calls.append(("children", prefix, None))
        return await self.inner.children(prefix)

    async def leftovers(self, prefix: str) -> builtins.list[str]:
        """Pass on."""
        return await self.inner.leftovers(prefix)

    async def aclose(self) -> None:
        """Close the inner store."""
        await self.inner.aclose()


class JournalFactory:
    """Opens fresh journals on one storage location (the ``journal`` fixture).

    Each call opens a new store object, as another process would; every journal
    opened is closed when the test ends.
    """

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = dict(options)
        # A journal option among the storage options: every journal opened uses it.
        self.compression: str | None = self.options.pop("compression", None)
        self.encryption: Any = self.options.pop("encryption", None)
        self.signing_key: Any = self.options.pop("signing_key", None)
        self._opened: list[Journal] = []

    def __call__(
        self,
        *,
        checkpoint_every: int = 100,
        blob_threshold: int = BLOB_THRESHOLD,
        clock: Callable[[], float] | None = None,
        wrap: Callable[[ObjectStore], ObjectStore] | None = None,
    ) -> Journal:
        """Open a journal.

        Args:
            checkpoint_every: Automatic checkpoint interval (0: off).
            blob_threshold: Encoded events larger than this become blobs.
            clock: The journal's wall clock (default ``time.time``).
            wrap: Wraps the fresh store (a proxy such as :class:`RecordingStore`).
        """
        store = Journal.open(self.url, **self.options).store
        if wrap is not None:
            store = wrap(store)
        journal = Journal(
            store,
            checkpoint_every=checkpoint_every,
            blob_threshold=blob_threshold,
            clock=clock or time.time,
            compression=self.compression,
            encryption=self.encryption,
            signing_key=self.signing_key,
        )
        self._opened.append(journal)
        return journal

    async def aclose(self) -> None:
        """Close every journal opened."""
        for journal in self._opened:
            with contextlib.suppress(Exception):
                await journal.aclose()
        self._opened.clear()


def new_key(**ids: str | None) -> ThreadKey:
    """A thread key with a fresh session id (other ids as given)."""
    args: dict[str, Any] = {
        "agent_id": "contract-agent",
        "session_id": f"s-{uuid.uuid4().hex}",
    }
    args.update(ids)
    return ThreadKey(**args)


def chunk_ending_ids(n: int, seed: int | None = None) -> list[str]:
    """``n`` fresh message ids that each end a checkpoint chunk (one id in 64 does).

    A context of such messages has a chunk per message, so a test reaches many
    chunks (and chunk index blobs) with few messages. With ``seed``, the same ids
    every run: how chunk references group into index blobs follows from their
    digests, so a test that counts groups needs them fixed.
    """
    rng = random.Random(seed) if seed is not None else None  # noqa: S311 (test ids)
    out: list[str] = []
    while len(out) < n:
        candidate = uuid.uuid4().hex if rng is None else f"{rng.getrandbits(128):032x}"
        if ends_chunk(candidate):
            out.append(candidate)
    return out


def say(text: str, role: Role = "user") -> MessageAppended:
    """A ``MessageAppended`` event with a plain-text message."""
    return MessageAppended(Msg(role, text))


def encoded(state: msgspec.Struct) -> bytes:
    """A state's canonical bytes, for equality checks."""
    return msgspec.msgpack.encode(state)


def empty_state(key: ThreadKey) -> AgentState:
    """The state of a thread with no records."""
    return AgentStateProjection(str(key)).initial(key)


async def all_records(journal: Journal, key: ThreadKey) -> list[Record]:
    """Every record of the thread, in order."""
    return [r async for r in journal.records(key)]


def replay(key: ThreadKey, records: Sequence[Record]) -> AgentState:
    """The state a full replay of ``records`` gives (no checkpoint)."""
    projection = AgentStateProjection(str(key))
    return fold(projection, projection.initial(key), records)


def batch_ids(records: Sequence[Record]) -> list[str]:
    """The records' batch ids, in order."""
    return [r.batch_id for r in records]


def texts(state: AgentState) -> list[str]:
    """The text of every message in the state's context."""
    return [m.text for m in state.context]


@contextlib.contextmanager
def forgotten(type_name: str) -> Iterator[None]:
    """Make this process a reader that does not know ``type_name`` (then restore)."""
    info = unregister_event(type_name)
    try:
        yield
    finally:
        register_event(
            info.cls, name=info.name, required=info.required, schema=info.schema
        )


class JournalFixtures:
    """The fixtures of every part of the contract; a binding overrides ``journal_url``.

    Example:
        ``class TestMemoryJournal(JournalContract)`` with a fixture
        ``async def journal_url(self): return f"memory://{uuid.uuid4().hex}"``.
    """

    @pytest.fixture
    async def journal_url(self) -> str:
        """The URL of the storage under test: every binding must override this.

        Raises:
            NotImplementedError: The suite was run without a binding.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must override the 'journal_url' fixture"
        )

    @pytest.fixture
    def storage_options(self) -> dict[str, Any]:
        """Options passed to ``Journal.open`` with the URL (none by default).

        ``compression``, ``encryption`` and ``signing_key`` among them are passed
        to every ``Journal`` opened.
        """
        return {}

    @pytest.fixture
    async def journal(
        self, journal_url: str, storage_options: dict[str, Any]
    ) -> AsyncIterator[JournalFactory]:
        """A factory of fresh journals on the storage under test."""
        factory = JournalFactory(journal_url, storage_options)
        yield factory
        await factory.aclose()
