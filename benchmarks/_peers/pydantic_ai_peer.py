"""pydantic-ai conversation stores: ``save`` of the conversation after each turn.

A turn is four messages, as an agent run with one tool call leaves them: the
request with the user prompt, the response with the preamble and its tool call, the
request with the tool's return, and the response with the answer. The store keeps
each message once (an entry), so a save appends the turn's four. pydantic-ai ships
one store, ``InMemoryConversationStore``; it has no durable one, so the journal's row
stands beside the in-memory one only. Conversations store messages only (no side
state), like the Agents SDK rows.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import InMemoryConversationStore
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

# Imported here, not in child_load's timed open, like every peer's library.
try:
    from journal import Journal
    from journal.adapters.pydantic_ai import JournalConversationStore
except ImportError:  # reported when the variant is selected
    pass

from _peers.base import Adapter, du

if TYPE_CHECKING:
    from pathlib import Path

    from _peers.workload import Turn

CONVERSATION = "peers"


def messages(t: Turn) -> list[Any]:
    return [
        ModelRequest(parts=[UserPromptPart(t.user)]),
        ModelResponse(
            parts=[
                TextPart(t.preamble),
                ToolCallPart(t.tool, json.dumps(t.args), tool_call_id=t.call_id),
            ]
        ),
        ModelRequest(parts=[ToolReturnPart(t.tool, t.result, tool_call_id=t.call_id)]),
        ModelResponse(parts=[TextPart(t.answer)]),
    ]


def make_store(spec: dict[str, Any]) -> Any:
    if spec["kind"] == "memory":
        return InMemoryConversationStore()
    return JournalConversationStore(Journal.open(spec["root"]), keep=True)


async def close_store(store: Any) -> None:
    if hasattr(store, "leases"):
        await store.aclose()
        await store.journal.aclose()


class PydanticAIPeer(Adapter):
    system = "pydantic-ai"
    module = "pydantic_ai_peer"

    def __init__(self, kind: str, *, path: Path | None = None) -> None:
        self.kind = kind
        self.path = path
        variant = {
            "memory": "InMemoryConversationStore",
            "journal": "agent-journal JournalConversationStore (file)",
        }[kind]
        durability = {
            "memory": "in memory (deep copies in dicts): nothing survives",
            "journal": "default: each save is one journal record, fsynced",
        }[kind]
        super().__init__(variant, durability)
        self.persistent = kind != "memory"

    def _spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.path)}

    async def open(self) -> None:
        self.store = make_store(self._spec())
        self.conversation = Conversation(conversation_id=CONVERSATION)

    async def put_turn(self, turn: Turn) -> None:
        self.conversation.messages.extend(messages(turn))
        await self.store.save(self.conversation)
        self.turns += 1

    async def load(self) -> int:
        found = await self.store.load(CONVERSATION)
        return len(found.messages)

    def footprint(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        return du(self.path)

    def loader_spec(self) -> dict[str, Any]:
        return self._spec()

    async def close(self) -> None:
        await close_store(self.store)


async def child_load(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    store = make_store(spec)
    t1 = time.perf_counter()
    found = await store.load(CONVERSATION)
    t2 = time.perf_counter()
    await close_store(store)
    return {"open_s": t1 - t0, "load_s": t2 - t1, "items": len(found.messages)}
