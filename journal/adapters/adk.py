"""Google ADK sessions on the journal: ``JournalSessionService``.

Each ADK session is one journal thread (``thread_key(app_name, user_id,
session_id)``); app-scoped and user-scoped state live in threads of their own.
Everything is an event, so history is kept:

* ``AdkSessionCreated`` (the session's own initial state), ``AdkEventAppended`` (one
  ADK event, its state delta kept apart so bytes and other msgpack values survive),
  ``AdkSessionDeleted`` (a tombstone: the id can be created again);
* ``AdkScopedStateUpdated`` on the app and user threads.

State values are msgpack. An int outside msgpack's 64 bits (ADK's in-memory and
database services keep any int) is a msgpack extension, code 1, holding the int as
big-endian two's complement, so it reads back as the same int; an adapter older
than this reads such a value as a ``msgspec.msgpack.Ext``. Such an int inside an
object msgpack encodes as a map of its own (a dataclass) is not widened: the write
raises ``ValueError`` naming the key, before anything is written.

Stale writers are caught with the journal's integer versions, not timestamps: a
session object remembers the thread version it was read at, and ``append_event``
commits with ``expected_version`` under the thread's writer lease. Of two
``run_async`` on one session, the one whose read the other moved past gets
``StaleSessionError`` at its next write and writes nothing more, so each run's
events stay one contiguous block (adk-python #4751: ADK 1.24's database service
reloaded and continued there, interleaving the runs). Lease and fencing failures
surface as ``StaleSessionError`` too, with the journal's error as the cause.

App- and user-scoped state are folded once per thread and kept (``ThreadFolds``):
a read catches up from the head it last saw, so the app thread, which every user's
turns grow, costs a read only the records committed since the last one. The folded
values stay msgpack and are decoded on every read, so what a caller changes in
place on a session's state never reaches the cache.

A session's app and user keys are written to their threads after its own record
commits, each write naming the session record it comes from (``batch_id``
``<session thread>@<version>``). Writes that did not happen (the process died in
between, or the app thread's lease could not be had) are made later, once: by the
next read of the session (``get_session``, best effort), by a retry of the append,
and before the session's next append. Such a late write leaves out the keys the
thread holds from a session record committed after its own (each write carries its
record's commit time), so it never undoes a newer value; commit times are the
writers' clocks, so across machines that order is as good as their clocks agree.
Writes made on time apply whole, in the order they land.
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import msgspec
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic_core import to_jsonable_python

from journal.adapters.threads import ThreadFolds
from journal.codec import register_event
from journal.errors import ConflictError, LeaseError
from journal.events import Event
from journal.keys import ThreadKey

if TYPE_CHECKING:
    from collections.abc import Callable

    from journal.codec import Record
    from journal.engine.facade import Journal

__all__ = [
    "AdkEventAppended",
    "AdkScopedStateUpdated",
    "AdkSessionCreated",
    "AdkSessionDeleted",
    "JournalSessionService",
    "default_thread_key",
]

_NAMESPACE = "adk"
_APP_THREAD = "adk-app-state"
_USER_THREAD = "adk-user-state"


class AdkSessionCreated(Event, frozen=True, kw_only=True):
    """A session (re)created, with its session-scoped initial state (msgpack).

    ``scoped`` holds the initial app and user keys (msgpack, prefixed), written to
    their threads after this record (empty in records written before it).
    """

    app_name: str
    user_id: str
    session_id: str
    state: bytes
    created_at: float
    scoped: bytes = b""


class AdkEventAppended(Event, frozen=True, kw_only=True):
    """One ADK event: its JSON without the state delta, and the delta (msgpack)."""

    event: bytes
    state_delta: bytes


class AdkSessionDeleted(Event, frozen=True, kw_only=True):
    """The session was deleted; its history stays in the log."""

    deleted_at: float


class AdkScopedStateUpdated(Event, frozen=True, kw_only=True):
    """App- or user-scoped keys set (msgpack, prefixes removed).

    ``at`` is the commit time of the session record the keys come from (0.0 in
    records written before it: their own record's time stands in).
    """

    delta: bytes
    at: float = 0.0


for _cls in (
    AdkSessionCreated,
    AdkEventAppended,
    AdkSessionDeleted,
    AdkScopedStateUpdated,
):
    register_event(_cls, required=False)


def default_thread_key(app_name: str, user_id: str, session_id: str) -> ThreadKey:
    """The thread of an ADK session: agent ``app_name``, namespace ``adk``.

    A replacement must keep ``agent_id=app_name`` and ``user_id=user_id`` (that is
    how ``list_sessions`` finds sessions) and use a thread id not starting with
    ``adk-``; it may scope the namespace or the session id.
    """
    return ThreadKey(app_name, session_id, user_id=user_id, namespace=_NAMESPACE)


# The msgpack extension code of an int outside msgpack's 64 bits.
_WIDE_INT = 1
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


class _WideInt:
    """An int outside msgpack's 64 bits, on its way to a ``_WIDE_INT`` extension."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


def _widen(value: Any) -> Any:
    """``value`` with every int outside 64 bits in it wrapped as a ``_WideInt``.

    Only the containers msgpack has (tuples and sets are arrays anyway); an int
    inside another object msgpack encodes natively (a dataclass) is left as it is.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value if _INT_MIN <= value <= _INT_MAX else _WideInt(value)
    if isinstance(value, dict):
        return {_widen(k): _widen(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_widen(v) for v in value]
    return value


def _enc_hook(value: Any) -> Any:
    if isinstance(value, _WideInt):
        n = value.value
        return msgspec.msgpack.Ext(
            _WIDE_INT, n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True)
        )
    # Values msgpack has no type for (pydantic models, ...) go in their JSON form, as
    # ADK's own database service stores them; an int in it may be a wide one.
    return _widen(to_jsonable_python(value))


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _WIDE_INT:
        return int.from_bytes(data, "big", signed=True)
    return msgspec.msgpack.Ext(code, bytes(data))


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.msgpack.Decoder(dict[str, Any], ext_hook=_ext_hook)


def _pack(state: dict[str, Any], prefix: str = "") -> bytes:
    """``state`` as msgpack, ints outside 64 bits as extensions (ADK stores them).

    Raises:
        ValueError: A value holds such an int where it cannot be widened (inside a
            dataclass, say); the message names its key (``prefix`` + name).
    """
    try:
        return _ENCODER.encode(state)
    except OverflowError:
        pass  # The rare state with a wide int pays for a second pass.
    try:
        return _ENCODER.encode(_widen(state))
    except OverflowError as exc:
        for name, value in state.items():
            try:
                _ENCODER.encode(_widen(value))
            except OverflowError:
                raise ValueError(
                    f"state key {prefix + name!r} holds an int outside 64 bits "
                    f"inside a {type(value).__name__} that cannot be stored; "
                    "store it as a plain int, or in a dict or list"
                ) from exc
        raise


def _unpack(data: bytes) -> dict[str, Any]:
    return _DECODER.decode(data) if data else {}


_RAW_DECODER = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])
_VALUE_DECODER = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


_log = logging.getLogger(__name__)


class _Scoped:
    """An app or user thread, folded.

    Attributes:
        values: Each key's value, still msgpack.
        set_at: Each key's commit time: that of the session record it came from.
        applied: Per session thread (its key as JSON), the highest version whose
            keys were written here.
    """

    __slots__ = ("applied", "set_at", "values")

    def __init__(self) -> None:
        self.values: dict[str, msgspec.Raw] = {}
        self.set_at: dict[str, float] = {}
        self.applied: dict[str, int] = {}


def _source_of(batch_id: str) -> tuple[str, int] | None:
    """The session thread and version a scoped write's ``batch_id`` names."""
    source, _, version = batch_id.rpartition("@")
    return (source, int(version)) if source and version.isdigit() else None


def _apply_scoped(state: _Scoped, record: Record) -> None:
    """Fold a record of an app or user thread."""
    for item in record.events:
        if isinstance(item, AdkScopedStateUpdated):
            at = item.at or record.committed_at
            for name, value in _RAW_DECODER.decode(item.delta).items():
                # A copy, so the view does not keep the whole record's delta alive.
                state.values[name] = value.copy()
                state.set_at[name] = at
            source = _source_of(record.batch_id)
            if source is not None:
                name, version = source
                state.applied[name] = max(state.applied.get(name, 0), version)


class _Folded(msgspec.Struct):
    """A session thread read back: the live session, or why there is none.

    ``scoped`` lists each record that set app or user keys: its version, commit
    time and those keys (prefixed, as in the session's state).
    """

    version: int = 0
    created: AdkSessionCreated | None = None
    deleted: bool = False
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    events: list[AdkEvent] = msgspec.field(default_factory=list)
    scoped: list[tuple[int, float, dict[str, Any]]] = msgspec.field(
        default_factory=list
    )

    @property
    def live(self) -> bool:
        return self.created is not None and not self.deleted


def _scoped_keys(state: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in state.items()
        if k.startswith((State.APP_PREFIX, State.USER_PREFIX))
    }


def _event_of(item: AdkEventAppended) -> AdkEvent:
    event = AdkEvent.model_validate_json(item.event)
    delta = _unpack(item.state_delta)
    if delta:
        event.actions.state_delta = delta
    return event


class JournalSessionService(BaseSessionService):
    """An ADK ``BaseSessionService`` storing each session as a journal thread.

    Args:
        journal: The journal (any URL: local, memory, S3).
        thread_key: Maps ``(app_name, user_id, session_id)`` to a thread; see
            :func:`default_thread_key` for what a replacement must keep.
        holder: This process's writer id (default: a new unique one).
        lease_ttl: The writer lease's duration in seconds.
        lease_wait: How long a write waits for another writer's lease, in seconds.
    """

    def __init__(
        self,
        journal: Journal,
        *,
        thread_key: Callable[[str, str, str], ThreadKey] = default_thread_key,
        holder: str | None = None,
        lease_ttl: float = 30.0,
        lease_wait: float = 10.0,
    ) -> None:
        if lease_wait < 0 or lease_ttl <= 0:
            raise ValueError("lease_ttl must be positive and lease_wait >= 0")
        self.journal = journal
        self.thread_key = thread_key
        self.holder = holder or f"adk-{uuid.uuid4().hex[:12]}"
        self.lease_ttl = lease_ttl
        self.lease_wait = lease_wait
        # The version each session object handed out was read at; keyed by id()
        # with a weak reference checking the object is still the same one.
        self._versions: dict[int, tuple[weakref.ref[Session], int]] = {}
        self._scoped_folds: ThreadFolds[_Scoped] = ThreadFolds(
            journal, _Scoped, _apply_scoped
        )
        # Sessions whose app/user writes may not all have been made (a write
        # failed after the session's commit): made before their next append.
        self._unsettled: set[ThreadKey] = set()

    # --- keys and versions ---------------------------------------------------------

    def _key(self, app_name: str, user_id: str, session_id: str) -> ThreadKey:
        return self.thread_key(app_name, user_id, session_id)

    @staticmethod
    def _app_key(app_name: str) -> ThreadKey:
        return ThreadKey(app_name, "app", thread_id=_APP_THREAD, namespace=_NAMESPACE)

    @staticmethod
    def _user_key(app_name: str, user_id: str) -> ThreadKey:
        return ThreadKey(
            app_name,
            "user",
            user_id=user_id,
            thread_id=_USER_THREAD,
            namespace=_NAMESPACE,
        )

    def _remember(self, session: Session, version: int) -> None:
        ident = id(session)
        self._versions[ident] = (
            weakref.ref(session, lambda _: self._versions.pop(ident, None)),
            version,
        )

    def version_of(self, session: Session) -> int | None:
        """The thread version ``session`` was read at (None if not from here)."""
        entry = self._versions.get(id(session))
        if entry is None or entry[0]() is not session:
            return None
        return entry[1]

    def _writer(self, key: ThreadKey) -> Any:
        return self.journal.writer(
            key,
            self.holder,
            lease_ttl=self.lease_ttl,
            wait=self.lease_wait,
            recover_runs=False,
            defer_fence=True,
        )

    # --- reading -------------------------------------------------------------------

    async def _fold(self, key: ThreadKey) -> _Folded:
        folded = _Folded()
        async for record in self.journal.records(key):
            folded.version = record.version
            for item in record.events:
                if isinstance(item, AdkSessionCreated):
                    folded = _Folded(
                        record.version,
                        item,
                        False,
                        _unpack(item.state),
                        [],
                        folded.scoped,
                    )
                    if scoped := _unpack(item.scoped):
                        folded.scoped.append(
                            (record.version, record.committed_at, scoped)
                        )
                elif isinstance(item, AdkSessionDeleted):
                    folded.deleted = True
                elif isinstance(item, AdkEventAppended) and folded.live:
                    event = _event_of(item)
                    folded.events.append(event)
                    if scoped := _scoped_keys(event.actions.state_delta):
                        folded.scoped.append(
                            (record.version, record.committed_at, scoped)
                        )
                    for name, value in event.actions.state_delta.items():
                        if not name.startswith(
                            (State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)
                        ):
                            folded.state[name] = value
        return folded

    async def _scoped(self, key: ThreadKey) -> dict[str, Any]:
        """An app or user thread's state as of its head, decoded afresh."""
        folded = await self._scoped_folds.read(key)
        # list() copies the items at once (another event loop's thread may fold).
        return {
            name: _VALUE_DECODER.decode(raw)
            for name, raw in list(folded.values.items())
        }

    async def _session_of(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        folded: _Folded,
        events: list[AdkEvent],
    ) -> Session:
        assert folded.created is not None  # noqa: S101 (callers check live)
        state = dict(folded.state)
        for name, value in (await self._scoped(self._app_key(app_name))).items():
            state[State.APP_PREFIX + name] = value
        user = await self._scoped(self._user_key(app_name, user_id))
        for name, value in user.items():
            state[State.USER_PREFIX + name] = value
        last = folded.events[-1].timestamp if folded.events else None
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=state,
            events=events,
            last_update_time=last if last is not None else folded.created.created_at,
        )
        self._remember(session, folded.version)
        return session

    # --- writing -------------------------------------------------------------------

    def _scoped_deltas(
        self, app_name: str, user_id: str, state: dict[str, Any]
    ) -> list[tuple[ThreadKey, dict[str, msgspec.Raw]]]:
        """The app and user keys of ``state``, packed for their threads.

        Packed before the session's own commit, so a value that cannot be stored
        fails before anything is written.
        """
        app: dict[str, Any] = {}
        user: dict[str, Any] = {}
        for name, value in state.items():
            if name.startswith(State.APP_PREFIX):
                app[name.removeprefix(State.APP_PREFIX)] = value
            elif name.startswith(State.USER_PREFIX):
                user[name.removeprefix(State.USER_PREFIX)] = value
        return [
            (key, _RAW_DECODER.decode(_pack(delta, prefix)))
            for key, delta, prefix in (
                (self._app_key(app_name), app, State.APP_PREFIX),
                (self._user_key(app_name, user_id), user, State.USER_PREFIX),
            )
            if delta
        ]

    async def _write_scoped(
        self,
        source: ThreadKey,
        version: int,
        at: float,
        deltas: list[tuple[ThreadKey, dict[str, msgspec.Raw]]],
        *,
        late: bool = False,
    ) -> None:
        """Write the app and user keys of record ``version`` of ``source``, once.

        Under each thread's lease: nothing where that record's keys were written
        already; else its keys, less (``late``) those the thread holds from a later
        commit (``at`` is the record's commit time).
        """
        name = source.model_dump_json()
        for key, delta in deltas:
            async with self._writer(key) as writer:
                view = await self._scoped_folds.upto(key, writer.version)
                if view.applied.get(name, 0) >= version:
                    continue
                fresh = delta
                if late:
                    set_at = view.set_at
                    fresh = {k: v for k, v in delta.items() if set_at.get(k, 0.0) <= at}
                record = await writer.append(
                    [AdkScopedStateUpdated(delta=msgspec.msgpack.encode(fresh), at=at)],
                    batch_id=f"{name}@{version}",
                )
            self._scoped_folds.committed(key, record)

    async def _write_scoped_of(
        self,
        source: ThreadKey,
        record: Record,
        deltas: list[tuple[ThreadKey, dict[str, msgspec.Raw]]],
    ) -> None:
        """:meth:`_write_scoped` after ``source``'s commit of ``record``.

        If it fails, the session is settled before its next append.
        """
        try:
            await self._write_scoped(
                source, record.version, record.committed_at, deltas
            )
        except BaseException:
            self._unsettled.add(source)
            raise

    async def _settle(
        self, key: ThreadKey, app_name: str, user_id: str, folded: _Folded
    ) -> None:
        """Make the app and user writes of the session's records that were not made.

        Raises:
            LeaseError: An app or user thread's lease could not be had.
            ConflictError: Another writer committed there meanwhile.
        """
        name = key.model_dump_json()
        done: dict[ThreadKey, int] = {}  # per app or user thread, read once
        for version, at, keys in folded.scoped:
            for scoped_key, delta in self._scoped_deltas(app_name, user_id, keys):
                if scoped_key not in done:
                    view = await self._scoped_folds.read(scoped_key)
                    done[scoped_key] = view.applied.get(name, 0)
                if version > done[scoped_key]:
                    await self._write_scoped(
                        key, version, at, [(scoped_key, delta)], late=True
                    )
        self._unsettled.discard(key)

    async def _settle_or_defer(
        self, key: ThreadKey, app_name: str, user_id: str, folded: _Folded
    ) -> None:
        """:meth:`_settle` on a read, leaving what cannot be written now.

        The session's next append settles it first.
        """
        if not folded.scoped:
            return
        try:
            await self._settle(key, app_name, user_id, folded)
        except (ConflictError, LeaseError) as exc:
            self._unsettled.add(key)
            _log.warning(
                "app/user state writes of session %s left for its next append: %s",
                key.model_dump_json(),
                exc,
            )

    # --- the BaseSessionService interface -------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (``AlreadyExistsError`` if the id is live)."""
        session_id = (session_id or "").strip() or uuid.uuid4().hex
        key = self._key(app_name, user_id, session_id)
        initial = dict(state or {})
        own = {
            k: v
            for k, v in initial.items()
            if not k.startswith(
                (State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)
            )
        }
        scoped = self._scoped_deltas(app_name, user_id, initial)
        scoped_keys = _scoped_keys(initial)
        created = AdkSessionCreated(
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            state=_pack(own),
            created_at=time.time(),
            scoped=_pack(scoped_keys) if scoped_keys else b"",
        )
        try:
            async with self._writer(key) as writer:
                if (await self._fold(key)).live:
                    raise AlreadyExistsError(
                        f"Session with id {session_id} already exists."
                    )
                record = await writer.append([created])
        except (ConflictError, LeaseError) as exc:
            raise StaleSessionError(
                f"creating session {session_id!r} of {app_name!r}: {exc}"
            ) from exc
        await self._write_scoped_of(key, record, scoped)
        folded = _Folded(record.version, created, False, own, [])
        return await self._session_of(app_name, user_id, session_id, folded, [])

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with app/user state merged, or None if unknown or deleted."""
        session_id = session_id.strip() if session_id else session_id
        key = self._key(app_name, user_id, session_id)
        folded = await self._fold(key)
        if not folded.live:
            return None
        await self._settle_or_defer(key, app_name, user_id, folded)
        events = folded.events
        if config is not None:
            if config.num_recent_events is not None:
                events = (
                    events[-config.num_recent_events :]
                    if config.num_recent_events
                    else []
                )
            if config.after_timestamp is not None:
                after = config.after_timestamp
                events = [e for e in events if e.timestamp >= after]
        return await self._session_of(
            app_name, user_id, session_id, folded, list(events)
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The live sessions (no events), oldest update first."""
        sessions: list[Session] = []
        users: Any = ... if user_id is None else user_id
        async for key in self.journal.threads(agent_id=app_name, user_id=users):
            if key.thread_id.startswith("adk-"):
                continue
            folded = await self._fold(key)
            created = folded.created
            if not folded.live or created is None or created.app_name != app_name:
                continue
            if user_id is not None and created.user_id != user_id:
                continue
            session = await self._session_of(
                app_name, created.user_id, created.session_id, folded, []
            )
            sessions.append(session)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> None:
        """Delete a session (a tombstone; nothing happens if it is not live)."""
        session_id = session_id.strip() if session_id else session_id
        key = self._key(app_name, user_id, session_id)
        if not (await self._fold(key)).live:
            return
        try:
            async with self._writer(key) as writer:
                if (await self._fold(key)).live:
                    await writer.append([AdkSessionDeleted(deleted_at=time.time())])
        except (ConflictError, LeaseError) as exc:
            raise StaleSessionError(
                f"deleting session {session_id!r} of {app_name!r}: {exc}"
            ) from exc

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user-scoped state, keys without the ``user:`` prefix."""
        return await self._scoped(self._user_key(app_name, user_id))

    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        """Commit ``event`` if ``session`` is still the thread's head.

        Raises:
            SessionNotFoundError: The session does not exist or was deleted.
            StaleSessionError: Another writer committed since ``session`` was read,
                or the thread's lease could not be had or was lost.
        """
        if event.partial:
            return event
        key = self._key(session.app_name, session.user_id, session.id)
        expected = self.version_of(session)
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        delta = dict(event.actions.state_delta) if event.actions else {}
        body = event.model_copy(deep=True)
        body.actions.state_delta = {}
        item = AdkEventAppended(
            event=body.model_dump_json(exclude_none=True).encode(),
            state_delta=_pack(delta),
        )
        scoped = self._scoped_deltas(session.app_name, session.user_id, delta)
        try:
            async with self._writer(key) as writer:
                if (
                    expected is None
                    or writer.version != expected
                    or key in self._unsettled
                ):
                    folded = await self._fold(key)
                    if not folded.live:
                        raise SessionNotFoundError(f"Session {session.id} not found.")
                    await self._settle(key, session.app_name, session.user_id, folded)
                    if any(e.id == event.id for e in folded.events):
                        return event  # a retry of an append that was committed
                    if expected is None and [e.id for e in folded.events] == [
                        e.id for e in session.events
                    ]:
                        expected = folded.version  # built by hand, but current
                    elif expected != folded.version:
                        raise StaleSessionError(
                            f"session {session.id!r} of {session.app_name!r} was "
                            f"read at version {expected}, the thread is at "
                            f"{folded.version}: reload it"
                        )
                record = await writer.append(
                    [item], expected_version=expected, batch_id=f"adk-{event.id}"
                )
        except (ConflictError, LeaseError) as exc:
            raise StaleSessionError(
                f"appending to session {session.id!r} of {session.app_name!r}: {exc}"
            ) from exc
        await self._write_scoped_of(key, record, scoped)
        session.last_update_time = event.timestamp
        self._remember(session, record.version)
        return self._commit_event_to_session(session, event)
