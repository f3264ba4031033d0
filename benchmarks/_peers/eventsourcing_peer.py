"""The ``eventsourcing`` library: one aggregate per thread, snapshots every 100 turns.

``Thread`` is an ``Aggregate`` whose command methods are decorated with ``@event``,
so each call triggers one domain event: one per message, one per side-state change.
``Threads`` is an ``Application`` with ``snapshotting_intervals = {Thread: 400}``
(400 message events = 100 turns, the journal's checkpoint cadence). A turn is four
(or more) method calls on the held aggregate and one ``app.save(thread)``: one
transaction for the turn's events. Infrastructure is chosen by environment, as the
library's docs show: POPO (in memory, the default), ``eventsourcing.sqlite``, or
``eventsourcing.postgres``. Loading is ``app.repository.get(id)``: the newest snapshot,
then the events after it.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from _peers.base import Adapter, du

if TYPE_CHECKING:
    from pathlib import Path

    from _peers.workload import Turn


class Thread(Aggregate):
    """One conversation thread."""

    @event("Started")
    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = []
        self.todos: list[dict[str, str]] = []
        self.todos_revision = 0
        self.summary: str | None = None
        self.plan_mode = False
        self.plan_file: str | None = None

    @event("MessageAppended")
    def append_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @event("TodosWritten")
    def write_todos(self, todos: list[dict[str, str]], revision: int) -> None:
        self.todos = todos
        self.todos_revision = revision

    @event("SummarySet")
    def set_summary(self, summary: str) -> None:
        self.summary = summary

    @event("PlanModeChanged")
    def set_plan_mode(self, active: bool, plan_file: str | None) -> None:
        self.plan_mode = active
        self.plan_file = plan_file


class Threads(Application[uuid.UUID]):
    snapshotting_intervals = {Thread: 400}  # noqa: RUF012 (the library's idiom)


def message_dicts(t: Turn) -> list[dict[str, Any]]:
    def msg(role: str, content: Any) -> dict[str, Any]:
        return {"id": uuid.uuid4().hex, "role": role, "content": content}

    return [
        msg("user", t.user),
        msg(
            "assistant",
            [
                {"type": "text", "text": t.preamble},
                {"type": "tool_use", "id": t.call_id, "name": t.tool, "input": t.args},
            ],
        ),
        msg(
            "tool",
            [{"type": "tool_result", "tool_use_id": t.call_id, "output": t.result}],
        ),
        msg("assistant", t.answer),
    ]


def apply_turn(thread: Any, turn: Turn) -> None:
    """Record one turn on a ``Thread`` aggregate: a domain event per change."""
    for message in message_dicts(turn):
        thread.append_message(message)
    if turn.todos is not None:
        thread.write_todos(turn.todos, turn.todos_revision)
    if turn.plan_mode is not None:
        thread.set_plan_mode(turn.plan_mode, turn.plan_file)
    if turn.summary is not None:
        thread.set_summary(turn.summary)


class EventsourcingPeer(Adapter):
    system = "eventsourcing"
    module = "eventsourcing_peer"

    def __init__(
        self, kind: str, *, path: Path | None = None, server: Any = None
    ) -> None:
        self.kind = kind
        self.path = path
        self.server = server
        self.database = "es_events"
        variant = {
            "popo": "POPO (in memory)",
            "sqlite": "SQLite (eventsourcing.sqlite)",
            "postgres": "PostgreSQL (eventsourcing.postgres)",
        }[kind]
        durability = {
            "popo": "in memory: nothing survives",
            "sqlite": (
                "default: journal_mode=WAL (the library sets it), synchronous=FULL "
                "(sqlite3's default, left as is): each commit fsyncs the WAL"
            ),
            "postgres": "server defaults (see PostgreSQL below)",
        }[kind]
        super().__init__(variant, durability)
        self.persistent = kind != "popo"

    def _env(self) -> dict[str, str]:
        if self.kind == "sqlite":
            return {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": str(self.path / "events.sqlite"),  # type: ignore[operator]
            }
        if self.kind == "postgres":
            return {
                "PERSISTENCE_MODULE": "eventsourcing.postgres",
                "POSTGRES_DBNAME": self.database,
                "POSTGRES_HOST": self.server.host,
                "POSTGRES_PORT": str(self.server.port),
                "POSTGRES_USER": self.server.user,
                "POSTGRES_PASSWORD": "",
            }
        return {}

    async def open(self) -> None:
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
        if self.kind == "postgres":
            self.server.create_database(self.database)
        self.app = Threads(env=self._env())
        self.thread = Thread(name="peers")
        self.app.save(self.thread)

    async def put_turn(self, turn: Turn) -> None:
        apply_turn(self.thread, turn)
        self.app.save(self.thread)
        self.turns += 1

    async def load(self) -> int:
        if self.kind == "popo":
            found = self.app.repository.get(self.thread.id)
        else:
            app = Threads(env=self._env())
            found = app.repository.get(self.thread.id)
            app.close()
        return len(found.messages)

    def footprint(self) -> tuple[int, int] | None:
        if self.kind == "sqlite":
            assert self.path is not None
            return du(self.path)
        if self.kind == "postgres":
            return self.server.footprint(self.database)
        return None

    def loader_spec(self) -> dict[str, Any]:
        return {"env": self._env(), "id": str(self.thread.id)}

    async def close(self) -> None:
        self.app.close()


async def child_load(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    app = Threads(env=spec["env"])
    t1 = time.perf_counter()
    found = app.repository.get(uuid.UUID(spec["id"]))
    t2 = time.perf_counter()
    app.close()
    return {"open_s": t1 - t0, "load_s": t2 - t1, "items": len(found.messages)}
