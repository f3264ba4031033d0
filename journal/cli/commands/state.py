"""``state``: a thread's state rebuilt at the head or as of a version."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.commands.threads import existing_head
from journal.cli.errors import CommandError
from journal.cli.reports import StateReport

if TYPE_CHECKING:
    from journal.cli.options import StateOptions
    from journal.engine import Journal
    from journal.keys import ThreadKey
    from projections.agent_state import AgentState

__all__ = ["load_at", "show_state"]


async def load_at(
    journal: Journal, key: ThreadKey, version: int, head: int
) -> AgentState:
    """The state of ``key`` as of ``version``, which must not pass ``head``.

    Raises:
        CommandError: ``version`` is beyond the head.
    """
    if version > head:
        raise CommandError(f"{key} has no version {version}; its head is {head}")
    return await journal.load(key, at_version=version)


async def show_state(journal: Journal, options: StateOptions) -> StateReport:
    """``state``: the state at ``at`` (default: the head).

    Raises:
        CommandError: The thread does not exist or has no such version.
    """
    key = options.key
    head = await existing_head(journal, key, options.root)
    at = options.at if options.at is not None else head
    state = await load_at(journal, key, at, head)
    return StateReport(key, head, at, state)
