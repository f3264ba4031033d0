"""The stateless agent runtime on the journal (the package's modules are moved here).

This first step only moves the modules; the next one gives each a single job.
"""

from __future__ import annotations

from journal.runtime.agent import (
    Agent,
    AgentRun,
    Model,
    ModelResponse,
    RunEvent,
    RuntimeContext,
    ScriptedModel,
    ScriptItem,
    Tool,
    ToolCall,
    ToolSpec,
    tool,
)

__all__ = [
    "Agent",
    "AgentRun",
    "Model",
    "ModelResponse",
    "RunEvent",
    "RuntimeContext",
    "ScriptItem",
    "ScriptedModel",
    "Tool",
    "ToolCall",
    "ToolSpec",
    "tool",
]
