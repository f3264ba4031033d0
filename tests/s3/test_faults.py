"""Faults on the wire under the journal: lost replies, 409, 503, 412, stale writers.

A loopback proxy (``S3Proxy``) sits between the journal and moto and turns chosen
requests into faults: it answers with an S3 error without forwarding (the request
was not applied), or forwards and then drops the reply (applied, never
acknowledged). botocore's own retries are off here, so what is retried is decided
by the store (409 and throttling), by aiohttp (one resend when the connection
drops) and by the engine (transient failures of a commit), and the counts below are
exact.
"""

# The fixtures imported from tests.services are parameters of the tests below.

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING

import pytest

from journal import (
    FencedError,
    Journal,
    MessageAppended,
    Msg,
    StorageError,
    ThreadKey,
)
from journal.engine.lease import read_lease
from journal.engine.log import ThreadLog
from tests.services.s3 import (  # noqa: F401
    Fault,
    S3Proxy,
    Seen,
    journal_options,
    make_bucket,
    s3_server,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.s3

NO_BOTOCORE_RETRY = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}
FAST_RETRY = {"retry_attempts": 3, "retry_base_delay": 0.001, "retry_max_delay": 0.01}


class Setup:
    """A bucket reached through the proxy, and journals on it."""

    def __init__(self, proxy: S3Proxy, endpoint: str, bucket: str) -> None:
        self.proxy = proxy
        self.endpoint = endpoint
        self.url = f"s3://{bucket}/journal"
        self.opened: list[Journal] = []

    def journal(self, *, direct: bool = False, clock=time.time) -> Journal:
        """A journal through the proxy (or straight to moto with ``direct``)."""
        if direct:
            options = journal_options(self.endpoint)
        else:
            options = journal_options(self.proxy.url, **NO_BOTOCORE_RETRY, **FAST_RETRY)
        store = Journal.open(self.url, **options).store
        j = Journal(store, checkpoint_every=0, clock=clock)
        self.opened.append(j)
        return j


@pytest.fixture
async def setup(s3_server: str) -> AsyncIterator[Setup]:
    async with S3Proxy(s3_server) as proxy:
        s = Setup(proxy, s3_server, await make_bucket(s3_server))
        try:
            yield s
        finally:
            for j in s.opened:
                await j.aclose()


def new_key() -> ThreadKey:
    return ThreadKey("s3-fault-agent", f"s-{uuid.uuid4().hex[:12]}")


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text))


def to_key(j: Journal, key: ThreadKey, name: str) -> str:
    """The path of a thread's object as the proxy sees it (``/bucket/journal/...``)."""
    return f"/{j.store.bucket}/journal/{key.prefix}/{name}"  # type: ignore[attr-defined]


def record_path(j: Journal, key: ThreadKey, version: int) -> str:
    return to_key(j, key, f"log/{version:020d}.rec")


def puts_to(
    path: str, fault: Fault, times: int | None = None
) -> Callable[[Seen], Fault | None]:
    """A rule injecting ``fault`` into the first ``times`` PUTs of ``path``."""
    hits = 0

    def rule(seen: Seen) -> Fault | None:
        nonlocal hits
        if seen.method != "PUT" or seen.path != path:
            return None
        if times is not None and hits >= times:
            return None
        hits += 1
        return fault

    return rule


def sent(proxy: S3Proxy, method: str, path: str) -> int:
    return sum(1 for s in proxy.seen if s.method == method and s.path == path)


async def batches(j: Journal, key: ThreadKey) -> list[str]:
    return [r.batch_id async for r in j.records(key)]


# --- a lost acknowledgement -------------------------------------------------------


@pytest.mark.parametrize("lost", [1, 3, None], ids=["once", "three-times", "always"])
async def test_lost_acknowledgement_of_an_append(setup: Setup, lost: int | None):
    """The record PUT lands but its reply is lost; the batch lands exactly once.

    Once: aiohttp resends the PUT, which meets the record (412), and the engine
    reads the slot and finds its own batch. Three times: the engine's own retry of
    the transient failure gets there. Always: every reply is lost, so the append
    cannot know and raises a transient ``StorageError``; the caller's retry with
    the same ``batch_id`` then finds the record and returns it without writing.
    """
    proxy = setup.proxy
    j = setup.journal()
    key = new_key()
    async with j.writer(key, holder="node-a") as w:
        await w.append([say("before")], batch_id="before")
        version = w.version + 1
        path = record_path(j, key, version)
        proxy.clear()
        proxy.inject(puts_to(path, Fault(drop_reply=True), lost))
        events = [say("the turn")]
        first = None
        if lost is None:
            with pytest.raises(StorageError) as info:
                await w.append(events, batch_id="turn")
            assert info.value.transient
        else:
            first = await w.append(events, batch_id="turn")
            # It found its own record in the slot: a GET of that slot.
            assert sent(proxy, "GET", path) == 1
        assert sent(proxy, "PUT", path) > (lost or 1)
        proxy.clear()
        again = await w.append(events, batch_id="turn")
        assert again.version == version
        if first is not None:
            assert (first.version, first.hash) == (again.version, again.hash)
            # Already acknowledged: the record is read to compare its content, and
            # nothing is written.
            assert [(s.method, s.path) for s in proxy.seen] == [("GET", path)]
        else:
            # One PUT meets the record (412), one GET reads it: ours.
            assert sent(proxy, "PUT", path) == 1
            assert sent(proxy, "GET", path) == 1
        after = await w.append([say("after")], batch_id="after")
        assert after.version == version + 1
    assert (await batches(setup.journal(direct=True), key))[1:] == [
        "before",
        "turn",
        "after",
    ]
    report = await setup.journal(direct=True).verify(key)
    assert report.ok, [str(p) for p in report.problems]


# --- 409 and 503 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [(409, "ConditionalRequestConflict"), (503, "SlowDown")],
)
@pytest.mark.parametrize("times", [2, None], ids=["twice", "always"])
async def test_conflict_and_throttling_on_an_append(
    setup: Setup, status: int, code: str, times: int | None
):
    """409 and 503 were not applied: retried, else a transient error; no duplicate."""
    proxy = setup.proxy
    j = setup.journal()
    key = new_key()
    async with j.writer(key, holder="node-a") as w:
        version = w.version + 1
        path = record_path(j, key, version)
        proxy.clear()
        proxy.inject(puts_to(path, Fault(status, code), times))
        events = [say("the turn")]
        if times is not None:
            rec = await w.append(events, batch_id="turn")
            assert rec.version == version
            assert sent(proxy, "PUT", path) == times + 1
        else:
            with pytest.raises(StorageError) as info:
                await w.append(events, batch_id="turn")
            assert info.value.transient
            assert code in str(info.value)
            # The store's 3 attempts, for each of the engine's 5.
            assert sent(proxy, "PUT", path) == 15
            proxy.clear()
            rec = await w.append(events, batch_id="turn")
            assert rec.version == version
            assert sent(proxy, "PUT", path) == 1
        await w.append([say("after")], batch_id="after")
    j2 = setup.journal(direct=True)
    assert (await batches(j2, key))[1:] == ["turn", "after"]
    assert (await j2.verify(key)).ok


# --- lease renewal ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["lost-reply", "refused"])
async def test_renewal_refused_while_the_lease_is_still_ours(setup: Setup, how: str):
    """A renewal PUT answered 412 although LEASE still holds our epoch and holder.

    ``lost-reply``: the renewal landed, its reply was lost, and the resent PUT's
    If-Match no longer matches (the ETag changed with our own write). ``refused``:
    a bare 412 injected without forwarding. Either way the writer re-reads LEASE,
    sees itself, renews with the current ETag and goes on writing.
    """
    proxy = setup.proxy
    j = setup.journal()
    key = new_key()
    lease_path = to_key(j, key, "LEASE")
    async with j.writer(key, holder="node-a") as w:
        before, _ = await read_lease(j.store, ThreadLog(j.store, key).lease_key)
        assert before is not None
        proxy.clear()
        fault = (
            Fault(drop_reply=True)
            if how == "lost-reply"
            else Fault(412, "PreconditionFailed")
        )
        proxy.inject(puts_to(lease_path, fault, 1))
        await w.renew()
        assert not w.fenced
        methods = [s.method for s in proxy.seen if s.path == lease_path]
        # The refused PUT (sent twice when its reply was lost), the HEAD that
        # tells a stale ETag from a missing key (Ceph RGW answers 412 for both),
        # the re-read, the renewal with the fresh ETag.
        expected = ["PUT", "PUT"] if how == "lost-reply" else ["PUT"]
        assert methods == [*expected, "HEAD", "GET", "PUT"]
        after, _ = await read_lease(j.store, ThreadLog(j.store, key).lease_key)
        assert after is not None
        assert (after.holder, after.epoch) == ("node-a", w.epoch)
        assert after.expires_at >= before.expires_at
        # The held ETag is current again: the next renewal is one PUT.
        proxy.clear()
        await w.renew()
        assert [s.method for s in proxy.seen] == ["PUT"]
        rec = await w.append([say("still writing")])
    assert (await batches(setup.journal(direct=True), key))[-1] == rec.batch_id


async def test_writer_whose_renewals_are_throttled_stops_appending(setup: Setup):
    """Every renewal answered 503: the writer refuses appends before expiry."""
    proxy = setup.proxy
    j = setup.journal()
    key = new_key()
    ttl = 1.0
    w = await j.acquire(key, holder="node-a", lease_ttl=ttl)
    # The lease was taken before acquire returned: a whole TTL after this, it
    # has expired whatever the acquire cost (a slow one on a loaded machine too).
    acquired = time.monotonic()
    try:
        lease_path = to_key(j, key, "LEASE")
        proxy.inject(puts_to(lease_path, Fault(503, "SlowDown")))
        # The acquire's own lease write must not count as a renewal tried.
        proxy.seen.clear()
        # Past the whole TTL since the acquire, a renewal having been tried and
        # none having landed.
        deadline = time.monotonic() + 60
        while time.monotonic() < acquired + ttl or not sent(proxy, "PUT", lease_path):
            assert time.monotonic() < deadline, "no renewal was tried"
            await asyncio.sleep(0.05)
        proxy.seen.clear()
        with pytest.raises(FencedError):
            await w.append([say("too late")])
        # Refused before anything was sent.
        assert not any(s.method == "PUT" and "/log/" in s.path for s in proxy.seen)
    finally:
        await w.close()
    assert await setup.journal(direct=True).head(key) == 1


# --- a stale writer ---------------------------------------------------------------


async def test_stale_writer_is_fenced_through_the_log(setup: Setup):
    """After a takeover, the old writer's create collides, it reads, it stops.

    The new writer's clock runs ahead (so the old lease looks expired to it) while
    the old writer still believes its lease valid: only the log can stop it.
    """
    proxy = setup.proxy
    old_j = setup.journal()
    key = new_key()
    old = await old_j.acquire(key, holder="old")
    try:
        await old.append([say("old 1")], batch_id="old-1")
        new_j = setup.journal(direct=True, clock=lambda: time.time() + 120.0)
        async with new_j.writer(key, holder="new") as new:
            assert new.epoch == old.epoch + 1
            await new.append([say("new 1")], batch_id="new-1")
            slot = old.version + 1
            path = record_path(old_j, key, slot)
            proxy.clear()
            with pytest.raises(FencedError) as info:
                await old.append([say("old 2")], batch_id="old-2")
            assert info.value.current_epoch == new.epoch
            assert [(s.method, s.path) for s in proxy.seen] == [
                ("PUT", path),
                ("GET", path),
            ]
            proxy.clear()
            with pytest.raises(FencedError):
                await old.append([say("old 3")], batch_id="old-3")
            assert proxy.seen == []
            new_epoch = new.epoch
    finally:
        proxy.clear()
        await old.close()
    # A fenced writer's close leaves LEASE alone.
    assert proxy.seen == []
    j = setup.journal(direct=True)
    records = [r async for r in j.records(key)]
    assert [(r.writer, r.epoch) for r in records] == [
        ("old", old.epoch),
        ("old", old.epoch),
        ("new", new_epoch),
        ("new", new_epoch),
    ]
    assert [r.batch_id for r in records][1::2] == ["old-1", "new-1"]
    lease, _ = await read_lease(j.store, ThreadLog(j.store, key).lease_key)
    assert lease is not None
    assert (lease.holder, lease.epoch) == ("new", new_epoch)
    assert (await j.verify(key)).ok
