"""Engine defects the simulation found and that are not fixed yet (none now).

Each one has a failing test in ``test_found_defects.py``; the seed suites do not
fail again on a seed whose every violation is one of these (they count them). When
a defect is fixed, its test passes: delete its entry here.
"""

from __future__ import annotations

__all__ = ["KNOWN_DEFECTS", "known_defect"]

KNOWN_DEFECTS: dict[str, tuple[str, ...]] = {}
"""Name -> the fragments a violation's text must all contain."""


def known_defect(violation: str) -> str | None:
    """The name of the known defect ``violation`` shows, or None."""
    for name, fragments in KNOWN_DEFECTS.items():
        if all(f in violation for f in fragments):
            return name
    return None
