"""RuntimeContext, tools (schema, validation, injection) and ScriptedModel."""

from __future__ import annotations

from typing import Annotated

import pydantic
import pytest

from journal import (
    Agent,
    Journal,
    ModelResponse,
    Msg,
    RunFailed,
    RuntimeContext,
    ScriptedModel,
    ToolCall,
    ToolResultBlock,
    ToolSpec,
    tool,
)

from ._support import all_events, fresh_url, key, names

# --- RuntimeContext ----------------------------------------------------------------


def test_context_defaults_and_empty():
    ctx = RuntimeContext.empty()
    assert (ctx.user_id, ctx.session_id, ctx.thread_id) == (None, None, "main")
    assert ctx.run_id is None
    assert ctx.turn_id is None
    assert ctx.agent_state is None
    assert ctx.extra == {}


@pytest.mark.parametrize("run_id", ["", "   ", "\t"])
def test_blank_explicit_run_id_is_rejected(run_id):
    with pytest.raises(ValueError, match="run_id"):
        RuntimeContext(user_id="u", session_id="s", run_id=run_id)


@pytest.mark.parametrize(
    "field", [{"user_id": ""}, {"session_id": "a\x00b"}, {"thread_id": "x" * 300}]
)
def test_invalid_ids_are_rejected(field):
    with pytest.raises(ValueError, match="_id"):
        RuntimeContext(**field)


def test_assignment_is_validated():
    ctx = RuntimeContext(session_id="s")
    with pytest.raises(ValueError, match="blank"):
        ctx.run_id = " "


class Database:
    def __init__(self, name: str) -> None:
        self.name = name


def test_string_and_type_keyed_attributes():
    ctx = RuntimeContext(user_id="u", session_id="s")
    db = Database("main")
    ctx.put("request_id", "r-1")
    ctx.put(Database, db)
    assert ctx.get("request_id") == "r-1"
    assert ctx.get("missing") is None
    assert ctx.get("missing", 5) == 5
    assert ctx.get(Database) is db
    assert ctx.get(int) is None
    assert ctx.extra == {"request_id": "r-1"}
    ctx.extra["other"] = 2
    assert ctx.get("other") == 2
    with pytest.raises(TypeError):
        ctx.put(Database, "not a database")
    # Runtime-only: never part of the serialized identity.
    assert ctx.model_dump() == {
        "user_id": "u",
        "session_id": "s",
        "thread_id": "main",
        "run_id": None,
        "turn_id": None,
    }
    assert "r-1" not in ctx.model_dump_json()


async def test_resolve_agent_state_falls_back_to_loading():
    j = Journal.open(fresh_url())
    agent = Agent("A", "assistant", ScriptedModel(["hello"]), journal=j)
    ctx = RuntimeContext(user_id="alice", session_id="s1")
    state = await RuntimeContext.resolve_agent_state(ctx, agent)
    assert state.version == 0
    assert state.context == []
    await agent.call([Msg("user", "hi")], ctx)
    assert ctx.agent_state is not None
    injected = await ctx.resolve_agent_state(agent)
    assert injected is ctx.agent_state
    other = RuntimeContext(user_id="alice", session_id="s1")
    loaded = await RuntimeContext.resolve_agent_state(other, agent)
    assert [m.text for m in loaded.context] == ["hi", "hello"]


async def test_context_attributes_are_not_persisted_nor_sent_to_the_model():
    j = Journal.open(fresh_url())
    seen: dict[str, object] = {}

    async def whoami(ctx: RuntimeContext) -> str:
        """Say who is asking."""
        seen["run_id"] = ctx.run_id
        seen["secret"] = ctx.get("secret")
        seen["db"] = ctx.get(Database)
        seen["state_version"] = ctx.agent_state.version if ctx.agent_state else None
        ctx.put("tool_was_here", True)
        return "someone"

    model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("whoami", {})]), "ok"])
    agent = Agent("A", "assistant", model, tools=[whoami], journal=j)
    ctx = RuntimeContext(user_id="alice", session_id="s1")
    token = "hunter2-" + "token"  # an opaque runtime-only value
    ctx.put("secret", token)
    db = Database("db-handle-xyz")
    ctx.put(Database, db)
    await agent.call("hi", ctx)
    assert seen["secret"] == token
    assert seen["db"] is db
    assert isinstance(seen["run_id"], str)
    assert seen["run_id"]
    assert seen["state_version"] is not None
    assert ctx.get("tool_was_here") is True  # the tool's context shares attributes
    assert ctx.run_id is None  # the caller's context is not rebound to the run
    events = await all_events(j, key())
    assert "hunter2" not in repr(events)
    assert "db-handle-xyz" not in repr(events)
    assert "hunter2" not in repr(model.calls)
    store = j.store
    raw = [
        (await store.read(k))[0]
        for k in await store.list(key().prefix)  # every object of the thread
    ]
    assert all(b"hunter2" not in data for data in raw)
    assert whoami.__name__ not in str(model.tools_seen[0][0].input_schema)
    assert model.tools_seen[0][0].input_schema["properties"] == {}


# --- tools -----------------------------------------------------------------------


def test_schema_comes_from_type_hints_and_docstring():
    def search(
        query: str,
        limit: int = 5,
        tags: list[str] | None = None,
        ctx: RuntimeContext | None = None,
    ) -> list[str]:
        """Search the notes.

        Args:
            query: What to look for.
            limit: At most this many results.
        """
        return []

    spec = tool(search).spec
    assert isinstance(spec, ToolSpec)
    assert spec.name == "search"
    assert spec.description.startswith("Search the notes.")
    schema = spec.input_schema
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"query", "limit", "tags"}
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"]["type"] == "string"
    assert schema["properties"]["query"]["description"] == "What to look for."
    assert schema["properties"]["limit"]["type"] == "integer"
    assert schema["properties"]["limit"]["default"] == 5
    assert schema["additionalProperties"] is False


def test_tool_name_description_and_annotated_constraints():
    async def fetch(url: Annotated[str, pydantic.Field(min_length=3)]) -> str:
        """Fetch a page."""
        return url

    renamed = tool(fetch, name="http_get", description="GET a URL.")
    assert renamed.spec.name == "http_get"
    assert renamed.spec.description == "GET a URL."
    assert renamed.spec.input_schema["properties"]["url"]["minLength"] == 3
    assert tool(fetch).spec.description == "Fetch a page."

    @tool(name="decorated")
    def helper(x: int) -> int:
        return x

    assert helper.spec.name == "decorated"
    assert helper.spec.description == ""


def test_bad_tool_definitions_are_refused():
    def star(*args: int) -> None:
        return None

    with pytest.raises(TypeError):
        tool(star)
    with pytest.raises(ValueError, match="name"):
        tool(lambda: None, name="has space")

    def dup() -> None:
        return None

    with pytest.raises(ValueError, match="two tools"):
        Agent(
            "A",
            "a",
            ScriptedModel([]),
            tools=[dup, dup],
            journal=Journal.open(fresh_url()),
        )


async def test_bad_tool_input_becomes_an_error_the_model_sees():
    j = Journal.open(fresh_url())
    ran: list[int] = []

    def double(n: int) -> int:
        """Double n."""
        ran.append(n)
        return 2 * n

    def check(messages: list[Msg]) -> str:
        result = messages[-1].content[0]
        assert isinstance(result, ToolResultBlock)
        assert result.is_error
        assert "invalid input" in result.output
        assert "n" in result.output
        return "sorry"

    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("double", {"n": "not a number"})]), check]
    )
    agent = Agent("A", "assistant", model, tools=[double], journal=j)
    reply = await agent.call(
        "double it", RuntimeContext(user_id="alice", session_id="s1")
    )
    assert reply.text == "sorry"
    assert ran == []  # the tool never ran
    events = await all_events(j, key())
    completed = [e for _, e in events if type(e).__name__ == "ToolCallCompleted"]
    assert completed[0].is_error


async def test_raising_tool_unknown_tool_and_sync_tool():
    j = Journal.open(fresh_url())

    async def explode() -> str:
        """Always fails."""
        raise OSError("disk on fire")

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    outputs: list[ToolResultBlock] = []

    def collect(messages: list[Msg]) -> str:
        outputs.extend(
            b
            for m in messages
            if m.role == "tool"
            for b in m.content  # type: ignore[union-attr]
        )
        return "done"

    model = ScriptedModel(
        [
            ModelResponse(
                tool_calls=[
                    ToolCall("explode", {}, id="c1"),
                    ToolCall("nope", {}, id="c2"),
                    ToolCall("add", {"a": 2, "b": "3"}, id="c3"),
                ]
            ),
            collect,
        ]
    )
    agent = Agent("A", "assistant", model, tools=[explode, add], journal=j)
    await agent.call("go", RuntimeContext(user_id="alice", session_id="s1"))
    by_id = {b.tool_use_id: b for b in outputs}
    assert by_id["c1"].is_error
    assert "disk on fire" in by_id["c1"].output
    assert by_id["c2"].is_error
    assert "unknown tool" in by_id["c2"].output
    assert not by_id["c3"].is_error
    assert by_id["c3"].output == 5


# --- ScriptedModel ---------------------------------------------------------------


async def test_scripted_model_replays_in_order_and_raises_when_it_runs_out():
    async def later(messages: list[Msg]) -> ModelResponse:
        return ModelResponse(text=f"saw {len(messages)}")

    model = ScriptedModel(["one", ModelResponse(text="two"), later])
    assert (await model([], [])).text == "one"
    assert (await model([], [])).text == "two"
    assert (await model([Msg("user", "x")], [])).text == "saw 1"
    assert model.remaining == 0
    with pytest.raises(RuntimeError, match="ran out"):
        await model([], [])


async def test_script_exhaustion_fails_the_run_and_records_it():
    j = Journal.open(fresh_url())
    agent = Agent("A", "assistant", ScriptedModel([]), journal=j)
    with pytest.raises(RuntimeError, match="ran out"):
        await agent.call("hi", RuntimeContext(user_id="alice", session_id="s1"))
    events = await all_events(j, key())
    failed = [e for _, e in events if isinstance(e, RunFailed)]
    assert len(failed) == 1
    assert "ran out" in failed[0].error
    assert names(events)[-1] == "RunFailed"
    state = await agent.get_agent_state("alice", "s1")
    assert state.active_run_id is None
    assert not state.shutdown_interrupted
    # The session stays usable.
    agent.model = ScriptedModel(["back"])
    assert (
        await agent.call("again", RuntimeContext(user_id="alice", session_id="s1"))
    ).text == "back"
