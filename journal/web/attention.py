"""What in a thread needs an operator: interrupted runs, uncertain calls, damage.

Computing it reads the whole thread and verifies it, so :class:`AttentionCache`
keeps each thread's answer until its head moves.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from journal.cli.commands.verify import verify_one
from journal.errors import JournalError
from journal.web.runs import call_status, run_tree

if TYPE_CHECKING:
    from collections.abc import Mapping

    from journal.codec import Record
    from journal.engine import Journal
    from journal.keys import ThreadKey
    from journal.web.run_cache import RunsAt
    from journal.web.runs import RunNode

__all__ = ["Attention", "AttentionCache", "attention_of"]


@dataclass(frozen=True, slots=True)
class Attention:
    """A thread's badges.

    Attributes:
        head: The head version the answer is for.
        interrupted_runs: Runs that ended interrupted, or that no record ends.
        uncertain_calls: Tool calls whose outcome is unknown.
        problems: What ``verify`` found wrong (empty: clean).
        warnings: What ``verify`` warned of.
    """

    head: int
    interrupted_runs: list[str] = field(default_factory=list)
    uncertain_calls: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def needed(self) -> bool:
        """Whether any badge is up (warnings alone raise none)."""
        return bool(self.interrupted_runs or self.uncertain_calls or self.problems)

    def to_json(self) -> dict[str, object]:
        """The badges as a JSON object."""
        return {
            "head": self.head,
            "needed": self.needed,
            "interrupted_runs": self.interrupted_runs,
            "uncertain_calls": self.uncertain_calls,
            "problems": self.problems,
            "warnings": self.warnings,
        }


def runs_attention(records: list[Record]) -> tuple[list[str], list[str]]:
    """The interrupted (or unfinished) runs and the uncertain calls of ``records``."""
    return _needing(run_tree(records)[1])


def _needing(runs: Mapping[str, RunNode]) -> tuple[list[str], list[str]]:
    interrupted = [
        run_id
        for run_id, node in runs.items()
        if run_id and node.entry.status in ("interrupted", "unfinished")
    ]
    uncertain = [
        call.call_id
        for node in runs.values()
        for call in node.entry.tool_calls
        if call_status(call, node.entry.status) == "uncertain"
    ]
    return interrupted, uncertain


async def attention_of(
    journal: Journal, key: ThreadKey, known: RunsAt | None = None
) -> Attention:
    """Read and verify ``key`` and say what needs attention.

    ``known``: the thread's runs, already read (at the head found here, they are
    not read again). A thread that cannot be read is a problem, not an error.
    """
    report = await verify_one(journal, key)
    problems = [str(f) for f in report.problems]
    warnings = [str(f) for f in report.warnings]
    head = report.head
    interrupted: list[str] = []
    uncertain: list[str] = []
    try:
        head = await journal.head(key)
        if known is not None and known.head == head:
            interrupted, uncertain = _needing(known.runs)
        else:
            records = [r async for r in journal.records(key, 1, head + 1)]
            interrupted, uncertain = runs_attention(records)
    except JournalError as exc:
        problems.append(f"the records cannot be read: {exc}")
    return Attention(head, interrupted, uncertain, problems, warnings)


class AttentionCache:
    """Each thread's :class:`Attention`, recomputed only when its head moves.

    Damage that leaves the head where it was (a flipped byte in an old record)
    shows on the thread's verify page at once, and in the badges once the thread
    moves on or the server restarts.
    """

    def __init__(self) -> None:
        self._known: dict[ThreadKey, Attention] = {}
        self._lock = asyncio.Lock()

    async def get(
        self,
        journal: Journal,
        key: ThreadKey,
        head: int,
        runs: RunsAt | None = None,
    ) -> Attention:
        """The attention of ``key`` at ``head``, from the cache when it is current.

        ``runs``: the thread's runs, when the caller has read them already.
        """
        known = self._known.get(key)
        if known is not None and known.head == head:
            return known
        fresh = await attention_of(journal, key, runs)
        async with self._lock:
            self._known[key] = fresh
        return fresh
