"""Exit statuses of ``agent-journal`` and the error a command stops with."""

from __future__ import annotations

__all__ = ["EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "CommandError", "usage_error"]

EXIT_OK = 0
EXIT_PROBLEM = 1
"""verify found a problem, import refused, or the journal reported an error."""
EXIT_USAGE = 2
"""Bad usage: unknown options, missing or invalid ids, a bad URL."""


class CommandError(Exception):
    """A command cannot go on; printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_PROBLEM) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CommandError:
    """A :class:`CommandError` for bad usage (exit status 2).

    Args:
        message: What was wrong with the request.

    Returns:
        The error, for the caller to raise.
    """
    return CommandError(message, EXIT_USAGE)
