"""Read models folded from a thread's events: AgentState and the audit views."""

from __future__ import annotations

# The projections build on journal's foundation (events, errors), and the journal's
# composition modules build on the projections. Importing the journal package first
# makes ``import projections`` work on its own: journal's foundation is loaded before
# any projection module asks for it, whichever package is imported first.
import journal  # noqa: F401  (import order, see above)
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
