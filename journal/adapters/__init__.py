"""Adapters that put the journal behind agent frameworks' own storage interfaces.

One module per framework, each importing its framework only inside itself and
installed with its own extra (``pip install 'agent-journal[adk]'``):

* ``journal.adapters.adk``: ``JournalSessionService``, a Google ADK
  ``BaseSessionService``.

Each adapter takes a :class:`~journal.Journal` (so any URL: local, memory, S3) and a
function from the framework's ids to a :class:`~journal.ThreadKey`, holds the
thread's writer lease while it writes, and reports lost races in the framework's
own error types.
"""

from __future__ import annotations
