"""The SQL store on SQLite (aiosqlite), and what is specific to SQL."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from journal.errors import StaleStateError, StorageError
from journal.events import Msg
from projections.agent_state import AgentState
from stores.state import SqlAgentStateStore
from stores.testing.state_contract import ENTRY, AgentStateStoreContract, full_state

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.sql


def _url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


class TestSqliteAgentStateStore(AgentStateStoreContract):
    @pytest.fixture
    async def state_store(self, tmp_path):
        store = SqlAgentStateStore(_url(tmp_path / "state.db"))
        yield store
        await store.aclose()


class TestSqliteInMemory(AgentStateStoreContract):
    """One shared connection (StaticPool): the store must take turns on it."""

    @pytest.fixture
    async def state_store(self):
        store = SqlAgentStateStore("sqlite+aiosqlite://")
        yield store
        await store.aclose()


async def test_table_layout(tmp_path):
    store = SqlAgentStateStore(_url(tmp_path / "state.db"))
    try:
        await store.save(None, "s1", ENTRY, full_state())
        await store.save("alice", "s1", ENTRY, full_state())
        await store.save("alice", "s1", ENTRY, full_state())
        async with store.engine.connect() as conn:
            columns, pk = await conn.run_sync(
                lambda c: (
                    [col["name"] for col in inspect(c).get_columns("agent_state")],
                    inspect(c).get_pk_constraint("agent_state")["constrained_columns"],
                )
            )
            rows = (
                await conn.execute(
                    text(
                        "SELECT user_key, session_id, entry, version, state "
                        "FROM agent_state ORDER BY user_key"
                    )
                )
            ).all()
        assert columns == [
            "user_key",
            "session_id",
            "entry",
            "version",
            "updated_at",
            "state",
        ]
        assert pk == ["user_key", "session_id", "entry"]
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
            ("alice", "s1", ENTRY, 2),
            ("~", "s1", ENTRY, 1),
        ]
        assert AgentState.from_json(rows[0][4]).version == 2
    finally:
        await store.aclose()


async def test_sqlite_uses_wal_and_a_busy_timeout(tmp_path):
    store = SqlAgentStateStore(_url(tmp_path / "state.db"), busy_timeout=7)
    try:
        await store.list_sessions("u")
        async with store.engine.connect() as conn:
            mode = await conn.scalar(text("PRAGMA journal_mode"))
            timeout = await conn.scalar(text("PRAGMA busy_timeout"))
        assert (mode, timeout) == ("wal", 7000)
    finally:
        await store.aclose()


async def test_a_custom_table_name(tmp_path):
    store = SqlAgentStateStore(_url(tmp_path / "state.db"), table="snapshots_v2")
    try:
        await store.save("u", "s", "e", full_state())
        async with store.engine.connect() as conn:
            names = await conn.run_sync(lambda c: inspect(c).get_table_names())
        assert names == ["snapshots_v2"]
    finally:
        await store.aclose()


@pytest.mark.parametrize("table", ["", "a b", "x;drop", "1abc", "a" * 64, "t-1"])
def test_bad_table_names_are_refused(tmp_path, table):
    with pytest.raises(ValueError, match="table"):
        SqlAgentStateStore(_url(tmp_path / "state.db"), table=table)


async def test_a_given_engine_is_not_disposed(tmp_path):
    engine = create_async_engine(_url(tmp_path / "state.db"))
    try:
        store = SqlAgentStateStore(engine)
        assert store.engine is engine
        await store.save("u", "s", "e", full_state())
        await store.aclose()
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT count(*) FROM agent_state")) == 1
    finally:
        await engine.dispose()


async def test_database_errors_become_storage_errors(tmp_path):
    store = SqlAgentStateStore(_url(tmp_path / "missing-dir" / "state.db"))
    try:
        with pytest.raises(StorageError) as caught:
            await store.save("u", "s", "e", full_state())
        assert caught.value.__cause__ is not None
        assert "sqlalchemy" in type(caught.value.__cause__).__module__
        assert "unable to open" in str(caught.value)
        assert caught.value.transient is False
    finally:
        await store.aclose()
        # aiosqlite stops the worker thread of a connection that failed to open
        # asynchronously; let it finish before this test's event loop closes.
        await asyncio.sleep(0.1)


async def test_two_engines_on_one_file(tmp_path):
    """Two stores on one database file (as two processes would be) lose nothing."""
    stores = [SqlAgentStateStore(_url(tmp_path / "state.db")) for _ in range(2)]

    async def append_one(store: SqlAgentStateStore, i: int) -> None:
        while True:
            found = await store.load("u", "s", "e")
            state, version = found if found else (AgentState(), 0)
            state.context.append(Msg(role="user", content=str(i), id=f"m{i}"))
            try:
                await store.save("u", "s", "e", state, expected_version=version)
                return
            except StaleStateError:
                await asyncio.sleep(0)

    try:
        await asyncio.gather(*(append_one(stores[i % 2], i) for i in range(20)))
        found = await stores[1].load("u", "s", "e")
        assert found is not None
        assert found[1] == 20
        assert len({m.id for m in found[0].context}) == 20
    finally:
        for store in stores:
            await store.aclose()


async def test_an_expected_version_beyond_64_bits_is_stale(tmp_path):
    # No slot reaches it: the answer is StaleStateError, not the driver's
    # OverflowError (SQLite) or a DataError (PostgreSQL) escaping.
    store = SqlAgentStateStore(_url(tmp_path / "state.db"))
    try:
        await store.save("u", "s", "e", full_state())
        for expected in (2**63, 2**70):
            with pytest.raises(StaleStateError) as caught:
                await store.save("u", "s", "e", full_state(), expected_version=expected)
            assert caught.value.actual == 1
        loaded = await store.load("u", "s", "e")
        assert loaded is not None
        assert loaded[1] == 1
    finally:
        await store.aclose()
