"""Workers: take queued turns per thread, in order, under the thread's lease.

A worker scans the index shard by shard (one ``LIST`` each), and for a thread with
entries tries the thread's lease (never waiting: a thread held elsewhere is
skipped). Holding it, a *claim* reads the thread's turns from the log since the
cursor hint, applies control requests, and takes the oldest unfinished turn:

1. a turn the log does not know yet: ``TurnQueued`` + ``TurnStarted`` in one
   record, then a run with the turn's input (``RunStarted.turn_id``);
2. a turn whose run was interrupted (its worker died: the lease's next holder
   recorded ``RunInterrupted(by="recovery")``, or it was stopped): the
   application's policy decides its uncertain tool calls, ``TurnTakenOver`` is
   recorded, and a continuation run (no new input) carries on;
3. a paused turn: nothing; the thread waits (FIFO) until it is resumed or
   cancelled.

When the turn's end is in the log, its entry is deleted. A claim takes up to
``max_turns`` turns, then writes the cursor hint and releases the lease. Pause and
cancel of a running turn fire its run's interrupt signal without cutting a model
call or tool short: the run stops at its next checkpoint.

A failure confined to one thread stops only that thread: an index object that
cannot be decoded is set aside (``DurableIndex.set_aside``; a turn whose input
cannot be read fails), a policy that raises or decides wrongly holds the turn as
``Hold`` would (its reason says why), and any other error of a claim is logged
and the thread is left alone by this worker until its entries change.

Fault points: ``fault(point)`` is called between the steps of a claim (the
tests make it raise); see ``FAULT_POINTS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import uuid
from typing import TYPE_CHECKING

import msgspec

from journal import events as ev
from journal import turn_events as te
from journal.codec import Record
from journal.durable.index import DurableIndex, ThreadEntries, TurnRef
from journal.durable.ledger import TurnInfo, TurnLedger, TurnStatus
from journal.durable.policy import (
    Decision,
    Fail,
    Hold,
    Reconcile,
    Uncertain,
    UncertainPolicy,
    hold,
)
from journal.errors import JournalError, LeaseHeldError, ObjectNotFoundError
from journal.runtime.context import RuntimeContext
from journal.runtime.run import RunControl, RunEvent
from journal.runtime.sinks import JournalSink
from journal.runtime.uncertain import outcome_block, reconcile_events, uncertain_calls

if TYPE_CHECKING:
    from collections.abc import Callable

    from journal.durable.index import Control, TurnEntry
    from journal.engine import Journal, ThreadWriter
    from journal.keys import ThreadKey
    from journal.runtime.agent import Agent

__all__ = ["FAULT_POINTS", "Worker"]

logger = logging.getLogger("journal.durable")

FAULT_POINTS = (
    "claimed",  # the lease is held, nothing read yet
    "read",  # the turns since the cursor are folded
    "control-committed",  # a control request's event is in the log, not deleted
    "started",  # TurnStarted is committed, the run has not begun
    "ran",  # the run ended (its end is in the log)
    "stopped",  # TurnPaused / TurnCancelled of a running turn committed
    "ended",  # an ended turn's entry is about to be deleted
    "swept",  # entries deleted, cursor not written
)
"""Where ``Worker(fault=...)`` is called during a claim, in order."""


class Worker:
    """Runs queued turns of any thread in the index; run one or many per replica.

    Args:
        agents: The agent that runs turns (its model, tools and settings), or a
            function of a thread key returning one (None: skip the thread).
        journal: The journal (default: the agent's).
        worker_id: The lease holder id (default: unique). A restarted worker
            may reuse its predecessor's to take its leases over at once.
        lease_ttl: The thread lease's duration; a dead worker's turns are taken
            over once it has expired.
        concurrency: Threads claimed at once by this worker.
        poll: Seconds between scans when a scan found nothing to do.
        control_poll: Seconds between looks for pause / cancel requests while a
            turn runs (one ``LIST`` each).
        uncertain: The policy for tool calls of unknown outcome at a takeover.
        max_turns: Turns one claim takes before releasing the lease.
        fault: Called at each of ``FAULT_POINTS`` (tests: raise to crash there).

    Raises:
        ValueError: A bad number.
    """

    def __init__(
        self,
        agents: Agent | Callable[[ThreadKey], Agent | None],
        journal: Journal | None = None,
        *,
        worker_id: str | None = None,
        lease_ttl: float = 30.0,
        concurrency: int = 4,
        poll: float = 0.5,
        control_poll: float = 0.25,
        uncertain: UncertainPolicy = hold,
        max_turns: int = 16,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        if lease_ttl <= 0 or poll <= 0 or control_poll <= 0:
            raise ValueError("lease_ttl, poll and control_poll must be positive")
        if concurrency < 1 or max_turns < 1:
            raise ValueError("concurrency and max_turns must be at least 1")
        self._agents = agents
        found = journal if journal is not None else _journal_of(agents)
        if found is None:
            raise ValueError("give Worker a journal= (or an Agent in journal mode)")
        self.journal: Journal = found
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:12]}"
        self.lease_ttl = lease_ttl
        self.concurrency = concurrency
        self.poll = poll
        self.control_poll = control_poll
        self.uncertain = uncertain
        self.max_turns = max_turns
        self.index = DurableIndex(
            self.journal.store,
            keyring=self.journal.keyring,
            encrypt=self.journal.settings.encrypt,
        )
        self._fault = fault
        self._active: set[str] = set()
        self._blocked: dict[str, frozenset[str]] = {}
        self._runs: set[RunControl] = set()
        self._stopping = False
        self.turns_run = 0

    def _agent(self, key: ThreadKey) -> Agent | None:
        agents = self._agents
        if callable(agents) and not hasattr(agents, "run_loop"):
            return agents(key)
        return agents  # type: ignore[return-value]

    def _point(self, name: str) -> None:
        if self._fault is not None:
            self._fault(name)

    # --- the loop ---

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Scan and run turns until ``stop`` is set (or the task is cancelled)."""
        stop = stop if stop is not None else asyncio.Event()
        while not stop.is_set() and not self._stopping:
            did = await self.run_once()
            if did == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.poll)

    async def drain(self, idle_rounds: int = 2) -> int:
        """Run until ``idle_rounds`` scans in a row found nothing to do.

        Returns:
            How many turns were advanced (run, stopped or ended).
        """
        total, idle = 0, 0
        while idle < idle_rounds:
            did = await self.run_once()
            total += did
            idle = 0 if did else idle + 1
            if not did and idle < idle_rounds:
                await asyncio.sleep(self.poll)
        return total

    async def run_once(self) -> int:
        """One scan of every shard; claims threads with work (``concurrency`` at once).

        Returns:
            How many turns the claims advanced.
        """
        shards = await self.index.shard_names()
        random.shuffle(shards)
        tasks: set[asyncio.Task[int]] = set()
        done_count = 0
        try:
            for shard in shards:
                threads = await self.index.list_shard(shard)
                random.shuffle(threads)
                for entries in threads:
                    if self._stopping:
                        break
                    if entries.prefix in self._active:
                        continue
                    if self._blocked.get(entries.prefix) == entries.names:
                        continue
                    while len(tasks) >= self.concurrency:
                        finished, tasks = await _first(tasks)
                        done_count += sum(t.result() for t in finished)
                    key = await self.index.key_of(entries)
                    if key is None:
                        # No entry names the thread: read them again only when
                        # they change.
                        self._blocked[entries.prefix] = entries.names
                        continue
                    agent = self._agent(key)
                    if agent is None:
                        continue
                    task = asyncio.create_task(
                        self._claim(key, agent, entries), name=f"claim {key}"
                    )
                    tasks.add(task)
            if tasks:
                results = await asyncio.gather(*tasks)
                done_count += sum(results)
                tasks = set()
        finally:
            for task in tasks:
                task.cancel()
        return done_count

    async def close(self) -> None:
        """Stop: running turns are interrupted (``by="shutdown"``) at once.

        Their turns stay running in the log; the next worker continues them. A
        tool call cut short is left uncertain (no result is recorded), so the
        next worker's ``uncertain`` policy decides it; the same holds when the
        worker's task is cancelled.
        """
        self._stopping = True
        for run in list(self._runs):
            run.signal.fire("shutdown", "the worker is shutting down")

    # --- one claim ---

    async def _claim(self, key: ThreadKey, agent: Agent, entries: ThreadEntries) -> int:
        prefix = entries.prefix
        # Marked here, in the claim's first step, not by the scan that created its
        # task: a task cancelled before it starts never runs a finally, and would
        # leave the thread marked for good.
        if prefix in self._active:
            return 0  # another claim of this worker holds the thread
        self._active.add(prefix)
        try:
            try:
                writer = await self.journal.acquire(
                    key,
                    self.worker_id,
                    lease_ttl=self.lease_ttl,
                    wait=0.0,
                    defer_fence=True,
                )
            except LeaseHeldError:
                return 0
            except JournalError as exc:
                logger.warning("%s: cannot claim: %s", key, exc)
                return 0
            try:
                return await self._hold(writer, key, agent, entries)
            except JournalError as exc:
                # The claim is lost (fenced, storage down): what it committed
                # stays, and the thread's next lease holder carries on from the log.
                logger.warning("%s: claim by %s ended: %s", key, self.worker_id, exc)
                return 0
            except Exception:
                # A fault of this thread alone (a bug, a bad agent): the other
                # threads' claims go on, and this one is not retried by this
                # worker until its entries change (it would fail the same way).
                logger.exception("%s: claim by %s failed", key, self.worker_id)
                self._blocked[prefix] = entries.names
                return 0
            finally:
                try:
                    await writer.close()
                except JournalError as exc:
                    logger.warning("%s: releasing the lease failed: %s", key, exc)
        finally:
            self._active.discard(prefix)

    async def _hold(
        self,
        writer: ThreadWriter,
        key: ThreadKey,
        agent: Agent,
        listing: ThreadEntries,
    ) -> int:
        self._point("claimed")
        cursor = await self.index.read_cursor(key)
        ledger = TurnLedger()
        async for record in self.journal.records(key, start=cursor):
            ledger.apply(record)
        self._point("read")
        # The scan's listing may predate the previous holder's last deletions.
        listing = await self._relist(listing)
        advanced = 0
        deleted: set[str] = set()
        while True:
            await self._apply_controls(writer, ledger, listing)
            head = await self._head(ledger, listing, deleted)
            if head is None:
                self._blocked.pop(listing.prefix, None)
                break
            ref, info = head
            if info is not None and info.status is TurnStatus.PAUSED:
                self._blocked[listing.prefix] = listing.names - deleted
                break
            if advanced >= self.max_turns or self._stopping:
                break
            await self._advance(writer, ledger, key, agent, ref, info, listing)
            advanced += 1
            listing = await self._relist(listing)
        await self._sweep(ledger, listing, deleted)
        self._point("swept")
        open_versions = [
            t.first_version
            for t in ledger.turns.values()
            if t.first_version
            and (not t.terminal or any(r.turn_id == t.turn_id for r in listing.turns))
        ]
        # The turns queued before the cursor have all ended and left the index.
        new_cursor = min(open_versions) if open_versions else writer.version + 1
        if new_cursor > cursor:
            await self.index.write_cursor(key, new_cursor)
        return advanced

    async def _relist(self, listing: ThreadEntries) -> ThreadEntries:
        """The thread's entries again, with those of unreadable turn ids set aside.

        No turn can be named to run or fail for such an entry.
        """
        listing = await self.index.relist(listing)
        for name, _ in listing.unread:
            kept = await self.index.set_aside(name)
            logger.warning("%s: unreadable turn entry set aside as %s", name, kept)
        listing.unread = []
        return listing

    async def _input(self, key: ThreadKey, ref: TurnRef) -> TurnEntry | str:
        """The turn's entry, or why it cannot be read (a copy is then set aside)."""
        try:
            return await self.index.read_turn(ref)
        except msgspec.DecodeError as exc:
            # The sweep deletes the entry once the turn has failed for it.
            kept = await self.index.set_aside(ref.key, delete=False)
            logger.warning("%s: turn %r: unreadable entry: %s", key, ref.turn_id, exc)
            return f"its index entry cannot be read ({exc}); a copy is at {kept}"

    async def _head(
        self, ledger: TurnLedger, listing: ThreadEntries, deleted: set[str]
    ) -> tuple[TurnRef, TurnInfo | None] | None:
        """The oldest unfinished turn; the entries of ended ones are deleted."""
        for ref in listing.turns:
            if ref.key in deleted:
                continue
            info = ledger.get(ref.turn_id)
            if info is not None and info.terminal:
                self._point("ended")
                await self.index.delete(ref.key)
                deleted.add(ref.key)
                continue
            return ref, info
        return None

    async def _sweep(
        self, ledger: TurnLedger, listing: ThreadEntries, deleted: set[str]
    ) -> None:
        for ref in listing.turns:
            info = ledger.get(ref.turn_id)
            if ref.key not in deleted and info is not None and info.terminal:
                self._point("ended")
                await self.index.delete(ref.key)
                deleted.add(ref.key)
        listing.turns = [t for t in listing.turns if t.key not in deleted]

    async def _commit(
        self, writer: ThreadWriter, ledger: TurnLedger, events: list[object]
    ) -> None:
        if events:
            ledger.apply(await writer.append(events))

    # --- control requests ---

    async def _apply_controls(
        self, writer: ThreadWriter, ledger: TurnLedger, listing: ThreadEntries
    ) -> None:
        for name in listing.controls:
            try:
                control = await self.index.read_control(name)
            except ObjectNotFoundError:
                continue
            except msgspec.DecodeError as exc:
                # Not a request: out of the queue, so no claim trips on it again.
                kept = await self.index.set_aside(name)
                logger.warning(
                    "%s: unreadable control request (%s) set aside as %s",
                    name,
                    exc,
                    kept,
                )
                continue
            events = await self._control_events(control, ledger, listing)
            await self._commit(writer, ledger, events)
            self._point("control-committed")
            await self.index.delete(name)
        listing.controls = []

    async def _control_events(
        self, control: Control, ledger: TurnLedger, listing: ThreadEntries
    ) -> list[object]:
        turn_id, request = control.turn_id, control.request_id
        info = ledger.get(turn_id)

        def refused(reason: str) -> list[object]:
            return [
                *queued,
                te.TurnControlRefused(turn_id, control.op, request, reason),
            ]

        queued: list[object] = []
        if info is None:
            ref = listing.find(turn_id)
            if ref is None:
                return []  # a turn this thread never had: nothing to record
            try:
                entry = await self.index.read_turn(ref)
            except ObjectNotFoundError:
                return []
            except msgspec.DecodeError:
                # Queued all the same; the turn fails when it comes to run.
                queued = [te.TurnQueued(turn_id, entry=ref.key)]
            else:
                queued = [
                    te.TurnQueued(
                        turn_id, entry.submitted_at, len(entry.messages), ref.key
                    )
                ]
            status, revision = TurnStatus.QUEUED, 1
        else:
            if request in info.requests:
                return []  # applied before its request object could be deleted
            status, revision = info.status, info.revision
            if info.terminal:
                return refused(f"the turn is {status}")
        match control.op:
            case "pause":
                if status is TurnStatus.PAUSED:
                    return refused("the turn is already paused")
                return [*queued, te.TurnPaused(turn_id, request, None, control.reason)]
            case "resume":
                if status is not TurnStatus.PAUSED:
                    return refused(f"the turn is {status}, not paused")
                if control.revision != revision:
                    return refused(
                        f"stale revision {control.revision}: the turn is at "
                        f"revision {revision}"
                    )
                return [*queued, te.TurnResumed(turn_id, revision, request)]
            case "cancel":
                reason = control.reason or "cancelled"
                return [*queued, te.TurnCancelled(turn_id, None, reason, request)]
        return refused(f"unknown request {control.op!r}")

    # --- taking a turn forward ---

    async def _advance(
        self,
        writer: ThreadWriter,
        ledger: TurnLedger,
        key: ThreadKey,
        agent: Agent,
        ref: TurnRef,
        info: TurnInfo | None,
        listing: ThreadEntries,
    ) -> None:
        turn_id = ref.turn_id
        run_id = uuid.uuid4().hex
        events: list[object] = []
        with_input = info is None or not info.input_committed
        inputs: list[ev.Msg] = []
        if with_input:
            entry = await self._input(key, ref)
            if isinstance(entry, str):
                # The turn cannot run without its input: it fails, visibly.
                if info is None:
                    events.append(te.TurnQueued(turn_id, entry=ref.key))
                events.append(te.TurnFailed(turn_id, entry))
                await self._commit(writer, ledger, events)
                return
            inputs = entry.messages
            if info is None:
                events.append(
                    te.TurnQueued(turn_id, entry.submitted_at, len(inputs), ref.key)
                )
        attempt = 1 if info is None else info.attempts + 1
        if info is not None:
            last = info.last_run
            if (
                info.status is TurnStatus.RUNNING
                and last is not None
                and last in info.started_runs
            ):
                events.append(te.TurnTakenOver(turn_id, last, self.worker_id))
        calls = uncertain_calls(writer.state)
        # A call is this turn's when one of its runs requested it; the others
        # (an Agent.call's, an ended turn's) are not charged to this turn.
        mine = [c for c in calls if _turn_of(ledger, c) == turn_id]
        others = [c for c in calls if _turn_of(ledger, c) != turn_id]
        if mine:
            last_run = info.last_run if info is not None else None
            situation = Uncertain(key, turn_id, last_run, mine)
            decision, settled = await self._decided(writer, situation)
            events = _with_decision(
                events, decision, turn_id, last_run, mine, self.worker_id
            )
            events.extend(settled)
            if not isinstance(decision, Reconcile):
                await self._commit(writer, ledger, events)
                return
        if others:
            # Decided for the calls alone: Reconcile and Fail settle them and
            # the turn runs; Hold pauses it (no run may start while the thread
            # has calls of unknown outcome) but never fails it.
            situation = Uncertain(key, turn_id, None, others)
            decision, settled = await self._decided(writer, situation, own=False)
            events.extend(settled)
            if isinstance(decision, Hold):
                await self._commit(writer, ledger, events)
                return
        events.append(
            te.TurnStarted(turn_id, run_id, self.worker_id, attempt, with_input)
        )
        await self._commit(writer, ledger, events)
        self._point("started")
        await self._run(writer, ledger, key, agent, listing, turn_id, run_id, inputs)

    async def _decided(
        self, writer: ThreadWriter, situation: Uncertain, *, own: bool = True
    ) -> tuple[Decision, list[object]]:
        """The policy's decision and the events that carry it out.

        A policy that raises, or decides something that cannot be carried out (not
        a Decision, a Reconcile that does not name exactly the uncertain calls),
        holds the turn as ``Hold`` would, with a reason saying so: the thread
        waits for an operator, and the worker goes on with other threads.

        Args:
            writer: The claim's writer.
            situation: What the policy decides.
            own: Whether the calls are the turn's own (False: ``Fail`` settles
                the calls without failing the turn).
        """
        key, turn_id, calls = situation.key, situation.turn_id, situation.calls
        try:
            decision = await _decide(self.uncertain, situation)
            return decision, _settle(key, writer, turn_id, decision, calls, own)
        except Exception as exc:
            logger.warning(
                "%s: turn %r: the uncertain-call policy failed: %r", key, turn_id, exc
            )
            held = Hold(
                f"the uncertain-call policy failed ({type(exc).__name__}: {exc}): "
                "reconcile the calls, then resume"
            )
            return held, _settle(key, writer, turn_id, held, calls, own)

    async def _run(
        self,
        writer: ThreadWriter,
        ledger: TurnLedger,
        key: ThreadKey,
        agent: Agent,
        base: ThreadEntries,
        turn_id: str,
        run_id: str,
        inputs: list[ev.Msg],
    ) -> None:
        ctx = RuntimeContext(
            user_id=key.user_id,
            session_id=key.session_id,
            thread_id=key.thread_id,
            turn_id=turn_id,
        )

        def emit(item: RunEvent) -> None:
            if isinstance(item, Record):
                ledger.apply(item)

        # A tool cut short by this worker's shutdown or cancellation is left
        # uncertain: the next holder's policy decides it, as after a crash.
        control = RunControl(
            key, run_id, False, inputs, ctx, emit, leave_uncertain=True
        )
        stop: dict[str, tuple[str, Control]] = {}
        watcher = asyncio.create_task(
            self._watch(key, base, turn_id, control, ledger, stop),
            name=f"controls of {turn_id}",
        )
        self._runs.add(control)
        try:
            await agent.run_loop().run(control, JournalSink(writer))
        except Exception:
            info = ledger.get(turn_id)
            if info is None or not info.terminal:
                raise  # the run's end could not be committed: the claim is lost
        finally:
            self._runs.discard(control)
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        self.turns_run += 1
        self._point("ran")
        info = ledger.get(turn_id)
        if "request" in stop and info is not None and not info.terminal:
            name, request = stop["request"]
            if request.op == "cancel":
                event: object = te.TurnCancelled(
                    turn_id, run_id, request.reason or "cancelled", request.request_id
                )
            else:
                event = te.TurnPaused(
                    turn_id, request.request_id, run_id, request.reason
                )
            await self._commit(writer, ledger, [event])
            self._point("stopped")
            await self.index.delete(name)

    async def _watch(
        self,
        key: ThreadKey,
        base: ThreadEntries,
        turn_id: str,
        control: RunControl,
        ledger: TurnLedger,
        stop: dict[str, tuple[str, Control]],
    ) -> None:
        """Watch for a pause or cancel of the running turn; stop it cooperatively."""
        seen: set[str] = set()
        while True:
            await asyncio.sleep(self.control_poll)
            try:
                # Carried forward: a hashed long turn id is read back only once.
                listing = base = await self.index.relist(base)
                for name in listing.controls:
                    if name in seen:
                        continue
                    seen.add(name)
                    try:
                        request = await self.index.read_control(name)
                    except (ObjectNotFoundError, msgspec.DecodeError):
                        # Applied already, or not a request (the claim sets it
                        # aside after the run).
                        continue
                    info = ledger.get(turn_id)
                    done = info is not None and request.request_id in info.requests
                    if request.turn_id != turn_id or done:
                        continue
                    if request.op in ("pause", "cancel"):
                        stop["request"] = (name, request)
                        reason = f"{request.op} requested" + (
                            f": {request.reason}" if request.reason else ""
                        )
                        control.signal.fire("user", reason, cut_short=False)
                        return
            except JournalError as exc:
                logger.warning("%s: reading control requests failed: %s", key, exc)


def _journal_of(agents: object) -> Journal | None:
    journal = getattr(agents, "journal", None)
    return journal


async def _first(
    tasks: set[asyncio.Task[int]],
) -> tuple[set[asyncio.Task[int]], set[asyncio.Task[int]]]:
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    return done, set(pending)


async def _decide(policy: UncertainPolicy, situation: Uncertain) -> Decision:
    decision = policy(situation)
    if inspect.isawaitable(decision):
        decision = await decision
    if not isinstance(decision, Hold | Reconcile | Fail):
        raise TypeError(
            f"the uncertain-call policy returned {decision!r}, not Hold, Reconcile "
            "or Fail"
        )
    return decision


def _with_decision(
    events: list[object],
    decision: Decision,
    turn_id: str,
    run_id: str | None,
    calls: list[ev.ToolCallRequested],
    worker: str,
) -> list[object]:
    name = {Hold: "hold", Reconcile: "reconcile", Fail: "fail"}[type(decision)]
    ids = [c.call_id for c in calls]
    out = [e for e in events if not isinstance(e, te.TurnTakenOver)]
    out.append(te.TurnTakenOver(turn_id, run_id or "", worker, ids, name))
    return out


def _turn_of(ledger: TurnLedger, call: ev.ToolCallRequested) -> str | None:
    """The turn whose run requested ``call`` (None: no turn the ledger folded)."""
    info = ledger.turn_of_run(call.run_id)
    return info.turn_id if info is not None else None


def _settle(
    key: ThreadKey,
    writer: ThreadWriter,
    turn_id: str,
    decision: Decision,
    calls: list[ev.ToolCallRequested],
    own: bool,
) -> list[object]:
    """The events of ``decision`` on ``calls`` (``own``: the turn's own calls)."""
    ids = [c.call_id for c in calls]
    match decision:
        case Hold(reason=reason):
            return [te.TurnPaused(turn_id, f"uncertain-{writer.version}", None, reason)]
        case Reconcile(outcomes=outcomes, reason=reason):
            blocks = {cid: outcome_block(cid, v) for cid, v in outcomes.items()}
            return reconcile_events(key, writer.state, blocks, reason, calls=ids)
        case Fail(reason=reason):
            blocks = {
                cid: ev.ToolResultBlock(
                    cid, f"outcome unknown: {reason}; not run again", True
                )
                for cid in ids
            }
            settled = reconcile_events(key, writer.state, blocks, reason, calls=ids)
            # Another run's calls do not end this turn.
            return [*settled, te.TurnFailed(turn_id, reason)] if own else settled
    raise AssertionError("unreachable")  # pragma: no cover
