"""``python -m journal``: the ``agent-journal`` command line."""

from __future__ import annotations

import sys

from journal.cli import main

if __name__ == "__main__":
    sys.exit(main())
