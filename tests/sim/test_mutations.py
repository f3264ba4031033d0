"""The simulation catches broken protocols: each mutant fails within the CI budget.

Each test breaks one rule of the write protocol by monkeypatching
``ThreadWriter`` (no engine code changes), runs seeds until the simulator reports a
violation, and checks that the same seed passes on the real engine (so the
violation is the mutant's doing). The first failing seed is printed (``-s``) and
recorded as a test property.

* ``no_fence``: acquire commits no ``LeaseAcquired`` record;
* ``no_slot_read``: a taken slot is treated as a plain version conflict: the
  writer catches up with the log and retries at the next version, never reading
  the slot to see whose record it is;
* ``no_idempotency``: the writer ignores that a batch id was already committed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

from journal import events as ev
from journal.engine.replay import rebuild
from journal.engine.writer import ThreadWriter
from tests.sim.known import known_defect
from tests.sim.simulator import run_seed
from tests.sim.test_sim import SEEDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from journal import codec

_commit = ThreadWriter._commit


async def _commit_without_fence(
    self: ThreadWriter, events: list[object], *args: Any, **kwargs: Any
) -> codec.Record | None:
    kept = [e for e in events if not isinstance(e, ev.LeaseAcquired)]
    if not kept:
        return None  # _acquire ignores what the fence commit returns
    return await _commit(self, kept, *args, **kwargs)


async def _taken_without_reading(
    self: ThreadWriter, version: int, *args: Any, **kwargs: Any
) -> codec.Record | None:
    loaded = await rebuild(self.log, None)
    self.state, self.version = loaded.state, loaded.head
    self._head_hash = loaded.head_hash
    return None  # retry at the next version


async def _never_retried(self: ThreadWriter, *args: Any, **kwargs: Any) -> None:
    """The idempotency lookup that never finds the batch already committed."""
    return None


MUTANTS: dict[str, tuple[str, Callable[..., Any], str]] = {
    # Structurally, the first run already shows an epoch rising with no fence;
    # asked for here is the harm: a writer whose epoch was superseded commits after
    # the newer writer's acquire returned.
    "no_fence": ("_commit", _commit_without_fence, "after the acquire at epoch"),
    # A lost reply's retry commits the batch again at the next version.
    "no_slot_read": ("_taken", _taken_without_reading, "and again at"),
    # Retrying an acknowledged batch writes it again.
    "no_idempotency": (
        "_retried",
        _never_retried,
        "the retry wrote instead of returning the commit",
    ),
}


def _unexplained(violations: list[str]) -> list[str]:
    return [v for v in violations if known_defect(v) is None]


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_simulation_catches(
    mutant: str,
    monkeypatch: pytest.MonkeyPatch,
    record_property: Callable[[str, object], None],
) -> None:
    """Within the CI budget a seed shows the mutant's harm; the engine passes it."""
    name, replacement, harm = MUTANTS[mutant]
    logging.disable(logging.WARNING)
    try:
        for seed in range(SEEDS):
            with monkeypatch.context() as patch:
                patch.setattr(ThreadWriter, name, replacement)
                found = [v for v in run_seed(seed).violations if harm in v]
            if found and not _unexplained(run_seed(seed).violations):
                break
        else:
            pytest.fail(f"{mutant}: no seed of {SEEDS} shows {harm!r}")
    finally:
        logging.disable(logging.NOTSET)
    record_property("first_failing_seed", seed)
    print(f"{mutant}: caught at seed {seed} ({seed + 1} seeds run): {found[0]}")
