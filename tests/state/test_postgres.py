"""The SQL store on a real PostgreSQL server (asyncpg)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from journal.errors import StaleStateError, StorageError
from journal.events import Msg
from projections.agent_state import AgentState
from stores.state import SqlAgentStateStore
from stores.testing.state_contract import ENTRY, AgentStateStoreContract, full_state
from tests.services.postgres import postgres_server  # noqa: F401
from tests.services.redis import free_port

pytestmark = pytest.mark.sql


def _table() -> str:
    return f"agent_state_{uuid.uuid4().hex[:12]}"


async def _drop(store: SqlAgentStateStore) -> None:
    async with store.engine.begin() as conn:
        await conn.run_sync(store.table.drop, checkfirst=True)


class TestPostgresAgentStateStore(AgentStateStoreContract):
    """A store that creates its own engine from a URL, on a fresh table per test."""

    @pytest.fixture
    async def state_store(self, postgres_server):
        store = SqlAgentStateStore(postgres_server, table=_table())
        yield store
        await _drop(store)
        await store.aclose()


async def test_the_default_table_and_its_columns(postgres_server):
    store = SqlAgentStateStore(postgres_server)
    try:
        await _drop(store)
        await store.save("alice", "s1", ENTRY, full_state())
        async with store.engine.connect() as conn:
            columns = (
                await conn.execute(
                    text(
                        "SELECT column_name, data_type FROM information_schema.columns"
                        " WHERE table_name = 'agent_state' ORDER BY ordinal_position"
                    )
                )
            ).all()
        assert [tuple(c) for c in columns] == [
            ("user_key", "character varying"),
            ("session_id", "character varying"),
            ("entry", "character varying"),
            ("version", "bigint"),
            ("updated_at", "timestamp with time zone"),
            ("state", "text"),
        ]
    finally:
        await _drop(store)
        await store.aclose()


async def test_many_writers_on_many_engines(postgres_server):
    """40 read-modify-write tasks over 4 engines (as if 4 processes) lose nothing."""
    table = _table()
    stores = [SqlAgentStateStore(postgres_server, table=table) for _ in range(4)]

    async def append_one(store: SqlAgentStateStore, i: int) -> int:
        conflicts = 0
        while True:
            found = await store.load("alice", "s1", ENTRY)
            state, version = found if found else (AgentState(), 0)
            state.context.append(Msg(role="user", content=str(i), id=f"m{i}"))
            try:
                await store.save("alice", "s1", ENTRY, state, expected_version=version)
                return conflicts
            except StaleStateError:
                conflicts += 1

    try:
        conflicts = await asyncio.gather(
            *(append_one(stores[i % 4], i) for i in range(40))
        )
        found = await stores[0].load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == 40
        assert sorted(m.id for m in found[0].context) == sorted(
            f"m{i}" for i in range(40)
        )
        assert sum(conflicts) > 0
    finally:
        await _drop(stores[0])
        for store in stores:
            await store.aclose()


async def test_unconditional_saves_on_many_engines(postgres_server):
    table = _table()
    stores = [SqlAgentStateStore(postgres_server, table=table) for _ in range(4)]
    try:
        versions = await asyncio.gather(
            *(stores[i % 4].save("u", "s", "e", full_state(f"w{i}")) for i in range(40))
        )
        assert sorted(versions) == list(range(1, 41))
    finally:
        await _drop(stores[0])
        for store in stores:
            await store.aclose()


async def test_stores_racing_to_create_the_table(postgres_server):
    table = _table()
    stores = [SqlAgentStateStore(postgres_server, table=table) for _ in range(6)]
    try:
        results = await asyncio.gather(
            *(s.save("u", f"s{i}", "e", full_state()) for i, s in enumerate(stores))
        )
        assert results == [1] * 6
        assert await stores[0].list_sessions("u") == [f"s{i}" for i in range(6)]
    finally:
        await _drop(stores[0])
        for store in stores:
            await store.aclose()


async def test_a_given_engine_is_not_disposed(postgres_server):
    engine = create_async_engine(postgres_server)
    table = _table()
    try:
        store = SqlAgentStateStore(engine, table=table)
        await store.save("u", "s", "e", full_state())
        await store.aclose()
        async with engine.connect() as conn:
            count = await conn.scalar(text(f"SELECT count(*) FROM {table}"))  # noqa: S608
        assert count == 1
        await _drop(store)
    finally:
        await engine.dispose()


async def test_an_unreachable_server_is_a_transient_storage_error():
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nothing"
    store = SqlAgentStateStore(url)
    try:
        with pytest.raises(StorageError) as caught:
            await store.load("u", "s", "e")
        assert caught.value.transient is True
        assert caught.value.__cause__ is not None
    finally:
        await store.aclose()


async def test_an_expected_version_beyond_64_bits_is_stale(postgres_server):
    store = SqlAgentStateStore(postgres_server, table=_table())
    try:
        await store.save("u", "s", "e", full_state())
        with pytest.raises(StaleStateError) as caught:
            await store.save("u", "s", "e", full_state(), expected_version=2**63)
        assert caught.value.actual == 1
    finally:
        await _drop(store)
        await store.aclose()
