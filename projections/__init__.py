"""Read models folded from a thread's events: AgentState and the audit views."""

from __future__ import annotations

from projections.agent_state import (
    AgentState,
    AgentStateProjection,
    PendingToolCall,
    PermissionContext,
    PlanModeContext,
    ToolContext,
)
from projections.audit import (
    HistoryProjection,
    RunLedger,
    RunNode,
    ThreadCatalog,
    run_tree,
)
from projections.base import Projection, fold
from projections.tasks import (
    DecisionDetail,
    EvidenceItem,
    Proposal,
    TasksContext,
    Verification,
)

__all__ = [
    "AgentState",
    "AgentStateProjection",
    "DecisionDetail",
    "EvidenceItem",
    "HistoryProjection",
    "PendingToolCall",
    "PermissionContext",
    "PlanModeContext",
    "Projection",
    "Proposal",
    "RunLedger",
    "RunNode",
    "TasksContext",
    "ThreadCatalog",
    "ToolContext",
    "Verification",
    "fold",
    "run_tree",
]
