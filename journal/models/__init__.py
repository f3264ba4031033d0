"""Real model clients for the runtime, each behind its own extra.

* ``journal.models.openai``: ``OpenAIChatModel`` (chat completions; any
  OpenAI-compatible ``base_url``), extra ``openai``.
* ``journal.models.anthropic``: ``AnthropicModel`` (messages), extra ``anthropic``.

Both implement :class:`journal.Model`, report token usage (``last_usage``,
``total_usage``) and raise :class:`~journal.models.common.ModelError` subclasses
for the provider's failures.
"""

from __future__ import annotations
