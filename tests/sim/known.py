"""Engine defects the simulation found and that are not fixed yet.

Each one has a failing test in ``test_found_defects.py``; the seed suites do not
fail again on a seed whose every violation is one of these (they count them). When
a defect is fixed, its test passes: delete its entry here.
"""

from __future__ import annotations

__all__ = ["KNOWN_DEFECTS", "known_defect"]

KNOWN_DEFECTS = {
    "writer-wedged-on-own-commit": (
        "raised VersionConflictError: version conflict on thread",
        "slot taken by another writer claiming epoch",
    ),
    # A reader's verify concurrent with a writer (the snapshot checks say
    # "verify <thread>:", never this).
    "verify-races-a-writer": (
        "verify found [",
        "checkpoint covers a version that is not in the log",
    ),
}
"""Name -> the fragments a violation's text must all contain."""


def known_defect(violation: str) -> str | None:
    """The name of the known defect ``violation`` shows, or None."""
    for name, fragments in KNOWN_DEFECTS.items():
        if all(f in violation for f in fragments):
            return name
    return None
