"""The journal contract bound to the in-process and local-disk stores."""

from __future__ import annotations

import uuid

import pytest

from stores.testing.journal_contract import JournalContract


class TestMemoryJournal(JournalContract):
    @pytest.fixture
    async def journal_url(self):
        return f"memory://journal-contract-{uuid.uuid4().hex}"


class TestLocalJournal(JournalContract):
    @pytest.fixture
    async def journal_url(self, tmp_path):
        return str(tmp_path / "journal")


class TestLocalJournalNoFsync(JournalContract):
    @pytest.fixture
    async def journal_url(self, tmp_path):
        return (tmp_path / "journal").as_uri()

    @pytest.fixture
    def storage_options(self):
        return {"fsync": False}


class TestMemoryJournalZstd(JournalContract):
    """Every record and blob compressed."""

    @pytest.fixture
    async def journal_url(self):
        return f"memory://journal-contract-{uuid.uuid4().hex}"

    @pytest.fixture
    def storage_options(self):
        return {"compression": "zstd"}


class TestLocalJournalZstd(JournalContract):
    @pytest.fixture
    async def journal_url(self, tmp_path):
        return str(tmp_path / "journal")

    @pytest.fixture
    def storage_options(self):
        return {"compression": "zstd"}
