"""The client side of durable turns: submit, look up, control, await.

A client never takes a thread's lease: it writes index entries (a turn, a control
request) and reads the thread's log. Workers holding the lease apply them.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from journal.durable.errors import (
    StaleRevisionError,
    TurnCancelledError,
    TurnFailedError,
    TurnNotFoundError,
    TurnStateError,
)
from journal.durable.index import (
    CONTROL_OPS,
    Control,
    ControlOp,
    DurableIndex,
    ThreadEntries,
    TurnEntry,
    new_request_id,
)
from journal.durable.ledger import TurnInfo, TurnLedger, TurnStatus
from journal.keys import ThreadKey
from journal.runtime.context import RuntimeContext
from journal.runtime.run import Messages, inputs_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from journal import events as ev
    from journal.codec import Record
    from journal.engine import Journal

__all__ = ["DurableClient", "Turn", "TurnView"]

_TURN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass(frozen=True, slots=True)
class TurnView:
    """A turn's status at one moment.

    Attributes:
        key: The thread.
        turn_id: The turn.
        status: Its status.
        revision: Its revision (the number of transitions; 1 when queued).
        in_log: Whether the log names it yet (else it waits in the index).
        error: Why it failed, was cancelled or is paused, if it was.
        runs: Its runs so far.
        pending_controls: Control requests waiting for the lease holder.
    """

    key: ThreadKey
    turn_id: str
    status: TurnStatus
    revision: int
    in_log: bool
    error: str | None = None
    runs: tuple[str, ...] = ()
    pending_controls: int = 0

    @property
    def terminal(self) -> bool:
        """Whether the turn has ended."""
        return self.status in (
            TurnStatus.COMPLETED,
            TurnStatus.FAILED,
            TurnStatus.CANCELLED,
        )


class DurableClient:
    """Submits and controls durable turns of one agent's threads.

    Args:
        journal: The journal the threads live in (the index shares its store).
        agent_id: The agent whose threads this client addresses.
        namespace: The thread keys' namespace.
        poll: Seconds between reads while awaiting a result or events.

    Raises:
        ValueError: A bad ``poll``.
    """

    def __init__(
        self,
        journal: Journal,
        agent_id: str,
        *,
        namespace: str = "default",
        poll: float = 0.1,
    ) -> None:
        if poll <= 0:
            raise ValueError(f"poll must be positive, not {poll}")
        ThreadKey(agent_id, "s", namespace=namespace)
        self.journal = journal
        self.agent_id = agent_id
        self.namespace = namespace
        self.poll = poll
        self.index = DurableIndex(
            journal.store, keyring=journal.keyring, encrypt=journal.settings.encrypt
        )

    def key(self, ctx: RuntimeContext | ThreadKey) -> ThreadKey:
        """The thread a context (or a key) names.

        Raises:
            ValueError: The context has no session id.
            TypeError: ``ctx`` is neither a RuntimeContext nor a ThreadKey.
        """
        if isinstance(ctx, ThreadKey):
            return ctx
        if not isinstance(ctx, RuntimeContext):
            raise TypeError(
                f"expected a RuntimeContext or a ThreadKey, not {type(ctx).__name__}"
            )
        if ctx.session_id is None:
            raise ValueError("a durable turn needs a session_id on its context")
        return ThreadKey(
            self.agent_id, ctx.session_id, ctx.user_id, ctx.thread_id, self.namespace
        )

    # --- submitting ---

    async def submit(
        self,
        ctx: RuntimeContext | ThreadKey,
        messages: Messages,
        turn_id: str | None = None,
    ) -> Turn:
        """Queue a turn on the thread; idempotent on ``turn_id``.

        A resubmission of a ``turn_id`` the thread already has (queued, running
        or ended) returns that turn and queues nothing, whatever its messages.

        Args:
            ctx: The thread (a context with a session id, or a key).
            messages: The turn's input (see ``Agent.call``). Must not be empty.
            turn_id: The turn's id (1-128 of ``[A-Za-z0-9_.:-]``); default a new one.

        Returns:
            The turn.

        Raises:
            ValueError: A bad ``turn_id`` or no messages.
        """
        key = self.key(ctx)
        inputs = inputs_of(messages)
        if not inputs:
            raise ValueError("a durable turn needs at least one input message")
        explicit = turn_id is not None
        turn_id = turn_id if turn_id is not None else uuid.uuid4().hex
        if not _TURN_ID.fullmatch(turn_id):
            raise ValueError(
                f"turn_id must be 1-128 characters of [A-Za-z0-9_.:-], not {turn_id!r}"
            )
        entries = await self.index.list_thread(key)
        if entries.find(turn_id) is not None:
            return Turn(self, key, turn_id)
        if explicit and await self._in_log(key, turn_id) is not None:
            return Turn(self, key, turn_id)
        entry = TurnEntry(
            turn_id=turn_id,
            messages=inputs,
            submitted_at=time.time(),
            agent_id=key.agent_id,
            session_id=key.session_id,
            user_id=key.user_id,
            thread_id=key.thread_id,
            namespace=key.namespace,
        )
        await self.index.add_turn(entry, entries)
        return Turn(self, key, turn_id)

    def turn(self, ctx: RuntimeContext | ThreadKey, turn_id: str) -> Turn:
        """A handle on an existing turn (nothing is read until it is used)."""
        return Turn(self, self.key(ctx), turn_id)

    # --- reading ---

    async def ledger(self, key: ThreadKey, start: int = 1) -> TurnLedger:
        """The thread's turns as its log shows them from version ``start``."""
        ledger = TurnLedger()
        async for record in self.journal.records(key, start=start):
            ledger.apply(record)
        return ledger

    async def _in_log(
        self, key: ThreadKey, turn_id: str, cursor: int | None = None
    ) -> TurnInfo | None:
        # Unfinished turns begin at or after the cursor; an ended one may be older.
        start = cursor if cursor is not None else await self.index.read_cursor(key)
        info = (await self.ledger(key, start)).get(turn_id)
        if info is None and start > 1:
            info = (await self.ledger(key, 1)).get(turn_id)
        return info

    async def view(self, key: ThreadKey, turn_id: str) -> TurnView:
        """The turn's current status.

        Raises:
            TurnNotFoundError: Neither the index nor the log has the turn.
        """
        # The cursor first: a turn that ends and leaves the index moves it after.
        cursor = await self.index.read_cursor(key)
        entries = await self.index.list_thread(key)
        info = (await self.ledger(key, cursor)).get(turn_id)
        controls = len(entries.controls)
        if info is None and entries.find(turn_id) is not None:
            return TurnView(
                key, turn_id, TurnStatus.QUEUED, 1, False, pending_controls=controls
            )
        if info is None and cursor > 1:
            info = (await self.ledger(key, 1)).get(turn_id)
        if info is None:
            raise TurnNotFoundError(str(key), turn_id)
        return _view(key, info, controls)

    async def turns(self, key: ThreadKey) -> list[TurnView]:
        """Every turn of the thread: those in its log, then those still queued."""
        entries = await self.index.list_thread(key)
        ledger = await self.ledger(key)
        out = [
            _view(key, info, len(entries.controls)) for info in ledger.turns.values()
        ]
        out.extend(
            TurnView(key, t.turn_id, TurnStatus.QUEUED, 1, False)
            for t in entries.turns
            if ledger.get(t.turn_id) is None
        )
        return out

    async def threads_with_work(self) -> list[ThreadKey]:
        """The threads the index holds entries for (one LIST per shard)."""
        out: list[ThreadKey] = []
        for shard in await self.index.shard_names():
            for entries in await self.index.list_shard(shard):
                key = await self.index.key_of(entries)
                if key is not None:
                    out.append(key)
        return out

    # --- control ---

    async def control(
        self,
        key: ThreadKey,
        turn_id: str,
        op: ControlOp,
        *,
        request_id: str | None = None,
        revision: int | None = None,
        reason: str = "",
    ) -> str:
        """Record a control request for the lease holder; returns its request id.

        Raises:
            ValueError: ``op`` is not one of ``pause``, ``resume``, ``cancel``.
        """
        if op not in CONTROL_OPS:
            # Checked here: a worker refuses an op it does not know only once it
            # holds the thread's lease.
            raise ValueError(
                f"op must be one of {', '.join(CONTROL_OPS)}, not {op!r} "
                f"(turn {turn_id!r} of {key})"
            )
        request = request_id or new_request_id()
        await self.index.add_control(
            Control(
                op=op,
                turn_id=turn_id,
                request_id=request,
                revision=revision,
                reason=reason,
                requested_at=time.time(),
                agent_id=key.agent_id,
                session_id=key.session_id,
                user_id=key.user_id,
                thread_id=key.thread_id,
                namespace=key.namespace,
            )
        )
        return request


def _view(key: ThreadKey, info: TurnInfo, controls: int) -> TurnView:
    return TurnView(
        key,
        info.turn_id,
        info.status,
        info.revision,
        True,
        info.error,
        tuple(info.runs),
        controls,
    )


class Turn:
    """A handle on one durable turn.

    Attributes:
        client: The client it came from.
        key: Its thread.
        turn_id: Its id.
    """

    def __init__(self, client: DurableClient, key: ThreadKey, turn_id: str) -> None:
        self.client = client
        self.key = key
        self.turn_id = turn_id

    def __repr__(self) -> str:
        return f"Turn({self.turn_id!r}, {str(self.key)!r})"

    async def status(self) -> TurnView:
        """The turn's status and revision now (see ``DurableClient.view``)."""
        return await self.client.view(self.key, self.turn_id)

    async def pause(self, request_id: str | None = None, reason: str = "") -> str:
        """Ask for the turn to pause at its next checkpoint (or before it starts).

        Args:
            request_id: The request's id: a repeated request with the same id is
                applied once. Default: a new one.
            reason: Recorded with the pause.

        Returns:
            The request id.

        Raises:
            TurnStateError: The turn has ended.
        """
        return await self._control_unended("pause", request_id, reason)

    async def resume(self, revision: int, request_id: str | None = None) -> str:
        """Resume the paused turn, if ``revision`` is still its revision.

        The lease holder checks the revision again when it applies the request
        (and records ``TurnControlRefused`` if the turn moved on meanwhile).

        Returns:
            The request id.

        Raises:
            StaleRevisionError: ``revision`` is not the turn's current revision.
            TurnStateError: The turn is not paused.
        """
        view = await self.status()
        if view.revision != revision:
            raise StaleRevisionError(
                str(self.key), self.turn_id, revision, view.revision
            )
        if view.status is not TurnStatus.PAUSED:
            raise TurnStateError(
                f"{self.key}: turn {self.turn_id!r} is {view.status}, not paused"
            )
        return await self.client.control(
            self.key,
            self.turn_id,
            "resume",
            request_id=request_id,
            revision=revision,
        )

    async def cancel(
        self, reason: str = "cancelled", request_id: str | None = None
    ) -> str:
        """Ask for the turn to be cancelled (a running one at its next checkpoint).

        Returns:
            The request id.

        Raises:
            TurnStateError: The turn has ended.
        """
        return await self._control_unended("cancel", request_id, reason)

    async def _control_unended(
        self, action: Literal["pause", "cancel"], request_id: str | None, reason: str
    ) -> str:
        """Send ``action`` unless the turn has ended (then ``TurnStateError``)."""
        view = await self.status()
        if view.terminal:
            raise TurnStateError(
                f"{self.key}: turn {self.turn_id!r} is {view.status}: nothing to "
                f"{action}"
            )
        return await self.client.control(
            self.key, self.turn_id, action, request_id=request_id, reason=reason
        )

    async def wait(self, timeout: float | None = None) -> TurnView:  # noqa: ASYNC109
        """Wait until the turn has ended; returns its final status.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        async with asyncio.timeout(timeout):
            while True:
                view = await self.status()
                if view.terminal:
                    return view
                await asyncio.sleep(self.client.poll)

    async def result(self, timeout: float | None = None) -> ev.Msg:  # noqa: ASYNC109
        """Wait for the turn to end and return its final reply.

        Raises:
            TurnFailedError: The turn failed.
            TurnCancelledError: The turn was cancelled.
            TimeoutError: ``timeout`` seconds passed first.
        """
        view = await self.wait(timeout)
        if view.status is TurnStatus.CANCELLED:
            raise TurnCancelledError(self.turn_id, view.error or "cancelled")
        if view.status is TurnStatus.FAILED:
            raise TurnFailedError(self.turn_id, view.error or "failed")
        info = await self.client._in_log(self.key, self.turn_id)
        if info is None or info.reply is None:
            raise TurnNotFoundError(str(self.key), self.turn_id)
        return info.reply

    async def events(self) -> AsyncIterator[Record]:
        """Yield the turn's records as they are committed, until it ends.

        Its transitions' records and those of its runs.
        """
        ledger = TurnLedger()
        start = 1
        while True:
            async for record in self.client.journal.records(self.key, start=start):
                ledger.apply(record)
                start = record.version + 1
                info = ledger.get(self.turn_id)
                if info is not None and _concerns(record, self.turn_id, ledger):
                    yield record
            info = ledger.get(self.turn_id)
            if info is not None and info.terminal:
                return
            if info is None:
                entries: ThreadEntries = await self.client.index.list_thread(self.key)
                if entries.find(self.turn_id) is None:
                    raise TurnNotFoundError(str(self.key), self.turn_id)
            await asyncio.sleep(self.client.poll)


def _concerns(record: Record, turn_id: str, ledger: TurnLedger) -> bool:
    info = ledger.turn_of_run(record.run_id)
    if info is not None and info.turn_id == turn_id:
        return True
    return any(getattr(e, "turn_id", None) == turn_id for e in record.events)
