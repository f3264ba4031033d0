"""The simulator: one seed is one small, fully deterministic run of the protocol.

A seed picks a configuration (how many writers, how stormy the faults, how often
writers checkpoint) and a few actors that share one or two threads of a journal:
writers (``Journal.acquire``, ``append``, retries of acknowledged batches,
``update``, ``checkpoint``, ``close``), a reader (``load``, ``load(at_version=)``,
``records``, ``head``, ``verify``), a checkpointer (``Journal.checkpoint``) and a
retention actor (``Journal.retain``). They run on a
:class:`~tests.sim.vloop.VirtualLoop` over a :class:`~tests.sim.faults.FaultyStore`;
every random choice, of the workload and of the faults, comes from one
``random.Random(seed)``, and every wait is in virtual time, so a seed replays
exactly and runs in milliseconds.

What is checked (a violation is a bug in the engine, or in a mutated engine):

* at every write that lands: a record's slot is created once (retention never lets
  a slot be refilled), and no record of epoch ``e`` is created after an acquire at
  an epoch above ``e`` returned (the fence);
* after every completed operation, on a snapshot of the store: ``verify`` finds no
  problem; ``records`` is contiguous and hash-chained from what retention kept up
  to the head and equals the history of every record ever created; ``load`` equals
  a fold (``projections.fold`` with ``AgentStateProjection``) of that history,
  compared as msgspec encodings; epochs never decrease along the log, every rise is
  a ``LeaseAcquired`` at that epoch, and fence epochs strictly increase; every
  acknowledged append is present exactly once, at the version it returned;
* per operation: a writer's state equals the fold at its version; ``load`` and
  ``head`` see every append acknowledged before they started, and ``load`` returns
  the fold at the version it reports; ``records`` returns the history; retrying an
  acknowledged batch with the same events returns the same record without
  writing; no operation raises an error it has no business raising;
* at the end, with faults off: a new writer can still take the thread and append
  (nothing is wedged), and the run did not hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import tempfile
from bisect import bisect_right, insort
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal import events as ev
from journal.engine.log import ThreadLog
from journal.errors import (
    CorruptRecordError,
    FencedError,
    LeaseHeldError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from journal.layout import version_of
from journal.store import ObjectStore
from projections import fold
from projections.agent_state import AgentState, AgentStateProjection, encode_state
from stores.memory import MemoryStore
from tests.sim.faults import FaultyStore
from tests.sim.vloop import (
    SimulationDeadlock,
    VirtualClock,
    VirtualLoop,
    virtual_engine_time,
)

if TYPE_CHECKING:
    import builtins
    from collections.abc import Awaitable, Coroutine, Iterator

    from journal import codec
    from journal.engine.writer import ThreadWriter

__all__ = ["SimResult", "run_seed"]

TTL = 1.0
"""Lease TTL of every simulated writer (virtual seconds)."""

RETENTION_WINDOW = 20.0 * TTL
"""Far above the longest a simulated writer can be paused between its validity
check and its create (one freeze of at most 3 TTL, plus delays and retries)."""

HANG_LIMIT = 400.0
"""Virtual seconds after which a run that has not finished counts as hung."""

ACTOR: contextvars.ContextVar[str] = contextvars.ContextVar("sim_actor", default="")


@dataclass(slots=True)
class SimResult:
    """The outcome of one seed.

    Attributes:
        seed: The seed.
        backend: ``memory`` or ``local``.
        semantics: ``memory``, ``s3`` or ``local``.
        trace: Operations and injected faults, in order, with virtual times.
        violations: What was found wrong (empty: the seed passed).
    """

    seed: int
    backend: str
    semantics: str
    trace: list[str]
    violations: list[str]

    def report(self, limit: int = 400) -> str:
        """The violations and the trace, readable, with the replay command."""
        env = f"AJ_SIM_SEED={self.seed}"
        if self.backend != "memory":
            env += f" AJ_SIM_BACKEND={self.backend}"
        lines = [
            f"seed {self.seed} ({self.backend} store, {self.semantics} semantics) "
            f"violated {len(self.violations)} invariant(s):",
            *(f"  ! {v}" for v in self.violations[:10]),
            f"replay: {env} python -m pytest tests/sim/test_sim.py -k replay",
            "trace:",
        ]
        trace = self.trace
        if len(trace) > limit:
            lines.append(f"  ... {len(trace) - limit} earlier lines left out")
            trace = trace[-limit:]
        lines.extend(f"  {line}" for line in trace)
        return "\n".join(lines)


class DictStore(ObjectStore):
    """A plain dict as a store, whose calls never suspend.

    Used for the shadow history (every record and blob ever created, deletes
    ignored) and for snapshots that the checks read.
    """

    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self.objects: dict[str, bytes] = dict(objects or {})
        self.keys = sorted(self.objects)
        self.url = "dict://"

    def put(self, key: str, data: bytes) -> None:
        if key not in self.objects:
            insort(self.keys, key)
        self.objects[key] = data

    async def create(self, key: str, data: bytes) -> str:
        if key in self.objects:
            raise ObjectExistsError(key)
        self.put(key, data)
        return str(len(data))

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        self.put(key, data)
        return str(len(data))

    async def read(self, key: str) -> tuple[bytes, str]:
        try:
            data = self.objects[key]
        except KeyError:
            raise ObjectNotFoundError(key) from None
        return data, str(len(data))

    async def read_many(
        self, keys: Any, *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        return [self.objects.get(k) for k in keys]

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        lo = bisect_right(self.keys, start_after) if start_after else 0
        return [k for k in self.keys[lo:] if k.startswith(prefix)]

    async def delete(self, key: str) -> bool:
        if self.objects.pop(key, None) is None:
            return False
        self.keys.remove(key)
        return True

    async def children(self, prefix: str) -> builtins.list[str]:
        names = {
            k[len(prefix) :].split("/", 1)[0]
            for k in self.keys
            if k.startswith(prefix) and "/" in k[len(prefix) :]
        }
        return sorted(names)


@dataclass(slots=True)
class Actor:
    """One simulated process."""

    name: str
    kind: str
    freezes: int = 0
    frozen_until: float = 0.0
    crashed: bool = False
    crashable: bool = True


@dataclass(slots=True)
class Acked:
    """An append that returned: where it must be, forever (until retention)."""

    key: ThreadKey
    version: int
    hash: str
    events: list[object]


@dataclass(slots=True)
class Config:
    """What one seed runs."""

    threads: int
    writers: int
    ops: int
    checkpoint_every: int
    blob_threshold: int
    p_delay: float
    p_error: float
    p_lost: float
    p_freeze: float
    p_crash: float
    timed_crashes: int
    checkers: bool
    retainer: bool
    wait: float
    log_spans: str

    @classmethod
    def draw(cls, rng: random.Random) -> Config:
        storm = rng.choice([0.0, 0.02, 0.06, 0.15])
        return cls(
            threads=rng.choice([1, 1, 1, 2]),
            writers=rng.choice([1, 2, 2, 3]),
            ops=rng.randint(2, 5),
            checkpoint_every=rng.choice([0, 2, 3, 5]),
            blob_threshold=rng.choice([48, 4096]),
            p_delay=rng.choice([0.0, 0.3, 0.7]),
            p_error=storm,
            p_lost=storm,
            p_freeze=rng.choice([0.0, 0.0, 0.05, 0.2]),
            p_crash=rng.choice([0.0, 0.0, 0.01, 0.04]),
            timed_crashes=rng.choice([0, 0, 1]),
            checkers=rng.random() < 0.5,
            retainer=rng.random() < 0.3,
            wait=rng.choice([0.0, 0.5 * TTL, 3 * TTL]),
            # "always": checkpoints name log spans on every backend, whatever
            # their density ("dense" names the dense ones on the local store).
            log_spans=rng.choice(["never", "dense", "always"]),
        )


class Sim:
    """One seed's run (see the module docstring)."""

    def __init__(self, seed: int, backend: str, root: str | None) -> None:
        self.seed = seed
        # Reproducibility is the point, not unpredictability.
        self.rng = rng = random.Random(seed)  # noqa: S311
        self.backend = backend
        self.semantics = "local" if backend == "local" else rng.choice(["memory", "s3"])
        self.cfg = Config.draw(rng)
        self.clock = VirtualClock()
        self.trace: list[str] = []
        self.violations: list[str] = []
        self.actors: dict[str, Actor] = {}
        self.tasks: dict[str, list[asyncio.Task[Any]]] = {}
        self.mains: list[asyncio.Task[Any]] = []
        self.faults_on = True
        self.inner: ObjectStore
        if backend == "local":
            from stores.local import LocalStore

            assert root is not None
            self.inner = LocalStore(root, fsync=False)
        else:
            self.inner = MemoryStore(f"sim-{seed}")
        self.store = FaultyStore(self.inner, self, self.semantics)
        self.shadow = DictStore()
        self.keys = [
            ThreadKey("agent", f"s{i}", user_id="u") for i in range(self.cfg.threads)
        ]
        self.logs = {ThreadLog(self.shadow, k).log_dir: k for k in self.keys}
        self.blob_dirs = tuple(ThreadLog(self.shadow, k).blob_dir for k in self.keys)
        self.history: dict[ThreadKey, list[codec.Record]] = {k: [] for k in self.keys}
        self.created: dict[ThreadKey, int] = dict.fromkeys(self.keys, 0)
        self.prefixes = {ThreadLog(self.shadow, k).prefix + "/": k for k in self.keys}
        self.dirty: set[ThreadKey] = set()
        self.shadow_journal = Journal(self.shadow)
        self.acquired: dict[ThreadKey, int] = dict.fromkeys(self.keys, 0)
        self.acked: dict[str, Acked] = {}
        self.batches = 0
        self.record_deletes = 0
        self.live: list[tuple[str, ThreadWriter]] = []
        self.journal = Journal(
            self.store,
            checkpoint_every=self.cfg.checkpoint_every,
            blob_threshold=self.cfg.blob_threshold,
            clock=self.clock.wall,
            log_spans=self.cfg.log_spans,
        )

    # --- tracing ----------------------------------------------------------------

    def note(self, text: str) -> None:
        self.trace.append(f"{self.clock.now:8.3f} {text}")

    def violation(self, text: str) -> None:
        self.note(f"VIOLATION {text}")
        self.violations.append(text)

    def label(self, key: ThreadKey) -> str:
        return key.session_id

    # --- the chaos the store asks -------------------------------------------------

    def draw(self) -> float:
        return self.rng.random()

    def _actor(self) -> Actor | None:
        name = ACTOR.get()
        actor = self.actors.get(name)
        if actor is None or not self.faults_on:
            return None
        if actor.crashed:
            raise asyncio.CancelledError
        return actor

    async def _thaw(self, actor: Actor) -> None:
        while self.clock.now < actor.frozen_until:
            await asyncio.sleep(actor.frozen_until - self.clock.now)

    async def _perturb(self, actor: Actor, where: str) -> None:
        rng, cfg = self.rng, self.cfg
        await self._thaw(actor)
        if rng.random() < cfg.p_delay:
            await asyncio.sleep(rng.choice([0.0, 0.001, 0.01, rng.uniform(0, 0.3)]))
        if actor.freezes and rng.random() < cfg.p_freeze:
            actor.freezes -= 1
            pause = rng.uniform(1.2, 3.0) * TTL
            actor.frozen_until = self.clock.now + pause
            self.note(f"FREEZE {actor.name} for {pause:.2f}s {where}")
            await self._thaw(actor)
            self.note(f"THAW {actor.name} {where}")
        if actor.crashable and rng.random() < cfg.p_crash:
            self.crash(actor.name, where)
            await asyncio.sleep(0)  # the cancellation lands here
            raise asyncio.CancelledError

    async def before(self, op: str, key: str) -> None:
        actor = self._actor()
        if actor is None:
            return
        where = f"before {op} {self._short(key)}"
        await self._perturb(actor, where)
        if self.rng.random() < self.cfg.p_error:
            transient = self.rng.random() < 0.75
            self.note(f"FAULT {actor.name} {where}: fails (transient={transient})")
            raise StorageError(f"sim: {op} {key} failed", transient=transient)

    async def after(self, op: str, key: str) -> bool:
        actor = self._actor()
        if actor is None:
            return False
        where = f"after {op} {self._short(key)}"
        await self._perturb(actor, where)
        if self.rng.random() < self.cfg.p_lost:
            self.note(f"FAULT {actor.name} {where}: applied, reply lost")
            return True
        return False

    def _short(self, key: str) -> str:
        for log_dir, k in self.logs.items():
            if key.startswith(log_dir):
                return f"{self.label(k)}:log/{version_of(key)}"
            prefix = log_dir[: -len("log/")]
            if key.startswith(prefix):
                return f"{self.label(k)}:{key[len(prefix) :][:24]}"
        return key

    def landed(self, op: str, key: str, data: bytes | None) -> None:
        for prefix, k in self.prefixes.items():
            if key.startswith(prefix) and not key.endswith("/LEASE"):
                self.dirty.add(k)  # the lease is not part of what is checked
        if op == "delete":
            if any(key.startswith(d) for d in self.logs):
                self.record_deletes += 1
            return
        if op != "create" or data is None:
            return
        if key.startswith(self.blob_dirs):
            if key not in self.shadow.objects:
                self.shadow.put(key, data)
            return
        thread = next((k for d, k in self.logs.items() if key.startswith(d)), None)
        version = version_of(key)
        if thread is None or version is None:
            return
        if key in self.shadow.objects:
            self.violation(
                f"{self.label(thread)} slot {version} was created a second time "
                "(retention let a removed slot be refilled?)"
            )
            return
        self.shadow.put(key, data)
        self.created[thread] += 1
        from journal import codec

        body = codec.parse_record(data, label=str(thread), version=version).body
        self.note(
            f"  landed {self.label(thread)}:log/{version} epoch {body.epoch} "
            f"batch {body.batch_id[:8]} by {body.writer}"
        )
        if body.epoch < self.acquired[thread]:
            self.violation(
                f"{self.label(thread)} version {version} committed at epoch "
                f"{body.epoch} by {body.writer} after the acquire at epoch "
                f"{self.acquired[thread]} returned (a fenced writer wrote)"
            )

    # --- actors ---------------------------------------------------------------------

    def _factory(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, context=context)
        name = (context if context is not None else contextvars.copy_context()).get(
            ACTOR, ""
        )
        if name:
            self.tasks.setdefault(name, []).append(task)
        return task

    def spawn(
        self, actor: Actor, coro: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        self.actors[actor.name] = actor
        ctx = contextvars.copy_context()
        ctx.run(ACTOR.set, actor.name)
        task = asyncio.get_running_loop().create_task(coro, context=ctx)
        self.mains.append(task)
        return task

    def crash(self, name: str, where: str) -> None:
        actor = self.actors[name]
        if actor.crashed or not self.faults_on:
            return
        actor.crashed = True
        self.note(f"CRASH {name} {where}")
        for task in self.tasks.get(name, []):
            if not task.done():
                task.cancel()
        self.live = [(n, w) for n, w in self.live if n != name]
        if actor.kind == "writer" and self.rng.random() < 0.6:
            # The process restarts, with the same holder id (it may take over its
            # own live lease) and a fresh writer.
            holder = name.split("'")[0]
            again = Actor(f"{name}'", "writer", freezes=0)
            self.note(f"RESTART {again.name}")
            self.spawn(again, self.writer_actor(again, holder, self.rng.randint(1, 3)))

    async def idle(self, long: bool = False) -> None:
        rng = self.rng
        if long:
            await asyncio.sleep(rng.uniform(RETENTION_WINDOW, 1.6 * RETENTION_WINDOW))
            return
        pause = rng.choice([0.0, rng.uniform(0, 0.3), rng.uniform(0.3, 1.5)])
        if pause:
            await asyncio.sleep(pause)

    async def step(
        self,
        what: str,
        call: Awaitable[Any],
        allowed: tuple[type[BaseException], ...] = (StorageError,),
    ) -> tuple[bool, Any]:
        """Run one operation: trace it, judge what it raised, check afterwards."""
        name = ACTOR.get()
        self.note(f"{name} {what}")
        try:
            result = await call
        except asyncio.CancelledError:
            raise
        except allowed as exc:
            self.note(f"{name} {what} -> {type(exc).__name__}: {exc}")
            await self.check_store(f"after {name} {what}")
            return False, exc
        except Exception as exc:
            self.violation(f"{name} {what} raised {type(exc).__name__}: {exc}")
            return False, exc
        self.note(f"{name} {what} -> {self._describe(result)}")
        await self.check_store(f"after {name} {what}")
        return True, result

    def _describe(self, result: object) -> str:
        version = getattr(result, "version", None)
        if version is not None:
            return f"ok v{version}"
        return f"ok {result!r}"[:80]

    def _events(self, n: int) -> list[object]:
        size = self.rng.choice([5, 5, 5, 200])
        text = f"m{n}-" + "x" * size
        return [MessageAppended(Msg("user", text, id=f"msg-{self.seed}-{n}"))]

    async def writer_actor(self, actor: Actor, holder: str, ops: int) -> None:
        rng = self.rng
        w: ThreadWriter | None = None
        mine: list[str] = []
        key = rng.choice(self.keys)
        for _ in range(ops * 2):
            await self.idle()
            if w is None or w.fenced:
                if w is not None:
                    self.note(f"{actor.name} drops its fenced writer (epoch {w.epoch})")
                    self.live = [(n, x) for n, x in self.live if x is not w]
                    await w.close()
                    w, mine = None, []
                ok, got = await self.step(
                    f"acquire {self.label(key)} as {holder}",
                    self.journal.acquire(
                        key, holder, lease_ttl=TTL, wait=self.cfg.wait
                    ),
                    (LeaseHeldError, FencedError, StorageError),
                )
                if ok:
                    w = got
                    self.acquired[key] = max(self.acquired[key], w.epoch)
                    self.note(
                        f"{actor.name} holds {self.label(key)} at epoch {w.epoch}"
                    )
                    self.live.append((actor.name, w))
                    self.check_writer(actor.name, w)
                continue
            ops -= 1
            if ops < 0:
                break
            choice = rng.random()
            if choice < 0.55:
                await self.append(actor, w, mine)
            elif choice < 0.7 and mine:
                await self.retry_acked(actor, w, rng.choice(mine))
            elif choice < 0.8:
                await self.update(actor, w)
            elif choice < 0.9:
                await self.step(
                    f"checkpoint (writer, epoch {w.epoch})",
                    w.checkpoint(),
                    (FencedError, StorageError),
                )
            else:
                await self.step(f"close (epoch {w.epoch})", w.close())
                self.live = [(n, x) for n, x in self.live if x is not w]
                w, mine = None, []
        if w is not None:
            if rng.random() < 0.8:
                await self.step(f"close (epoch {w.epoch})", w.close())
                self.live = [(n, x) for n, x in self.live if x is not w]
            else:
                self.note(f"{actor.name} leaves its writer open")

    async def append(self, actor: Actor, w: ThreadWriter, mine: list[str]) -> None:
        self.batches += 1
        batch = f"b{self.batches}"
        events = self._events(self.batches)
        for attempt in range(3):
            ok, got = await self.step(
                f"append {batch} (epoch {w.epoch}){' retry' * (attempt > 0)}",
                w.append(events, batch_id=batch),
                (FencedError, StorageError),
            )
            if ok:
                self.ack(actor, w, batch, events, got)
                mine.append(batch)
                return
            if isinstance(got, FencedError) or (
                isinstance(got, StorageError) and self.rng.random() < 0.3
            ):
                return  # an application that gives up on the batch

    def ack(
        self,
        actor: Actor,
        w: ThreadWriter,
        batch: str,
        events: list[object],
        record: codec.Record,
    ) -> None:
        if record.batch_id != batch or record.epoch != w.epoch:
            self.violation(
                f"append {batch} at epoch {w.epoch} returned batch "
                f"{record.batch_id} at epoch {record.epoch}"
            )
        known = self.acked.get(batch)
        if known is not None and (known.version, known.hash) != (
            record.version,
            record.hash,
        ):
            self.violation(
                f"batch {batch} acknowledged at v{known.version}, then again at "
                f"v{record.version}"
            )
        self.acked[batch] = Acked(w.key, record.version, record.hash, events)
        self.check_writer(actor.name, w)

    async def retry_acked(self, actor: Actor, w: ThreadWriter, batch: str) -> None:
        done = self.acked[batch]
        ok, got = await self.step(
            f"re-append acknowledged {batch} (idempotent retry)",
            w.append(done.events, batch_id=batch),
            (FencedError, StorageError),
        )
        if ok and (got.version, got.hash) != (done.version, done.hash):
            self.violation(
                f"retrying acknowledged batch {batch} (v{done.version}) returned "
                f"v{got.version}: the retry wrote instead of returning the commit"
            )

    async def update(self, actor: Actor, w: ThreadWriter) -> None:
        n = self.rng.randint(0, 99)
        if self.rng.random() < 0.5 or not w.state.context:

            def change(state: AgentState) -> None:
                state.summary = f"summary {n}"

            what = f"update summary {n}"
        else:

            def change(state: AgentState) -> None:
                del state.context[0]  # no event says this: AgentStateReplaced

            what = "update: drop the first message"
        ok, _ = await self.step(
            f"{what} (epoch {w.epoch})",
            w.update("sim", change),
            (FencedError, StorageError),
        )
        if ok:
            self.check_writer(actor.name, w)

    async def reader_actor(self, actor: Actor, ops: int) -> None:
        rng = self.rng
        for _ in range(ops):
            await self.idle()
            key = rng.choice(self.keys)
            floor = self.acked_head(key)
            deletes = self.record_deletes
            choice = rng.random()
            if choice < 0.3:
                ok, state = await self.step(
                    f"load {self.label(key)}",
                    self.journal.load(key),
                    (StorageError,),
                )
                if ok:
                    self.check_loaded(key, state, floor, None)
            elif choice < 0.5:
                at = rng.randint(0, len(self.history_now(key)))
                ok, state = await self.step(
                    f"load {self.label(key)} at v{at}",
                    self.journal.load(key, at_version=at),
                    (StorageError, ValueError),
                )
                if ok:
                    self.check_loaded(key, state, 0, at)
            elif choice < 0.7:
                start = await self.first_retained(key)
                ok, got = await self.step(
                    f"records {self.label(key)} from v{start}",
                    self._collect(key, start),
                    (StorageError, CorruptRecordError),
                )
                if not ok and isinstance(got, CorruptRecordError):
                    if self.record_deletes == deletes:
                        self.violation(
                            f"records raised {got} with no retention running"
                        )
                elif ok:
                    self.check_records(key, got, start, floor)
            elif choice < 0.85:
                ok, head = await self.step(
                    f"head {self.label(key)}", self.journal.head(key)
                )
                if ok and not floor <= head <= len(self.history_now(key)):
                    self.violation(
                        f"head {head} of {self.label(key)}: acknowledged up to "
                        f"{floor}, created up to {len(self.history_now(key))}"
                    )
            else:
                ok, report = await self.step(
                    f"verify {self.label(key)}", self.journal.verify(key)
                )
                if ok and not report.ok and self.record_deletes == deletes:
                    self.violation(f"verify found {report.problems}")

    async def _collect(self, key: ThreadKey, start: int) -> list[codec.Record]:
        return [r async for r in self.journal.records(key, start=start)]

    async def checkpointer_actor(self, actor: Actor, ops: int) -> None:
        for _ in range(ops):
            await self.idle()
            key = self.rng.choice(self.keys)
            await self.step(
                f"checkpoint {self.label(key)} (no lease)",
                self.journal.checkpoint(key),
                (StorageError, ValueError),
            )

    async def retainer_actor(self, actor: Actor, ops: int) -> None:
        for _ in range(ops):
            await self.idle(long=True)
            key = self.rng.choice(self.keys)
            await self.step(
                f"retain {self.label(key)} window {RETENTION_WINDOW:g}s",
                self.journal.retain(key, window=RETENTION_WINDOW),
            )

    # --- the checks -------------------------------------------------------------------

    def history_now(self, key: ThreadKey) -> list[codec.Record]:
        """Every record of ``key`` ever created, decoded (the shadow history)."""
        history = self.history[key]
        if len(history) == self.created[key]:
            return history
        start = len(history) + 1
        records = _run_now(self._shadow_records(key, start, history))
        if [r.version for r in records] != list(range(start, self.created[key] + 1)):
            self.violation(f"{self.label(key)}: created versions are not contiguous")
        history.extend(records)
        return history

    async def _shadow_records(
        self, key: ThreadKey, start: int, before: list[codec.Record]
    ) -> list[codec.Record]:
        out = [r async for r in self.shadow_journal.records(key, start=start)]
        if before and out and out[0].prev_hash != before[-1].hash:
            self.violation(f"{self.label(key)}: hash chain broken at v{start}")
        return out

    def acked_head(self, key: ThreadKey) -> int:
        return max((a.version for a in self.acked.values() if a.key == key), default=0)

    def folded(self, key: ThreadKey, version: int) -> bytes:
        projection = AgentStateProjection(str(key))
        state = fold(
            projection, projection.initial(key), self.history_now(key)[:version]
        )
        state.version = version
        return encode_state(state)

    def check_writer(self, name: str, w: ThreadWriter) -> None:
        if w.version > len(self.history_now(w.key)):
            self.violation(f"{name} is at v{w.version}, beyond what was created")
            return
        if encode_state(w.state) != self.folded(w.key, w.version):
            self.violation(
                f"{name}'s state at v{w.version} differs from the fold of the log"
            )

    def check_loaded(
        self, key: ThreadKey, state: AgentState, floor: int, at: int | None
    ) -> None:
        if at is not None and state.version != at:
            self.violation(f"load at v{at} returned v{state.version}")
        if state.version < floor:
            self.violation(
                f"load returned v{state.version}; v{floor} was acknowledged before"
            )
        if state.version > len(self.history_now(key)):
            self.violation(f"load returned v{state.version}, beyond what was created")
        elif encode_state(state) != self.folded(key, state.version):
            self.violation(
                f"load of {self.label(key)} at v{state.version} differs from the "
                "fold of the log"
            )

    def check_records(
        self, key: ThreadKey, got: list[codec.Record], start: int, floor: int
    ) -> None:
        history = self.history_now(key)
        versions = [r.version for r in got]
        if versions != list(range(start, start + len(got))):
            self.violation(f"records from v{start} returned versions {versions}")
            return
        if start + len(got) - 1 < floor:
            self.violation(f"records ended at v{start + len(got) - 1} < acked {floor}")
        for r in got:
            if r.version > len(history) or history[r.version - 1].hash != r.hash:
                self.violation(f"records returned a v{r.version} never created")
                return

    async def first_retained(self, key: ThreadKey) -> int:
        marker = await ThreadLog(self.inner, key).read_retention()
        return marker.first_retained if marker is not None else 1

    async def snapshot(self, key: ThreadKey) -> DictStore:
        prefix = ThreadLog(self.inner, key).prefix + "/"
        keys = await self.inner.list(prefix)
        data = await self.inner.read_many(keys)
        return DictStore(
            {k: d for k, d in zip(keys, data, strict=True) if d is not None}
        )

    async def check_store(self, when: str, everything: bool = False) -> None:
        """The invariants of a snapshot of the store (see the module docstring).

        Only the threads written since the last check are checked again.
        """
        keys = self.keys if everything else [k for k in self.keys if k in self.dirty]
        self.dirty.clear()
        for key in keys:
            snap = await self.snapshot(key)
            journal = Journal(snap, clock=self.clock.wall)
            try:
                await self._check_thread(journal, snap, key)
            except Exception as exc:
                self.violation(f"{when}: reading {self.label(key)} raised {exc!r}")

    async def _check_thread(
        self, journal: Journal, snap: DictStore, key: ThreadKey
    ) -> None:
        history = self.history_now(key)
        name = self.label(key)
        report = await journal.verify(key)
        if not report.ok:
            self.violation(f"verify {name}: {[str(p) for p in report.problems]}")
        marker = await ThreadLog(snap, key).read_retention()
        first = marker.first_retained if marker is not None else 1
        head = await journal.head(key)
        records = [r async for r in journal.records(key, start=first)]
        if head and [r.version for r in records] != list(range(first, head + 1)):
            self.violation(f"{name}: records from v{first} do not reach head {head}")
        for r in records:
            if r.version > len(history) or history[r.version - 1].hash != r.hash:
                self.violation(f"{name}: v{r.version} is not the record created there")
                break
        if head < len(history):
            self.violation(f"{name}: head {head}, but v{len(history)} was created")
        state = await journal.load(key)
        if state.version != head or encode_state(state) != self.folded(key, head):
            self.violation(
                f"{name}: load (v{state.version}) is not the fold of v{head}"
            )
        self._check_history(key, history)
        for batch, acked in self.acked.items():
            if acked.key != key:
                continue
            if acked.version > len(history):
                self.violation(f"acknowledged {batch} (v{acked.version}) is missing")
            elif history[acked.version - 1].hash != acked.hash:
                self.violation(f"acknowledged {batch} is not at v{acked.version}")

    def _check_history(self, key: ThreadKey, history: list[codec.Record]) -> None:
        name = self.label(key)
        epoch, fences, seen = 0, 0, dict[str, int]()
        for r in history:
            if r.epoch < epoch:
                self.violation(
                    f"{name} v{r.version} has epoch {r.epoch} after epoch {epoch}"
                )
            fence = [e.epoch for e in r.events if isinstance(e, ev.LeaseAcquired)]
            if r.epoch > epoch and fence != [r.epoch]:
                self.violation(
                    f"{name} v{r.version}: epoch rose to {r.epoch} with no "
                    "LeaseAcquired fence at that epoch"
                )
            for f in fence:
                if f <= fences or f != r.epoch:
                    self.violation(
                        f"{name} v{r.version}: fence at epoch {f} out of order"
                    )
                fences = max(fences, f)
            epoch = max(epoch, r.epoch)
            if r.batch_id in seen:
                self.violation(
                    f"{name}: batch {r.batch_id} at v{seen[r.batch_id]} and again at "
                    f"v{r.version}"
                )
            seen[r.batch_id] = r.version

    # --- the run ----------------------------------------------------------------------

    async def main(self) -> None:
        asyncio.get_running_loop().set_task_factory(self._factory)  # type: ignore[arg-type]
        cfg, rng = self.cfg, self.rng
        self.note(
            f"seed {self.seed}: {self.backend} store, {self.semantics} semantics, {cfg}"
        )
        writers = []
        for i in range(cfg.writers):
            actor = Actor(f"w{i}", "writer", freezes=1)
            writers.append(actor)
            self.spawn(actor, self.writer_actor(actor, actor.name, cfg.ops))
        if cfg.checkers:
            reader = Actor("reader", "reader")
            self.spawn(reader, self.reader_actor(reader, rng.randint(1, 4)))
            cp = Actor("checkpointer", "checkpointer")
            self.spawn(cp, self.checkpointer_actor(cp, rng.randint(1, 2)))
        if cfg.retainer:
            ret = Actor("retainer", "retainer")
            self.spawn(ret, self.retainer_actor(ret, rng.randint(1, 2)))
        loop = asyncio.get_running_loop()
        for _ in range(cfg.timed_crashes):
            victim = rng.choice(writers).name
            loop.call_later(rng.uniform(0.2, 6.0), self.crash, victim, "(timed)")
        await self._wait_all()
        await self.finish()

    async def _wait_all(self) -> None:
        while True:
            pending = [t for t in self.mains if not t.done()]
            if not pending:
                break
            left = HANG_LIMIT - self.clock.now
            if left <= 0:
                self.violation(f"hung: {len(pending)} actor(s) still running")
                break
            await asyncio.wait(pending, timeout=left)
        for task in self.mains:
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                self.violation(f"an actor died of {type(exc).__name__}: {exc}")

    async def finish(self) -> None:
        """Faults off: close what is open, then a fresh writer must get through."""
        self.faults_on = False
        self.note("faults off")
        for name, w in list(self.live):
            self.note(f"{name} closes (epoch {w.epoch})")
            await w.close()
        for tasks in self.tasks.values():
            for task in tasks:
                task.cancel()
        await asyncio.sleep(0)
        for key in self.keys:
            try:
                async with self.journal.writer(
                    key, "final", lease_ttl=TTL, wait=4 * TTL
                ) as w:
                    self.acquired[key] = max(self.acquired[key], w.epoch)
                    record = await w.append(self._events(0), batch_id=f"final-{key}")
                    self.acked[f"final-{key}"] = Acked(
                        key, record.version, record.hash, []
                    )
                    self.note(f"final writer of {self.label(key)} at v{record.version}")
                    self.check_writer("final", w)
            except Exception as exc:
                self.violation(
                    f"no writer gets through {self.label(key)} after the run: {exc!r}"
                )
        await self.check_store("at the end", everything=True)


def _run_now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (it reads a :class:`DictStore`)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a shadow read suspended")


@contextlib.contextmanager
def _local_io_inline() -> Iterator[None]:
    # The local store hands its file I/O to worker threads; in the simulation it
    # runs inline so that the order of events is the seed's alone.
    import stores.local

    async def inline(fn: Any, *args: Any) -> Any:
        return fn(*args)

    saved = stores.local.run_blocking
    stores.local.run_blocking = inline  # type: ignore[assignment]
    try:
        yield
    finally:
        stores.local.run_blocking = saved


def run_seed(seed: int, backend: str = "memory") -> SimResult:
    """Run one seed on a fresh virtual-time loop; return what it found."""
    with contextlib.ExitStack() as stack:
        root = None
        if backend == "local":
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="ajsim"))
            stack.enter_context(_local_io_inline())
        sim = Sim(seed, backend, root)
        stack.enter_context(virtual_engine_time(sim.clock, sim.rng.randbytes))
        loop = VirtualLoop(sim.clock)
        try:
            loop.run_until_complete(sim.main())
        except SimulationDeadlock as exc:
            sim.violation(f"deadlock: {exc}")
        finally:
            with contextlib.suppress(Exception):
                _cancel_all(loop)
            loop.close()
    return SimResult(seed, backend, sim.semantics, sim.trace, sim.violations)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def iter_seeds(start: int, count: int) -> Iterator[int]:
    """The seeds ``start .. start + count - 1``."""
    return iter(range(start, start + count))
