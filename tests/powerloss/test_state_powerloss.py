"""Power loss under a JSON-file state store writer, on LazyFS.

A child saves one slot in a loop with compare-and-swap, printing each acknowledged
version; the parent cuts the power at a random moment (seeded) and checks that the
slot holds the last acknowledged save or the one in flight after it, with the
content of that version, never an older one, and that the next save goes on from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import TYPE_CHECKING

import pytest

from projections import AgentState
from stores import JsonFileAgentStateStore
from tests.powerloss._harness import rounds
from tests.powerloss._writer import ENTRY, SESSION
from tests.powerloss.conftest import SEED

if TYPE_CHECKING:
    from pathlib import Path

    from tests.powerloss._lazyfs import LazyFS

pytestmark = pytest.mark.powerloss


async def _check_round(root: Path, round_: int, acked: int, before: int) -> int:
    where = f"json-state round {round_} (seed {SEED})"
    async with JsonFileAgentStateStore(root) as store:
        found = await store.load(None, SESSION, ENTRY)
        version = found[1] if found else 0
        floor = max(acked, before)
        assert floor <= version <= floor + 1, (
            f"{where}: slot at version {version}, acknowledged {acked}, "
            f"before this round {before}"
        )
        if found:
            assert found[0].summary == f"s-{version}", f"{where}: wrong content"
        new = await store.save(
            None,
            SESSION,
            ENTRY,
            AgentState(summary=f"s-{version + 1}"),
            expected_version=version,
        )
        assert new == version + 1, where
        again = await store.load(None, SESSION, ENTRY)
        assert again is not None, where
        assert again[1] == new, where
        assert again[0].summary == f"s-{new}", where
        return new


def test_power_cut_keeps_acknowledged_state_saves(lazyfs: LazyFS, cuts: int) -> None:
    root = lazyfs.mount_point / "state"
    rng = random.Random(f"{SEED}:json-state")  # noqa: S311 - cut times
    head = acked_total = in_flight = 0
    cfgs = [{"mode": "state", "root": str(root)} for _ in range(cuts)]
    with contextlib.closing(rounds(lazyfs, cfgs, rng)) as dead_writers:
        for round_, child in enumerate(dead_writers):
            acks = [version for version, _ in child.acked()]
            assert acks == list(range(head + 1, head + 1 + len(acks))), acks
            acked = acks[-1] if acks else 0
            acked_total += len(acks)
            saved = asyncio.run(_check_round(root, round_, acked, head))
            # saved - 1 is what survived the cut (the parent saved one more).
            in_flight += saved - 1 - max(acked, head)
            head = saved
    print(
        f"\npowerloss json-state: {lazyfs.cuts} cuts, {acked_total} acknowledged saves,"
        f" 0 lost, {in_flight} unacknowledged saves survived, version {head}"
    )
