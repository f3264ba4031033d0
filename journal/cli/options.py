"""What each command is asked to do: plain, typed requests, free of argparse.

The parser turns command-line flags into these; another front end (a web UI, a
test) builds them directly.
"""

from __future__ import annotations

from typing import Any

import msgspec

from journal.keys import ThreadKey

__all__ = [
    "CheckpointOptions",
    "DemoOptions",
    "DiffOptions",
    "ExportOptions",
    "HistoryOptions",
    "ImportExportOptions",
    "ImportOptions",
    "IndexOptions",
    "LogOptions",
    "LsOptions",
    "Options",
    "ReconcileOptions",
    "RecoverOptions",
    "RunsOptions",
    "SealOptions",
    "StateOptions",
    "ThreadFilter",
    "VerifyOptions",
]


class ThreadFilter(msgspec.Struct, frozen=True):
    """Optional ids selecting threads; with an agent and a session, one thread.

    A user left out (``user_id`` None, ``anonymous`` False) means any user;
    ``anonymous`` selects the anonymous user.
    """

    namespace: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    thread_id: str | None = None
    anonymous: bool = False

    @property
    def names_one_thread(self) -> bool:
        """Whether the agent and the session are both given."""
        return self.agent_id is not None and self.session_id is not None

    @property
    def user_given(self) -> bool:
        """Whether a user (or the anonymous user) is selected."""
        return self.user_id is not None or self.anonymous

    @property
    def given(self) -> bool:
        """Whether any id is given."""
        return self.user_given or any(
            v is not None
            for v in (self.namespace, self.agent_id, self.session_id, self.thread_id)
        )

    def key(self) -> ThreadKey:
        """The one thread named (empty thread and namespace ids mean the default).

        A user left out is the anonymous user here: this is the key a command
        that creates a thread (``import``) writes.

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


class LsOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``ls``: the threads matching ``filter`` under ``root``.

    ``attention``: only the threads needing an operator (an unfinished run,
    uncertain tool calls, damage found by the cheap check).
    """

    root: str
    filter: ThreadFilter = msgspec.field(default_factory=ThreadFilter)
    attention: bool = False


class IndexOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``index``: register every thread under ``root`` in the store's thread index."""

    root: str


class SealOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``seal``: print the latest seal of ``key`` (sign one at the head if ``new``)."""

    root: str
    key: ThreadKey
    new: bool = False


class LogOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``log``: a thread's records from ``start`` to ``stop``, or the last ``tail``.

    ``run_id`` keeps the records of one run; ``types`` the records holding an
    event of one of those type names (and only those events). ``follow`` keeps
    polling every ``poll`` seconds for new records (``limit``: stop after that
    many records shown, for scripts and tests; None: until interrupted).
    """

    root: str
    key: ThreadKey
    start: int | None = None
    stop: int | None = None
    tail: int | None = None
    run_id: str | None = None
    types: tuple[str, ...] = ()
    follow: bool = False
    poll: float = 0.5
    limit: int | None = None


class RunsOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``runs``: the run ledger of ``key`` (one run only with ``run_id``)."""

    root: str
    key: ThreadKey
    run_id: str | None = None


class HistoryOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``history``: every message ``key`` ever held, cleared and compacted marked."""

    root: str
    key: ThreadKey


class ReconcileOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``reconcile``: record the operator's verdict on each uncertain tool call.

    ``outcomes`` maps a call id to what happened (its result text); ``errors``
    maps a call id to an error message (the call failed). Together they must name
    exactly the thread's uncertain calls.
    """

    root: str
    key: ThreadKey
    holder: str
    outcomes: dict[str, str] = msgspec.field(default_factory=dict)
    errors: dict[str, str] = msgspec.field(default_factory=dict)
    reason: str = "reconciled by an operator"
    wait: float = 0.0


class StateOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``state``: a thread's state at version ``at`` (None: the head)."""

    root: str
    key: ThreadKey
    at: int | None = None


class DiffOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``diff``: state changes from ``start`` (head-1) to ``stop`` (head)."""

    root: str
    key: ThreadKey
    start: int | None = None
    stop: int | None = None


class VerifyOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``verify``: the one thread ``filter`` names, else every matching thread."""

    root: str
    filter: ThreadFilter = msgspec.field(default_factory=ThreadFilter)
    trust: str | None = None
    """A public key (``ed25519:<base64>``, hex or a PEM file): check the seals."""
    anchor: str | None = None
    """A file holding a seal printed by ``seal``, which the history must extend."""


class CheckpointOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``checkpoint``: write a checkpoint of ``key`` at its head."""

    root: str
    key: ThreadKey


class ExportOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``export``: every record of ``key``, to ``output`` (None: the caller's sink)."""

    root: str
    key: ThreadKey
    output: str | None = None


class RecoverOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``recover``: take the lease of ``key`` as ``holder``, waiting ``wait`` s."""

    root: str
    key: ThreadKey
    holder: str
    wait: float = 0.0


class ImportOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``import``: the state slot of ``key`` in ``source`` becomes a new thread.

    ``source`` None means the JSON-file store's default root for the agent.
    """

    key: ThreadKey
    holder: str
    source: str | None = None


class ImportExportOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``import --from-export``: the export file ``path`` becomes the thread ``key``."""

    key: ThreadKey
    holder: str
    path: str


class DemoOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``demo``: the tour, on ``root`` (which a child process opens too).

    ``cli_flags`` are repeated in the inspection commands the demo prints;
    ``pace`` is the pause after each step title, in seconds; ``incident`` stops
    after the crash (step 4), leaving the interrupted run and its uncertain tool
    call for an operator to investigate.
    """

    root: str
    storage_options: dict[str, Any] = msgspec.field(default_factory=dict)
    cli_flags: tuple[str, ...] = ()
    pace: float = 0.0
    incident: bool = False


Options = (
    LsOptions
    | IndexOptions
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
    | RunsOptions
    | HistoryOptions
    | ReconcileOptions
    | ImportExportOptions
)
"""Any command's options."""
