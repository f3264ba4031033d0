"""The journal engine: the :class:`Journal` facade and the rooms behind it.

``facade``      Journal: opens a store, hands each thread's work to the modules below
``writer``      ThreadWriter: lease, fence, commits, background checkpoints
``replay``      rebuilding a state: hint -> checkpoint -> tail
``verify``      every integrity check, one method each; Finding, VerifyReport
``checkpoints`` capturing, writing and reading checkpoints
``retention``   removing history an old checkpoint covers
``listing``     the threads of a store, level by level
``log``         ThreadLog: all I/O of one thread, and the one contiguity/chain scan
``lease``       the LEASE record and its compare-and-swap
``diff``        a state change as the events it amounts to
``settings``    what a journal hands down to its writers and readers

Imports point down this list (``facade`` imports the rest; nothing imports
``facade`` but this package root).
"""

from __future__ import annotations

from journal.engine.facade import Journal
from journal.engine.verify import Finding, VerifyReport
from journal.engine.writer import ThreadWriter, WriterOptions

__all__ = ["Finding", "Journal", "ThreadWriter", "VerifyReport", "WriterOptions"]
