from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from journal.errors import StaleStateError, StorageError
from journal.events import Msg
from projections.agent_state import AgentState
from stores.state import RedisAgentStateStore
from stores.testing.state_contract import ENTRY, AgentStateStoreContract, full_state
from tests.services.redis import (  # noqa: F401
    free_port,
    redis_server,
    redis_service,
)

pytestmark = pytest.mark.redis


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


class TestRedisAgentStateStore(AgentStateStoreContract):
    """A store that creates its own client from a URL, on a fresh prefix."""

    @pytest.fixture
    async def state_store(self, redis_server):
        store = RedisAgentStateStore(redis_server, prefix=_prefix())
        yield store
        await store.aclose()


class TestRedisWithDecodingClient(AgentStateStoreContract):
    """A client the caller owns, which decodes responses to str."""

    @pytest.fixture
    async def state_store(self, redis_server):
        client = aioredis.from_url(redis_server, decode_responses=True)
        yield RedisAgentStateStore(client, prefix=_prefix())
        await client.aclose()


class TestRedisWithTtl(AgentStateStoreContract):
    """A TTL long enough never to fire during a test changes nothing else."""

    @pytest.fixture
    async def state_store(self, redis_server):
        store = RedisAgentStateStore(redis_server, prefix=_prefix(), ttl=600)
        yield store
        await store.aclose()


@pytest.fixture
async def client(redis_server):
    client = aioredis.from_url(redis_server)
    yield client
    await client.aclose()


async def test_one_hash_per_slot_with_a_user_hash_tag(client):
    prefix = _prefix()
    store = RedisAgentStateStore(client, prefix=prefix)
    await store.save("alice", "s1", ENTRY, full_state())
    await store.save("alice", "s/2", "e", full_state())
    await store.save(None, "s1", "e", full_state())
    keys = sorted(k.decode() for k in await client.keys(f"{prefix}:*"))
    assert keys == sorted(
        [
            f"{prefix}:{{alice}}:entries:s1",
            f"{prefix}:{{alice}}:entries:s%2F2",
            f"{prefix}:{{alice}}:sessions",
            f"{prefix}:{{alice}}:slot:s%2F2:e",
            f"{prefix}:{{alice}}:slot:s1:default%2Fassistant%2Fmain%2Fagent_state",
            f"{prefix}:{{~}}:entries:s1",
            f"{prefix}:{{~}}:sessions",
            f"{prefix}:{{~}}:slot:s1:e",
        ]
    )
    # Cluster: one user's keys share a hash slot, so one script may touch them all.
    alice = {key_slot(k.encode()) for k in keys if "{alice}" in k}
    assert len(alice) == 1
    slot = await client.hgetall(f"{prefix}:{{alice}}:slot:s%2F2:e")
    assert sorted(slot) == [b"state", b"updated_at", b"version"]
    assert slot[b"version"] == b"1"
    assert AgentState.from_json(slot[b"state"]).summary == full_state().summary


async def test_prefixes_keep_stores_apart(client):
    a = RedisAgentStateStore(client, prefix=_prefix())
    b = RedisAgentStateStore(client, prefix=_prefix())
    await a.save("u", "s", "e", full_state("a"))
    assert await b.load("u", "s", "e") is None
    assert await b.list_sessions("u") == []
    assert await b.save("u", "s", "e", full_state("b")) == 1


async def test_ttl_expires_slots_and_their_listing(client):
    prefix = _prefix()
    store = RedisAgentStateStore(client, prefix=prefix, ttl=timedelta(seconds=1))
    await store.save("u", "s1", "e", full_state())
    await store.save("u", "s2", "e", full_state())
    slot_key = f"{prefix}:{{u}}:slot:s1:e"
    assert 0 < await client.pttl(slot_key) <= 1000
    assert await client.pttl(f"{prefix}:{{u}}:sessions") > 0
    await asyncio.sleep(0.5)
    await store.save("u", "s2", "e", full_state())  # renews s2 only
    await asyncio.sleep(0.6)
    assert await store.load("u", "s1", "e") is None
    assert await store.list_sessions("u") == ["s2"]
    found = await store.load("u", "s2", "e")
    assert found is not None
    assert found[1] == 2
    await asyncio.sleep(0.5)
    assert await store.list_sessions("u") == []
    assert await client.keys(f"{prefix}:*") == []


async def test_a_save_without_ttl_makes_the_slot_persistent(client):
    prefix = _prefix()
    with_ttl = RedisAgentStateStore(client, prefix=prefix, ttl=60)
    without = RedisAgentStateStore(client, prefix=prefix)
    await with_ttl.save("u", "s", "e", full_state())
    assert await client.pttl(f"{prefix}:{{u}}:slot:s:e") > 0
    await without.save("u", "s", "e", full_state())
    assert await client.pttl(f"{prefix}:{{u}}:slot:s:e") == -1
    assert await client.pttl(f"{prefix}:{{u}}:sessions") == -1
    # A later save with a TTL never shortens the index under a persistent slot.
    await with_ttl.save("u", "s", "other", full_state())
    assert await client.pttl(f"{prefix}:{{u}}:sessions") == -1


@pytest.mark.parametrize("ttl", [0, -1, timedelta(0)])
def test_bad_ttl_is_refused(redis_server, ttl):
    with pytest.raises(ValueError, match="ttl"):
        RedisAgentStateStore(redis_server, ttl=ttl)


@pytest.mark.parametrize("prefix", ["", "a{b", "a}b"])
def test_bad_prefix_is_refused(redis_server, prefix):
    with pytest.raises(ValueError, match="prefix"):
        RedisAgentStateStore(redis_server, prefix=prefix)


async def test_a_given_client_is_not_closed(client):
    store = RedisAgentStateStore(client, prefix=_prefix())
    await store.save("u", "s", "e", full_state())
    await store.aclose()
    assert await client.ping()
    assert store.client is client


async def test_an_unreachable_server_is_a_transient_storage_error():
    store = RedisAgentStateStore(f"redis://127.0.0.1:{free_port()}/0")
    try:
        for attempt in (
            store.save("u", "s", "e", full_state()),
            store.load("u", "s", "e"),
            store.delete("u", "s", "e"),
            store.list_sessions("u"),
        ):
            with pytest.raises(StorageError) as caught:
                await attempt
            assert caught.value.transient is True
            assert caught.value.__cause__ is not None
            assert "redis" in type(caught.value.__cause__).__module__
    finally:
        await store.aclose()


async def test_unix_socket_url(redis_service):
    store = RedisAgentStateStore(redis_service.unix_url, prefix=_prefix())
    try:
        assert await store.save("u", "s", "e", full_state()) == 1
        found = await store.load("u", "s", "e")
        assert found is not None
        assert found[1] == 1
    finally:
        await store.aclose()


async def test_many_writers_on_many_clients(redis_server):
    """40 read-modify-write tasks over 4 clients (as if 4 processes) lose nothing."""
    prefix = _prefix()
    stores = [RedisAgentStateStore(redis_server, prefix=prefix) for _ in range(4)]

    async def append_one(store: RedisAgentStateStore, i: int) -> None:
        while True:
            found = await store.load("alice", "s1", ENTRY)
            state, version = found if found else (AgentState(), 0)
            state.context.append(Msg(role="user", content=str(i), id=f"m{i}"))
            try:
                await store.save("alice", "s1", ENTRY, state, expected_version=version)
                return
            except StaleStateError:
                await asyncio.sleep(0)

    try:
        await asyncio.gather(*(append_one(stores[i % 4], i) for i in range(40)))
        found = await stores[0].load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == 40
        assert sorted(m.id for m in found[0].context) == sorted(
            f"m{i}" for i in range(40)
        )
    finally:
        for store in stores:
            await store.aclose()
