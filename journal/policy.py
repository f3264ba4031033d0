"""How snapshot mode resolves a save that finds a newer version."""

from __future__ import annotations

import enum

__all__ = ["ConflictPolicy"]


class ConflictPolicy(enum.Enum):
    """What an Agent in snapshot mode does when its save finds a newer version.

    An Agent loads its slot at call entry and saves after the call with the version it
    loaded (compare-and-swap). When another writer saved in between, the store raises
    ``StaleStateError`` and the policy decides:

    Attributes:
        FAIL: Raise ``StaleStateError`` to the caller; nothing of this turn is saved.
            The default: no turn is ever silently dropped or merged.
        OVERWRITE: Last writer wins: save again unconditionally, replacing whatever the
            other writer saved (its changes are lost).
        APPEND_MERGE: Reload the slot, append this turn's new messages after the
            slot's messages and retry the compare-and-swap once. Refused (raises
            ``StaleStateError``) when the turn compacted or cleared the context, because
            appending to a context the turn did not see would be wrong, and when it
            changed anything else of the state (todos, plan mode, permissions, tool
            groups), which a merge of messages would drop while keeping the
            messages that report those changes done.
    """

    FAIL = "fail"
    OVERWRITE = "overwrite"
    APPEND_MERGE = "append_merge"
