"""A pytest plugin that runs the OpenAI Agents SDK's own session tests on the journal.

Loaded with ``-p journal_agents_session`` (this directory on ``PYTHONPATH``), it puts
``SQLiteSessionOnJournal`` where the SDK's tests import ``SQLiteSession`` from
(``agents`` and ``agents.memory``), before they are collected. An in-memory database
becomes a fresh ``memory://`` journal, a database file a journal directory beside it,
so two sessions opened on one file share it as they would with SQLite.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import agents
import agents.memory

from journal import Journal
from journal.adapters.openai_agents import JournalSession

if TYPE_CHECKING:
    from pathlib import Path

CREATED: list[str] = []
"""The session ids the swapped-in class was built for, reported at the end."""


class SQLiteSessionOnJournal(JournalSession):
    """``SQLiteSession``'s constructor over a ``JournalSession``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        if str(db_path) == ":memory:":
            url = f"memory://agents-{uuid.uuid4().hex}"
        else:
            url = f"{db_path}.journal"
        self.db_path = db_path
        CREATED.append(session_id)
        super().__init__(
            session_id,
            Journal.open(url),
            lease_wait=30.0,
            session_settings=session_settings,
        )


def _swap() -> None:
    agents.SQLiteSession = SQLiteSessionOnJournal  # type: ignore[misc,assignment]
    agents.memory.SQLiteSession = SQLiteSessionOnJournal  # type: ignore[attr-defined]


_swap()


def pytest_configure(config: Any) -> None:
    _swap()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"JournalSession stood in for SQLiteSession {len(CREATED)} times"
    )
