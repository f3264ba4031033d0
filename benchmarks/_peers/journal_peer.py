"""agent-journal: one ``ThreadWriter.append`` per turn through a held writer."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from _peers.base import Adapter, du
from journal import (
    Journal,
    MessageAppended,
    Msg,
    PlanModeEntered,
    PlanModeExited,
    SummarySet,
    TextBlock,
    ThreadKey,
    TodosWritten,
    ToolResultBlock,
    ToolUseBlock,
)

if TYPE_CHECKING:
    from _peers.workload import Turn
    from journal import ThreadWriter

KEY = ThreadKey("bench", "peers", "bench")
PRELOAD = ("stores.registry", "stores.local")  # imported by Journal.open on first use


def message_id(turn: int, k: int) -> str:
    """The id of a turn's ``k``-th message: a uuid4-sized hex, the same every run.

    Chunk boundaries (and so when a checkpoint is taken) follow from message
    ids; random ids would move them from run to run, and with them every
    checkpoint-sensitive number.
    """
    seed = f"bench-{turn}-{k}".encode()
    return hashlib.blake2b(seed, digest_size=16).hexdigest()


def messages(t: Turn) -> list[Msg]:
    ids = [message_id(t.i, k) for k in range(4)]
    return [
        Msg("user", t.user, id=ids[0]),
        Msg(
            "assistant",
            [TextBlock(t.preamble), ToolUseBlock(t.call_id, t.tool, t.args)],
            id=ids[1],
        ),
        Msg("tool", [ToolResultBlock(t.call_id, t.result)], id=ids[2]),
        Msg("assistant", t.answer, id=ids[3]),
    ]


def events(t: Turn) -> list[Any]:
    out: list[Any] = [MessageAppended(m) for m in messages(t)]
    if t.todos is not None:
        out.append(TodosWritten(t.todos, t.todos_revision))
    if t.plan_mode is True:
        out.append(PlanModeEntered(t.plan_file))
    elif t.plan_mode is False:
        out.append(PlanModeExited())
    if t.summary is not None:
        out.append(SummarySet(t.summary))
    return out


def payload_bytes(t: Turn) -> int:
    """The messages' own bytes (msgpack of each ``Msg``, as bench_commit counts)."""
    return sum(len(msgspec.msgpack.encode(m)) for m in messages(t))


class JournalPeer(Adapter):
    system = "agent-journal"
    module = "journal_peer"

    def __init__(
        self,
        root: Path | None,
        *,
        fsync: bool = True,
        compression: str | None = None,
        log_spans: str = "dense",
    ) -> None:
        if root is None:  # a process-wide MemoryStore
            variant = "memory://"
            durability = "in memory: nothing survives the process"
        elif fsync:
            variant = "local disk, fsync=True"
            durability = (
                "fsync=True (default): each record is appended to the thread's "
                "segment file and fdatasync-ed before append returns (the "
                "segment's directory is synced when the segment is created)"
            )
        else:
            variant = "local disk, fsync=False"
            durability = (
                "fsync=False: the same writes without any fsync (survives a "
                "process crash, not a power loss)"
            )
        if compression is not None:
            variant += f", compression={compression}"
            durability += (
                f"; records and chunks compressed with {compression} "
                "(`Journal.open(..., compression=...)`, the `zstd` extra)"
            )
        if log_spans != "dense":
            variant += f", log_spans={log_spans}"
            durability += (
                "; checkpoints copy messages into chunk blobs"
                if log_spans == "never"
                else "; checkpoints name the records holding their messages"
            ) + f" (`Journal.open(..., log_spans={log_spans!r})`)"
        super().__init__(variant, durability)
        self.root = root
        self.fsync = fsync
        self.compression = compression
        self.log_spans = log_spans
        self.persistent = root is not None
        self.durable = (
            "memory" if root is None else "durable" if fsync else "not durable"
        )
        self.url = str(root) if root is not None else f"memory://peers-{id(self)}"
        self.writer: ThreadWriter | None = None

    def _open_journal(self) -> Journal:
        if self.root is None:
            return Journal.open(self.url)
        return Journal.open(
            self.url,
            fsync=self.fsync,
            compression=self.compression,
            log_spans=self.log_spans,
        )

    async def open(self) -> None:
        self.journal = self._open_journal()
        self.writer = await self.journal.acquire(KEY, holder="bench")

    async def put_turn(self, turn: Turn) -> None:
        assert self.writer is not None
        await self.writer.append(events(turn))
        self.turns += 1

    async def load(self) -> int:
        fresh = self._open_journal()
        try:
            state = await fresh.load(KEY)
        finally:
            await fresh.aclose()
        return len(state.context)

    def footprint(self) -> tuple[int, int] | None:
        return du(self.root) if self.root is not None else None

    async def byte_parts(self) -> dict[str, int] | None:
        return await byte_parts(self.root) if self.root is not None else None

    def loader_spec(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    async def settle(self) -> None:
        # A checkpoint (100 to 400 records apart) is written by a background task after
        # the append that made it due returns; wait for it so that its cost is
        # counted here, not in whichever system runs next.
        task = getattr(self.writer, "_checkpointer", None)
        if task is not None and not task.done():
            await task

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer.close()
            self.writer = None
        await self.journal.aclose()


PARTS = ("log", "blobs", "checkpoints", "seals")
"""A thread's directories, each counted apart by :func:`byte_parts`."""


def _file_parts(root: Path) -> dict[str, int]:
    parts = dict.fromkeys((*PARTS, "other"), 0)
    for path in root.rglob("*"):
        if path.is_file():
            where = next((p for p in PARTS if p in path.relative_to(root).parts), None)
            parts[where or "other"] += path.stat().st_size
    return parts


async def byte_parts(root: Path, key: ThreadKey = KEY) -> dict[str, int]:
    """Where a local journal's bytes go: file sizes by part, and what the log holds.

    ``log``, ``blobs`` (message chunks), ``checkpoints``, ``seals``: the bytes of
    the files under the thread's directory of that name (a segment file's whole
    size, the reserve at its end included); ``other``: everything else under
    ``root`` (LEASE, hints, the thread index). ``events``: the events' own bytes
    (MessagePack of each, as a record's envelope holds them), summed over every
    record of ``key``; ``records``: how many records it has. The log's bytes beyond
    its events are its framing: the segment's frames, each record's frame, header
    and hash, and the envelopes.
    """
    parts = _file_parts(root)
    journal = Journal.open(root)
    try:
        records = [r async for r in journal.records(key)]
    finally:
        await journal.aclose()
    parts["events"] = sum(
        len(msgspec.msgpack.encode(event)) for r in records for event in r.events
    )
    parts["records"] = len(records)
    return parts


async def child_load(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    journal = Journal.open(Path(spec["root"]))
    t1 = time.perf_counter()
    state = await journal.load(KEY)
    t2 = time.perf_counter()
    await journal.aclose()
    return {"open_s": t1 - t0, "load_s": t2 - t1, "items": len(state.context)}
