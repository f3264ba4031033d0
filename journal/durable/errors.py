"""The errors of durable turns (all ``JournalError`` subclasses)."""

from __future__ import annotations

from journal.errors import ConflictError, JournalError

__all__ = [
    "StaleRevisionError",
    "TurnCancelledError",
    "TurnFailedError",
    "TurnNotFoundError",
    "TurnStateError",
]


class TurnNotFoundError(JournalError, LookupError):
    """No such turn on the thread (never submitted, or submitted elsewhere).

    Attributes:
        key: The thread.
        turn_id: The turn asked for.
    """

    def __init__(self, key: str, turn_id: str) -> None:
        super().__init__(f"{key}: no turn {turn_id!r} (not queued, not in the log)")
        self.key = key
        self.turn_id = turn_id


class StaleRevisionError(ConflictError):
    """A request named a revision of the turn that is no longer its current one.

    Attributes:
        turn_id: The turn.
        expected: The revision the caller gave.
        actual: The turn's revision now.
    """

    def __init__(self, key: str, turn_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"{key}: turn {turn_id!r} is at revision {actual}, not {expected}: "
            "read its status again before resuming"
        )
        self.turn_id = turn_id
        self.expected = expected
        self.actual = actual


class TurnStateError(JournalError):
    """The turn's status does not allow the request (resume a turn not paused)."""


class TurnFailedError(JournalError):
    """The turn ended failed.

    Attributes:
        turn_id: The turn.
        error: What went wrong, as recorded.
    """

    def __init__(self, turn_id: str, error: str) -> None:
        super().__init__(f"turn {turn_id!r} failed: {error}")
        self.turn_id = turn_id
        self.error = error


class TurnCancelledError(JournalError):
    """The turn was cancelled.

    Attributes:
        turn_id: The turn.
        reason: The recorded reason.
    """

    def __init__(self, turn_id: str, reason: str) -> None:
        super().__init__(f"turn {turn_id!r} was cancelled: {reason}")
        self.turn_id = turn_id
        self.reason = reason
