"""Adapters that put the journal behind agent frameworks' own storage interfaces.

One module per framework, each importing its framework only inside itself and
installed with its own extra (``pip install 'agent-journal[langgraph]'``):

* ``journal.adapters.adk``: ``JournalSessionService``, a Google ADK
  ``BaseSessionService`` (extra ``adk``).
* ``journal.adapters.langgraph``: ``JournalSaver``, a LangGraph
  ``BaseCheckpointSaver`` (extra ``langgraph``).
* ``journal.adapters.openai_agents``: ``JournalSession``, an OpenAI Agents SDK
  ``Session`` (extra ``openai-agents``).
* ``journal.adapters.pydantic_ai``: ``JournalConversationStore``, a pydantic-ai
  ``ConversationStore`` (extra ``pydantic-ai``).

Each adapter takes a :class:`~journal.Journal` (so any URL: local, memory, S3) and a
function from the framework's ids to a :class:`~journal.ThreadKey`, holds the
thread's writer lease while it writes, and reports lost races in the framework's
own error types. ``journal.adapters.threads`` holds what the LangGraph, Agents
and pydantic-ai adapters share.
"""

from __future__ import annotations
