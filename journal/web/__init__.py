"""``agent-journal ui``: a read-only web timeline of the journal (extra ``ui``).

Pages (one HTML page, routed by the address's fragment): the threads with
filters and attention badges; a thread's records grouped by run, with the run
tree and each tool call's status; the state at any version; the diff between
two versions; the verify result. The page follows the journal live through a
server-sent event stream.

The modules, bottom up:

- :mod:`~journal.web.runs`: records grouped by run, runs nested (pure);
- :mod:`~journal.web.attention`: interrupted runs, uncertain calls, damage;
- :mod:`~journal.web.views`: each page's JSON document, built on the CLI's
  commands and reports;
- :mod:`~journal.web.security`: the bind address, token and Host checks;
- :mod:`~journal.web.server`: the aiohttp application;
- :mod:`~journal.web.command`: the ``ui`` command (imports without aiohttp).

Agent content is untrusted: the page builds every element with text nodes and
runs under a Content-Security-Policy that allows its own script only.
"""

from __future__ import annotations

__all__: list[str] = []
