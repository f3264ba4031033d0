"""Smoke test of benchmarks/bench_crypto.py: its codec rows at a tiny size."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


async def test_codec_rows_are_well_formed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = importlib.import_module("bench_crypto")
    rows = await bench.codec_rows(60)
    assert [r[0].split(",")[0] for r in rows] == [
        "codec: encode a 2",
        "codec: parse and check it",
    ]
    for _, value, ratio in rows:
        assert "µs vs" in value
        assert ratio.endswith("µs)")
    assert "| measure |" in bench.render(rows, quick=True, fsync=False)
