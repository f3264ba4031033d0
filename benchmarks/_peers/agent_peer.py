"""agent-journal through its agent runtime: one ``Agent.call`` per turn.

What users of the runtime actually store: the turn's records are the ones
``Agent.call`` writes (run start with the user's message, the assistant's message
with its tool call and the write-ahead ``ToolCallRequested``, the tool's completion,
the answer with the run's end), not the four ``MessageAppended`` events the direct
row appends. The model is instant: a callable that answers the turn's first call
with the workload's preamble and tool call, its second with the answer. The tool
(``search``, marked read-only so that plan mode keeps offering it) returns the
workload's result and sets the turn's side state through the runtime, inside the
run: todos with ``ctx.tasks.write_todos``, plan mode and the summary with
``ctx.update_state``. So a timed turn is the runtime's own overhead plus its journal
writes. One warm ``Agent`` (its lease kept between calls, the default) serves the
thread. Loading is ``Journal.load`` of the thread, as for the direct row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from _peers.base import Adapter, du
from _peers.journal_peer import byte_parts
from journal import (
    Agent,
    Journal,
    ModelResponse,
    RuntimeContext,
    ToolCall,
    tool,
)

if TYPE_CHECKING:
    from pathlib import Path

    from _peers.workload import Turn
    from journal import AgentState

# The thread the agent writes is the direct row's KEY: ThreadKey(agent, session, user).
AGENT_ID, SESSION, USER = "bench", "peers", "bench"


class TurnModel:
    """An instant model: the turn's preamble and tool call, then its answer."""

    def __init__(self) -> None:
        self.turn: Turn | None = None
        self.step = 0

    def start(self, turn: Turn) -> None:
        self.turn, self.step = turn, 0

    async def __call__(self, messages: list[Any], tools: list[Any]) -> ModelResponse:
        t = self.turn
        assert t is not None
        self.step += 1
        if self.step == 1:
            return ModelResponse(t.preamble, [ToolCall(t.tool, t.args, id=t.call_id)])
        return ModelResponse(t.answer)


def search_tool(model: TurnModel) -> Any:
    """The workload's tool: its result, and the turn's side state via the runtime."""

    async def search(q: str, ctx: RuntimeContext) -> str:
        """Search the notes.

        Args:
            q: The query.
        """
        t = model.turn
        assert t is not None
        if t.todos is not None:
            await ctx.tasks.write_todos(t.todos)
        if t.plan_mode is not None or t.summary is not None:

            def change(state: AgentState) -> None:
                if t.plan_mode is not None:
                    state.plan_mode_context.active = t.plan_mode
                    state.plan_mode_context.plan_file = t.plan_file
                if t.summary is not None:
                    state.summary = t.summary

            await ctx.update_state("the turn's side state", change)
        return t.result

    return tool(search, name="search", read_only=True)


class AgentPeer(Adapter):
    system = "agent-journal"
    module = "journal_peer"  # its child_load reads the same thread

    def __init__(self, root: Path, hold_lease: float = 0.0) -> None:
        held = f", hold_lease={hold_lease:g}" if hold_lease else ""
        super().__init__(
            f"Agent.call (runtime){held}, local disk, fsync=True",
            "fsync=True (default): every record the runtime writes in a call is "
            "fdatasync-ed before the call goes on (four or five records per turn)"
            + (
                "; the kept lease stays busy between calls: no LEASE write per call"
                if hold_lease
                else "; the kept lease is marked busy, then idle: two LEASE writes "
                "per call"
            ),
        )
        self.root = root
        self.hold_lease = hold_lease

    async def open(self) -> None:
        self.journal = Journal.open(self.root)
        self.model = TurnModel()
        self.agent = Agent(
            "A",
            AGENT_ID,
            self.model,
            tools=[search_tool(self.model)],
            journal=self.journal,
            hold_lease=self.hold_lease,
        )
        self.ctx = RuntimeContext(user_id=USER, session_id=SESSION)

    async def put_turn(self, turn: Turn) -> None:
        self.model.start(turn)
        await self.agent.call(turn.user, self.ctx)
        self.turns += 1

    async def load(self) -> int:
        fresh = Journal.open(self.root)
        try:
            state = await fresh.load(self.agent.thread_key(self.ctx))
        finally:
            await fresh.aclose()
        return len(state.context)

    def footprint(self) -> tuple[int, int] | None:
        return du(self.root)

    async def byte_parts(self) -> dict[str, int] | None:
        return await byte_parts(self.root, self.agent.thread_key(self.ctx))

    def loader_spec(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    async def close(self) -> None:
        await self.agent.close()
        await self.journal.aclose()
