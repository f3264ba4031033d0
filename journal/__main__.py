"""``python -m journal``: the ``agent-journal`` command line."""

from __future__ import annotations

from journal.cli import run

if __name__ == "__main__":
    run()
