"""The OpenAI Agents SDK's own session tests, run on JournalSession.

The SDK's test files are downloaded at test time (the sdist of the installed
``openai-agents``) into a temporary directory and run in a child pytest with the
``journal_agents_session`` plugin, which puts ``JournalSession`` where the tests take
``SQLiteSession`` from. Nothing of the SDK's is copied into this repository.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("agents")

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = Path(__file__).resolve().parent / "plugins"

FILES = [
    "tests/memory/test_session.py",
    "tests/memory/test_session_context_wrapper.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_session_persistence_sanitize.py",
    "tests/memory/test_compaction_suffix.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/memory/test_openai_responses_compaction_session.py",
]

_CONNECTIONS = "inspects SQLiteSession's per-thread sqlite3 connection pool"
_CORRUPT_ROW = "writes a corrupt row into the SQLite table behind the session's back"
_TX = (
    "injects a failing sqlite3 connection to test SQLite transaction rollback; a "
    "journal commit is one exclusive create, with no transaction to roll back"
)
_COMMIT_GATE = "gates the sqlite3 commit of a private SQLite connection"

# Tests of SQLiteSession's own machinery, which JournalSession does not have.
NOT_APPLICABLE: dict[str, str] = {
    "test_session.py::test_sqlite_session_close_closes_worker_thread_connections": (
        _CONNECTIONS
    ),
    "test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads": (  # noqa: E501
        _CONNECTIONS
    ),
    "test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation": (  # noqa: E501
        _CONNECTIONS
    ),
    "test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads": (
        _CONNECTIONS
    ),
    "test_session.py::test_sqlite_session_closed_rejects_empty_add_items": (
        "matches the text 'SQLiteSession is closed'; the behaviour (a closed session "
        "refuses add_items([])) is tested in test_openai_agents_session.py"
    ),
    "test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent": (
        _CORRUPT_ROW
    ),
    "test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (  # noqa: E501
        _CORRUPT_ROW
    ),
    "test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        _CORRUPT_ROW
    ),
    "test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (  # noqa: E501
        _CORRUPT_ROW
    ),
    "test_session.py::test_sqlite_session_file_lock_is_shared_across_instances": (
        "counts SQLiteSession's process-local file locks (the journal's writer "
        "lease serializes writers across processes instead)"
    ),
    "test_session.py::test_sqlite_session_failed_add_items_releases_write_lock": _TX,
    "test_session.py::test_sqlite_session_failed_clear_session_rolls_back": _TX,
    "test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock": _TX,
    "test_session.py::test_sqlite_session_rollback_failure_evicts_connection": _TX,
    "test_session.py::test_sqlite_session_close_retries_quarantined_connection": _TX,
    "test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (  # noqa: E501
        _COMMIT_GATE + "; the behaviour (a cancelled write settles, then the "
        "cancellation propagates) is tested in test_openai_agents_session.py"
    ),
    "test_compaction_suffix.py::test_suffix_transaction_rolls_back_failed_insert": _TX,
    "test_compaction_suffix.py::test_cancelled_suffix_transaction_settles_before_newer_append": (  # noqa: E501
        "patches SQLiteSession._insert_items"
    ),
    "test_compaction_suffix.py::test_failed_encrypted_suffix_transaction_preserves_original_tokens": (  # noqa: E501
        _TX
    ),
    "test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::test_settled_pop_failure_invalidates_response_chain": (  # noqa: E501
        _COMMIT_GATE
    ),
    "test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::test_settled_clear_failure_invalidates_response_chain": (  # noqa: E501
        _COMMIT_GATE
    ),
}


@pytest.fixture(scope="module")
def sdk_tests(tmp_path_factory) -> Path:
    version = importlib.metadata.version("openai-agents")
    where = tmp_path_factory.mktemp("openai-agents-sdist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"openai-agents=={version}",
            "-d",
            str(where),
        ],
        check=True,
    )
    (archive,) = where.glob("openai_agents-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    (root,) = (p for p in where.iterdir() if p.is_dir())
    return root


def test_sdk_session_suite_on_journal(sdk_tests: Path) -> None:
    deselect: list[str] = []
    for name in NOT_APPLICABLE:
        deselect += ["--deselect", f"tests/memory/{name}"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(sdk_tests), str(PLUGINS), str(ROOT)]),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-p",
            "journal_agents_session",
            *deselect,
            *FILES,
        ],
        cwd=sdk_tests,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    stood_in = re.search(r"JournalSession stood in for SQLiteSession (\d+) times", tail)
    assert stood_in is not None, tail
    assert int(stood_in.group(1)) >= 50, tail
    summary = re.search(r"(\d+) passed.*?(\d+) deselected", done.stdout)
    assert summary is not None, tail
    passed, deselected = int(summary.group(1)), int(summary.group(2))
    # Each entry names a test (a parametrized one deselects all its cases).
    assert deselected >= len(NOT_APPLICABLE), tail
    assert passed >= 300, tail
