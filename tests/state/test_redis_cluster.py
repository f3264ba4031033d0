"""The Redis state store on a real three-master Redis Cluster."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest
from redis.asyncio.cluster import RedisCluster

from journal.errors import StaleStateError
from journal.events import Msg
from projections.agent_state import AgentState
from stores.state import RedisAgentStateStore
from stores.testing.state_contract import ENTRY, AgentStateStoreContract, full_state
from tests.services.redis_cluster import redis_cluster  # noqa: F401

if TYPE_CHECKING:
    from tests.services.redis_cluster import RedisClusterService

pytestmark = pytest.mark.redis


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def _marked(tag: str) -> AgentState:
    return AgentState(summary=tag)


def _cluster(service: RedisClusterService, **kwargs: Any) -> RedisCluster:
    return RedisCluster(host=service.host, port=service.port, **kwargs)


class TestRedisClusterStateStore(AgentStateStoreContract):
    """A ``RedisCluster`` client the caller owns, on a fresh prefix."""

    @pytest.fixture
    async def state_store(self, redis_cluster):
        client = _cluster(redis_cluster)
        yield RedisAgentStateStore(client, prefix=_prefix())
        await client.aclose()


class TestRedisClusterFromUrlDecoding(AgentStateStoreContract):
    """The documented ``RedisCluster.from_url`` form, decoding responses to str."""

    @pytest.fixture
    async def state_store(self, redis_cluster):
        client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
        yield RedisAgentStateStore(client, prefix=_prefix())
        await client.aclose()


@pytest.fixture
async def cluster(redis_cluster):
    client = _cluster(redis_cluster)
    yield client
    await client.aclose()


async def _keys_by_node(client: RedisCluster, prefix: str) -> dict[str, list[str]]:
    """Every key under ``prefix``, grouped by the master that holds it."""
    found: dict[str, list[str]] = {}
    for node in client.get_primaries():
        keys = await client.keys(f"{prefix}:*", target_nodes=node)
        found[node.name] = sorted(
            k.decode() if isinstance(k, bytes) else k for k in keys
        )
    return found


async def _server_slot(client: RedisCluster, key: str) -> int:
    """The key's hash slot as the server computes it (``CLUSTER KEYSLOT``)."""
    return int(await client.cluster_keyslot(key))


async def test_users_spread_over_the_masters_and_each_user_keeps_one_slot(cluster):
    prefix = _prefix()
    store = RedisAgentStateStore(cluster, prefix=prefix)
    users: list[str | None] = [*(f"user-{i}" for i in range(24)), None, "a{b}c"]
    for user in users:
        for session in ("s1", "s/2"):
            for entry in (ENTRY, "other"):
                await store.save(user, session, entry, full_state(f"{user}"))
    by_node = await _keys_by_node(cluster, prefix)
    # Each user has 2 slots x 2 sessions = 4 slot hashes, 2 entry sets, 1 index.
    assert sum(len(keys) for keys in by_node.values()) == 7 * len(users)

    slots_of_user: dict[str, set[int]] = defaultdict(set)
    nodes_of_user: dict[str, set[str]] = defaultdict(set)
    for node, keys in by_node.items():
        for key in keys:
            tag = key[key.index("{") : key.index("}") + 1]
            slots_of_user[tag].add(await _server_slot(cluster, key))
            nodes_of_user[tag].add(node)
    assert len(slots_of_user) == len(users)
    # One user's keys share one slot (so one script may touch them all) ...
    assert all(len(slots) == 1 for slots in slots_of_user.values()), slots_of_user
    assert all(len(nodes) == 1 for nodes in nodes_of_user.values()), nodes_of_user
    # ... while different users land in different slots, on different masters: a
    # script that mixed two users' keys would fail here with CROSSSLOT.
    assert len({slot for slots in slots_of_user.values() for slot in slots}) > 1
    holding = {node for nodes in nodes_of_user.values() for node in nodes}
    assert len(holding) >= 2, by_node
    # Every slot is where the server says it belongs, and it reads back.
    for user in users:
        for session in ("s1", "s/2"):
            found = await store.load(user, session, "other")
            assert found is not None
            assert (found[0].summary, found[1]) == (f"summary of {user}", 1)


async def test_the_cluster_refuses_a_script_across_two_users(cluster):
    """The check above is meaningful: the cluster does reject cross-slot scripts."""
    from redis.exceptions import RedisClusterException, ResponseError

    prefix = _prefix()
    a, b = f"{prefix}:{{user-0}}:x", f"{prefix}:{{user-1}}:x"
    assert await _server_slot(cluster, a) != await _server_slot(cluster, b)
    with pytest.raises((RedisClusterException, ResponseError), match=r"(?i)slot"):
        await cluster.eval("return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)", 2, a, b)


async def test_list_sessions_per_user_on_the_cluster(cluster):
    store = RedisAgentStateStore(cluster, prefix=_prefix())
    sessions = {f"user-{i}": [f"s{j}" for j in range(i % 4 + 1)] for i in range(12)}
    for user, names in sessions.items():
        for name in names:
            await store.save(user, name, ENTRY, AgentState(summary=name))
            await store.save(user, name, "second", AgentState(summary=name))
    for user, names in sessions.items():
        assert await store.list_sessions(user) == sorted(names)
    assert await store.list_sessions("nobody") == []
    # A session stays listed while one of its slots is left.
    assert await store.delete("user-3", "s0", ENTRY)
    assert await store.list_sessions("user-3") == ["s0", "s1", "s2", "s3"]
    assert await store.delete("user-3", "s0", "second")
    assert await store.list_sessions("user-3") == ["s1", "s2", "s3"]
    assert await store.list_sessions("user-7") == ["s0", "s1", "s2", "s3"]


async def test_listing_drops_expired_slots_on_the_cluster(cluster):
    """The listing script prunes index keys it was not given, in the user's slot."""
    store = RedisAgentStateStore(cluster, prefix=_prefix(), ttl=0.3)
    keeper = RedisAgentStateStore(cluster, prefix=store.prefix)
    for user in ("user-0", "user-1", "user-2"):
        await store.save(user, "fleeting", "e", AgentState())
        await keeper.save(user, "kept", "e", AgentState())
    await asyncio.sleep(0.5)
    for user in ("user-0", "user-1", "user-2"):
        assert await store.list_sessions(user) == ["kept"]
        assert await store.load(user, "fleeting", "e") is None


async def test_concurrent_compare_and_swap_on_one_slot(redis_cluster):
    """Writers on separate clients: one winner per version, nothing lost."""
    prefix = _prefix()
    clients = [_cluster(redis_cluster) for _ in range(3)]
    stores = [RedisAgentStateStore(c, prefix=prefix) for c in clients]
    writers = 30
    won: list[int] = []
    lost: list[tuple[int, int, int]] = []  # (read version, expected, actual)

    async def append_one(store: RedisAgentStateStore, i: int) -> None:
        while True:
            found = await store.load("alice", "s1", ENTRY)
            state, version = found if found is not None else (AgentState(), 0)
            state.context.append(Msg(role="user", content=str(i), id=f"m{i}"))
            try:
                won.append(
                    await store.save(
                        "alice", "s1", ENTRY, state, expected_version=version
                    )
                )
                return
            except StaleStateError as exc:
                lost.append((version, exc.expected, exc.actual))
                await asyncio.sleep(0)

    try:
        await asyncio.gather(
            *(append_one(stores[i % len(stores)], i) for i in range(writers))
        )
        assert sorted(won) == list(range(1, writers + 1))  # one winner per version
        assert lost  # they really raced
        assert all(read == expected < actual for read, expected, actual in lost)
        found = await stores[0].load("alice", "s1", ENTRY)
        assert found is not None
        assert found[1] == writers
        assert sorted(m.id for m in found[0].context) == sorted(
            f"m{i}" for i in range(writers)
        )
    finally:
        for client in clients:
            await client.aclose()


async def test_racing_the_same_version_on_every_master(cluster):
    """Rounds of racers on users that live on different masters, all at once."""
    store = RedisAgentStateStore(cluster, prefix=_prefix())
    users = [f"user-{i}" for i in range(6)]
    racers, rounds = 15, 4

    async def save(user: str, tag: str, expected: int) -> int:
        return await store.save(user, "s", "e", _marked(tag), expected_version=expected)

    async def race(user: str) -> None:
        for version in range(rounds):
            results = await asyncio.gather(
                *(save(user, f"{version}:{i}", version) for i in range(racers)),
                return_exceptions=True,
            )
            assert [r for r in results if not isinstance(r, Exception)] == [
                version + 1
            ], results
            losers = [r for r in results if isinstance(r, StaleStateError)]
            assert len(losers) == racers - 1, results
            assert {(r.expected, r.actual) for r in losers} == {(version, version + 1)}

    await asyncio.gather(*(race(u) for u in users))
    for user in users:
        found = await store.load(user, "s", "e")
        assert found is not None
        assert found[1] == rounds


async def _script_loaded(client: RedisCluster, sha: str) -> list[bool]:
    """Whether each master has the script in its cache."""
    found = []
    for node in client.get_primaries():
        reply = await client.execute_command("SCRIPT EXISTS", sha, target_nodes=node)
        found.append(bool(reply[0]))
    return found


async def test_scripts_reload_after_a_flush_on_every_master(cluster):
    """A master that lost its script cache (restart, failover) still serves saves."""
    store = RedisAgentStateStore(cluster, prefix=_prefix())
    await store.save("user-0", "s", "e", AgentState())
    sha = store._save_script.sha
    assert any(await _script_loaded(cluster, sha))
    await cluster.execute_command("SCRIPT FLUSH", target_nodes=RedisCluster.ALL_NODES)
    assert not any(await _script_loaded(cluster, sha))
    for i in range(6):
        assert await store.save(f"user-{i}", "s", "e", AgentState()) == (
            2 if i == 0 else 1
        )
    assert await store.list_sessions("user-0") == ["s"]
    assert await store.delete("user-0", "s", "e")
