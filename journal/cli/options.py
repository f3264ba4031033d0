"""What each command is asked to do: plain, typed requests, free of argparse.

The parser turns command-line flags into these; another front end (a web UI, a
test) builds them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from journal.keys import ThreadKey

__all__ = [
    "CheckpointOptions",
    "DemoOptions",
    "DiffOptions",
    "ExportOptions",
    "ImportOptions",
    "LogOptions",
    "LsOptions",
    "Options",
    "RecoverOptions",
    "SealOptions",
    "StateOptions",
    "ThreadFilter",
    "VerifyOptions",
]


@dataclass(frozen=True, slots=True)
class ThreadFilter:
    """Optional ids selecting threads; with an agent and a session, one thread."""

    namespace: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    thread_id: str | None = None

    @property
    def names_one_thread(self) -> bool:
        """Whether the agent and the session are both given."""
        return self.agent_id is not None and self.session_id is not None

    def key(self) -> ThreadKey:
        """The one thread named (empty thread and namespace ids mean the default).

        Raises:
            InvalidKeyError: An id is not valid.
        """
        return ThreadKey(
            self.agent_id or "",
            self.session_id or "",
            self.user_id,
            self.thread_id or "main",
            self.namespace or "default",
        )

    def check(self) -> None:
        """Validate whichever ids are given with ``ThreadKey``'s own rules.

        Raises:
            InvalidKeyError: A given id is not valid.
        """
        ThreadKey(
            self.agent_id if self.agent_id is not None else "x",
            self.session_id if self.session_id is not None else "x",
            self.user_id,
            self.thread_id if self.thread_id is not None else "main",
            self.namespace if self.namespace is not None else "default",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LsOptions:
    """``ls``: the threads matching ``filter`` under ``root``."""

    root: str
    filter: ThreadFilter = field(default_factory=ThreadFilter)


@dataclass(frozen=True, slots=True, kw_only=True)
class SealOptions:
    """``seal``: print the latest seal of ``key`` (sign one at the head if ``new``)."""

    root: str
    key: ThreadKey
    new: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LogOptions:
    """``log``: a thread's records from ``start`` to ``stop``, or the last ``tail``."""

    root: str
    key: ThreadKey
    start: int | None = None
    stop: int | None = None
    tail: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StateOptions:
    """``state``: a thread's state at version ``at`` (None: the head)."""

    root: str
    key: ThreadKey
    at: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffOptions:
    """``diff``: state changes from ``start`` (head-1) to ``stop`` (head)."""

    root: str
    key: ThreadKey
    start: int | None = None
    stop: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyOptions:
    """``verify``: the one thread ``filter`` names, else every matching thread."""

    root: str
    filter: ThreadFilter = field(default_factory=ThreadFilter)
    trust: str | None = None
    """A public key (``ed25519:<base64>``, hex or a PEM file): check the seals."""
    anchor: str | None = None
    """A file holding a seal printed by ``seal``, which the history must extend."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointOptions:
    """``checkpoint``: write a checkpoint of ``key`` at its head."""

    root: str
    key: ThreadKey


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportOptions:
    """``export``: every record of ``key``, to ``output`` (None: the caller's sink)."""

    root: str
    key: ThreadKey
    output: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoverOptions:
    """``recover``: take the lease of ``key`` as ``holder``, waiting ``wait`` s."""

    root: str
    key: ThreadKey
    holder: str
    wait: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportOptions:
    """``import``: the state slot of ``key`` in ``source`` becomes a new thread.

    ``source`` None means the JSON-file store's default root for the agent.
    """

    key: ThreadKey
    holder: str
    source: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    """``demo``: the tour, on ``root`` (which a child process opens too).

    ``cli_flags`` are repeated in the inspection commands the demo prints;
    ``pace`` is the pause after each step title, in seconds.
    """

    root: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    cli_flags: tuple[str, ...] = ()
    pace: float = 0.0


Options = (
    LsOptions
    | LogOptions
    | StateOptions
    | DiffOptions
    | VerifyOptions
    | SealOptions
    | CheckpointOptions
    | ExportOptions
    | RecoverOptions
    | ImportOptions
    | DemoOptions
)
"""Any command's options."""
