"""Google ADK session services: ``append_event`` for each event of a turn.

A turn is what an ADK ``Runner`` appends for it: the user's event, the model's event
(a text part and a ``function_call`` part), the function-response event and the final
model event, each a separate ``append_event`` on the held ``Session``, as the Runner
does while the turn runs. Side state rides on the final event as
``EventActions(state_delta=...)``. Loading is ``get_session``: the session's state and
all its events.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from google.adk.events import Event, EventActions
from google.adk.sessions import InMemorySessionService
from google.genai import types

from _peers.base import Adapter, du

if TYPE_CHECKING:
    from pathlib import Path

    from _peers.workload import Turn

try:
    from google.adk.sessions.sqlite_session_service import SqliteSessionService
except ImportError:  # reported when the variant is selected
    SqliteSessionService = None  # type: ignore[assignment,misc]
try:
    from google.adk.sessions.database_session_service import DatabaseSessionService
except ImportError:
    DatabaseSessionService = None  # type: ignore[assignment,misc]

APP, USER, SESSION = "bench", "bench-user", "peers"
AGENT = "assistant"


def events(t: Turn) -> list[Event]:
    invocation = f"e-{uuid.uuid4()}"
    delta: dict[str, Any] = {}
    if t.todos is not None:
        delta["todos"] = t.todos
    if t.summary is not None:
        delta["summary"] = t.summary
    if t.plan_mode is not None:
        delta["plan_mode"] = {"active": t.plan_mode, "plan_file": t.plan_file}
    return [
        Event(
            invocation_id=invocation,
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=t.user)]),
        ),
        Event(
            invocation_id=invocation,
            author=AGENT,
            content=types.Content(
                role="model",
                parts=[
                    types.Part(text=t.preamble),
                    types.Part(
                        function_call=types.FunctionCall(
                            id=t.call_id, name=t.tool, args=t.args
                        )
                    ),
                ],
            ),
        ),
        Event(
            invocation_id=invocation,
            author=AGENT,
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id=t.call_id, name=t.tool, response={"result": t.result}
                        )
                    )
                ],
            ),
        ),
        Event(
            invocation_id=invocation,
            author=AGENT,
            content=types.Content(role="model", parts=[types.Part(text=t.answer)]),
            actions=EventActions(state_delta=delta),
        ),
    ]


def make_service(spec: dict[str, Any]) -> Any:
    kind = spec["kind"]
    if kind == "memory":
        return InMemorySessionService()
    if kind == "journal":
        from journal import Journal
        from journal.adapters.adk import JournalSessionService

        return JournalSessionService(Journal.open(spec["root"]))
    if kind == "sqlite":
        assert SqliteSessionService is not None, "this ADK has no SqliteSessionService"
        return SqliteSessionService(spec["db"])
    assert DatabaseSessionService is not None, "ADK's database extra is missing"
    return DatabaseSessionService(db_url=spec["url"])


class AdkPeer(Adapter):
    system = "Google ADK"
    module = "adk_peer"

    def __init__(
        self, kind: str, *, path: Path | None = None, server: Any = None
    ) -> None:
        self.kind = kind
        self.path = path
        self.server = server
        self.database = "adk_sessions"
        variant = {
            "memory": "InMemorySessionService",
            "sqlite": "SqliteSessionService (file)",
            "db-sqlite": "DatabaseSessionService (sqlite+aiosqlite)",
            "db-postgres": "DatabaseSessionService (postgresql+asyncpg)",
            "journal": "agent-journal JournalSessionService (file)",
        }[kind]
        durability = {
            "memory": "in memory: nothing survives",
            "sqlite": (
                "default: a new aiosqlite connection per call, journal_mode=DELETE, "
                "synchronous=FULL (sqlite3's defaults, left as is): each commit "
                "fsyncs the rollback journal and the database"
            ),
            "db-sqlite": (
                "default: SQLAlchemy pool, journal_mode=DELETE, synchronous=FULL "
                "(sqlite3's defaults, left as is): each commit fsyncs the rollback "
                "journal and the database"
            ),
            "db-postgres": "server defaults (see PostgreSQL below)",
            "journal": "default: each append_event is one journal record, fsynced",
        }[kind]
        super().__init__(variant, durability)
        self.persistent = kind != "memory"

    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"kind": self.kind}
        if self.kind == "journal":
            spec["root"] = str(self.path)
        elif self.kind == "sqlite":
            spec["db"] = str(self.path / "sessions.db")  # type: ignore[operator]
        elif self.kind == "db-sqlite":
            spec["url"] = f"sqlite+aiosqlite:///{self.path / 'sessions.db'}"  # type: ignore[operator]
        elif self.kind == "db-postgres":
            spec["url"] = self.server.url(self.database, "asyncpg")
        return spec

    async def open(self) -> None:
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
        if self.kind == "db-postgres":
            self.server.create_database(self.database)
        self.service = make_service(self._spec())
        self.session = await self.service.create_session(
            app_name=APP, user_id=USER, session_id=SESSION, state={}
        )

    async def put_turn(self, turn: Turn) -> None:
        for event in events(turn):
            await self.service.append_event(self.session, event)
        self.turns += 1

    async def load(self) -> int:
        session = await self.service.get_session(
            app_name=APP, user_id=USER, session_id=SESSION
        )
        assert session is not None
        return len(session.events)

    def footprint(self) -> tuple[int, int] | None:
        if self.kind in ("sqlite", "db-sqlite", "journal"):
            assert self.path is not None
            return du(self.path)
        if self.kind == "db-postgres":
            return self.server.footprint(self.database)
        return None

    def loader_spec(self) -> dict[str, Any]:
        return self._spec()

    async def close(self) -> None:
        close = getattr(self.service, "close", None)
        if close is not None:
            await close()


async def child_load(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    service = make_service(spec)
    t1 = time.perf_counter()
    session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    t2 = time.perf_counter()
    assert session is not None
    close = getattr(service, "close", None)
    if close is not None:
        await close()
    return {"open_s": t1 - t0, "load_s": t2 - t1, "items": len(session.events)}
