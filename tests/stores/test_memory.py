from __future__ import annotations

import pytest

from stores.memory import MemoryStore
from stores.testing import StoreContract


class TestMemoryStore(StoreContract):
    @pytest.fixture
    async def store(self):
        return MemoryStore()


class TestNamedMemoryStore(StoreContract):
    """The process-wide named stores behave like private ones."""

    @pytest.fixture
    async def store(self):
        return MemoryStore.named("contract-suite")


async def test_named_stores_share_objects():
    a = MemoryStore.named("shared-test")
    assert MemoryStore.named("shared-test") is a
    etag = await a.create("k", b"v")
    assert await MemoryStore.named("shared-test").read("k") == (b"v", etag)
    assert await MemoryStore.named("other-test").read_many(["k"]) == [None]
    assert await MemoryStore().read_many(["k"]) == [None]
    assert a.url == "memory://shared-test"


async def test_stored_bytes_are_a_copy():
    store = MemoryStore()
    data = bytearray(b"abc")
    await store.create("k", data)  # type: ignore[arg-type]
    data[0] = ord("X")
    assert (await store.read("k"))[0] == b"abc"
