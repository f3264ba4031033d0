"""Snapshot-mode state store on the local file system, one readable JSON file a slot.

Layout under the store's root::

    <root>/<user segment>/<session segment>/<entry segment>.json    the slot
    <root>/<user segment>/<session segment>/<entry segment>.lock    its lock file

Each segment is :func:`journal.keys.encode_segment` of the id (``~`` for the anonymous
user), so no id can escape the root or share a file with another. A slot file reads::

    {"version": 3, "updated_at": "2025-01-01T00:00:00+00:00", "user_id": "alice",
     "session_id": "s1", "entry": "...", "state": {...AgentState...}}

A save writes a temporary file in the slot's directory, fsyncs it, renames it over the
slot and fsyncs the directory, so readers see the old or the new file, never a torn
one. The version check and the rename happen under an exclusive ``fcntl.flock`` on the
slot's lock file, so compare-and-swap holds across processes on one machine (POSIX
only; not over NFS). Lock files are never removed: unlinking a lock file another
process waits on would break mutual exclusion. A delete also removes the temporary
files of the slot that a save killed before its rename left.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from journal.errors import CorruptRecordError, StaleStateError, StorageError
from journal.keys import decode_segment, encode_segment
from stores._files import ensure_dirs, fsync_dir, rename_into_place, write_temp
from stores._offload import run_blocking
from stores.state.base import AgentStateStoreBase
from stores.state.slots import SlotBytes, SlotKey, check_id, utc_now

if TYPE_CHECKING:
    from collections.abc import Iterator

    from stores.state.slots import StateEncoder

__all__ = [
    "DEFAULT_AGENT_ID",
    "DEFAULT_STATE_HOME",
    "STATE_HOME_ENV",
    "JsonFileAgentStateStore",
    "default_root",
]

STATE_HOME_ENV = "AGENT_JOURNAL_STATE_HOME"
"""Environment variable that replaces :data:`DEFAULT_STATE_HOME`."""

DEFAULT_STATE_HOME = "~/.agent-journal/state"
"""Where the default roots live, one directory per agent."""

DEFAULT_AGENT_ID = "default"
"""The agent directory used when no agent_id is given."""

_TRANSIENT_ERRNOS = frozenset(
    {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETIMEDOUT, errno.ENOLCK}
)


class _SlotFile(msgspec.Struct):
    version: int
    updated_at: str
    user_id: str | None
    session_id: str
    entry: str
    # The state's JSON, kept as bytes: decoding it is the adapter's job, and
    # embedding it verbatim keeps the file what encoding the state inline gave.
    state: msgspec.Raw


class _Header(msgspec.Struct):
    version: int


class _Names(msgspec.Struct):
    session_id: str


_slot_decoder = msgspec.json.Decoder(_SlotFile)
_header_decoder = msgspec.json.Decoder(_Header)
_names_decoder = msgspec.json.Decoder(_Names)


def default_root(agent_id: str | None = None) -> Path:
    """The default root of an agent's JSON-file state store.

    ``$AGENT_JOURNAL_STATE_HOME/<agent>`` when the variable is set and not empty, else
    ``~/.agent-journal/state/<agent>``; ``<agent>`` is the encoded ``agent_id``, or
    ``default`` without one.

    Raises:
        InvalidKeyError: ``agent_id`` is not an acceptable id.
    """
    home = os.environ.get(STATE_HOME_ENV) or DEFAULT_STATE_HOME
    agent = DEFAULT_AGENT_ID if agent_id is None else check_id(agent_id, "agent_id")
    return Path(home).expanduser() / encode_segment(agent)


@contextlib.contextmanager
def _map_errors(label: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise StorageError(
            f"file system error on {label}: {exc}",
            transient=exc.errno in _TRANSIENT_ERRNOS,
        ) from exc


class JsonFileAgentStateStore(AgentStateStoreBase):
    """Keeps each slot in a JSON file; safe across threads and processes.

    Args:
        root: The directory of this store. Default: :func:`default_root` of
            ``agent_id``.
        agent_id: Picks the default root (``<state home>/<agent_id>``); not used when
            ``root`` is given.
        fsync: Flush every save and delete to disk before returning (default). With
            False a crash of the process loses nothing, but a power loss may lose
            recent saves, or leave a slot file empty (the rename can reach the
            disk before the data): loading it then raises ``CorruptRecordError``
            naming the slot. Measured on LazyFS.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        agent_id: str | None = None,
        fsync: bool = True,
    ) -> None:
        if root is None:
            self.root = default_root(agent_id)
        else:
            if agent_id is not None:
                check_id(agent_id, "agent_id")
            self.root = Path(root).expanduser()
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    def _dir(self, slot: SlotKey) -> Path:
        return self.root / slot.user / slot.session

    # Each operation is one hop to a worker thread: the whole read-check-write under
    # the lock runs there, so the event loop never blocks on the disk or the lock.

    async def _write(
        self, slot: SlotKey, encode: StateEncoder, expected_version: int | None
    ) -> int:
        return await run_blocking(self._write_sync, slot, encode, expected_version)

    async def _read(self, slot: SlotKey) -> SlotBytes | None:
        return await run_blocking(self._read_sync, slot)

    async def _delete(self, slot: SlotKey) -> bool:
        return await run_blocking(self._delete_sync, slot)

    async def _list_sessions(self, user_id: str | None, user: str) -> list[str]:
        return await run_blocking(self._list_sync, user)

    @contextlib.contextmanager
    def _locked(self, slot: SlotKey, *, create: bool) -> Iterator[bool]:
        """Hold the slot's lock; yields False when absent and ``create`` is False."""
        directory = self._dir(slot)
        if create:
            self._makedirs(directory)
        fd: int | None = None
        try:
            fd = os.open(directory / f"{slot.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            if create:
                raise
        if fd is None:
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield True
        finally:
            # Closing the descriptor releases the lock.
            os.close(fd)

    def _makedirs(self, directory: Path) -> None:
        ensure_dirs(str(directory), fsync=self.fsync, mode=0o700)

    def _current_version(self, path: Path, slot: SlotKey) -> int:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return 0
        try:
            return _header_decoder.decode(raw).version
        # msgspec recurses per nesting level, even to skip a field: hostile or
        # damaged bytes nested deeply enough exhaust Python's recursion limit.
        except (msgspec.DecodeError, RecursionError) as exc:
            raise CorruptRecordError(slot.label, None, f"{path}: {exc}") from exc

    def _write_sync(
        self, slot: SlotKey, encode: StateEncoder, expected_version: int | None
    ) -> int:
        directory = self._dir(slot)
        path = directory / f"{slot.name}.json"
        with _map_errors(slot.label), self._locked(slot, create=True):
            version = self._current_version(path, slot)
            if expected_version is not None and expected_version != version:
                raise StaleStateError(slot.label, expected_version, version)
            new = version + 1
            body = _SlotFile(
                version=new,
                updated_at=utc_now().isoformat(),
                user_id=slot.user_id,
                session_id=slot.session_id,
                entry=slot.entry,
                state=msgspec.Raw(encode(new)),
            )
            data = msgspec.json.format(msgspec.json.encode(body), indent=2) + b"\n"
            tmp = write_temp(
                str(directory),
                data,
                fsync=self.fsync,
                prefix=f".{slot.name}.",
                mode=0o600,
            )
            rename_into_place(tmp, path)
            if self.fsync:
                fsync_dir(directory)
            return new

    def _read_sync(self, slot: SlotKey) -> SlotBytes | None:
        path = self._dir(slot) / f"{slot.name}.json"
        with _map_errors(slot.label):
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                return None
        try:
            body = _slot_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:  # as in _current_version
            raise CorruptRecordError(slot.label, None, f"{path}: {exc}") from exc
        return SlotBytes(bytes(body.state), body.version, origin=str(path))

    def _delete_sync(self, slot: SlotKey) -> bool:
        directory = self._dir(slot)
        with _map_errors(slot.label), self._locked(slot, create=False) as exists:
            if not exists:
                return False
            # Under the lock no save of this slot is under way: a temporary file
            # of its is what a save killed before its rename left, holding a whole
            # state, and a delete (an erasure) must not leave it behind.
            left = self._remove_leftovers(directory, slot)
            try:
                (directory / f"{slot.name}.json").unlink()
            except FileNotFoundError:
                if left and self.fsync:
                    fsync_dir(directory)
                return False
            if self.fsync:
                fsync_dir(directory)
            return True

    @staticmethod
    def _remove_leftovers(directory: Path, slot: SlotKey) -> bool:
        """Remove the slot's temporary files; True if there were any."""
        found = False
        # Segments hold no "." (nor a glob character): only this slot's match.
        for leftover in directory.glob(f".{slot.name}.*"):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
                found = True
        return found

    def _list_sync(self, user: str) -> list[str]:
        user_dir = self.root / user
        sessions: set[str] = set()
        with _map_errors(f"sessions of user directory {user_dir}"):
            try:
                children = list(os.scandir(user_dir))
            except FileNotFoundError:
                return []
            for child in children:
                if not child.is_dir(follow_symlinks=False):
                    continue
                session = self._session_of(Path(child.path), child.name)
                if session is not None:
                    sessions.add(session)
        return sorted(sessions)

    @staticmethod
    def _session_of(directory: Path, segment: str) -> str | None:
        """The session id of a session directory holding a slot, else None."""
        try:
            session = decode_segment(segment)
        except ValueError:
            return None  # not a directory this store made
        for slot_file in directory.glob("*.json"):
            if slot_file.name.startswith("."):
                continue
            if session is not None:
                return session
            # A hashed long-form segment: the id is recorded in the slot file.
            try:
                return _names_decoder.decode(slot_file.read_bytes()).session_id
            except (FileNotFoundError, msgspec.DecodeError, RecursionError):
                continue
        return None
