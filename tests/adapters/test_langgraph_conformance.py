"""JournalSaver against langgraph-checkpoint-conformance: base and every extension."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability

from journal import Journal
from journal.adapters.langgraph import JournalSaver


@pytest.mark.parametrize("url", ["memory", "file"])
async def test_conformance_full(url, tmp_path):
    @checkpointer_test(name=f"JournalSaver-{url}")
    async def journal_saver():
        root = (
            f"memory://lg-{uuid.uuid4().hex}"
            if url == "memory"
            else str(tmp_path / uuid.uuid4().hex)
        )
        async with Journal.open(root) as journal:
            saver = JournalSaver(journal)
            yield saver
            await saver.aclose()

    report = await validate(journal_saver)
    failures = {
        name: (result.failures if result else None)
        for name, result in report.results.items()
        if result is None or not result.passed
    }
    assert not failures, failures
    assert report.passed_all(), report.conformance_level()
    counts = {name: r.tests_passed for name, r in report.results.items()}
    assert all(r.tests_failed == 0 for r in report.results.values()), counts
    for cap in (Capability.DELETE_FOR_RUNS, Capability.COPY_THREAD, Capability.PRUNE):
        result = report.results[cap.value]
        assert result is not None, cap
        assert result.detected, cap
        assert result.passed, cap
