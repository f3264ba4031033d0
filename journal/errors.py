"""The whole exception tree of agent-journal.

Errors are grouped by what the caller must do next::

    JournalError
    ├── ConflictError                    reload, then retry or give up
    │   ├── VersionConflictError         .key .expected .actual
    │   ├── StaleStateError              a loaded state is no longer the head
    │   └── TodoRevisionError            the todo list moved on: reload, rewrite
    ├── LeaseError
    │   ├── LeaseHeldError               .holder .expires_at
    │   └── FencedError                  our epoch was superseded: stop, never retry
    ├── RunError
    │   ├── UncertainToolCallsError      reconcile these tool calls before a new run
    │   ├── DuplicateRunError            an explicit run id the journal already has
    │   └── RecursiveRunError            a run started inside a run, on its thread
    ├── StorageError                     the backend failed (.transient: retry later)
    │   ├── ObjectExistsError            create() found the key taken
    │   ├── ObjectNotFoundError          read()/replace() found no such key
    │   └── PreconditionFailedError      replace() found another etag
    ├── CorruptRecordError               bad checksum, broken chain, gap, missing blob
    ├── UnknownEventError                a required event type this reader lacks
    ├── CompressionUnavailableError      zstd data or setting, zstandard missing
    └── EncryptionError                  encrypted data that cannot be read or sealed
        ├── KeyUnavailableError          .owner .key_id: a data key missing or wrong
        └── ErasedError                  .owner: the owner's data keys were destroyed
    InvalidKeyError(JournalError, ValueError)
    InvalidEventError(JournalError, ValueError)   an event readers would refuse
    TaskError(JournalError, ValueError)   a task change the task's state refuses

Programmer mistakes raise the built-in ``ValueError`` / ``TypeError``. Native backend
exceptions never leak: stores translate them into ``StorageError`` (or a more specific
error) with the original exception as ``__cause__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "CompressionUnavailableError",
    "ConflictError",
    "CorruptRecordError",
    "DuplicateRunError",
    "EncryptionError",
    "ErasedError",
    "FencedError",
    "InvalidEventError",
    "InvalidKeyError",
    "JournalError",
    "KeyUnavailableError",
    "LeaseError",
    "LeaseHeldError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "PreconditionFailedError",
    "RecursiveRunError",
    "RunError",
    "StaleStateError",
    "StorageError",
    "TaskError",
    "TodoRevisionError",
    "UncertainToolCallsError",
    "UnknownEventError",
    "VersionConflictError",
]


class JournalError(Exception):
    """Base of every error raised by agent-journal."""


class ConflictError(JournalError):
    """Someone else committed first: reload, then retry or give up."""


class VersionConflictError(ConflictError):
    """The version a write expected is not the thread's head.

    Attributes:
        key: A readable name of the thread.
        expected: The version the caller expected to be the head.
        actual: The head (or the slot found taken) when the write was refused.
    """

    def __init__(self, key: str, expected: int, actual: int, detail: str = "") -> None:
        self.key = key
        self.expected = expected
        self.actual = actual
        msg = f"version conflict on {key}: expected head {expected}, found {actual}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class StaleStateError(ConflictError):
    """A state loaded at some version is no longer current and was not saved.

    Attributes:
        key: A readable name of the thread or slot.
        expected: The version the state was loaded at.
        actual: The current version.
    """

    def __init__(self, key: str, expected: int, actual: int) -> None:
        self.key = key
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stale state for {key}: it was loaded at version {expected}, "
            f"but the current version is {actual}; reload and reapply the change"
        )


class TodoRevisionError(ConflictError):
    """A todo list was written against a revision that is no longer current.

    Attributes:
        expected: The revision the writer based its list on.
        actual: The current revision.
    """

    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stale todo revision: the list was written against revision "
            f"{expected}, but the current revision is {actual}; reload the todos "
            "and write them again"
        )


class LeaseError(JournalError):
    """The writer lease of a thread could not be had or was lost."""


class LeaseHeldError(LeaseError):
    """Another holder's lease on the thread has not expired.

    Attributes:
        key: A readable name of the thread.
        holder: The current holder's id.
        epoch: The current lease epoch.
        expires_at: When the holder's lease expires (seconds since the epoch).
    """

    def __init__(self, key: str, holder: str, epoch: int, expires_at: float) -> None:
        self.key = key
        self.holder = holder
        self.epoch = epoch
        self.expires_at = expires_at
        super().__init__(
            f"lease on {key} is held by {holder!r} (epoch {epoch}) "
            f"until {expires_at:.3f}"
        )


class FencedError(LeaseError):
    """This writer's epoch was superseded; it must stop writing and never retry.

    Attributes:
        key: A readable name of the thread.
        epoch: This writer's epoch.
        current_epoch: The newer epoch found (None when the lease was lost for
            another reason, such as renewals failing past the lease's expiry).
    """

    def __init__(
        self, key: str, epoch: int, current_epoch: int | None, detail: str = ""
    ) -> None:
        self.key = key
        self.epoch = epoch
        self.current_epoch = current_epoch
        if current_epoch is None:
            msg = f"writer of {key} at epoch {epoch} lost its lease"
        else:
            msg = (
                f"writer of {key} at epoch {epoch} was fenced by epoch {current_epoch}"
            )
        super().__init__(f"{msg}: {detail}" if detail else msg)


class RunError(JournalError):
    """An agent run cannot start as asked."""


class UncertainToolCallsError(RunError):
    """The thread has tool calls whose outcome is unknown; reconcile them first.

    Attributes:
        key: A readable name of the thread.
        call_ids: The uncertain tool calls' ids.
    """

    def __init__(self, key: str, call_ids: Sequence[str]) -> None:
        self.key = key
        self.call_ids = list(call_ids)
        super().__init__(
            f"{key} has {len(self.call_ids)} tool call(s) with unknown outcome "
            f"({', '.join(self.call_ids)}); reconcile them before starting a new run"
        )


class DuplicateRunError(RunError):
    """An explicit run id is already in the journal."""


class RecursiveRunError(RunError):
    """A run was started, from inside a run, on that run's own thread.

    The outer run holds the thread (its lock and lease) until the inner one returns,
    so the inner one could never start: a sub-agent needs its own thread (another
    agent id, or another ``thread_id``).

    Attributes:
        key: A readable name of the thread.
        parent_run_id: The run already running there.
    """

    def __init__(self, key: str, parent_run_id: str) -> None:
        self.key = key
        self.parent_run_id = parent_run_id
        super().__init__(
            f"{key}: cannot start a run from inside run {parent_run_id} on the same "
            "thread; give the sub-agent its own thread (another agent_id or "
            "thread_id)"
        )


class StorageError(JournalError):
    """The storage backend failed.

    Attributes:
        transient: True when retrying later (with backoff) may succeed.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        self.transient = transient
        super().__init__(message)


class ObjectExistsError(StorageError):
    """An exclusive ``create`` found its key already taken."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"object {key!r} already exists")


class ObjectNotFoundError(StorageError):
    """The object does not exist."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"object {key!r} does not exist")


class PreconditionFailedError(StorageError):
    """A ``replace`` found an etag other than the one it was given."""

    def __init__(self, key: str, detail: str = "") -> None:
        self.key = key
        msg = f"object {key!r} changed since it was read"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class CorruptRecordError(JournalError):
    """Stored bytes failed a check: checksum, hash chain, contiguity or a blob.

    Attributes:
        key: A readable name of the thread (or the object's storage key).
        version: The version involved, when there is one.
    """

    def __init__(self, key: str, version: int | None, detail: str) -> None:
        self.key = key
        self.version = version
        where = f"{key} version {version}" if version is not None else key
        super().__init__(f"corrupt data in {where}: {detail}")


class UnknownEventError(JournalError):
    """A log holds a *required* event type this reader does not know.

    A state built without it would be wrong, so rebuilding fails closed. Upgrade the
    reader (or register the type) to read the thread.

    Attributes:
        key: A readable name of the thread.
        version: The record holding the event.
        type_name: The unknown type's name.
    """

    def __init__(self, key: str, version: int, type_name: str) -> None:
        self.key = key
        self.version = version
        self.type_name = type_name
        super().__init__(
            f"{key} version {version} holds the required event type {type_name!r}, "
            "which this reader does not know; refusing to build state without it"
        )


class InvalidKeyError(JournalError, ValueError):
    """A thread identifier is not acceptable (empty, too long, control chars)."""


class InvalidEventError(JournalError, ValueError):
    """An append holds an event that readers would refuse; nothing was committed.

    Raised before anything is written, so the thread stays as it was and the next
    valid append commits normally. The message names the event, the field and the
    offending value's type.

    Attributes:
        index: The event's position in the append.
        type_name: The event's type name.
        path: Where in the append the problem is, e.g. ``events[0].message.role``.
        detail: What is wrong there.
        value_type: The offending value's type name, when there is one value.
    """

    def __init__(
        self,
        index: int,
        type_name: str,
        path: str,
        detail: str,
        value_type: str | None = None,
    ) -> None:
        self.index = index
        self.type_name = type_name
        self.path = path
        self.detail = detail
        self.value_type = value_type
        of_type = f" (a value of type {value_type})" if value_type else ""
        super().__init__(
            f"cannot append the {type_name} event: {path}: {detail}{of_type}; "
            "nothing was committed"
        )


class CompressionUnavailableError(JournalError, ImportError):
    """Compressed data was found (or compression asked for) without ``zstandard``."""

    def __init__(self) -> None:
        super().__init__(
            "zstd compression needs the zstandard package: "
            "pip install 'agent-journal[zstd]'"
        )


class TaskError(JournalError, ValueError):
    """A task change that the current task refuses; nothing was committed.

    Attributes:
        task_id: The current task's id (None when it has none, or no task began).
        requirement: The requirement involved, if any.
        detail: What is wrong.
    """

    def __init__(
        self, detail: str, *, task_id: str | None = None, requirement: str | None = None
    ) -> None:
        self.task_id = task_id
        self.requirement = requirement
        self.detail = detail
        where = f"task {task_id!r}" if task_id is not None else "the current task"
        if requirement is not None:
            where += f", requirement {requirement!r}"
        super().__init__(f"{where}: {detail}")


def _shown(name: str) -> str:
    """``name`` as a message shows it: escaped (``repr``) unless it is printable.

    Owners and key ids can come from a listing or stored bytes that someone who
    can write the storage chose; a control character in them must not reach a
    terminal or a log as it is.
    """
    return name if name.isprintable() else repr(name)


class EncryptionError(JournalError):
    """Encrypted data cannot be read, or data cannot be encrypted.

    Messages name the key's owner and the key id, never key material.
    """


class KeyUnavailableError(EncryptionError):
    """The data key that encrypted something is missing, or cannot be unwrapped.

    Raised when a journal is opened without encryption on encrypted data, when the
    owner's key object is missing, and when the key provider does not hold (or holds
    another) key-encryption key. It is not corruption: the bytes may be intact.

    Attributes:
        owner: Whose key: the thread's user (``ns/agent/user``) or anonymous
            session (``ns/agent/~/session``), as its key object names it.
        key_id: The data key's or key-encryption key's id ("" when unknown).
        detail: Why the key cannot be used.
    """

    def __init__(self, owner: str, key_id: str, detail: str) -> None:
        self.owner = owner
        self.key_id = key_id
        self.detail = detail
        which = f" (key id {_shown(key_id)})" if key_id else ""
        super().__init__(f"no usable key for {_shown(owner)}{which}: {detail}")


class KeyRotationIncompleteError(EncryptionError):
    """A KEK rotation rewrapped what it could and left some key objects as they were.

    Each of those is another owner's copy, does not decode, names a malformed id,
    holds data keys no KEK of the provider unwraps, or kept changing meanwhile.
    Retiring the older KEKs now makes them useless for good (and locks out an owner
    whose data keys only an older KEK wraps): look at them first.

    Attributes:
        rewritten: How many key objects the rotation rewrote.
        skipped: The path of each key object left as it was, and why.
    """

    def __init__(self, rewritten: int, skipped: list[tuple[str, str]]) -> None:
        self.rewritten = rewritten
        self.skipped = skipped
        # Paths come from the store's listing: shown escaped.
        listed = "; ".join(f"{path!r}: {why}" for path, why in skipped)
        super().__init__(
            f"KEK rotation left {len(skipped)} key object(s) as they were "
            f"({listed}) and rewrote {rewritten}: deal with them before retiring "
            "the older KEKs"
        )


class ErasedError(EncryptionError):
    """The owner's data keys were destroyed (crypto-shredding): the data is gone.

    Every copy of what those keys encrypted (log, checkpoints, object versions,
    backups) is unreadable. This is the expected state of an erased user, not
    corruption.

    Attributes:
        owner: Whose keys were destroyed.
        erased_at: When (wall clock seconds), 0.0 when unknown.
    """

    def __init__(self, owner: str, erased_at: float = 0.0, what: str = "") -> None:
        self.owner = owner
        self.erased_at = erased_at
        subject = f"{what}: " if what else ""
        super().__init__(
            f"{subject}the data of {_shown(owner)} was erased (its data keys were "
            "destroyed)"
        )
