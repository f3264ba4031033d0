"""Framework adapters: the journal behind other agent frameworks' storage seams.

``threads``        what they share: a writer lease and a folded view per thread
``langgraph``      ``JournalSaver``, a LangGraph ``BaseCheckpointSaver``
``openai_agents``  ``JournalSession``, an OpenAI Agents ``Session``
``pydantic_ai``    ``JournalConversationStore``, a pydantic-ai ``ConversationStore``

Each needs its extra: ``langgraph``, ``openai-agents``, ``pydantic-ai``.

Each framework module imports its framework at the top, so import the one you use;
this package root imports none of them.
"""

from __future__ import annotations
