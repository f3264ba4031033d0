"""What every adapter provides, and helpers they share."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pathlib import Path

    from _peers.workload import Turn


def du(root: Path | str) -> tuple[int, int]:
    """(sum of file sizes, allocated bytes as ``du -B1`` counts them) under root."""
    size = alloc = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            size += st.st_size
            alloc += st.st_blocks * 512
    return size, alloc


def made(directory: Path) -> Path:
    """``directory``, created with its parents if missing."""
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class Adapter:
    """One system under test, holding one thread open as an agent would.

    Subclasses set ``system`` (the product), ``variant`` (backend), ``durability``
    (what the setting does, stated exactly) and ``items_per_turn`` (how many stored
    items one turn becomes: the load check counts them).
    """

    system: ClassVar[str] = ""
    key: str = ""
    """The short name ``--only`` selects (set by bench_peers)."""
    durable: str = "durable"
    """"durable", "not durable" or "memory": which agent-journal row it is
    compared with (fsync=True, fsync=False, memory://)."""
    items_per_turn: ClassVar[int] = 4
    persistent: ClassVar[bool] = True
    """False for in-memory backends: nothing survives the process to load."""
    module: ClassVar[str] = ""
    """The ``_peers`` module whose ``child_load`` loads this system's storage."""

    def __init__(self, variant: str, durability: str) -> None:
        self.variant = variant
        self.durability = durability
        self.turns = 0

    @property
    def name(self) -> str:
        return f"{self.system}: {self.variant}"

    async def open(self) -> None:
        raise NotImplementedError

    async def put_turn(self, turn: Turn) -> None:
        raise NotImplementedError

    async def load(self) -> int:
        """Rebuild the full state from storage in this process; return its items."""
        raise NotImplementedError

    def footprint(self) -> tuple[int, int] | None:
        """(bytes, allocated bytes) of this system's storage, None for in-memory."""
        return None

    async def byte_parts(self) -> dict[str, int] | None:
        """Where the footprint's bytes go (agent-journal on local disk), or None."""
        return None

    def loader_spec(self) -> dict[str, Any]:
        """What ``child_load`` needs to find and read this thread (JSON)."""
        raise NotImplementedError

    async def seed(self, n_turns: int) -> bool:
        """Start a new thread already holding ``n_turns`` turns, if the system needs
        that to reach a length at all (see the LangGraph adapter); False otherwise."""
        return False

    async def settle(self) -> None:
        """Finish any work the system left running in the background."""

    async def close(self) -> None:
        pass
