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
from projections.audit import HistoryProjection, RunLedger, ThreadCatalog
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
    "TasksContext",
    "ThreadCatalog",
    "ToolContext",
    "Verification",
    "fold",
]
