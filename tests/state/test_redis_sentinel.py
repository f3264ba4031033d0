"""The Redis state store through Redis Sentinel: a sentinel-managed master client."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import TYPE_CHECKING

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff

from journal.errors import StorageError
from projections.agent_state import AgentState
from stores.state import RedisAgentStateStore
from stores.testing.state_contract import ENTRY, AgentStateStoreContract, full_state
from tests.services.redis_cluster import (  # noqa: F401
    redis_sentinel,
    redis_sentinel_with_replica,
)

if TYPE_CHECKING:
    from tests.services.redis_cluster import RedisSentinelService

pytestmark = pytest.mark.redis


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def _sentinel(service: RedisSentinelService) -> Sentinel:
    return Sentinel(service.sentinels)  # type: ignore[no-untyped-call]


class TestRedisSentinelStateStore(AgentStateStoreContract):
    """The documented sentinel form: ``Sentinel([...]).master_for(name)``."""

    @pytest.fixture
    async def state_store(self, redis_sentinel):
        sentinel = _sentinel(redis_sentinel)
        client = sentinel.master_for(redis_sentinel.master_name)
        yield RedisAgentStateStore(client, prefix=_prefix())
        await client.aclose()
        await sentinel.aclose()


@pytest.fixture
async def sentinel(redis_sentinel):
    sentinel = _sentinel(redis_sentinel)
    yield sentinel
    await sentinel.aclose()


async def test_a_round_trip_lands_on_the_master_the_sentinel_names(
    redis_sentinel, sentinel
):
    """The store is handed only the sentinel's address; the data is on the master."""
    assert await sentinel.discover_master(redis_sentinel.master_name) == (
        "127.0.0.1",
        redis_sentinel.master_port,
    )
    client = sentinel.master_for(redis_sentinel.master_name, decode_responses=True)
    direct = aioredis.Redis(host="127.0.0.1", port=redis_sentinel.master_port)
    prefix = _prefix()
    store = RedisAgentStateStore(client, prefix=prefix)
    try:
        assert await store.save("alice", "s1", ENTRY, full_state()) == 1
        found = await store.load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == 1
        assert found[0].summary == full_state().summary
        assert await store.list_sessions("alice") == ["s1"]
        slot_key = f"{prefix}:{{alice}}:slot:s1:{ENTRY.replace('/', '%2F')}"
        assert await direct.hget(slot_key, "version") == b"1"
        assert await store.delete("alice", "s1", ENTRY)
        assert await direct.exists(slot_key) == 0
        await store.aclose()  # a client the caller owns stays open
        assert await client.ping()
    finally:
        await client.aclose()
        await direct.aclose()


def test_a_sentinel_url_is_not_a_supported_form(redis_sentinel):
    """Only client objects are documented for Sentinel; a URL fails at once."""
    url = f"redis+sentinel://127.0.0.1:{redis_sentinel.sentinel_port}/mymaster"
    with pytest.raises(ValueError, match="scheme"):
        RedisAgentStateStore(url)


async def _wait_for_master(sentinel: Sentinel, name: str, port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(MasterNotFoundError):  # e.g. the old one is down
            if (await sentinel.discover_master(name))[1] == port:
                return
        await asyncio.sleep(0.1)
    pytest.fail(f"the sentinel never named 127.0.0.1:{port} the master")


async def test_the_store_follows_a_failover(redis_sentinel_with_replica):
    """The master dies, the sentinel promotes its replica, the same store writes there.

    A call that meets the dead master's connection may fail with a transient
    StorageError; a retry succeeds, and compare-and-swap continues from the
    replicated version. (The failover is forced, so the test need not wait out
    ``down-after-milliseconds``.)
    """
    service = redis_sentinel_with_replica
    sentinel = _sentinel(service)
    client = sentinel.master_for(service.master_name)
    prefix = _prefix()
    store = RedisAgentStateStore(client, prefix=prefix)
    try:
        assert await store.save("alice", "s1", ENTRY, AgentState(summary="a")) == 1
        version = await store.save(
            "alice", "s1", ENTRY, AgentState(summary="b"), expected_version=1
        )
        assert version == 2
        assert await client.wait(1, 5000) == 1  # the replica has both writes
        old_master = aioredis.Redis(
            host="127.0.0.1",
            port=service.master_port,
            retry=Retry(NoBackoff(), 0),  # do not reconnect to re-send SHUTDOWN
        )
        await old_master.shutdown(nosave=True, now=True)  # as if it crashed
        await old_master.aclose()
        sentinel_node = aioredis.Redis(host="127.0.0.1", port=service.sentinel_port)
        try:
            assert await sentinel_node.sentinel_failover(service.master_name)
        finally:
            await sentinel_node.aclose()
        assert service.replica_port is not None
        await _wait_for_master(sentinel, service.master_name, service.replica_port)

        errors: list[StorageError] = []
        for _ in range(20):
            try:
                version = await store.save(
                    "alice", "s1", ENTRY, AgentState(summary="c"), expected_version=2
                )
                break
            except StorageError as exc:
                errors.append(exc)
                await asyncio.sleep(0.1)
        else:
            pytest.fail(f"no save succeeded after the failover: {errors!r}")
        assert all(e.transient for e in errors), errors
        assert version == 3
        found = await store.load("alice", "s1", ENTRY)
        assert found is not None
        assert (found[0].summary, found[1]) == ("c", 3)
        assert await store.list_sessions("alice") == ["s1"]
        direct = aioredis.Redis(host="127.0.0.1", port=service.replica_port)
        try:
            assert (await direct.info("replication"))["role"] == "master"
            slot_key = f"{prefix}:{{alice}}:slot:s1:{ENTRY.replace('/', '%2F')}"
            assert await direct.hget(slot_key, "version") == b"3"
        finally:
            await direct.aclose()
    finally:
        await client.aclose()
        await sentinel.aclose()
