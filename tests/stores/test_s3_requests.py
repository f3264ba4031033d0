"""Request economy of S3Store: what each primitive sends over the wire.

A loopback proxy in front of moto records every HTTP request. Each test measures a
fresh store, so opening the session is included: it must send nothing.

    create        1 PUT  (If-None-Match: *)
    replace       1 PUT  (If-Match: <unquoted etag>, or none when unconditional);
                  + 1 HEAD when it fails with 412 (a stale etag or, on Ceph RGW,
                  a missing key)
    read          1 GET
    read_many     1 GET per key
    list          1 GET (ListObjectsV2) per 1,000 keys, StartAfter on the first
    children      1 GET (ListObjectsV2 with delimiter) per 1,000 names
    delete        1 HEAD + 1 DELETE (1 HEAD when the key is missing)
"""

# The fixtures imported from tests.services are parameters of the tests below.

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qs

import pytest

from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from tests.services.s3 import (  # noqa: F401
    BIG_DIRS,
    BIG_PREFIX,
    Fault,
    S3Proxy,
    Seen,
    big_key,
    make_bucket,
    open_s3_store,
    s3_big_bucket,
    s3_server,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from stores.s3 import S3Store

pytestmark = pytest.mark.s3


@pytest.fixture
async def proxy(s3_server: str) -> AsyncIterator[S3Proxy]:
    async with S3Proxy(s3_server) as p:
        yield p


@pytest.fixture
async def bucket(proxy: S3Proxy) -> str:
    return await make_bucket(proxy.url)


async def measured(proxy: S3Proxy, bucket: str) -> S3Store:
    """A store that has sent nothing yet, with the proxy's record cleared."""
    proxy.clear()
    return open_s3_store(proxy.url, bucket)


def summary(seen: list[Seen]) -> list[str]:
    return [s.method for s in seen]


def query(seen: Seen) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(seen.query, keep_blank_values=True).items()}


async def test_create_is_one_put(proxy: S3Proxy, bucket: str) -> None:
    store = await measured(proxy, bucket)
    await store.create("log/00000000000000000001.rec", b"record")
    assert summary(proxy.seen) == ["PUT"]
    (put,) = proxy.seen
    assert put.headers["if-none-match"] == "*"
    assert "if-match" not in put.headers
    assert put.path == f"/{bucket}/journal/log/00000000000000000001.rec"
    await store.aclose()


async def test_losing_create_is_one_put(proxy: S3Proxy, bucket: str) -> None:
    store = await measured(proxy, bucket)
    await store.create("k", b"first")
    proxy.clear()
    with pytest.raises(ObjectExistsError):
        await store.create("k", b"second")
    assert summary(proxy.seen) == ["PUT"]
    await store.aclose()


async def test_replace_is_one_put(proxy: S3Proxy, bucket: str) -> None:
    writer = await measured(proxy, bucket)
    etag = await writer.create("LEASE", b"epoch 1")
    await writer.aclose()

    store = await measured(proxy, bucket)
    new = await store.replace("LEASE", b"epoch 2", if_match=etag)
    assert summary(proxy.seen) == ["PUT"]
    assert etag.startswith('"')  # S3 quotes its etags ...
    assert proxy.seen[0].headers["if-match"] == etag.strip('"')  # ... RGW matches bare
    assert "if-none-match" not in proxy.seen[0].headers

    proxy.clear()
    await store.replace("LAST_CHECKPOINT", b"hint", if_match=None)
    assert summary(proxy.seen) == ["PUT"]
    assert "if-match" not in proxy.seen[0].headers

    proxy.clear()
    with pytest.raises(PreconditionFailedError):
        await store.replace("LEASE", b"epoch 3", if_match=etag)
    assert summary(proxy.seen) == ["PUT", "HEAD"]
    assert new != etag
    await store.aclose()


def rgw_if_match(seen: Seen) -> Fault | None:
    """Ceph RGW's If-Match: a quoted etag never matches (412)."""
    if seen.method == "PUT" and seen.headers.get("if-match", "").startswith('"'):
        return Fault(412, "PreconditionFailed")
    return None


def rgw_missing_key(seen: Seen) -> Fault | None:
    """Ceph RGW's If-Match on a key that does not exist: 412, not 404."""
    if seen.method == "PUT" and "if-match" in seen.headers:
        return Fault(412, "PreconditionFailed")
    return None


async def test_compare_and_swap_passes_a_strict_if_match(
    proxy: S3Proxy, bucket: str
) -> None:
    store = await measured(proxy, bucket)
    etag = await store.create("LEASE", b"epoch 1")
    proxy.inject(rgw_if_match)
    new = await store.replace("LEASE", b"epoch 2", if_match=etag)
    assert await store.read("LEASE") == (b"epoch 2", new)
    # An etag handed in bare (as some callers store it) goes out the same way.
    newer = await store.replace("LEASE", b"epoch 3", if_match=new.strip('"'))
    assert await store.read("LEASE") == (b"epoch 3", newer)
    await store.aclose()


async def test_412_for_a_missing_key_is_not_found(proxy: S3Proxy, bucket: str) -> None:
    store = await measured(proxy, bucket)
    proxy.inject(rgw_missing_key)
    with pytest.raises(ObjectNotFoundError):
        await store.replace("LEASE", b"epoch 1", if_match='"0123abcd"')
    assert summary(proxy.seen) == ["PUT", "HEAD"]
    await store.aclose()


async def test_412_for_a_present_key_stays_a_failed_precondition(
    proxy: S3Proxy, bucket: str
) -> None:
    store = await measured(proxy, bucket)
    await store.create("LEASE", b"epoch 1")
    proxy.clear()
    proxy.inject(rgw_missing_key)
    with pytest.raises(PreconditionFailedError):
        await store.replace("LEASE", b"epoch 2", if_match='"0123abcd"')
    assert summary(proxy.seen) == ["PUT", "HEAD"]
    assert (await store.read("LEASE"))[0] == b"epoch 1"
    await store.aclose()


async def test_read_is_one_get(proxy: S3Proxy, bucket: str) -> None:
    writer = await measured(proxy, bucket)
    await writer.create("k", b"v" * 100_000)
    await writer.aclose()

    store = await measured(proxy, bucket)
    data, _ = await store.read("k")
    assert len(data) == 100_000
    assert summary(proxy.seen) == ["GET"]
    assert proxy.seen[0].path == f"/{bucket}/journal/k"

    proxy.clear()
    with pytest.raises(ObjectNotFoundError):
        await store.read("missing")
    assert summary(proxy.seen) == ["GET"]
    await store.aclose()


async def test_read_many_is_one_get_per_key(proxy: S3Proxy, bucket: str) -> None:
    writer = await measured(proxy, bucket)
    for i in range(5):
        await writer.create(f"k{i}", b"v")
    await writer.aclose()

    store = await measured(proxy, bucket)
    got = await store.read_many([f"k{i}" for i in range(6)])
    assert got == [b"v"] * 5 + [None]
    assert summary(proxy.seen) == ["GET"] * 6
    await store.aclose()


async def test_list_is_one_request_below_a_page(proxy: S3Proxy, bucket: str) -> None:
    writer = await measured(proxy, bucket)
    for i in range(1, 31):
        await writer.create(f"t/log/{i:020d}.rec", b"r")
    await writer.aclose()

    store = await measured(proxy, bucket)
    assert len(await store.list("t/log/")) == 30
    assert summary(proxy.seen) == ["GET"]
    q = query(proxy.seen[0])
    assert q["list-type"] == "2"
    assert q["prefix"] == "journal/t/log/"
    assert "start-after" not in q

    proxy.clear()
    tail = await store.list("t/log/", start_after=f"t/log/{27:020d}.rec")
    assert tail == [f"t/log/{i:020d}.rec" for i in (28, 29, 30)]
    assert summary(proxy.seen) == ["GET"]
    assert query(proxy.seen[0])["start-after"] == f"journal/t/log/{27:020d}.rec"
    await store.aclose()


async def test_list_is_one_request_per_thousand_keys(
    proxy: S3Proxy, s3_big_bucket: str
) -> None:
    store = await measured(proxy, s3_big_bucket)
    assert len(await store.list("p/")) == BIG_DIRS
    assert summary(proxy.seen) == ["GET", "GET"]
    first, second = (query(s) for s in proxy.seen)
    assert first["max-keys"] == "1000"
    assert "continuation-token" in second
    assert "start-after" not in second

    # Starting near the end reads only the keys after the start.
    proxy.clear()
    assert len(await store.list("p/", start_after=big_key(1040))) == 9
    assert summary(proxy.seen) == ["GET"]
    assert query(proxy.seen[0])["start-after"] == f"{BIG_PREFIX}/{big_key(1040)}"
    await store.aclose()


async def test_children_list_one_level(proxy: S3Proxy, s3_big_bucket: str) -> None:
    """children() asks for one level with a delimiter; it never lists the bucket."""
    store = await measured(proxy, s3_big_bucket)
    assert await store.children("") == ["p"]
    assert summary(proxy.seen) == ["GET"]
    q = query(proxy.seen[0])
    assert (q["prefix"], q["delimiter"]) == (f"{BIG_PREFIX}/", "/")

    proxy.clear()
    assert len(await store.children("p")) == BIG_DIRS
    assert all(query(s)["delimiter"] == "/" for s in proxy.seen)
    # Moto pages common prefixes 1,000 at a time, like S3.
    assert summary(proxy.seen) == ["GET", "GET"]
    await store.aclose()


async def test_delete_is_head_then_delete(proxy: S3Proxy, bucket: str) -> None:
    store = await measured(proxy, bucket)
    await store.create("k", b"v")
    proxy.clear()
    assert await store.delete("k") is True
    assert summary(proxy.seen) == ["HEAD", "DELETE"]
    proxy.clear()
    assert await store.delete("k") is False
    assert summary(proxy.seen) == ["HEAD"]
    await store.aclose()
