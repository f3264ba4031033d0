"""Fixtures of the power-loss suite: a LazyFS mount per test, and the cut budget."""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING

import pytest

from tests.powerloss._lazyfs import LazyFS, lazyfs_binary

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# The whole suite's number of power cuts, shared out among its scenarios; CI runs
# the default, AJ_POWERLOSS_CUTS=1000 the full size (docs/TESTING.md).
TOTAL_CUTS = int(os.environ.get("AJ_POWERLOSS_CUTS", "200"))
# Every random delay derives from this seed and the scenario's name.
SEED = os.environ.get("AJ_POWERLOSS_SEED", "20261201")
# How many scenarios share TOTAL_CUTS: 14 journal, 1 state store, 1 concurrent.
SCENARIOS = 16


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[LazyFS]:
    """LazyFS mounted on a fresh directory; unmounted (and killed) afterwards."""
    fs = LazyFS(lazyfs_binary(), tmp_path)
    try:
        fs.mount()
        yield fs
    finally:
        fs.unmount()
        if fs.revivals:
            warnings.warn(
                f"LazyFS crashed and was started again {len(fs.revivals)} time(s), "
                f"each crash counted as a power cut: {fs.revivals}",
                stacklevel=1,
            )


@pytest.fixture
def cuts() -> int:
    """Power cuts for one scenario."""
    return max(1, round(TOTAL_CUTS / SCENARIOS))
