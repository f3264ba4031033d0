"""Read models folded from a thread's events: AgentState and the audit views.

The names are re-exported lazily (PEP 562): loading a thread needs
``projections.agent_state`` only, not the audit views.
"""

from __future__ import annotations

import typing as _typing

from journal.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
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
    from projections.base import (
        Projection,
        fold,
    )
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

_EXPORTS: dict[str, str] = {
    "AgentState": "projections.agent_state",
    "AgentStateProjection": "projections.agent_state",
    "PendingToolCall": "projections.agent_state",
    "PermissionContext": "projections.agent_state",
    "PlanModeContext": "projections.agent_state",
    "ToolContext": "projections.agent_state",
    "HistoryProjection": "projections.audit",
    "RunLedger": "projections.audit",
    "RunNode": "projections.audit",
    "ThreadCatalog": "projections.audit",
    "run_tree": "projections.audit",
    "Projection": "projections.base",
    "fold": "projections.base",
    "DecisionDetail": "projections.tasks",
    "EvidenceItem": "projections.tasks",
    "Proposal": "projections.tasks",
    "TasksContext": "projections.tasks",
    "Verification": "projections.tasks",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__, globals())
