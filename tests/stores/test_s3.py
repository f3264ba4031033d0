"""S3Store on a real S3 server over HTTP (moto), plus S3-specific behaviour.

The contract suite runs as is; the tests below add what only S3 has: conditional
requests raced over the wire, pagination past 1,000 keys, error codes injected by a
loopback proxy (409, 503, bare 412, 500, 403, lost replies), buckets that do not
exist, and a store moving between event loops.
"""

# The fixtures imported from tests.services are parameters of the tests below.

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

import pytest

from journal import Journal
from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from stores.fsspec_store import FsspecStore
from stores.registry import open_store
from stores.s3 import S3Store
from stores.testing import StoreContract
from tests.services.s3 import (  # noqa: F401
    BIG_DIRS,
    BIG_PREFIX,
    CREDENTIALS,
    Fault,
    S3Proxy,
    Seen,
    big_key,
    make_bucket,
    make_s3_store,
    open_s3_store,
    s3_big_bucket,
    s3_server,
    s3_store,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.s3

MIB = 1024 * 1024

# Faults are counted exactly only when botocore does not retry on its own.
NO_BOTOCORE_RETRY = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}
FAST_RETRY = {"retry_attempts": 3, "retry_base_delay": 0.001, "retry_max_delay": 0.01}


class TestS3Store(StoreContract):
    @pytest.fixture
    async def store(self, s3_server: str) -> AsyncIterator[S3Store]:
        store = await make_s3_store(s3_server)
        yield store
        await store.aclose()


class TestS3StoreAtBucketRoot(StoreContract):
    """Keys map to the bucket's root when the URL names no prefix."""

    @pytest.fixture
    async def store(self, s3_server: str) -> AsyncIterator[S3Store]:
        store = await make_s3_store(s3_server, prefix="")
        yield store
        await store.aclose()


# --- opening -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "canonical"),
    [
        ("s3://b", "b", "", "s3://b"),
        ("s3://b/", "b", "", "s3://b"),
        ("s3://b/journal", "b", "journal", "s3://b/journal"),
        ("s3://b/a/b/c/", "b", "a/b/c", "s3://b/a/b/c"),
        ("s3a://b/x", "b", "x", "s3://b/x"),
        ("S3://b/x", "b", "x", "s3://b/x"),
    ],
)
def test_from_url(url: str, bucket: str, prefix: str, canonical: str) -> None:
    store = S3Store.from_url(url, endpoint_url="http://127.0.0.1:1")
    assert (store.bucket, store.prefix, store.url) == (bucket, prefix, canonical)
    assert store.writable is True


@pytest.mark.parametrize("url", ["s3://", "s3:///x", "gcs://b/x", "b/x"])
def test_from_url_rejects(url: str) -> None:
    with pytest.raises(ValueError, match="S3"):
        S3Store.from_url(url)


async def test_registry_opens_s3_and_s3a(s3_server: str) -> None:
    bucket = await make_bucket(s3_server)
    for scheme in ("s3", "s3a"):
        store = open_store(
            f"{scheme}://{bucket}/{scheme}", endpoint_url=s3_server, **CREDENTIALS
        )
        assert isinstance(store, S3Store)
        await store.create("k", scheme.encode())
        assert (await store.read("k"))[0] == scheme.encode()
        await store.aclose()
    # Both prefixes live in the same bucket, side by side.
    root = open_s3_store(s3_server, bucket, prefix="")
    assert await root.list("") == ["s3/k", "s3a/k"]
    await root.aclose()


async def test_invalid_keys_are_programmer_errors(s3_store: S3Store) -> None:
    for key in ["", "/abs", "dir/", "a//b", "a/./b", "a/../b"]:
        with pytest.raises(ValueError, match="invalid object key"):
            await s3_store.create(key, b"x")
        with pytest.raises(ValueError, match="invalid object key"):
            await s3_store.read(key)


# --- conditional writes over the wire -------------------------------------------


async def test_create_race_one_mib_bodies(s3_store: S3Store) -> None:
    """20 creators of one key with 1 MiB bodies: exactly one wins, its bytes stay."""
    rng = random.Random(7)  # noqa: S311
    bodies = [rng.randbytes(MIB) for _ in range(20)]
    results = await asyncio.gather(
        *(s3_store.create("log/00000000000000000001.rec", b) for b in bodies),
        return_exceptions=True,
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, str)]
    assert len(winners) == 1, results
    losers = [r for i, r in enumerate(results) if i != winners[0]]
    assert all(type(r) is ObjectExistsError for r in losers), losers
    data, etag = await s3_store.read("log/00000000000000000001.rec")
    assert data == bodies[winners[0]]
    assert etag == results[winners[0]]


async def test_races_on_many_slots(s3_store: S3Store) -> None:
    """Ten slots, each raced by 20 writers at once: one winner per slot."""
    slots = [f"log/{v:020d}.rec" for v in range(1, 11)]
    attempts = [
        (slot, f"{slot}|writer-{w}".encode()) for slot in slots for w in range(20)
    ]
    random.Random(3).shuffle(attempts)  # noqa: S311
    results = await asyncio.gather(
        *(s3_store.create(slot, body) for slot, body in attempts),
        return_exceptions=True,
    )
    won: dict[str, bytes] = {}
    for (slot, body), result in zip(attempts, results, strict=True):
        if isinstance(result, str):
            assert slot not in won, f"two winners for {slot}"
            won[slot] = body
        else:
            assert type(result) is ObjectExistsError, result
    assert sorted(won) == slots
    assert await s3_store.read_many(slots) == [won[s] for s in slots]


async def test_cas_with_stale_etag(s3_store: S3Store) -> None:
    """A writer holding an old etag can neither overwrite nor recreate the key."""
    first = await s3_store.create("LEASE", b"epoch 1 holder a")
    second = await s3_store.replace("LEASE", b"epoch 2 holder b", if_match=first)
    assert second != first
    with pytest.raises(PreconditionFailedError) as info:
        await s3_store.replace("LEASE", b"epoch 2 holder a", if_match=first)
    assert info.value.transient is False
    assert "LEASE" in str(info.value)
    assert await s3_store.read("LEASE") == (b"epoch 2 holder b", second)
    third = await s3_store.replace("LEASE", b"epoch 3 holder b", if_match=second)
    assert await s3_store.read("LEASE") == (b"epoch 3 holder b", third)


# --- listing past one page ------------------------------------------------------


async def test_list_paginates_with_start_after(
    s3_server: str, s3_big_bucket: str
) -> None:
    store = open_s3_store(s3_server, s3_big_bucket, prefix=BIG_PREFIX)
    try:
        everything = await store.list("p/")
        assert everything == [big_key(i) for i in range(BIG_DIRS)]
        # Starting in the first page, crossing into the second.
        after = await store.list("p/", start_after=big_key(499))
        assert after == [big_key(i) for i in range(500, BIG_DIRS)]
        # Starting in what would be the second page.
        after = await store.list("p", start_after=big_key(1020))
        assert after == [big_key(i) for i in range(1021, BIG_DIRS)]
        # A start that is not a key, and one past the end.
        assert await store.list("p/", start_after="p/t0999/") == [
            big_key(i) for i in range(999, BIG_DIRS)
        ]
        assert await store.list("p/", start_after="p/u") == []
    finally:
        await store.aclose()


async def test_children_paginate(s3_server: str, s3_big_bucket: str) -> None:
    store = open_s3_store(s3_server, s3_big_bucket, prefix=BIG_PREFIX)
    try:
        assert await store.children("p") == [f"t{i:04d}" for i in range(BIG_DIRS)]
        assert await store.children("") == ["p"]
        assert await store.children("p/t0007/") == []
    finally:
        await store.aclose()


async def test_children_use_delimiters(s3_store: S3Store) -> None:
    keys = [
        "ns/agent/~/s1/main/log/00000000000000000001.rec",
        "ns/agent/~/s1/main/LEASE",
        "ns/agent/~/s2/main/LEASE",
        "ns/agent/alice/s1/main/LEASE",
        "ns/agent/alice/s1/side/LEASE",
        "ns/other/bob/s9/main/LEASE",
        "ns/agent-2/LEASE",
        "ns/README",
    ]
    for key in keys:
        await s3_store.create(key, b"x")
    assert await s3_store.children("") == ["ns"]
    assert await s3_store.children("ns") == ["agent", "agent-2", "other"]
    assert await s3_store.children("ns/agent/") == ["alice", "~"]
    assert await s3_store.children("ns/agent/~") == ["s1", "s2"]
    assert await s3_store.children("ns/agent/alice/s1") == ["main", "side"]
    assert await s3_store.children("ns/agent/~/s1/main") == ["log"]
    assert await s3_store.children("ns/agent/~/s1/main/log") == []


async def test_folder_markers_are_not_objects(s3_server: str) -> None:
    """A zero-byte ``dir/`` object left by other tools is neither a key nor a child."""
    store = await make_s3_store(s3_server)
    try:
        await store.create("d/real", b"x")
        fs = await store._session()
        await fs._call_s3("put_object", Bucket=store.bucket, Key="journal/d/", Body=b"")
        await fs._call_s3("put_object", Bucket=store.bucket, Key="journal/e/", Body=b"")
        assert await store.list("") == ["d/real"]
        assert await store.children("") == ["d", "e"]
        assert await store.list("e") == []
    finally:
        await store.aclose()


# --- error mapping under injected faults ------------------------------------------


@pytest.fixture
async def proxy(s3_server: str) -> AsyncIterator[S3Proxy]:
    async with S3Proxy(s3_server) as p:
        yield p


def on(
    method: str, fault: Fault, times: int | None = None
) -> Callable[[Seen], Fault | None]:
    """A rule injecting ``fault`` into the first ``times`` requests of ``method``."""
    hits = 0

    def rule(seen: Seen) -> Fault | None:
        nonlocal hits
        if seen.method != method or (times is not None and hits >= times):
            return None
        hits += 1
        return fault

    return rule


async def faulty_store(proxy: S3Proxy, **options: object) -> S3Store:
    store = await make_s3_store(
        proxy.url, **{**NO_BOTOCORE_RETRY, **FAST_RETRY, **options}
    )
    proxy.clear()
    return store


def assert_mapped(
    exc: BaseException, expected: type[StorageError], *, transient: bool
) -> None:
    assert type(exc) is expected, repr(exc)
    assert not isinstance(exc, OSError)
    assert exc.transient is transient
    assert exc.__cause__ is not None


async def test_409_conflict_is_retried(proxy: S3Proxy) -> None:
    store = await faulty_store(proxy)
    proxy.inject(on("PUT", Fault(409, "ConditionalRequestConflict"), times=1))
    etag = await store.create("k", b"v")
    assert proxy.count("PUT") == 2
    assert await store.read("k") == (b"v", etag)
    await store.aclose()


async def test_409_conflict_persisting_is_transient(proxy: S3Proxy) -> None:
    store = await faulty_store(proxy)
    proxy.inject(on("PUT", Fault(409, "ConditionalRequestConflict")))
    with pytest.raises(StorageError) as info:
        await store.create("k", b"v")
    assert_mapped(info.value, StorageError, transient=True)
    assert "ConditionalRequestConflict" in str(info.value)
    assert proxy.count("PUT") == FAST_RETRY["retry_attempts"]
    with pytest.raises(StorageError) as info:
        await store.replace("k", b"v", if_match='"abc"')
    assert_mapped(info.value, StorageError, transient=True)
    proxy.clear()
    with pytest.raises(ObjectNotFoundError):
        await store.read("k")
    await store.aclose()


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, "SlowDown"), (503, "ServiceUnavailable"), (429, "TooManyRequests")],
)
async def test_throttling_is_retried_then_transient(
    proxy: S3Proxy, status: int, code: str
) -> None:
    store = await faulty_store(proxy)
    proxy.inject(on("PUT", Fault(status, code), times=2))
    etag = await store.create("k", b"v")
    assert proxy.count("PUT") == 3
    proxy.clear()
    proxy.inject(on("GET", Fault(status, code)))
    with pytest.raises(StorageError) as info:
        await store.read("k")
    assert_mapped(info.value, StorageError, transient=True)
    assert proxy.count("GET") == FAST_RETRY["retry_attempts"]
    proxy.clear()
    assert await store.read("k") == (b"v", etag)
    await store.aclose()


async def test_botocore_retries_5xx_on_its_own(proxy: S3Proxy) -> None:
    """With botocore's default retries, one 503 never reaches the store."""
    store = await faulty_store(proxy, config_kwargs={}, retry_attempts=1)
    proxy.inject(on("PUT", Fault(503, "SlowDown"), times=1))
    await store.create("k", b"v")
    assert proxy.count("PUT") == 2
    await store.aclose()


async def test_bare_412_is_decided_on_the_error_code(proxy: S3Proxy) -> None:
    """A 412 without a Condition element (s3fs: OSError(EINVAL)) still maps right."""
    store = await faulty_store(proxy)
    etag = await store.create("k", b"v")
    proxy.inject(on("PUT", Fault(412, "PreconditionFailed")))
    with pytest.raises(StorageError) as info:
        await store.create("k2", b"v")
    assert_mapped(info.value, ObjectExistsError, transient=False)
    with pytest.raises(StorageError) as info:
        await store.replace("k", b"w", if_match=etag)
    assert_mapped(info.value, PreconditionFailedError, transient=False)
    assert proxy.count("PUT") == 3  # one create, then each 412 once: never retried
    await store.aclose()


async def test_500_on_conditional_write_is_not_retried_by_the_store(
    proxy: S3Proxy,
) -> None:
    """An internal error may follow an applied write: writes are not retried."""
    store = await faulty_store(proxy)
    etag = await store.create("k", b"v")
    proxy.inject(on("PUT", Fault(500, "InternalError")))
    with pytest.raises(StorageError) as info:
        await store.replace("k", b"w", if_match=etag)
    assert_mapped(info.value, StorageError, transient=True)
    assert proxy.count("PUT") == 2
    proxy.clear()
    proxy.inject(on("GET", Fault(500, "InternalError"), times=1))
    assert await store.read("k") == (b"v", etag)  # reads are retried
    assert proxy.count("GET") == 2
    await store.aclose()


async def test_access_denied_is_permanent(proxy: S3Proxy) -> None:
    store = await faulty_store(proxy)
    proxy.inject(on("GET", Fault(403, "AccessDenied")))
    for call in (
        lambda: store.read("k"),
        lambda: store.list(""),
        lambda: store.children(""),
    ):
        with pytest.raises(StorageError) as info:
            await call()
        assert_mapped(info.value, StorageError, transient=False)
        assert "AccessDenied" in str(info.value)
    assert proxy.count("GET") == 3  # not retried
    await store.aclose()


async def test_missing_bucket_is_not_a_missing_key(s3_server: str) -> None:
    """NoSuchBucket must not look like an empty thread."""
    store = open_s3_store(s3_server, "no-such-bucket-here", **NO_BOTOCORE_RETRY)
    try:
        for call in (
            lambda: store.read("k"),
            lambda: store.list(""),
            lambda: store.create("k", b"x"),
        ):
            with pytest.raises(StorageError) as info:
                await call()
            assert_mapped(info.value, StorageError, transient=False)
            assert "NoSuchBucket" in str(info.value)
    finally:
        await store.aclose()


async def test_unreachable_endpoint_is_transient() -> None:
    # Bind a port, then close it: nothing listens there any more.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    store = S3Store.from_url(
        "s3://b/p",
        endpoint_url=f"http://127.0.0.1:{port}",
        **CREDENTIALS,
        **NO_BOTOCORE_RETRY,
        **FAST_RETRY,
    )
    try:
        for call in (
            lambda: store.create("k", b"x"),
            lambda: store.read("k"),
            lambda: store.list(""),
        ):
            with pytest.raises(StorageError) as info:
                await call()
            assert_mapped(info.value, StorageError, transient=True)
    finally:
        await store.aclose()


# --- lost acknowledgements -----------------------------------------------------


@pytest.mark.parametrize("lost", [1, 2])
async def test_lost_reply_on_create_resent_is_object_exists(
    proxy: S3Proxy, lost: int
) -> None:
    """The PUT lands, its reply is lost, the client resends it: ObjectExistsError.

    aiohttp resends a PUT once by itself when the server disconnects (PUT is
    idempotent in HTTP) and botocore retries connection errors after that; either
    way the resent create meets the first one's object and gets a 412. The object
    holds the first attempt's bytes, which the journal reads to recognise its own
    batch.
    """
    store = await faulty_store(proxy, config_kwargs={})
    proxy.inject(on("PUT", Fault(drop_reply=True), times=lost))
    with pytest.raises(ObjectExistsError):
        await store.create("log/00000000000000000001.rec", b"batch-1")
    puts = [s for s in proxy.seen if s.method == "PUT"]
    assert len(puts) == lost + 1
    assert all(s.headers.get("if-none-match") == "*" for s in puts)
    assert (await store.read("log/00000000000000000001.rec"))[0] == b"batch-1"
    await store.aclose()


async def test_lost_replies_exhausting_resends_are_transient(proxy: S3Proxy) -> None:
    """Every reply lost and no more resends: outcome unknown, so transient."""
    store = await faulty_store(proxy)
    # Without botocore's retries only aiohttp's single resend is left.
    proxy.inject(on("PUT", Fault(drop_reply=True), times=2))
    with pytest.raises(StorageError) as info:
        await store.create("k", b"first")
    assert_mapped(info.value, StorageError, transient=True)
    assert proxy.count("PUT") == 2
    with pytest.raises(ObjectExistsError):
        await store.create("k", b"second")
    assert (await store.read("k"))[0] == b"first"
    await store.aclose()


async def test_lost_reply_on_replace_leaves_our_bytes(proxy: S3Proxy) -> None:
    """A resent CAS meets its own write: PreconditionFailedError, our bytes stored.

    This is why the lease re-reads ``LEASE`` after a failed compare-and-swap.
    """
    store = await faulty_store(proxy, config_kwargs={})
    etag = await store.create("LEASE", b"epoch 1")
    proxy.inject(on("PUT", Fault(drop_reply=True), times=1))
    with pytest.raises(PreconditionFailedError):
        await store.replace("LEASE", b"epoch 2", if_match=etag)
    assert (await store.read("LEASE"))[0] == b"epoch 2"
    await store.aclose()


# --- sessions and event loops ---------------------------------------------------


def test_store_survives_a_change_of_event_loop(s3_server: str) -> None:
    """The CLI may run several ``asyncio.run`` calls on one store."""
    bucket = asyncio.run(make_bucket(s3_server))
    store = open_s3_store(s3_server, bucket)
    etag = asyncio.run(store.create("k", b"v"))
    assert asyncio.run(store.read("k")) == (b"v", etag)
    assert asyncio.run(store.list("")) == ["k"]

    async def read_and_close() -> tuple[bytes, str]:
        try:
            return await store.read("k")
        finally:
            await store.aclose()

    assert asyncio.run(read_and_close()) == (b"v", etag)


async def test_aclose_then_reuse(s3_store: S3Store) -> None:
    await s3_store.create("k", b"v")
    await s3_store.aclose()
    await s3_store.aclose()  # idempotent
    assert (await s3_store.read("k"))[0] == b"v"  # reopened lazily


# --- the generic fsspec store, over the same server -------------------------------


async def test_fsspec_store_reads_but_refuses_writes(
    s3_store: S3Store, s3_server: str
) -> None:
    for key in ("t/log/1.rec", "t/log/2.rec", "t/LEASE", "u/LEASE"):
        await s3_store.create(key, key.encode())
    store = FsspecStore.from_url(s3_store.url, endpoint_url=s3_server, **CREDENTIALS)
    try:
        assert store.writable is False
        assert (await store.read("t/LEASE"))[0] == b"t/LEASE"
        assert await store.list("") == [
            "t/LEASE",
            "t/log/1.rec",
            "t/log/2.rec",
            "u/LEASE",
        ]
        assert await store.list("t/log", start_after="t/log/1.rec") == ["t/log/2.rec"]
        assert await store.children("") == ["t", "u"]
        assert await store.children("t") == ["log"]
        assert await store.read_many(["t/LEASE", "nope"]) == [b"t/LEASE", None]
        with pytest.raises(ObjectNotFoundError):
            await store.read("nope")
        # Listings are not cached: a new key shows up at once.
        await s3_store.create("t/log/3.rec", b"3")
        assert await store.list("t/log/") == [
            "t/log/1.rec",
            "t/log/2.rec",
            "t/log/3.rec",
        ]
        for write in (
            lambda: store.create("t/log/4.rec", b"4"),
            lambda: store.replace("t/LEASE", b"x", if_match=None),
            lambda: store.delete("t/LEASE"),
        ):
            with pytest.raises(StorageError, match="read-only") as info:
                await write()
            assert type(info.value) is StorageError
            assert "exclusive create" in str(info.value)
        assert await s3_store.list("t/log/") == [
            "t/log/1.rec",
            "t/log/2.rec",
            "t/log/3.rec",
        ]
    finally:
        await store.aclose()


def test_a_misspelled_storage_option_is_refused_up_front():
    with pytest.raises(ValueError, match="endpont_url"):
        S3Store("bucket", endpont_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="endpont_url"):
        Journal.open("s3://bucket/prefix", endpont_url="http://127.0.0.1:1")
