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

import typing as _typing

from journal.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from journal.engine.facade import Journal
    from journal.engine.verify import Finding, VerifyReport
    from journal.engine.writer import ThreadWriter, WriterOptions

__all__ = ["Finding", "Journal", "ThreadWriter", "VerifyReport", "WriterOptions"]

# Lazy (PEP 562): opening a journal to read or write does not load the verifier.
_EXPORTS: dict[str, str] = {
    "Finding": "journal.engine.verify",
    "Journal": "journal.engine.facade",
    "ThreadWriter": "journal.engine.writer",
    "VerifyReport": "journal.engine.verify",
    "WriterOptions": "journal.engine.writer",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__, globals())
