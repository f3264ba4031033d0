"""A LangGraph checkpoint saver on the journal (the ``langgraph`` extra).

``JournalSaver`` is a ``BaseCheckpointSaver``: each LangGraph thread is a journal
thread (``thread_key`` maps the ``thread_id``), each ``put`` one record holding the
checkpoint without its channel values plus the values of the channels whose versions
changed (``new_versions``), and each ``put_writes`` one record of the task's writes.
A checkpoint's channel values are rebuilt from the nearest records that stored each
channel at the version the checkpoint names, so a step costs what it changed, not the
whole state. Deletions (``delete_thread``, ``delete_for_runs``, ``prune``) are
records too: what they remove is gone from every read, and the log keeps the
history (``Journal.retain`` and ``Journal.erase`` reclaim the bytes).

Values are keyed by channel version, so each write needs versions no other write
used: ``get_next_version`` makes them strings with a random suffix, as LangGraph's
own savers do, and a fork (time travel, or two processes running one thread without
``hold``) stores its values beside the other branch's instead of over them. Records
written before that hold LangGraph's default integer versions, which forks shared;
they are read with each integer as its zero-padded string (``5`` as 32 digits), so
their checkpoints load the same values and order below every newer version, and a
thread never mixes the two types (LangGraph compares versions).

Writes hold the thread's writer lease (see ``ThreadLeases`` in
:mod:`journal.adapters.threads`); a writer taken over raises
:class:`CheckpointFencedError`, a lease held elsewhere
:class:`CheckpointLeaseHeldError`.

The sync methods (``get_tuple``, ``put``, ...) run the async ones on the event loop
the saver was made on, as LangGraph's own async savers do: call them from another
thread (a sync graph run in a worker thread), never from the loop's own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import msgspec
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

from journal.adapters.threads import ThreadFolds, ThreadLeases
from journal.codec import register_event
from journal.errors import ConflictError, FencedError, LeaseHeldError
from journal.events import Event
from journal.keys import ThreadKey

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterator,
        Callable,
        Coroutine,
        Generator,
        Iterator,
        Sequence,
    )

    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from journal.codec import Record
    from journal.engine import Journal

__all__ = [
    "CheckpointConflictError",
    "CheckpointFencedError",
    "CheckpointLeaseHeldError",
    "JournalSaver",
    "LangGraphChannelValue",
    "LangGraphCheckpointSaved",
    "LangGraphCheckpointsDeleted",
    "LangGraphThreadDeleted",
    "LangGraphWrite",
    "LangGraphWritesSaved",
    "default_thread_key",
]

T = TypeVar("T")
Version = str | int | float


class CheckpointConflictError(RuntimeError):
    """Another writer committed to the thread first; reload and retry the step.

    LangGraph has no storage error of its own; this one carries the journal's
    ``ConflictError`` as its ``__cause__``.
    """


class CheckpointFencedError(CheckpointConflictError):
    """This saver's writer lease was taken over: stop this run, never retry it."""


class CheckpointLeaseHeldError(CheckpointConflictError):
    """Another holder's writer lease on the thread is live past ``lease_wait``."""


# --- events ---


class LangGraphChannelValue(msgspec.Struct, frozen=True):
    """One channel's value at one version, as the saver's serializer typed it.

    With ``base`` set, ``data`` holds only the items appended to the list the
    channel held at version ``base`` (a delta); the value is that list plus them.
    """

    channel: str
    version: Version
    type: str
    data: bytes
    base: Version | None = None


class LangGraphCheckpointSaved(Event, frozen=True, kw_only=True):
    """A checkpoint without its channel values, and the values that changed.

    ``unique_versions`` is False in records written before versions were unique to
    each write: their integer versions are read as zero-padded strings.
    """

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    checkpoint_type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes
    values: list[LangGraphChannelValue] = msgspec.field(default_factory=list)
    unique_versions: bool = False


class LangGraphWrite(msgspec.Struct, frozen=True):
    """One pending write of a task: its index, channel and typed value."""

    idx: int
    channel: str
    type: str
    data: bytes


class LangGraphWritesSaved(Event, frozen=True, kw_only=True):
    """A task's pending writes against a checkpoint."""

    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: list[LangGraphWrite]


class LangGraphCheckpointsDeleted(Event, frozen=True, kw_only=True):
    """Checkpoints (and their writes) removed by ``delete_for_runs`` or ``prune``."""

    checkpoints: list[tuple[str, str]]
    reason: str


class LangGraphThreadDeleted(Event, frozen=True, kw_only=True):
    """Every checkpoint, write and value of the thread removed."""


for _event in (
    LangGraphCheckpointSaved,
    LangGraphWritesSaved,
    LangGraphCheckpointsDeleted,
    LangGraphThreadDeleted,
):
    register_event(_event, required=False)


# --- the folded view of one thread ---


@dataclass
class _Saved:
    checkpoint: tuple[str, bytes]
    metadata: tuple[str, bytes]
    parent_id: str | None
    run_id: str | None
    unique_versions: bool


@dataclass
class _Thread:
    thread_id: str | None = None
    # ns -> checkpoint id -> what put stored
    checkpoints: dict[str, dict[str, _Saved]] = field(default_factory=dict)
    # (ns, channel, version) -> the stored value (whole, or a delta on a base)
    blobs: dict[tuple[str, str, Version], LangGraphChannelValue] = field(
        default_factory=dict
    )
    # (ns, checkpoint id) -> (task id, idx) -> (task id, channel, value, task path)
    writes: dict[
        tuple[str, str], dict[tuple[str, int], tuple[str, str, tuple[str, bytes], str]]
    ] = field(default_factory=dict)


def _apply(view: _Thread, record: Record) -> None:
    for event in record.events:
        if isinstance(event, LangGraphCheckpointSaved):
            view.thread_id = event.thread_id
            for value in event.values:
                if not event.unique_versions:
                    base = value.base
                    value = msgspec.structs.replace(
                        value,
                        version=_string_version(value.version),
                        base=None if base is None else _string_version(base),
                    )
                view.blobs[(event.ns, value.channel, value.version)] = value
            view.checkpoints.setdefault(event.ns, {})[event.checkpoint_id] = _Saved(
                (event.checkpoint_type, event.checkpoint),
                (event.metadata_type, event.metadata),
                event.parent_id,
                event.run_id,
                event.unique_versions,
            )
        elif isinstance(event, LangGraphWritesSaved):
            stored = view.writes.setdefault((event.ns, event.checkpoint_id), {})
            for write in event.writes:
                inner = (event.task_id, write.idx)
                # A regular write already stored stays (a retried task); the special
                # ones (error, interrupt, ...) are replaced.
                if write.idx >= 0 and inner in stored:
                    continue
                stored[inner] = (
                    event.task_id,
                    write.channel,
                    (write.type, write.data),
                    event.task_path,
                )
        elif isinstance(event, LangGraphCheckpointsDeleted):
            for ns, checkpoint_id in event.checkpoints:
                view.checkpoints.get(ns, {}).pop(checkpoint_id, None)
                view.writes.pop((ns, checkpoint_id), None)
        elif isinstance(event, LangGraphThreadDeleted):
            view.checkpoints.clear()
            view.blobs.clear()
            view.writes.clear()


def _string_version(version: Version) -> Version:
    """An integer version of a record older than unique versions, as a string.

    Zero-padded like ``get_next_version``'s counters, without their suffix, so it
    orders as the integer did among its own thread's versions and below every
    version made from it.
    """
    if isinstance(version, int) and not isinstance(version, bool):
        return f"{version:032}"
    return version


def default_thread_key(thread_id: str) -> ThreadKey:
    """The journal thread of a LangGraph ``thread_id``: agent ``langgraph``."""
    return ThreadKey(agent_id="langgraph", session_id=thread_id)


def _writes_order(item: tuple[tuple[str, int], tuple[str, str, Any, str]]) -> Any:
    (task_id, idx), (_, _, _, task_path) = item
    return (task_path, task_id, idx)


class JournalSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver whose checkpoints are journal records.

    Args:
        journal: The journal (any URL: ``file://``, ``memory://``, ``s3://``).
        thread_key: The journal thread of a LangGraph ``thread_id``; replace it to scope
            threads by user or tenant. Must be one-to-one.
        holder: The writer lease holder id (default: unique per saver).
        lease_ttl: Writer lease duration in seconds.
        lease_wait: Seconds a write waits for another holder's lease.
        keep: Keep each thread's lease between writes (see ``ThreadLeases``); call
            :meth:`release` or :meth:`aclose` to hand the thread on.
        serde: LangGraph serializer (default: LangGraph's).
        loop: The event loop the sync methods run on (default: the running one).
    """

    def __init__(
        self,
        journal: Journal,
        *,
        thread_key: Callable[[str], ThreadKey] = default_thread_key,
        holder: str | None = None,
        lease_ttl: float = 30.0,
        lease_wait: float = 0.0,
        keep: bool = True,
        serde: SerializerProtocol | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.journal = journal
        self.thread_key = thread_key
        self.leases = ThreadLeases(
            journal, holder=holder, lease_ttl=lease_ttl, wait=lease_wait, keep=keep
        )
        self.folds: ThreadFolds[_Thread] = ThreadFolds(journal, _Thread, _apply)
        # The list channels this saver stored last, per thread: delta bases.
        self._lists: dict[tuple[str, str, str], _ListChannel] = {}
        if loop is None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
        self.loop = loop

    @contextlib.asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[None]:
        """Hold ``thread_id``'s writer lease for a whole run, then release it.

        ``async with saver.hold(tid): await graph.ainvoke(..., config)`` makes the
        run read the checkpoint no other process can supersede before it writes:
        runs of one thread in several processes then take turns instead of
        forking the checkpoint history.

        Raises:
            CheckpointLeaseHeldError: Another holder's lease is live past
                ``lease_wait``.
        """
        with _framework_errors():
            async with self.leases.holding(self.thread_key(thread_id)):
                yield

    async def release(self, thread_id: str) -> None:
        """Release the writer lease this saver keeps on ``thread_id``."""
        await self.leases.release(self.thread_key(thread_id))

    async def aclose(self) -> None:
        """Release every writer lease this saver keeps."""
        await self.leases.aclose()

    async def __aenter__(self) -> JournalSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def get_next_version(self, current: Version | None, channel: None) -> str:
        """A version after ``current`` that no other write uses (as InMemorySaver).

        The counter orders versions; the random suffix keeps apart the values two
        branches store at the same step, which share the counter.
        """
        if current is None:
            counter = 0
        elif isinstance(current, str):
            counter = int(current.split(".", 1)[0])
        else:
            counter = int(current)
        return f"{counter + 1:032}.{secrets.randbits(64):020}"

    # --- writing ---

    @contextlib.asynccontextmanager
    async def _commit(self, thread_id: str) -> AsyncIterator[_Committer]:
        key = self.thread_key(thread_id)
        with _framework_errors():
            async with self.leases.writing(key) as writer:
                view = await self.folds.upto(key, writer.version)
                committer = _Committer(view, [])
                yield committer
                if committer.events:
                    record = await writer.append(committer.events)
                    self.folds.committed(key, record)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the values of the channels in ``new_versions``."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        stripped: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = stripped.pop("channel_values", {})
        checkpoint_type, checkpoint_bytes = self.serde.dumps_typed(stripped)
        metadata_type, metadata_bytes = self.serde.dumps_typed(
            get_checkpoint_metadata(config, metadata)
        )
        run_id = metadata.get("run_id")
        event = LangGraphCheckpointSaved(
            thread_id=thread_id,
            ns=ns,
            checkpoint_id=checkpoint["id"],
            parent_id=configurable.get("checkpoint_id"),
            run_id=None if run_id is None else str(run_id),
            checkpoint_type=checkpoint_type,
            checkpoint=checkpoint_bytes,
            metadata_type=metadata_type,
            metadata=metadata_bytes,
            unique_versions=True,
        )
        # Serialized now, before the first await: under durability="async" the
        # graph's next step runs while this one is saved, and may edit in place
        # values this checkpoint holds.
        taken = [
            self._take_value(thread_id, ns, channel, version, values)
            for channel, version in new_versions.items()
        ]
        async with self._commit(thread_id) as commit:
            stored = [self._store_value(commit.view, ns, t) for t in taken]
            commit.events.append(msgspec.structs.replace(event, values=stored))
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _take_value(
        self,
        thread_id: str,
        ns: str,
        channel: str,
        version: Version,
        values: dict[str, Any],
    ) -> LangGraphChannelValue | _TakenList:
        """The channel's new value, serialized as it is now.

        A value that is not a list is final here. A list is taken as its items'
        serialized forms, with the serialized items past the ones this saver last
        stored for the channel when it only grew since (``delta``), else the whole
        list serialized. "Only grew" is decided on each item's serialized form, not
        with ``==`` on the items: an item that now serializes otherwise (``1``
        become ``1.0``, a dict edited in place since) makes the list stored whole,
        so a read gives back what InMemorySaver would.
        """
        key = (thread_id, ns, channel)
        if channel not in values:
            self._lists.pop(key, None)
            return LangGraphChannelValue(channel, version, "empty", b"")
        value = values[channel]
        if type(value) is not list:
            return LangGraphChannelValue(
                channel, version, *self.serde.dumps_typed(value)
            )
        items = [self.serde.dumps_typed(item) for item in value]
        cached = self._lists.get(key)
        if (
            cached is not None
            and cached.since_whole < cached.whole_size
            and items[: len(cached.items)] == cached.items
        ):
            delta = self.serde.dumps_typed(value[len(cached.items) :])
            return _TakenList(key, channel, version, items, None, delta, cached)
        whole = self.serde.dumps_typed(value)
        return _TakenList(key, channel, version, items, whole, None, None)

    def _store_value(
        self, view: _Thread, ns: str, taken: LangGraphChannelValue | _TakenList
    ) -> LangGraphChannelValue:
        """The channel's new value as stored: whole, or what it appended to a list.

        A list channel (``messages``) that only grew since this saver last stored
        it is stored as the appended items on that earlier version, so a turn
        costs its new messages, not the conversation, provided the thread still
        holds that version and no other write of the channel came between. A
        whole value is stored again once the deltas since the last whole one add
        up to its size, which keeps both the bytes written (at most about twice
        the value) and the chain a read folds (at most one whole value's worth)
        bounded.
        """
        if isinstance(taken, LangGraphChannelValue):
            return taken
        cached = self._lists.get(taken.key)
        if (
            taken.delta is not None
            and cached is not None
            and cached is taken.on
            and cached.version == taken.on_version
            and (ns, taken.channel, cached.version) in view.blobs
        ):
            kind, data = taken.delta
            base = cached.version
            cached.since_whole += len(data)
            cached.version, cached.items = taken.version, taken.items
            return LangGraphChannelValue(taken.channel, taken.version, kind, data, base)
        whole = taken.whole
        if whole is None:
            # The delta's base is gone (a deletion, another write of the channel
            # in between): the list as taken, rebuilt from its items' forms.
            loads = self.serde.loads_typed
            whole = self.serde.dumps_typed([loads(item) for item in taken.items])
        self._lists[taken.key] = _ListChannel(taken.version, taken.items, len(whole[1]))
        return LangGraphChannelValue(taken.channel, taken.version, *whole)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes against the checkpoint ``config`` names."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        stored = [
            LangGraphWrite(
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                *self.serde.dumps_typed(value),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        event = LangGraphWritesSaved(
            ns=str(configurable.get("checkpoint_ns", "")),
            checkpoint_id=str(configurable["checkpoint_id"]),
            task_id=task_id,
            task_path=task_path,
            writes=stored,
        )
        async with self._commit(thread_id) as commit:
            commit.events.append(event)

    async def adelete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint and write of the thread (the log keeps them)."""
        if await self.journal.head(self.thread_key(thread_id)) == 0:
            return
        async with self._commit(thread_id) as commit:
            if commit.view.checkpoints or commit.view.writes or commit.view.blobs:
                commit.events.append(LangGraphThreadDeleted())

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) of the given runs, everywhere."""
        wanted = set(run_ids)
        if not wanted:
            return
        async for thread_id in self._thread_ids():
            async with self._commit(thread_id) as commit:
                doomed = [
                    (ns, checkpoint_id)
                    for ns, saved in commit.view.checkpoints.items()
                    for checkpoint_id, entry in saved.items()
                    if entry.run_id in wanted
                ]
                if doomed:
                    commit.events.append(
                        LangGraphCheckpointsDeleted(
                            checkpoints=doomed, reason="delete_for_runs"
                        )
                    )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of a thread to another, in order.

        The target's earlier checkpoints stay; one record carries the whole copy.
        """
        source = await self.folds.read(self.thread_key(source_thread_id))
        events: list[object] = []
        copied: set[tuple[str, str, Version]] = set()
        for ns, saved in source.checkpoints.items():
            for checkpoint_id in sorted(saved):
                entry = saved[checkpoint_id]
                checkpoint = self._checkpoint(entry)
                values: list[LangGraphChannelValue] = []
                for channel, version in checkpoint["channel_versions"].items():
                    for link in _chain(source, ns, channel, version):
                        if (ns, channel, link.version) not in copied:
                            copied.add((ns, channel, link.version))
                            values.append(link)
                events.append(
                    LangGraphCheckpointSaved(
                        thread_id=target_thread_id,
                        ns=ns,
                        checkpoint_id=checkpoint_id,
                        parent_id=entry.parent_id,
                        run_id=entry.run_id,
                        checkpoint_type=entry.checkpoint[0],
                        checkpoint=entry.checkpoint[1],
                        metadata_type=entry.metadata[0],
                        metadata=entry.metadata[1],
                        values=values,
                        unique_versions=entry.unique_versions,
                    )
                )
                events.extend(_copied_writes(source, ns, checkpoint_id))
        if not events:
            return
        async with self._commit(target_thread_id) as commit:
            commit.events.extend(events)

    async def aprune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> None:
        """Remove all but the newest checkpoint per namespace, or all of them.

        Args:
            thread_ids: The threads to prune.
            strategy: ``"keep_latest"`` or ``"delete"``.

        Raises:
            ValueError: An unknown ``strategy``.
        """
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(
                f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}"
            )
        for thread_id in thread_ids:
            if await self.journal.head(self.thread_key(thread_id)) == 0:
                continue
            async with self._commit(thread_id) as commit:
                view = commit.view
                if strategy == "delete":
                    if view.checkpoints or view.writes:
                        commit.events.append(LangGraphThreadDeleted())
                    continue
                doomed = [
                    (ns, checkpoint_id)
                    for ns, saved in view.checkpoints.items()
                    if saved
                    for kept in [self._kept_by_prune(view, ns, saved)]
                    for checkpoint_id in sorted(saved)
                    if checkpoint_id not in kept
                ]
                if doomed:
                    commit.events.append(
                        LangGraphCheckpointsDeleted(checkpoints=doomed, reason="prune")
                    )

    def _kept_by_prune(
        self, view: _Thread, ns: str, saved: dict[str, _Saved]
    ) -> set[str]:
        """The newest checkpoint, and the ancestors its ``DeltaChannel``s rebuild from.

        A ``DeltaChannel`` stores a value only at its snapshots and rebuilds the
        steps between from the ancestors' writes: keeping only the newest
        checkpoint would leave it empty. The newest checkpoint's metadata names
        those channels (``counters_since_delta_snapshot``); its parent chain is
        kept back to the nearest checkpoint storing a value for each of them.
        """
        current: str | None = max(saved)
        newest = saved[max(saved)]
        metadata = self.serde.loads_typed(newest.metadata)
        pending = set(metadata.get("counters_since_delta_snapshot") or {})
        kept: set[str] = set()
        while current is not None and current in saved:
            kept.add(current)
            if not pending:
                break
            entry = saved[current]
            versions = self._checkpoint(entry)["channel_versions"]
            for channel in list(pending):
                link = view.blobs.get((ns, channel, versions.get(channel)))
                if link is not None and link.type != "empty":
                    pending.discard(channel)
            current = entry.parent_id
        return kept

    # --- reading ---

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        with _framework_errors():
            view = await self.folds.read(self.thread_key(thread_id))
        saved = view.checkpoints.get(ns, {})
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            if not saved:
                return None
            checkpoint_id = max(saved)
        entry = saved.get(checkpoint_id)
        if entry is None:
            return None
        return self._tuple(view, thread_id, ns, checkpoint_id, entry)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The checkpoints matching, newest first (see ``BaseCheckpointSaver.list``)."""
        if config is not None:
            thread_ids: list[str] = [str(config["configurable"]["thread_id"])]
            wanted_ns = config["configurable"].get("checkpoint_ns")
            wanted_id = get_checkpoint_id(config)
        else:
            thread_ids = [t async for t in self._thread_ids()]
            wanted_ns, wanted_id = None, None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id in thread_ids:
            with _framework_errors():
                view = await self.folds.read(self.thread_key(thread_id))
            for ns, saved in list(view.checkpoints.items()):
                if wanted_ns is not None and ns != wanted_ns:
                    continue
                for checkpoint_id in sorted(saved, reverse=True):
                    if wanted_id and checkpoint_id != wanted_id:
                        continue
                    if before_id and checkpoint_id >= before_id:
                        continue
                    entry = saved[checkpoint_id]
                    metadata = self.serde.loads_typed(entry.metadata)
                    if filter and not all(
                        metadata.get(k) == v for k, v in filter.items()
                    ):
                        continue
                    if remaining is not None:
                        if remaining <= 0:
                            return
                        remaining -= 1
                    yield self._tuple(view, thread_id, ns, checkpoint_id, entry)

    def _checkpoint(self, entry: _Saved) -> dict[str, Any]:
        """The stored checkpoint, an older record's integer versions as strings."""
        checkpoint: dict[str, Any] = self.serde.loads_typed(entry.checkpoint)
        if not entry.unique_versions:
            checkpoint["channel_versions"] = {
                channel: _string_version(version)
                for channel, version in checkpoint["channel_versions"].items()
            }
            if "versions_seen" in checkpoint:
                checkpoint["versions_seen"] = {
                    node: {channel: _string_version(v) for channel, v in seen.items()}
                    for node, seen in checkpoint["versions_seen"].items()
                }
        return checkpoint

    def _tuple(
        self, view: _Thread, thread_id: str, ns: str, checkpoint_id: str, entry: _Saved
    ) -> CheckpointTuple:
        checkpoint = self._checkpoint(entry)
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            chain = _chain(view, ns, channel, version)
            if not chain or chain[0].type == "empty" or chain[0].base is not None:
                continue  # never stored, empty, or a delta whose base is gone
            value = self.serde.loads_typed((chain[0].type, chain[0].data))
            for link in chain[1:]:
                value = value + self.serde.loads_typed((link.type, link.data))
            values[channel] = value
        writes = sorted(
            view.writes.get((ns, checkpoint_id), {}).items(), key=_writes_order
        )
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=cast("Checkpoint", {**checkpoint, "channel_values": values}),
            metadata=self.serde.loads_typed(entry.metadata),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": entry.parent_id,
                    }
                }
                if entry.parent_id
                else None
            ),
            pending_writes=[
                (task_id, channel, self.serde.loads_typed(value))
                for task_id, channel, value, _ in (w for _, w in writes)
            ],
        )

    async def _thread_ids(self) -> AsyncIterator[str]:
        """The LangGraph thread ids of every journal thread holding a checkpoint."""
        async for key in self.journal.threads():
            with _framework_errors():
                view = await self.folds.read(key)
            if view.thread_id is not None and view.checkpoints:
                yield view.thread_id

    # --- the sync twins, run on the saver's loop ---

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise RuntimeError(
                "JournalSaver's sync methods run on the event loop the saver was made "
                "on; make it inside a running loop (or pass loop=)"
            )
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError(
                "a sync JournalSaver method was called on its own event loop's "
                "thread, where it would wait for itself; use the async method "
                "(aget_tuple, aput, ...) or call from another thread"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Sync :meth:`aget_tuple` (from a thread other than the saver's loop)."""
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Sync :meth:`alist` (from a thread other than the saver's loop)."""

        async def collect() -> list[CheckpointTuple]:
            return [
                t
                async for t in self.alist(
                    config, filter=filter, before=before, limit=limit
                )
            ]

        return iter(self._sync(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Sync :meth:`aput` (from a thread other than the saver's loop)."""
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Sync :meth:`aput_writes` (from a thread other than the saver's loop)."""
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Sync :meth:`adelete_thread` (from a thread other than the saver's loop)."""
        self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Sync :meth:`adelete_for_runs` (from a thread other than the saver's loop)."""
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync :meth:`acopy_thread` (from a thread other than the saver's loop)."""
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> None:
        """Sync :meth:`aprune` (from a thread other than the saver's loop)."""
        self._sync(self.aprune(thread_ids, strategy=strategy))


@dataclass
class _ListChannel:
    """The list a saver last stored for a channel: the base of its next delta.

    ``items`` holds each item's serialized form, as it was when stored: the graph
    may edit the items themselves in place afterwards.
    """

    version: Version
    items: list[tuple[str, bytes]]
    whole_size: int
    since_whole: int = 0


def _chain(
    view: _Thread, ns: str, channel: str, version: Version
) -> list[LangGraphChannelValue]:
    """The stored links of a value, the whole one first, then its deltas in order."""
    links: list[LangGraphChannelValue] = []
    current: Version | None = version
    while current is not None:
        link = view.blobs.get((ns, channel, current))
        if link is None:
            break
        links.append(link)
        current = link.base
    links.reverse()
    return links


@dataclass
class _TakenList:
    """A list channel's value as ``aput`` took it, before the lease is held.

    ``delta`` (the items past ``on``'s, serialized) when the list only grew since
    the stored list ``on`` (a cache entry, then at ``on_version``), else ``whole``.
    """

    key: tuple[str, str, str]
    channel: str
    version: Version
    items: list[tuple[str, bytes]]
    whole: tuple[str, bytes] | None
    delta: tuple[str, bytes] | None
    on: _ListChannel | None
    on_version: Version | None = field(init=False)

    def __post_init__(self) -> None:
        self.on_version = None if self.on is None else self.on.version


@dataclass
class _Committer:
    """The thread's view under the lease, and the events one operation commits."""

    view: _Thread
    events: list[object]


def _copied_writes(
    source: _Thread, ns: str, checkpoint_id: str
) -> Iterator[LangGraphWritesSaved]:
    by_task: dict[tuple[str, str], list[LangGraphWrite]] = {}
    for (task_id, idx), (_, channel, (kind, data), task_path) in sorted(
        source.writes.get((ns, checkpoint_id), {}).items(), key=_writes_order
    ):
        by_task.setdefault((task_id, task_path), []).append(
            LangGraphWrite(idx, channel, kind, data)
        )
    for (task_id, task_path), writes in by_task.items():
        yield LangGraphWritesSaved(
            ns=ns,
            checkpoint_id=checkpoint_id,
            task_id=task_id,
            task_path=task_path,
            writes=writes,
        )


@contextlib.contextmanager
def _framework_errors() -> Generator[None, None, None]:
    """Re-raise the journal's lease and conflict errors as the saver's own."""
    try:
        yield
    except FencedError as exc:
        raise CheckpointFencedError(str(exc)) from exc
    except LeaseHeldError as exc:
        raise CheckpointLeaseHeldError(str(exc)) from exc
    except ConflictError as exc:
        raise CheckpointConflictError(str(exc)) from exc
