"""The ADK session service on the journal.

Ports the behaviours ADK's own session-service tests check (duplicate and stripped
ids, unknown and deleted sessions, stale writers, app/user/temp delta semantics,
GetSessionConfig, bytes and metadata round trips, listing) and adds the one ADK's
database service fails: two concurrent ``run_async`` on one session never
interleave and nothing acknowledged is lost (adk-python #4751). Two processes
writing one session lose nothing either.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
)
from google.genai import types

from journal import Journal, ThreadKey
from journal.adapters.adk import (
    AdkScopedStateUpdated,
    JournalSessionService,
    default_thread_key,
)

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

APP, USER = "app", "alice"
# Where the service keeps APP's app-scoped state and USER's user-scoped state,
# spelled out as the layout documents it (not taken from the service).
APP_THREAD = ThreadKey(APP, "app", thread_id="adk-app-state", namespace="adk")
USER_THREAD = ThreadKey(
    APP, "user", user_id=USER, thread_id="adk-user-state", namespace="adk"
)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["memory", "file"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Journal:
    # Memory journals of one name are shared in the process: one name per test.
    url = (
        f"memory://adk-{uuid.uuid4().hex}"
        if request.param == "memory"
        else str(tmp_path / "j")
    )
    return Journal.open(url)


@pytest.fixture
def service(journal: Journal) -> JournalSessionService:
    return JournalSessionService(journal)


def text_event(text: str, *, author: str = "user", **kw: object) -> Event:
    return Event(
        author=author,
        invocation_id=kw.pop("invocation_id", "inv"),  # type: ignore[arg-type]
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        **kw,  # type: ignore[arg-type]
    )


def delta_event(**delta: object) -> Event:
    return Event(
        author="agent", invocation_id="inv", actions=EventActions(state_delta=delta)
    )


async def test_create_and_get(service: JournalSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id=USER, state={"a": 1})
    got = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert got is not None
    assert (got.id, got.app_name, got.user_id, got.state) == (
        made.id,
        APP,
        USER,
        {"a": 1},
    )
    assert got.events == []
    assert (
        await service.get_session(app_name=APP, user_id="bob", session_id=made.id)
        is None
    )
    assert (
        await service.get_session(app_name="other", user_id=USER, session_id=made.id)
        is None
    )


async def test_duplicate_id_is_refused(service: JournalSessionService) -> None:
    await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    with pytest.raises(AlreadyExistsError, match="s1"):
        await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    # The same id for another user is another session.
    await service.create_session(app_name=APP, user_id="bob", session_id="s1")


async def test_ids_are_stripped(service: JournalSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id=USER, session_id="  s1 ")
    assert made.id == "s1"
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    assert await service.get_session(app_name=APP, user_id=USER, session_id=" s1 ")
    await service.delete_session(app_name=APP, user_id=USER, session_id=" s1")
    assert (
        await service.get_session(app_name=APP, user_id=USER, session_id="s1") is None
    )


async def test_unknown_session(service: JournalSessionService) -> None:
    assert (
        await service.get_session(app_name=APP, user_id=USER, session_id="nope") is None
    )
    await service.delete_session(app_name=APP, user_id=USER, session_id="nope")
    made = await service.create_session(app_name=APP, user_id=USER)
    ghost = made.model_copy(update={"id": "nope"})
    with pytest.raises(SessionNotFoundError):
        await service.append_event(ghost, text_event("hi"))


async def test_deleted_session(
    service: JournalSessionService, journal: Journal
) -> None:
    made = await service.create_session(
        app_name=APP, user_id=USER, session_id="s", state={"k": 1}
    )
    await service.append_event(made, text_event("before"))
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    assert (await service.list_sessions(app_name=APP)).sessions == []
    with pytest.raises(SessionNotFoundError):
        await service.append_event(made, text_event("after"))
    # The id can be used again, from scratch; the old history stays in the log.
    again = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert again.state == {}
    assert again.events == []
    key = default_thread_key(APP, USER, "s")
    kinds = [type(e).__name__ async for r in journal.records(key) for e in r.events]
    assert kinds.count("AdkSessionCreated") == 2
    assert "AdkSessionDeleted" in kinds


async def test_stale_writer_is_refused(service: JournalSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    first = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    second = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert first is not None
    assert second is not None
    await service.append_event(first, text_event("one"))
    with pytest.raises(StaleSessionError, match="version"):
        await service.append_event(second, text_event("two"))
    # The session object that wrote keeps going; the stale one wrote nothing.
    await service.append_event(first, text_event("three"))
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert stored is not None
    assert [e.content.parts[0].text for e in stored.events] == ["one", "three"]


async def test_retried_append_is_idempotent(service: JournalSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id=USER)
    event = text_event("once")
    await service.append_event(made, event)
    stale = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert stale is not None
    await service.append_event(made, text_event("next"))
    # The same event again (a retry after a lost reply) is not committed twice.
    await service.append_event(stale, event)
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert stored is not None
    assert [e.id for e in stored.events].count(event.id) == 1


async def test_partial_events_are_not_stored(service: JournalSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(made, text_event("streaming", partial=True))
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert stored is not None
    assert stored.events == []


async def test_state_scopes(service: JournalSessionService) -> None:
    s1 = await service.create_session(
        app_name=APP,
        user_id=USER,
        state={"own": 1, "app:a": 1, "user:u": 1, "temp:t": 1},
    )
    assert s1.state == {"own": 1, "app:a": 1, "user:u": 1}
    await service.append_event(
        s1, delta_event(own=2, **{"app:a": 2, "user:u": 2, "temp:t": 9})
    )
    # temp: is visible to the running invocation, never stored.
    assert s1.state["temp:t"] == 9
    s2 = await service.create_session(app_name=APP, user_id=USER)
    other = await service.create_session(app_name=APP, user_id="bob")
    assert s2.state == {"app:a": 2, "user:u": 2}
    assert other.state == {"app:a": 2}
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=s1.id)
    assert stored is not None
    assert stored.state == {"own": 2, "app:a": 2, "user:u": 2}
    assert "temp:t" not in stored.events[0].actions.state_delta
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"u": 2}
    assert await service.get_user_state(app_name=APP, user_id="nobody") == {}


async def test_delta_overwrites_and_keeps(service: JournalSessionService) -> None:
    made = await service.create_session(
        app_name=APP, user_id=USER, state={"a": 1, "b": 1}
    )
    await service.append_event(made, delta_event(a=2))
    await service.append_event(made, delta_event(c=[1, {"x": None}]))
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert stored is not None
    assert stored.state == {"a": 2, "b": 1, "c": [1, {"x": None}]}
    assert stored.state == made.state


async def test_bytes_and_metadata_round_trip(service: JournalSessionService) -> None:
    made = await service.create_session(
        app_name=APP, user_id=USER, state={"blob": b"\x00\xff", "user:key": b"\x01"}
    )
    event = Event(
        author="user",
        invocation_id="inv",
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    inline_data=types.Blob(data=b"\x89PNG\x00", mime_type="image/png")
                ),
                types.Part(text="look"),
            ],
        ),
        custom_metadata={"trace": {"id": "t1", "n": [1, 2]}},
        actions=EventActions(state_delta={"more": b"\xfe"}),
    )
    await service.append_event(made, event)
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert stored is not None
    (back,) = stored.events
    assert back == event
    assert back.content.parts[0].inline_data.data == b"\x89PNG\x00"
    assert back.custom_metadata == {"trace": {"id": "t1", "n": [1, 2]}}
    assert stored.state == {"blob": b"\x00\xff", "more": b"\xfe", "user:key": b"\x01"}


async def test_get_session_config(service: JournalSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id=USER)
    for i in range(5):
        await service.append_event(made, text_event(str(i), timestamp=1000.0 + i))

    async def texts(config: GetSessionConfig) -> list[str]:
        got = await service.get_session(
            app_name=APP, user_id=USER, session_id=made.id, config=config
        )
        assert got is not None
        return [e.content.parts[0].text for e in got.events]

    assert await texts(GetSessionConfig(num_recent_events=2)) == ["3", "4"]
    assert await texts(GetSessionConfig(num_recent_events=0)) == []
    assert await texts(GetSessionConfig(after_timestamp=1002.0)) == ["2", "3", "4"]
    assert await texts(GetSessionConfig(num_recent_events=10)) == list("01234")
    with pytest.raises(ValueError, match="num_recent_events"):
        GetSessionConfig(num_recent_events=-1)


async def test_list_sessions(service: JournalSessionService) -> None:
    a = await service.create_session(app_name=APP, user_id=USER, session_id="a")
    await service.create_session(app_name=APP, user_id="bob", session_id="b")
    await service.create_session(app_name="other", user_id=USER, session_id="c")
    await service.append_event(a, text_event("latest", timestamp=4_000_000_000.0))
    mine = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert [s.id for s in mine] == ["a"]
    assert mine[0].events == []
    everyone = (await service.list_sessions(app_name=APP)).sessions
    assert [s.id for s in everyone] == ["b", "a"]  # oldest update first
    assert (await service.list_sessions(app_name=APP, user_id="nobody")).sessions == []


async def test_thread_key_can_be_replaced(journal: Journal) -> None:
    def scoped(app: str, user: str, session: str) -> ThreadKey:
        return ThreadKey(app, session, user_id=user, namespace="tenant-7")

    service = JournalSessionService(journal, thread_key=scoped)
    made = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(made, text_event("hi"))
    assert (
        await journal.head(ThreadKey(APP, "s", user_id=USER, namespace="tenant-7")) == 2
    )
    assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == ["s"]


# Ints msgpack has no 64-bit room for: ADK's own services store them.
WIDE = {
    "big": 2**64,
    "small": -(2**63) - 1,
    "huge": -(2**200),
    "edges": [2**64 - 1, -(2**63)],
    "nested": {"ids": [2**127, 1], "n": {"k": 2**100}},
}


async def test_ints_beyond_64_bits_round_trip(journal: Journal) -> None:
    async def states(service: BaseSessionService) -> tuple[Any, ...]:
        made = await service.create_session(
            app_name=APP,
            user_id=USER,
            state={"seed": 2**64, "app:total": -(2**70), "user:wide": WIDE},
        )
        event = delta_event(**WIDE, **{"app:n": 2**65, "user:m": -(2**65)})
        await service.append_event(made, event)
        got = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
        assert got is not None
        user = await service.get_user_state(app_name=APP, user_id=USER)
        return got.state, got.events[0].actions.state_delta, user

    reference = await states(InMemorySessionService())
    assert reference[0]["big"] == 2**64
    assert await states(JournalSessionService(journal)) == reference
    # Another process reads them back from the log.
    other = JournalSessionService(journal)
    (listed,) = (await other.list_sessions(app_name=APP, user_id=USER)).sessions
    got = await other.get_session(app_name=APP, user_id=USER, session_id=listed.id)
    assert got is not None
    assert (got.state, got.events[0].actions.state_delta) == reference[:2]


@dataclasses.dataclass
class Counter64:
    n: int


async def test_an_unstorable_int_is_a_value_error_naming_its_key(
    journal: Journal,
) -> None:
    service = JournalSessionService(journal)
    # Inside an object msgpack encodes natively the int has no room to be widened.
    with pytest.raises(ValueError, match="'app:counter'"):
        await service.create_session(
            app_name=APP,
            user_id=USER,
            session_id="s",
            state={"ok": 1, "app:counter": Counter64(2**64)},
        )
    assert [k async for k in journal.threads()] == []
    made = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    head = await journal.head(default_thread_key(APP, USER, "s"))
    with pytest.raises(ValueError, match="'counter'"):
        await service.append_event(made, delta_event(counter=Counter64(-(2**64))))
    assert await journal.head(default_thread_key(APP, USER, "s")) == head


class RecordsRead:
    """Counts the records the journal yields, per thread (through its public API)."""

    def __init__(self, journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[ThreadKey] = Counter()
        records = journal.records

        async def counting(key: ThreadKey, *args: Any, **kw: Any) -> Any:
            async for record in records(key, *args, **kw):
                self.counts[key] += 1
                yield record

        monkeypatch.setattr(journal, "records", counting)

    def take(self, key: ThreadKey) -> int:
        """The records of ``key`` read since the last take."""
        return self.counts.pop(key, 0)


async def test_scoped_state_is_read_from_where_the_last_read_ended(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = JournalSessionService(journal)
    empty = await service.create_session(app_name=APP, user_id="new")
    busy = await service.create_session(app_name=APP, user_id=USER)
    for i in range(30):
        await service.append_event(busy, delta_event(**{"app:n": i, "user:n": i}))
    app, user = APP_THREAD, USER_THREAD
    reads = RecordsRead(journal, monkeypatch)
    # The app thread grows with every user's turns: a read must not replay it.
    got = await service.get_session(app_name=APP, user_id="new", session_id=empty.id)
    assert got is not None
    assert got.state == {"app:n": 29}
    # This service folded its own writes as it committed them: nothing to read.
    assert reads.take(app) == 0
    for _ in range(3):
        await service.get_session(app_name=APP, user_id="new", session_id=empty.id)
        await service.list_sessions(app_name=APP)
        await service.create_session(app_name=APP, user_id=USER)
        assert await service.get_user_state(app_name=APP, user_id=USER) == {"n": 29}
    assert reads.take(app) == 0
    assert reads.take(user) == 0
    # Another process's writes are read once, from the head this one last saw.
    other = JournalSessionService(journal)
    theirs = await other.create_session(app_name=APP, user_id=USER)
    for i in range(5):
        await other.append_event(theirs, delta_event(**{"app:n": 100 + i}))
    reads.take(app)
    got = await service.get_session(app_name=APP, user_id="new", session_id=empty.id)
    assert got is not None
    assert got.state == {"app:n": 104}
    assert reads.take(app) == 5
    mine = await service.get_session(app_name=APP, user_id=USER, session_id=busy.id)
    assert mine is not None
    assert mine.state["user:n"] == 29
    assert reads.take(app) == 0


async def test_scoped_state_handed_out_is_a_copy(
    service: JournalSessionService,
) -> None:
    made = await service.create_session(
        app_name=APP, user_id=USER, state={"app:cfg": {"k": [1]}, "user:l": [1]}
    )
    made.state["app:cfg"]["k"].append(2)
    made.state["user:l"].append(2)
    got = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert got is not None
    got.state["app:cfg"]["k"].append(3)
    (await service.get_user_state(app_name=APP, user_id=USER))["l"].append(3)
    again = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
    assert again is not None
    assert again.state == {"app:cfg": {"k": [1]}, "user:l": [1]}


# --- two concurrent run_async on one session (adk-python #4751) -------------------


class SlowModel(BaseLlm):
    """Answers after yielding to the event loop, so two runs overlap."""

    model: str = "slow"

    async def generate_content_async(
        self, llm_request: object, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        for _ in range(5):
            await asyncio.sleep(0)
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text="answer")])
        )


async def run(runner: Runner, session_id: str, text: str) -> list[Event]:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    return [
        event
        async for event in runner.run_async(
            user_id=USER, session_id=session_id, new_message=message
        )
    ]


async def test_concurrent_runs_never_interleave(service: JournalSessionService) -> None:
    """Each run's events stay one contiguous block; the loser stops at once.

    Whichever run writes second from a read the other has moved past gets
    StaleSessionError at that write and writes nothing more, so no event is ever
    committed on top of a history its run did not see. (ADK's database service,
    since 1.24, reloads and continues there, interleaving the two runs.)
    """
    agent = LlmAgent(name="assistant", model=SlowModel())
    runner = Runner(app_name=APP, agent=agent, session_service=service)
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    outcomes = await asyncio.gather(
        run(runner, "s", "first"), run(runner, "s", "second"), return_exceptions=True
    )
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1, outcomes
    assert len(failed) == 1, outcomes
    assert isinstance(failed[0], StaleSessionError), outcomes
    stored = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert stored is not None
    runs = [e.invocation_id for e in stored.events]
    blocks = [i for n, i in enumerate(runs) if n == 0 or runs[n - 1] != i]
    assert len(blocks) == len(set(blocks)), runs  # no run resumes after another
    # Everything the winner produced is stored, ending the history.
    winner = [e.id for e in won[0] if not e.partial]
    assert [e.id for e in stored.events][-len(winner) :] == winner
    assert stored.events[-1].content.parts[0].text == "answer"
    # The loser can run again from a fresh read, after the winner's turn.
    before = len(stored.events)
    await run(runner, "s", "again")
    stored = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert stored is not None
    assert [e.author for e in stored.events[before:]] == ["user", "assistant"]


# --- two processes writing one session ---------------------------------------------


@pytest.mark.slow
async def test_two_processes_lose_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "j")
    journal = Journal.open(root)
    service = JournalSessionService(journal)
    await service.create_session(app_name="app", user_id="u", session_id="s")
    count = 15
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.adapters._adk_child",
                root,
                "s",
                name,
                str(count),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in ("p1", "p2")
    ]
    for child in children:
        _out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err.decode()
    stored = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert stored is not None
    seen = [e.invocation_id for e in stored.events]
    for name in ("p1", "p2"):
        mine = [i for i in seen if i.startswith(name)]
        assert mine == [f"{name}-{i}" for i in range(count)]  # all, once, in order
    assert len(seen) == 2 * count
    key = default_thread_key("app", "u", "s")
    assert await journal.head(key) == 2 * count + 1
    assert (await journal.verify(key)).ok


@pytest.mark.slow
async def test_a_process_killed_mid_append_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    """SIGKILL in the middle of a stream of appends; the next process continues."""
    root = str(tmp_path / "j")
    journal = Journal.open(root)
    service = JournalSessionService(journal, holder="next", lease_wait=30.0)
    await service.create_session(app_name="app", user_id="u", session_id="s")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.adapters._adk_child", root, "s", "k", "100000",
         "--ack", "1.0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    acked: list[str] = []
    while len(acked) < 25:
        line = child.stdout.readline().decode()
        assert line, child.stderr.read().decode() if child.stderr else ""
        acked.append(line.split()[1])
    child.send_signal(signal.SIGKILL)  # mid-stream: likely inside an append
    child.wait(timeout=30)
    # Whatever the child printed after was acknowledged too: read it all.
    acked += [line.split()[1] for line in child.stdout.read().decode().splitlines()]
    stored = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert stored is not None
    seen = [e.invocation_id for e in stored.events]
    assert seen[: len(acked)] == acked  # every acknowledged append, once, in order
    assert len(seen) - len(acked) <= 1  # at most the one in flight, never doubled
    # The next process takes over the dead lease and appends.
    await service.append_event(stored, Event(author="next", invocation_id="after"))
    again = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert again is not None
    assert again.events[-1].invocation_id == "after"
    assert (await journal.verify(default_thread_key("app", "u", "s"))).ok


# --- app/user state writes a session commit left undone ----------------------------


async def _commit_without_scoped(
    journal: Journal, service: JournalSessionService, session: object, event: Event
) -> None:
    """Append ``event``: its session record commits, its app/user writes fail.

    Another holder keeps the app and user threads' leases while it runs, as a
    process that died between the two would leave them undone.
    """
    app, user = APP_THREAD, USER_THREAD
    held = [await journal.acquire(k, holder="blocker") for k in (app, user)]
    quick = JournalSessionService(journal, holder=service.holder, lease_wait=0.0)
    quick._versions = service._versions  # the same process's session objects
    try:
        with pytest.raises(Exception, match="lease"):
            await quick.append_event(session, event)  # type: ignore[arg-type]
    finally:
        for writer in held:
            await writer.close()


async def test_app_and_user_writes_left_undone_are_made_on_the_next_read(
    journal: Journal,
) -> None:
    service = JournalSessionService(journal)
    made = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await _commit_without_scoped(
        journal, service, made, delta_event(own=1, **{"app:a": 1, "user:u": 1})
    )
    # A restarted process reads the session: the committed event's app and user
    # keys are written then, once.
    restarted = JournalSessionService(journal)
    for _ in range(2):
        got = await restarted.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        assert got.state == {"own": 1, "app:a": 1, "user:u": 1}
    assert await restarted.get_user_state(app_name=APP, user_id=USER) == {"u": 1}
    other = await restarted.create_session(app_name=APP, user_id="bob")
    assert other.state == {"app:a": 1}
    app = APP_THREAD
    writes = [
        e
        async for r in journal.records(app)
        for e in r.events
        if isinstance(e, AdkScopedStateUpdated)
    ]
    assert len(writes) == 1


async def test_a_retried_append_makes_the_app_and_user_writes_left_undone(
    journal: Journal,
) -> None:
    service = JournalSessionService(journal)
    made = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    event = delta_event(**{"app:a": 1, "user:u": 1})
    await _commit_without_scoped(journal, service, made, event)
    # The caller saw an error and tries the same append again.
    await service.append_event(made, event)
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"u": 1}
    other = await service.create_session(app_name=APP, user_id="bob")
    assert other.state == {"app:a": 1}


async def test_a_late_app_write_does_not_undo_a_later_session_s(
    journal: Journal,
) -> None:
    service = JournalSessionService(journal)
    first = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    await _commit_without_scoped(
        journal, service, first, delta_event(**{"app:x": 1, "app:y": 1})
    )
    # Another session commits after it, and its app write lands first.
    later = await service.create_session(app_name=APP, user_id="bob")
    await service.append_event(later, delta_event(**{"app:x": 2}))
    got = await JournalSessionService(journal).get_session(
        app_name=APP, user_id=USER, session_id="s1"
    )
    assert got is not None
    # x was set again by a later commit; y only by the late one.
    assert got.state == {"app:x": 2, "app:y": 1}


async def test_a_new_session_s_app_and_user_keys_left_undone_are_made_later(
    journal: Journal,
) -> None:
    app = APP_THREAD
    blocker = await journal.acquire(app, holder="blocker")
    service = JournalSessionService(journal, lease_wait=0.0)
    with pytest.raises(Exception, match="lease"):
        await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state={"app:a": 1, "own": 2}
        )
    await blocker.close()
    got = await JournalSessionService(journal).get_session(
        app_name=APP, user_id=USER, session_id="s"
    )
    assert got is not None
    assert got.state == {"app:a": 1, "own": 2}


async def test_writes_a_read_could_not_make_are_made_before_the_next_append(
    journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    service = JournalSessionService(journal)
    made = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await _commit_without_scoped(
        journal, service, made, delta_event(**{"app:a": 1, "app:b": 1})
    )
    app = APP_THREAD
    restarted = JournalSessionService(journal, lease_wait=0.0)
    blocker = await journal.acquire(app, holder="blocker")
    with caplog.at_level("WARNING", logger="journal.adapters.adk"):
        got = await restarted.get_session(app_name=APP, user_id=USER, session_id="s")
    assert got is not None
    assert got.state == {}  # the read answers with what the app thread holds
    assert "left for its next append" in caplog.text
    # Still held: the append refuses rather than commit past the unmade writes.
    with pytest.raises(StaleSessionError):
        await restarted.append_event(got, delta_event(**{"app:b": 2}))
    await blocker.close()
    await restarted.append_event(got, delta_event(**{"app:b": 2}))
    again = await restarted.get_session(app_name=APP, user_id=USER, session_id="s")
    assert again is not None
    assert again.state == {"app:a": 1, "app:b": 2}
    session = ThreadKey(APP, "s", user_id=USER, namespace="adk")
    assert await journal.head(session) == 3  # created, the two appends, no more
