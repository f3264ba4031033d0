"""Request economy of the journal on S3: what each operation sends over the wire.

A loopback proxy in front of moto records every HTTP request; each test fails if an
operation sends more (or other) requests than it should:

    append (checkpoints off, payload below the blob threshold)   1 PUT
    append of an event above the threshold                       + 1 PUT (its blob)
    lease renewal                                                1 PUT (If-Match)
    load of a thread with a checkpoint                           GET LAST_CHECKPOINT
                                                                 + GET the checkpoint
                                                                 + 1 GET per chunk
                                                                 + 1 LIST (StartAfter)
                                                                 + 1 GET per tail record
    threads()                                                    1 LIST of the index
                                                                 + 1 GET per LEASE
    threads() of a store without a complete index              delimiter LISTs only

The threads are built straight against moto; only the measured operation goes
through the proxy, on a journal (and store) that has sent nothing yet.
"""

# The fixtures imported from tests.services are parameters of the tests below.

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.codec import BLOB_THRESHOLD, decode_checkpoint
from journal.engine.log import ThreadLog
from tests.services.s3 import (  # noqa: F401
    S3Proxy,
    Seen,
    journal_options,
    make_bucket,
    s3_server,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from projections import AgentState

pytestmark = pytest.mark.s3


class Setup:
    """A bucket, journals straight to moto, and measured journals via the proxy."""

    def __init__(self, proxy: S3Proxy, endpoint: str, bucket: str) -> None:
        self.proxy = proxy
        self.endpoint = endpoint
        self.bucket = bucket
        self.url = f"s3://{bucket}/journal"
        self.opened: list[Journal] = []

    def direct(self, **kwargs) -> Journal:
        j = Journal.open(self.url, **kwargs, **journal_options(self.endpoint))
        self.opened.append(j)
        return j

    def measured(self, **kwargs) -> Journal:
        """A fresh journal through the proxy, with the proxy's record cleared."""
        self.proxy.clear()
        j = Journal.open(self.url, **kwargs, **journal_options(self.proxy.url))
        self.opened.append(j)
        return j

    def path(self, key: ThreadKey, name: str) -> str:
        """An object's path as the proxy sees it."""
        return f"/{self.bucket}/journal/{key.prefix}/{name}"


@pytest.fixture
async def setup(s3_server: str) -> AsyncIterator[Setup]:
    async with S3Proxy(s3_server) as proxy:
        s = Setup(proxy, s3_server, await make_bucket(s3_server))
        try:
            yield s
        finally:
            for j in s.opened:
                await j.aclose()


def new_key(**ids: str | None) -> ThreadKey:
    args: dict = {"agent_id": "s3-req-agent", "session_id": f"s-{uuid.uuid4().hex}"}
    args.update(ids)
    return ThreadKey(**args)


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text))


def query(seen: Seen) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(seen.query, keep_blank_values=True).items()}


def requests(proxy: S3Proxy) -> list[tuple[str, str]]:
    return [(s.method, s.path) for s in proxy.seen]


def record(version: int) -> str:
    return f"log/{version:020d}.rec"


async def test_append_is_one_put(setup: Setup) -> None:
    """Checkpoints off, payload below the blob threshold: 1 PUT, nothing else."""
    key = new_key()
    j = setup.measured(checkpoint_every=0)
    async with j.writer(key, holder="node-a") as w:
        for i in range(5):
            setup.proxy.clear()
            kwargs = {"expected_version": w.version} if i % 2 else {}
            rec = await w.append([say(f"turn {i}" * 200)], batch_id=f"b{i}", **kwargs)
            assert requests(setup.proxy) == [
                ("PUT", setup.path(key, record(rec.version)))
            ]
            (put,) = setup.proxy.seen
            assert put.headers["if-none-match"] == "*"
            assert "if-match" not in put.headers
        setup.proxy.clear()

        def summarize(state: AgentState) -> None:
            state.summary = "short"

        # A state change committed as specific events (SummarySet) is an append too.
        await w.update("summary", summarize)
        assert [m for m, _ in requests(setup.proxy)] == ["PUT"]


async def test_payload_above_the_threshold_adds_one_put(setup: Setup) -> None:
    """An event above the blob threshold: its blob, then the record; 2 PUTs."""
    key = new_key()
    j = setup.measured(checkpoint_every=0)
    async with j.writer(key, holder="node-a") as w:
        setup.proxy.clear()
        rec = await w.append([say("x" * (BLOB_THRESHOLD + 1024))], batch_id="big")
        seen = requests(setup.proxy)
        assert [m for m, _ in seen] == ["PUT", "PUT"]
        blob, rec_put = (p for _, p in seen)
        assert blob.startswith(setup.path(key, "blobs/"))
        assert rec_put == setup.path(key, record(rec.version))
        assert all(s.headers["if-none-match"] == "*" for s in setup.proxy.seen)
        # The blob is content-addressed: its name is the hash of what was stored.
        data, _ = await setup.direct().store.read(
            f"{key.prefix}/blobs/{blob.rsplit('/', 1)[1]}"
        )
        assert hashlib.sha256(data).hexdigest() == blob.rsplit("/", 1)[1]
        # Just below the threshold, the payload stays inline: 1 PUT.
        setup.proxy.clear()
        await w.append([say("y" * (BLOB_THRESHOLD - 1024))], batch_id="inline")
        assert [m for m, _ in requests(setup.proxy)] == ["PUT"]


async def test_renewal_is_one_put(setup: Setup) -> None:
    key = new_key()
    j = setup.measured(checkpoint_every=0)
    lease = setup.path(key, "LEASE")
    async with j.writer(key, holder="node-a") as w:
        for _ in range(3):
            setup.proxy.clear()
            await w.renew()
            assert requests(setup.proxy) == [("PUT", lease)]
            (put,) = setup.proxy.seen
            assert put.headers["if-match"]
            assert "if-none-match" not in put.headers


@pytest.mark.parametrize("tail", [7, 0])
async def test_load_with_a_checkpoint(setup: Setup, tail: int) -> None:
    """A load reads the hint, the checkpoint, its chunks, one listing, the tail.

    300 messages in 30 records, a checkpoint at version 31 (the fence is version 1),
    then ``tail`` more records. Chunks end at content-defined boundaries or at 256
    messages, so 300 messages make at least 2. With no tail, the one record read is
    the checkpoint's own, to check the checkpoint belongs to this log.
    """
    key = new_key()
    j = setup.direct(checkpoint_every=0)
    async with j.writer(key, holder="node-a") as w:
        for i in range(30):
            await w.append([say(f"m{i}-{k}") for k in range(10)])
        checkpoint = await w.checkpoint()
        for i in range(tail):
            await w.append([say(f"tail {i}")])
        head = w.version
    assert checkpoint == 31
    log = ThreadLog(j.store, key)
    raw, _ = await j.store.read(log.checkpoint_key(checkpoint))
    chunks = set(decode_checkpoint(raw).chunks)
    assert len(chunks) >= 2

    m = setup.measured()
    state = await m.load(key)
    assert state.version == head
    assert len(state.context) == 300 + tail
    seen = requests(setup.proxy)
    assert seen[:2] == [
        ("GET", setup.path(key, "LAST_CHECKPOINT")),
        ("GET", setup.path(key, f"checkpoints/{checkpoint:020d}.ckpt")),
    ]
    listings = [s for s in setup.proxy.seen if "list-type=2" in s.query]
    assert len(listings) == 1
    q = query(listings[0])
    assert q["prefix"] == f"journal/{key.prefix}/log/"
    assert q["start-after"] == f"journal/{key.prefix}/{record(checkpoint)}"
    gets = sorted(p for m_, p in seen[2:] if m_ == "GET" and p != listings[0].path)
    read = range(checkpoint + 1, head + 1) if tail else [checkpoint]
    assert gets == sorted(
        [setup.path(key, f"blobs/{c}") for c in chunks]
        + [setup.path(key, record(v)) for v in read]
    )
    assert len(seen) == 3 + len(chunks) + max(tail, 1)
    assert all(m_ == "GET" for m_, _ in seen)


async def test_threads_lists_with_delimiters_only(setup: Setup) -> None:
    """threads() walks the tree a level at a time; never one recursive listing."""
    made = [
        new_key(agent_id=a, user_id=u, session_id=s, thread_id=t)
        for a in ("a1", "a2")
        for u in ("alice", None)
        for s in ("s1", "s2")
        for t in ("main", "side")
        if not (a == "a2" and u is None)
    ]
    j = setup.direct(checkpoint_every=0)
    for key in made:
        async with j.writer(key):
            pass
    # Without the index's marker (a store from before it), listing walks.
    assert await j.store.delete("~threads/COMPLETE")
    # A key outside the journal's prefix is never listed.
    async with Journal.open(
        f"s3://{setup.bucket}/elsewhere", **journal_options(setup.endpoint)
    ) as other:
        await other.store.create("x/y", b"z")

    m = setup.measured()
    found = [k async for k in m.threads()]
    assert sorted(map(str, found)) == sorted(map(str, made))
    # The index's listing finds no marker first, then the walk.
    index, *lists = setup.proxy.seen
    assert query(index)["prefix"] == "journal/~threads/"
    assert all(s.method == "GET" for s in lists)
    assert all(query(s)["delimiter"] == "/" for s in lists)
    assert all(query(s)["prefix"].startswith("journal/") for s in lists)
    # One listing per directory: the namespace level, the agent level, a user
    # level per agent, a session level per user, a thread level per session.
    users = {(k.agent_id, k.user_id) for k in made}
    sessions = {(k.agent_id, k.user_id, k.session_id) for k in made}
    assert len(lists) == 1 + 1 + 2 + len(users) + len(sessions)

    # Filters skip the levels they name.
    setup.proxy.clear()
    found = [k async for k in m.threads(agent_id="a1", user_id=None)]
    assert sorted(map(str, found)) == sorted(
        str(k) for k in made if k.agent_id == "a1" and k.user_id is None
    )
    index, *lists = setup.proxy.seen
    assert query(index)["prefix"] == "journal/~threads/"
    assert all(query(s)["delimiter"] == "/" for s in lists)
    # Namespaces, the anonymous user's sessions, a thread level per session.
    assert len(lists) == 1 + 1 + 2


async def test_threads_lists_the_thread_index(setup: Setup) -> None:
    """threads() on a store with a index: one listing of it, then each LEASE."""
    made = [
        new_key(agent_id=a, user_id=u, thread_id=t)
        for a in ("a1", "a2")
        for u in ("alice", None)
        for t in ("main", "side")
    ]
    j = setup.direct(checkpoint_every=0)
    for key in made:
        async with j.writer(key):
            pass
    m = setup.measured()
    found = [k async for k in m.threads()]
    assert sorted(map(str, found)) == sorted(map(str, made))
    lists = [s for s in setup.proxy.seen if "list-type" in query(s)]
    assert len(lists) == 1
    assert query(lists[0])["prefix"] == "journal/~threads/"
    assert "delimiter" not in query(lists[0])
    gets = sorted(s.path for s in setup.proxy.seen if s not in lists)
    assert gets == sorted(setup.path(k, "LEASE") for k in made)
    assert all(s.method == "GET" for s in setup.proxy.seen)

    # Filters are applied to the entries: only the matching LEASEs are read.
    setup.proxy.clear()
    found = [k async for k in m.threads(agent_id="a1", user_id=None)]
    wanted = [k for k in made if k.agent_id == "a1" and k.user_id is None]
    assert sorted(map(str, found)) == sorted(map(str, wanted))
    leases = [s.path for s in setup.proxy.seen if s.path.endswith("/LEASE")]
    assert sorted(leases) == sorted(setup.path(k, "LEASE") for k in wanted)
