from __future__ import annotations

import pytest

from stores.state import InMemoryAgentStateStore
from stores.testing.state_contract import AgentStateStoreContract, full_state


class TestInMemoryAgentStateStore(AgentStateStoreContract):
    @pytest.fixture
    async def state_store(self):
        store = InMemoryAgentStateStore()
        yield store
        await store.aclose()


async def test_stores_are_private():
    a, b = InMemoryAgentStateStore(), InMemoryAgentStateStore()
    await a.save("u", "s", "e", full_state())
    assert await b.load("u", "s", "e") is None
    assert await b.list_sessions("u") == []


async def test_async_context_manager():
    async with InMemoryAgentStateStore() as store:
        assert await store.save(None, "s", "e", full_state()) == 1
