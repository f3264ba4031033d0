"""The engine's logger imports ``logging`` on first use and logs as the real one."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import TYPE_CHECKING

from journal.lazy import lazy_logger

if TYPE_CHECKING:
    import pytest


def test_a_lazy_logger_logs_through_the_named_logger(caplog: pytest.LogCaptureFixture):
    logger = lazy_logger("journal")
    with caplog.at_level(logging.WARNING, logger="journal"):
        logger.warning("%s: could not remove leftovers: %s", "t", "EACCES")
        logger.info("below the level")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("journal", "WARNING", "t: could not remove leftovers: EACCES")
    ]
    assert logger.isEnabledFor(logging.WARNING)


def test_logging_is_imported_only_when_something_is_logged():
    code = (
        "import sys\n"
        "from journal.lazy import lazy_logger\n"
        "logger = lazy_logger('journal')\n"
        "assert 'logging' not in sys.modules\n"
        "logger.warning('now')\n"
        "assert 'logging' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "now" in done.stderr  # logging's last-resort handler printed it
