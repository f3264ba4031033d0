"""OpenAI Agents SDK sessions: ``add_items`` with the turn's Responses-API items.

A turn is the items the Runner stores for it: the user message, the assistant's
output message (the preamble) and its ``function_call``, the
``function_call_output``, and the final assistant message, five item dicts in one
``add_items`` call (the Runner makes two or more calls per turn: the input first,
then the outputs; one call is the cheapest). Sessions store conversation items only:
there is no place for side state, so this peer persists none (its rows carry the
same messages, minus the todos, summary and plan mode). Loading is ``get_items()``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from agents import SQLiteSession

# Imported here, not in child_load's timed open, like every peer's library.
try:
    from journal import Journal
    from journal.adapters.openai_agents import JournalSession
except ImportError:  # reported when the variant is selected
    pass

from _peers.base import Adapter, du

if TYPE_CHECKING:
    from pathlib import Path

    from _peers.workload import Turn

try:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
except ImportError:  # reported when the variant is selected
    SQLAlchemySession = None  # type: ignore[assignment,misc]

SESSION = "peers"


def items(t: Turn) -> list[dict[str, Any]]:
    def output_message(text: str) -> dict[str, Any]:
        return {
            "id": f"msg_{uuid.uuid4().hex}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    return [
        {"role": "user", "content": t.user},
        output_message(t.preamble),
        {
            "id": f"fc_{uuid.uuid4().hex}",
            "type": "function_call",
            "call_id": t.call_id,
            "name": t.tool,
            "arguments": json.dumps(t.args),
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": t.call_id, "output": t.result},
        output_message(t.answer),
    ]


def make_session(spec: dict[str, Any], *, create: bool) -> Any:
    if spec["kind"] == "journal":
        return JournalSession(SESSION, Journal.open(spec["root"]), keep=True)
    if spec["kind"] == "sqlite":
        return SQLiteSession(SESSION, spec["db"])
    assert SQLAlchemySession is not None, "sqlalchemy is missing"
    # create_tables=True only for the writer: the docs keep it off in production.
    return SQLAlchemySession.from_url(SESSION, url=spec["url"], create_tables=create)


async def close_session(session: Any) -> None:
    if hasattr(session, "leases"):  # the journal's session
        await session.aclose()
        await session.journal.aclose()
    elif isinstance(session, SQLiteSession):
        session.close()
    else:
        await session.engine.dispose()


class OpenAIPeer(Adapter):
    system = "OpenAI Agents SDK"
    module = "openai_peer"
    items_per_turn = 5

    def __init__(
        self, kind: str, *, path: Path | None = None, server: Any = None
    ) -> None:
        self.kind = kind
        self.path = path
        self.server = server
        self.database = "openai_sessions"
        variant = {
            "sqlite": "SQLiteSession (file)",
            "sa-sqlite": "SQLAlchemySession (sqlite+aiosqlite)",
            "sa-postgres": "SQLAlchemySession (postgresql+asyncpg)",
            "journal": "agent-journal JournalSession (file)",
        }[kind]
        durability = {
            "sqlite": (
                "default: journal_mode=WAL (SQLiteSession sets it), synchronous=FULL "
                "(sqlite3's default, left as is): each commit fsyncs the WAL"
            ),
            "sa-sqlite": (
                "default: journal_mode=WAL (SQLAlchemySession sets it), "
                "synchronous=FULL (sqlite3's default): each commit fsyncs the WAL"
            ),
            "sa-postgres": "server defaults (see PostgreSQL below)",
            "journal": "default: each add_items is one journal record, fsynced",
        }[kind]
        super().__init__(variant, durability)

    def _spec(self) -> dict[str, Any]:
        if self.kind == "sqlite":
            return {"kind": "sqlite", "db": str(self.path / "sessions.db")}  # type: ignore[operator]
        if self.kind == "journal":
            return {"kind": "journal", "root": str(self.path)}
        if self.kind == "sa-sqlite":
            return {
                "kind": self.kind,
                "url": f"sqlite+aiosqlite:///{self.path / 'sessions.db'}",  # type: ignore[operator]
            }
        return {"kind": self.kind, "url": self.server.url(self.database, "asyncpg")}

    async def open(self) -> None:
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
        if self.kind == "sa-postgres":
            self.server.create_database(self.database)
        self.session = make_session(self._spec(), create=True)

    async def put_turn(self, turn: Turn) -> None:
        await self.session.add_items(items(turn))
        self.turns += 1

    async def load(self) -> int:
        return len(await self.session.get_items())

    def footprint(self) -> tuple[int, int] | None:
        if self.kind == "sa-postgres":
            return self.server.footprint(self.database)
        assert self.path is not None
        return du(self.path)

    def loader_spec(self) -> dict[str, Any]:
        return self._spec()

    async def close(self) -> None:
        await close_session(self.session)


async def child_load(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    session = make_session(spec, create=False)
    t1 = time.perf_counter()
    found = await session.get_items()
    t2 = time.perf_counter()
    await close_session(session)
    return {"open_s": t1 - t0, "load_s": t2 - t1, "items": len(found)}
