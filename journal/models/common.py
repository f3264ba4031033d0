"""What the model clients share: usage, errors, and the status-to-error mapping."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ModelAuthError",
    "ModelError",
    "ModelRateLimitError",
    "ModelRequestError",
    "ModelResponseError",
    "ModelUnavailableError",
    "Usage",
    "error_for_status",
    "text_of",
]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one call (or a client's calls so far) used."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )


class ModelError(Exception):
    """A model provider's call failed.

    Attributes:
        provider: ``"openai"`` or ``"anthropic"`` (or the compatible server's).
        status: The HTTP status, or None when no reply came.
        transient: Whether retrying later may succeed.
    """

    transient = False

    def __init__(self, provider: str, message: str, status: int | None = None) -> None:
        super().__init__(
            f"{provider}: {message}" + (f" (HTTP {status})" if status else "")
        )
        self.provider = provider
        self.status = status


class ModelAuthError(ModelError):
    """The credentials were refused (401/403): fix the key, do not retry."""


class ModelRequestError(ModelError):
    """The request was refused as invalid (400/404/413/422): fix the request."""


class ModelRateLimitError(ModelError):
    """Rate limited (429): retry after a pause."""

    transient = True


class ModelUnavailableError(ModelError):
    """The provider failed or could not be reached (5xx, 529, connection)."""

    transient = True


class ModelResponseError(ModelError):
    """The reply could not be understood (for example tool arguments not JSON)."""


def error_for_status(provider: str, status: int, message: str) -> ModelError:
    """The error class for an HTTP status."""
    if status in (401, 403):
        return ModelAuthError(provider, message, status)
    if status == 429:
        return ModelRateLimitError(provider, message, status)
    if status >= 500:
        return ModelUnavailableError(provider, message, status)
    return ModelRequestError(provider, message, status)


def text_of(output: Any) -> str:
    """A tool's output as the text sent back to a model."""
    return output if isinstance(output, str) else json.dumps(output, default=str)
