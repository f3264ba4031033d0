"""The stateless agent runtime on the journal: RuntimeContext and the Agent facade.

An :class:`Agent` is execution configuration — a model, tools, and where state lives
(a :class:`~journal.Journal`, or a snapshot-mode state store) — built once and shared.
Every request may use a fresh ``Agent`` and a fresh :class:`RuntimeContext`: a session
continues only through its identity (user, session, thread) and the journal.

One call is one *run*, a ReAct loop framed in the log::

    [RunStarted, MessageAppended(input)...]            before the model is called
    [MessageAppended(assistant + ToolUseBlocks), ToolCallRequested...]
                                                        before any of those tools runs
    [ToolCallCompleted (also the tool message)]        after each tool
    ...
    [MessageAppended(reply), RunCompleted]              (or RunFailed / RunInterrupted)

The write-ahead order means a crash can only leave "requested, no result": such a call
is *uncertain*, and a new run on the thread is refused (``UncertainToolCallsError``)
until :meth:`Agent.reconcile_tool_calls` names exactly that set. The runtime never
re-runs a tool.

An instance serializes operations on one thread (other threads run in parallel) and
keeps a thread's lease between them, idle, so a warm call pays no fence and no reload;
any other instance may take an idle lease at once (see docs/RUNTIME.md).

The modules, each importing only those listed after it:

- ``agent``: the :class:`Agent` facade (nothing in the package imports it).
- ``builtin``: the built-in tools (todos, plan mode).
- ``leases``: writers kept between operations (warm leases).
- ``loop``: the ReAct loop of one run; ``request``: what each model call sees.
- ``run``: :class:`AgentRun`, the caller's handle, and ``RunControl``, the runtime's
  side of a run (its interrupt signal and event feed).
- ``sinks``, ``slots``, ``uncertain``, ``locks``, ``run_ids``: where a run's events
  go, snapshot-mode slots, uncertain tool calls, per-thread locks, explicit run ids.
- ``context``, ``task_tools``, ``scope``: the call context, the task operations a
  tool may use, and the run a tool runs inside.
- ``tasks``, ``model``, ``tools``: the task-context rules, model I/O, tools.
- ``copies``: copies of a state that share its messages until they are read.
"""

from __future__ import annotations

from journal.runtime.agent import Agent
from journal.runtime.builtin import builtin_tools
from journal.runtime.context import RuntimeContext
from journal.runtime.model import (
    Model,
    ModelResponse,
    ScriptedModel,
    ScriptItem,
    ToolCall,
)
from journal.runtime.request import ModelRequest, RequestBuilder
from journal.runtime.run import AgentRun, RunEvent
from journal.runtime.task_tools import TaskTools
from journal.runtime.tasks import TaskView, VerificationResult, Verifier
from journal.runtime.tools import Tool, ToolSpec, tool

__all__ = [
    "Agent",
    "AgentRun",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "RequestBuilder",
    "RunEvent",
    "RuntimeContext",
    "ScriptItem",
    "ScriptedModel",
    "TaskTools",
    "TaskView",
    "Tool",
    "ToolCall",
    "ToolSpec",
    "VerificationResult",
    "Verifier",
    "builtin_tools",
    "tool",
]
