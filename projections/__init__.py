"""Read models folded from a thread's events: AgentState and the audit views."""

from __future__ import annotations

from projections.agent_state import (
    AgentState,
    AgentStateProjection,
    PendingToolCall,
    PermissionContext,
    PlanModeContext,
    TasksContext,
    ToolContext,
    Verification,
)
from projections.audit import (
    HistoryProjection,
    RunLedger,
    RunNode,
    ThreadCatalog,
    run_tree,
)
from projections.base import Projection, fold

__all__ = [
    "AgentState",
    "AgentStateProjection",
    "HistoryProjection",
    "PendingToolCall",
    "PermissionContext",
    "PlanModeContext",
    "Projection",
    "RunLedger",
    "RunNode",
    "TasksContext",
    "ThreadCatalog",
    "ToolContext",
    "Verification",
    "fold",
    "run_tree",
]
