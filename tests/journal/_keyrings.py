"""What the key-handling tests share: a thread, a journal on local disk, forged ids."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from journal import Journal, MessageAppended, Msg, ThreadKey
from stores.local import LocalStore

if TYPE_CHECKING:
    from pathlib import Path

    from projections import AgentState

KEY = ThreadKey("agent", "s1", user_id="alice")
THREAD = "default/agent/alice/s1/main"
KEYRING = "@keyring/threads/default/agent"
"""Where the key objects of agent ``agent``'s users lie, under the root."""
MARKER = "osprey-gabbro-2048"
"""Text the threads hold, and their summary: looked for after a load."""
FORGED = "\n\x1b[32mALL OK\x1b[0m\n"
"""A key id someone who can write the storage made: control characters."""
RAW = ("\x1b", "\nALL OK", "ALL OK\x1b")
"""What of :data:`FORGED` must never reach a message unescaped."""


def assert_escaped(text: str) -> None:
    """``text`` shows :data:`FORGED` escaped (as repr does), never raw."""
    for raw in RAW:
        assert raw not in text
    assert "\\x1b" in text


def local(root: Path) -> LocalStore:
    return LocalStore(root, segments=False, fsync=False)


def journal_of(root: Path, provider: object) -> Journal:
    """A journal on ``root`` encrypting with ``provider``, no automatic checkpoints."""
    return Journal(
        local(root),
        encryption=provider,  # type: ignore[arg-type]
        checkpoint_every=0,
    )


def key_of(user: str) -> ThreadKey:
    return ThreadKey("agent", "s1", user_id=user)


async def say(journal: Journal, key: ThreadKey) -> None:
    """A message and the summary :data:`MARKER` in ``key``, then a checkpoint."""

    def summarize(state: AgentState) -> None:
        state.summary = MARKER

    async with journal.writer(key) as w:
        await w.append([MessageAppended(Msg("user", f"{MARKER} {key}"))])
        await w.update("summarize", summarize)
        await w.checkpoint()


def kek_of(path: Path) -> str:
    """The KEK id that wraps the (first) data key of the key object at ``path``."""
    return str(json.loads(path.read_text())["keys"][0]["kek"])
