"""The web UI's HTTP side without a browser: documents, access checks, live updates.

The server runs in the test's loop (aiohttp's test server on a free loopback
port) over a real local journal holding the demo's incident.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from journal import Journal, MessageAppended, Msg, RunStarted, ThreadKey
from journal.cli import main
from journal.web.attention import AttentionCache
from journal.web.command import MISSING_EXTRA, access_for
from journal.web.run_cache import RunCache
from journal.web.runs import arrange, pruned
from journal.web.security import COOKIE_NAME, AccessPolicy, is_loopback
from journal.web.server import UiConfig, create_app
from journal.web.views import MAX_PAGE, PAGE, thread_params, timeline_view
from tests.web.incident import (
    HOSTILE_KEY,
    INCIDENT_CALL,
    INCIDENT_RUN,
    LONG_RUNS,
    XSS_TEXT,
    build_hostile,
    build_incident,
    build_long,
    long_run,
)

REPO = Path(__file__).resolve().parents[2]
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 (only a policy's input: nothing binds to it)


@pytest.fixture(scope="module")
def incident_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("web") / "journal")

    async def build():
        incident = await build_incident(root)
        await build_hostile(root)
        return incident

    return root, asyncio.run(build())


async def _client(root: str, policy: AccessPolicy | None = None, **config):
    journal = Journal.open(root)
    app = create_app(
        UiConfig(journal, root, policy or AccessPolicy("127.0.0.1"), **config)
    )
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client, journal


@contextlib.asynccontextmanager
async def _serving(root: str):
    client, journal = await _client(root)
    try:
        yield client
    finally:
        await client.close()
        await journal.aclose()


@pytest.fixture
async def client(incident_root):
    async with _serving(incident_root[0]) as served:
        yield served


async def _get(client, path, **params):
    reply = await client.get(path, params=params)
    return reply.status, await reply.json()


# --- documents ----------------------------------------------------------------------


async def test_threads_carry_attention_badges_and_filter_by_substring(client):
    status, doc = await _get(client, "/api/threads")
    assert status == 200
    by_user = {t["user_id"]: t for t in doc["threads"]}
    alice = by_user["alice"]["attention"]
    assert alice["interrupted_runs"] == [INCIDENT_RUN]
    assert alice["uncertain_calls"] == [INCIDENT_CALL]
    assert alice["problems"] == []
    assert alice["needed"] is True
    assert by_user["bob"]["attention"]["needed"] is False

    _, doc = await _get(client, "/api/threads", user="ALI")
    assert [t["user_id"] for t in doc["threads"]] == ["alice"]
    _, doc = await _get(client, "/api/threads", attention="1")
    assert [t["user_id"] for t in doc["threads"]] == ["alice"]
    _, doc = await _get(client, "/api/threads", agent="assist", session="incident")
    assert sorted(t["user_id"] for t in doc["threads"]) == ["alice", "bob"]
    _, doc = await _get(client, "/api/threads", session="no-such-session")
    assert doc["count"] == 0


async def test_the_timeline_groups_records_by_run_with_call_status(
    client, incident_root
):
    _, incident = incident_root
    status, doc = await _get(client, "/api/timeline", **thread_params(incident.key))
    assert status == 200
    runs = {r["run_id"]: r for r in doc["runs"]}
    run = runs[INCIDENT_RUN]
    assert run["status"] == "interrupted"
    assert run["started_at"] == incident.run_started_at
    (call,) = run["tool_calls"]
    assert (call["call_id"], call["status"]) == (INCIDENT_CALL, "uncertain")
    assert runs["alice-1"]["tool_calls"][0]["status"] == "completed"
    # Every record appears once, in order; the recovery's fence record (which
    # interrupts the run) is filed under the run it ends.
    versions = [r["version"] for s in doc["segments"] for r in s["records"]]
    assert versions == list(range(1, incident.head + 1))
    fence = next(
        s
        for s in doc["segments"]
        for r in s["records"]
        if r["version"] == incident.head
    )
    assert fence["run_id"] == INCIDENT_RUN
    event = fence["records"][-1]["events"][-1]
    assert event["type"] == "RunInterrupted"
    assert "by recovery" in event["summary"]


@pytest.fixture(scope="module")
def long_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("web-long") / "journal")
    return root, asyncio.run(build_long(root))


@pytest.fixture
async def long_client(long_root):
    async with _serving(long_root[0]) as served:
        yield served


def _versions(doc) -> list[int]:
    return [r["version"] for s in doc["segments"] for r in s["records"]]


def _run_ids(doc) -> list[str]:
    return [r["run_id"] for r in doc["runs"]]


async def test_a_long_timeline_comes_a_page_at_a_time(long_client, long_root):
    _, key = long_root
    head = 2 * LONG_RUNS + 1
    status, doc = await _get(long_client, "/api/timeline", **thread_params(key))
    assert status == 200
    first = head - PAGE + 1
    assert doc["head"] == head
    assert doc["window"] == {
        "first": first,
        "last": head,
        "limit": PAGE,
        "earlier": True,
        "later": False,
    }
    assert _versions(doc) == list(range(first, head + 1))
    # The runs of the page's records, not the thread's other 30.
    assert doc["runs_total"] == LONG_RUNS
    assert _run_ids(doc) == [long_run(i) for i in range((first - 2) // 2, LONG_RUNS)]

    # The page before v100, of 25: it opens with the result of a call requested
    # on the page before, which still goes with the call's run.
    status, doc = await _get(
        long_client, "/api/timeline", **thread_params(key), before="100", limit="25"
    )
    assert status == 200
    assert _versions(doc) == list(range(75, 100))
    opening = doc["segments"][0]
    assert opening["run_id"] == long_run(36)
    assert [r["version"] for r in opening["records"]] == [75]
    assert _run_ids(doc) == [long_run(i) for i in range(36, 49)]
    (call,) = doc["runs"][0]["tool_calls"]
    assert (call["call_id"], call["status"], call["requested_at"]) == (
        "call-36",
        "completed",
        74,
    )
    assert (doc["window"]["earlier"], doc["window"]["later"]) == (True, True)


async def test_a_selected_run_brings_its_records_and_stays_listed(
    long_client, long_root
):
    _, key = long_root
    params = thread_params(key)
    # Without `before`, the page ends with the selected run's last record.
    status, doc = await _get(
        long_client, "/api/timeline", **params, run=long_run(10), limit="4"
    )
    assert status == 200
    assert _versions(doc) == [20, 21, 22, 23]
    assert _run_ids(doc) == [long_run(9), long_run(10)]
    # Paging away keeps the selected run among the runs, for its panel.
    status, doc = await _get(
        long_client,
        "/api/timeline",
        **params,
        run=long_run(10),
        before="100000",
        limit="4",
    )
    assert _versions(doc) == [258, 259, 260, 261]
    assert _run_ids(doc) == [long_run(10), long_run(128), long_run(129)]
    # A run the thread does not have: the newest page (the page says it is not there).
    status, doc = await _get(
        long_client, "/api/timeline", **params, run="no-such-run", limit="3"
    )
    assert status == 200
    assert _versions(doc) == [259, 260, 261]
    # Nothing before v1: an empty page that says what lies after it.
    status, doc = await _get(long_client, "/api/timeline", **params, before="1")
    assert status == 200
    assert doc["segments"] == []
    assert (doc["window"]["earlier"], doc["window"]["later"]) == (False, True)


async def test_a_long_diff_holds_the_last_page_of_its_records(long_client, long_root):
    _, key = long_root
    head = 2 * LONG_RUNS + 1
    params = thread_params(key)
    status, doc = await _get(long_client, "/api/diff", **params, **{"from": "0"})
    assert status == 200
    assert doc["records_total"] == head
    assert [r["version"] for r in doc["records"]] == list(
        range(head - PAGE + 1, head + 1)
    )
    # The messages added: their last page too, and how many there are.
    assert doc["added_total"] == 2 * LONG_RUNS
    assert [m["summary"] for m in doc["added"][-2:]] == [
        f"question {LONG_RUNS - 1}",
        f"answer {LONG_RUNS - 1}",
    ]
    assert len(doc["added"]) == PAGE
    status, doc = await _get(long_client, "/api/diff", **params, **{"from": "250"})
    assert doc["records_total"] == head - 250
    assert [r["version"] for r in doc["records"]] == list(range(251, head + 1))


async def test_a_long_context_comes_as_its_last_page_unless_all_is_asked(
    long_client, long_root
):
    _, key = long_root
    params = thread_params(key)
    status, doc = await _get(long_client, "/api/state", **params)
    assert status == 200
    assert doc["messages_total"] == 2 * LONG_RUNS
    assert len(doc["messages"]) == PAGE
    assert doc["messages"][-1]["summary"] == f"answer {LONG_RUNS - 1}"
    # The state's JSON holds the same messages as the list, in full.
    context = doc["state"]["context"]
    assert [m["id"] for m in context] == [m["id"] for m in doc["messages"]]
    status, doc = await _get(long_client, "/api/state", **params, messages="all")
    assert status == 200
    assert len(doc["messages"]) == len(doc["state"]["context"]) == 2 * LONG_RUNS
    # A short context is whole either way.
    status, doc = await _get(long_client, "/api/state", **params, at="11")
    assert doc["messages_total"] == len(doc["messages"]) == 10
    status, doc = await _get(long_client, "/api/state", **params, messages="some")
    assert status == 400
    assert "messages must be 'all' or left out, not 'some'" in doc["error"]


def _count_full_reads(journal: Journal, key: ThreadKey) -> list[int]:
    """Wrap ``journal.records``: the list grows by one at each read of ``key`` from
    its first record."""
    reads: list[int] = []
    records = journal.records

    def counted(k, start=1, stop=None):
        if k == key and start <= 1:
            reads.append(start)
        return records(k, start, stop)

    journal.records = counted  # type: ignore[method-assign]
    return reads


async def test_pages_at_one_head_read_only_their_window(tmp_path):
    root = str(tmp_path / "journal")
    key = await build_long(root)
    journal = Journal.open(root)
    reads = _count_full_reads(journal, key)
    app = create_app(UiConfig(journal, root, AccessPolicy("127.0.0.1")))
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        params = thread_params(key)
        status, newest = await _get(client, "/api/timeline", **params)
        assert status == 200
        # One read for the runs, which the badges use too (verify reads apart).
        after_first = len(reads)
        assert after_first == 1
        pages = ({"before": "100"}, {"run": long_run(30)}, {"before": "60"})
        for query in pages:
            status, doc = await _get(
                client, "/api/timeline", **params, **query, limit="25"
            )
            assert status == 200
        assert len(reads) == after_first
        # The same page again is the same document.
        _, again = await _get(client, "/api/timeline", **params)
        assert again == newest
        # The head moves: the runs are read again, the new run among them.
        async with journal.writer(key, holder="another") as w:
            await w.append([RunStarted("late")], run_id="late")
        status, doc = await _get(client, "/api/timeline", **params)
        assert len(reads) > after_first
        assert doc["runs"][-1]["run_id"] == "late"
        assert doc["runs"][-1]["status"] == "unfinished"
    finally:
        await client.close()
        await journal.aclose()


async def test_a_kept_run_tree_gives_the_pages_a_fresh_read_gives(long_root):
    root, key = long_root
    async with Journal.open(root) as journal:
        cache, kept = AttentionCache(), RunCache()
        for query in (
            {},
            {"before": 100, "limit": 25},
            {"before": 76, "limit": 1},  # a result whose request is on the page before
            {"run": long_run(10), "limit": 4},
            {"before": 1},
        ):
            fresh = await timeline_view(journal, root, key, cache, **query)
            cached = await timeline_view(
                journal, root, key, cache, **query, run_cache=kept
            )
            assert cached == fresh, query


async def test_the_run_cache_keeps_the_threads_shown_last():
    key_a, key_b = ThreadKey("bot", "a"), ThreadKey("bot", "b")
    async with Journal.open("memory://web-run-cache") as journal:
        for key in (key_a, key_b):
            async with journal.writer(key) as w:
                await w.append([RunStarted("r")], run_id="r")
        reads_a = _count_full_reads(journal, key_a)
        cache = RunCache(size=1)
        first = await cache.get(journal, key_a, 2, ())
        assert await cache.get(journal, key_a, 2, ()) is first
        assert len(reads_a) == 1
        await cache.get(journal, key_b, 2, ())  # pushes a out
        assert await cache.get(journal, key_a, 2, ()) is not first
        assert len(reads_a) == 2


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            {"limit": "0"},
            f"limit must be a number of records from 1 to {MAX_PAGE}, not '0'",
        ),
        ({"limit": str(MAX_PAGE + 1)}, "limit must be a number of records"),
        ({"limit": "ten"}, "not 'ten'"),
        ({"limit": "-5"}, "not '-5'"),
        ({"before": "x"}, "before must be a version number"),
        ({"before": "0"}, "before must be a version number from 1, not 0"),
    ],
)
async def test_a_bad_page_is_refused_naming_the_parameter(
    long_client, long_root, query, message
):
    _, key = long_root
    status, doc = await _get(
        long_client, "/api/timeline", **thread_params(key), **query
    )
    assert status == 400
    assert message in doc["error"]


async def test_state_before_the_run_diff_and_verify(client, incident_root):
    _, incident = incident_root
    params = thread_params(incident.key)
    before = incident.run_started_at - 1
    status, doc = await _get(client, "/api/state", **params, at=str(before))
    assert status == 200
    assert doc["version"] == before
    assert doc["state"]["active_run_id"] is None
    assert doc["state"]["tool_context"]["pending_calls"] == {}
    status, doc = await _get(
        client, "/api/diff", **params, **{"from": str(before), "to": str(incident.head)}
    )
    assert status == 200
    assert doc["added"][0]["summary"] == "Email Bob the forecast."
    assert doc["records"][0]["version"] == incident.run_started_at
    fields = {c["field"] for c in doc["changes"]}
    assert "shutdown_interrupted" in fields
    status, doc = await _get(client, "/api/verify", **params)
    assert status == 200
    assert doc["ok"] is True
    assert doc["records"] == incident.head


async def test_hostile_content_is_served_as_json_data(client):
    status, doc = await _get(client, "/api/timeline", **thread_params(HOSTILE_KEY))
    assert status == 200
    assert doc["thread"]["session_id"] == HOSTILE_KEY.session_id
    summaries = [
        e["summary"] for s in doc["segments"] for r in s["records"] for e in r["events"]
    ]
    assert any(XSS_TEXT in s for s in summaries)


async def test_bad_requests_say_what_was_wrong(client, incident_root):
    _, incident = incident_root
    params = thread_params(incident.key)
    status, doc = await _get(client, "/api/state", **params, at="x")
    assert status == 400
    assert "at must be a version number" in doc["error"]
    status, doc = await _get(client, "/api/state", **params, at="999")
    assert status == 404
    assert "has no version 999" in doc["error"]
    status, doc = await _get(client, "/api/timeline", agent_id="nobody", session_id="s")
    assert status == 404
    assert "does not exist" in doc["error"]
    status, doc = await _get(client, "/api/timeline", session_id="s")
    assert status == 400
    assert "agent_id" in doc["error"]
    status, doc = await _get(client, "/api/diff", **params, **{"from": "5", "to": "3"})
    assert status == 400


# --- read-only, headers, access -----------------------------------------------------


async def test_only_get_routes_exist_and_writes_are_refused(client):
    methods = {route.method for route in client.server.app.router.routes()}
    assert methods <= {"GET", "HEAD"}
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        reply = await client.request(method, "/api/threads")
        assert reply.status == 405


async def test_the_page_runs_its_own_script_only(client):
    reply = await client.get("/")
    assert reply.status == 200
    csp = reply.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "default-src 'none'" in csp
    assert "unsafe-inline" not in csp
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert (await client.get("/static/app.js")).status == 200
    assert (await client.get("/static/../server.py")).status == 404
    assert (await client.get("/static/index.html")).status == 404


async def test_on_loopback_only_loopback_host_headers_are_answered(client):
    reply = await client.get("/api/info", headers={"Host": "attacker.example"})
    assert reply.status == 403
    port = client.server.port
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        reply = await client.get("/api/info", headers={"Host": host})
        assert reply.status == 200, host


async def test_with_a_token_every_request_must_carry_it(incident_root):
    root, _ = incident_root
    client, journal = await _client(root, AccessPolicy(ANY_ADDRESS, "s3cret-token"))
    try:
        for path in ("/", "/api/threads", "/api/live", "/static/app.js"):
            assert (await client.get(path)).status == 401, path
        reply = await client.get("/api/info", headers={"Authorization": "Bearer nope"})
        assert reply.status == 401
        reply = await client.get("/api/info", params={"token": "nope"})
        assert reply.status == 401
        # Any Host header passes off loopback: the token is the guard.
        reply = await client.get(
            "/api/info",
            headers={"Authorization": "Bearer s3cret-token", "Host": "box.lan:1"},
        )
        assert reply.status == 200
        # The token once in the address: a cookie, and the address without it.
        reply = await client.get(
            "/", params={"token": "s3cret-token", "x": "1"}, allow_redirects=False
        )
        assert reply.status == 303
        assert reply.headers["Location"] == "/?x=1"
        cookie = reply.cookies[COOKIE_NAME]
        assert cookie.value == "s3cret-token"
        assert cookie["httponly"] is True
        assert cookie["samesite"] == "Strict"
        client.session.cookie_jar.clear()
        for value, status in (("s3cret-token", 200), ("wrong", 401)):
            reply = await client.get(
                "/api/threads", headers={"Cookie": f"{COOKIE_NAME}={value}"}
            )
            assert reply.status == status, value
    finally:
        await client.close()
        await journal.aclose()


def test_a_token_is_required_off_loopback():
    with pytest.raises(ValueError, match="a token is required"):
        AccessPolicy(ANY_ADDRESS)
    policy, generated = access_for(ANY_ADDRESS, None)
    assert generated
    assert len(policy.token or "") >= 24
    policy, generated = access_for("127.0.0.1", None)
    assert (policy.token, generated) == (None, False)
    policy, generated = access_for("192.168.1.5", "mine")
    assert (policy.token, generated) == ("mine", False)
    for host in ("::1", "[::1]", "localhost", "127.0.0.2"):
        assert is_loopback(host), host
    for host in (ANY_ADDRESS, "example.com", "10.0.0.1"):
        assert not is_loopback(host), host


def test_ui_without_the_extra_says_which_extra_in_one_line(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['aiohttp'] = None\n"  # as if aiohttp were not installed
        "from journal.cli import main\n"
        f"sys.exit(main(['--root', {str(tmp_path)!r}, 'ui', '--port', '0']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"agent-journal ui: error: {MISSING_EXTRA}"
    assert "agent-journal[ui]" in done.stderr


# --- live updates -------------------------------------------------------------------


async def _next_event(reply) -> tuple[str, bytes]:
    name, data = "", b""
    while True:
        line = await reply.content.readline()
        if not line:
            raise AssertionError("the stream ended")
        line = line.rstrip(b"\r\n")
        if not line:
            if name:
                return name, data
            continue
        if line.startswith(b"event: "):
            name = line[7:].decode()
        elif line.startswith(b"data: "):
            data = line[6:]


async def test_the_live_stream_says_when_a_thread_moves(tmp_path):
    root = str(tmp_path / "journal")
    key = ThreadKey("bot", "live")
    async with Journal.open(root) as journal, journal.writer(key) as w:
        await w.append([MessageAppended(Msg("user", "one"))])
    client, journal = await _client(root, poll_interval=0.05)
    try:
        reply = await client.get("/api/live", params=thread_params(key))
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        assert (await asyncio.wait_for(_next_event(reply), 30))[0] == "ready"
        async with Journal.open(root) as writer_journal:
            async with writer_journal.writer(key) as w:
                await w.append([MessageAppended(Msg("user", "two"))])
            head = await writer_journal.head(key)
        name, data = await asyncio.wait_for(_next_event(reply), 30)
        assert name == "changed"
        # The writer's fence is a record too, so the head moved by more than one;
        # the stream may report the fence first: read until it reaches the head.
        while msgspec.json.decode(data)["head"] != head:
            name, data = await asyncio.wait_for(_next_event(reply), 30)
        reply.close()
    finally:
        await client.close()
        await journal.aclose()


# --- the run tree -------------------------------------------------------------------


async def test_runs_nest_under_their_parent_run():
    key = ThreadKey("bot", "tree")
    async with Journal.open("memory://web-tree") as journal:
        async with journal.writer(key) as w:
            await w.append([RunStarted("parent")], run_id="parent")
            await w.append(
                [RunStarted("child", parent_run_id="parent")], run_id="child"
            )
            await w.append(
                [RunStarted("grandchild", parent_run_id="child")], run_id="grandchild"
            )
            # A parent that started later (or is unknown) cannot adopt a run.
            await w.append(
                [RunStarted("orphan", parent_run_id="nobody")], run_id="orphan"
            )
        records = [r async for r in journal.records(key)]
    arranged = arrange(records)
    assert [n.entry.run_id for n in arranged.roots] == ["parent", "orphan"]
    (child,) = arranged.runs["parent"].children
    assert child.entry.run_id == "child"
    assert [n.entry.run_id for n in child.children] == ["grandchild"]
    assert child.parent_run_id == "parent"
    assert [s.run_id for s in arranged.segments] == [
        None,
        "parent",
        "child",
        "grandchild",
        "orphan",
    ]
    # Cut down to one run, the tree keeps the runs it nests under, and only them.
    (kept,) = pruned(arranged.roots, {"grandchild"})
    assert kept.entry.run_id == "parent"
    assert [n.entry.run_id for n in kept.children] == ["child"]
    assert [n.entry.run_id for n in kept.children[0].children] == ["grandchild"]
    assert [n.entry.run_id for n in arranged.runs["parent"].children] == ["child"]
    assert pruned(arranged.roots, {"orphan"})[0].entry.run_id == "orphan"
    assert pruned(arranged.roots, set()) == []


def test_ui_refuses_json(tmp_path, capsys):
    code = main(["--root", str(tmp_path), "ui", "--port", "0", "--json"])
    assert code == 2
    assert "drop --json" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "70000"], "--port must be 0 to 65535"),
        (["--poll", "0"], "--poll must be above 0"),
        (["--token", " "], "the token must not be empty"),
    ],
)
def test_ui_refuses_bad_options(tmp_path, capsys, flags, message):
    assert main(["--root", str(tmp_path), "ui", *flags]) == 2
    assert message in capsys.readouterr().err
