"""Snapshot-mode state store on SQL (SQLAlchemy 2 asyncio; SQLite and PostgreSQL).

One row a slot in the table ``agent_state`` (created if missing)::

    user_key    encoded user segment ("~" for the anonymous user)   -+
    session_id  the session id as given                               +- primary key
    entry       the entry as given                                   -+
    version     the slot's version (the truth; the state's own field mirrors it)
    updated_at  when the slot was last saved (UTC)
    state       the AgentState as JSON text

Compare-and-swap is ``UPDATE ... WHERE version = :expected`` checked by its row count,
and ``INSERT`` for an absent slot, where the primary key turns a concurrent creation
into a unique violation. An unconditional save reads the version and then does the
same compare-and-swap, retrying when another writer got in between. Each statement
that writes is the first of its transaction, which keeps SQLite's WAL mode from
refusing to upgrade a stale read snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    MetaData,
    String,
    Table,
    Text,
    and_,
    event,
    inspect,
    select,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import SingletonThreadPool, StaticPool

from journal.errors import StaleStateError, StorageError
from journal.keys import MAX_ID_LENGTH
from stores.state.base import AgentStateStoreBase
from stores.state.slots import SlotBytes, utc_now

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from sqlalchemy import ColumnElement

    from stores.state.slots import SlotKey, StateEncoder

__all__ = ["SqlAgentStateStore"]

_MAX_ATTEMPTS = 200
_MAX_VERSION = 2**63 - 1  # the BIGINT version column's largest value
# OperationalErrors that retrying cannot cure (SQLite reports these as operational).
_PERMANENT = (
    "unable to open database",
    "readonly database",
    "file is not a database",
    "no such table",
)
_SETUP_ATTEMPTS = 20
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@contextlib.contextmanager
def _map_errors(label: str) -> Iterator[None]:
    try:
        yield
    except sa_exc.DBAPIError as exc:
        detail = str(exc.orig)
        transient = exc.connection_invalidated or (
            isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
            and not any(p in detail for p in _PERMANENT)
        )
        raise StorageError(
            f"database error on {label}: {detail}", transient=transient
        ) from exc
    except sa_exc.TimeoutError as exc:  # the connection pool ran dry
        raise StorageError(f"database pool timeout on {label}", transient=True) from exc
    except sa_exc.SQLAlchemyError as exc:
        raise StorageError(f"database error on {label}: {exc}") from exc
    except OSError as exc:  # connecting failed (TimeoutError is an OSError)
        raise StorageError(
            f"cannot reach the database for {label}: {exc!r}", transient=True
        ) from exc


def _is_busy(exc: sa_exc.DBAPIError) -> bool:
    """Whether creating the table failed because someone else was doing it too."""
    detail = str(exc.orig).lower()
    return any(
        word in detail
        for word in ("locked", "busy", "already exists", "duplicate", "unique")
    )


def _sqlite_busy_timeout(busy_timeout: float) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()

    return on_connect


class SqlAgentStateStore(AgentStateStoreBase):
    """Keeps each slot in a row of an SQL table.

    Args:
        url_or_engine: An async SQLAlchemy URL (``sqlite+aiosqlite:///path/state.db``,
            ``postgresql+asyncpg://user:pw@host/db``), from which the store creates,
            and later disposes of, its own engine; for SQLite it turns on WAL and a
            busy timeout. Or an ``AsyncEngine`` you own and configure.
        table: The table's name (default ``agent_state``); a plain SQL identifier.
        busy_timeout: SQLite only, for an engine the store creates: how long a writer
            waits for another one's lock, in seconds.

    Raises:
        ValueError: ``table`` is not a plain identifier.
    """

    def __init__(
        self,
        url_or_engine: str | URL | AsyncEngine,
        *,
        table: str = "agent_state",
        busy_timeout: float = 30.0,
    ) -> None:
        if not _TABLE_NAME.fullmatch(table):
            raise ValueError(f"table must be a plain SQL identifier, not {table!r}")
        if isinstance(url_or_engine, AsyncEngine):
            self._engine = url_or_engine
            self._owns_engine = False
        else:
            url = make_url(url_or_engine)
            if url.get_backend_name() == "sqlite":
                engine = create_async_engine(
                    url, connect_args={"timeout": busy_timeout}
                )
                event.listen(
                    engine.sync_engine, "connect", _sqlite_busy_timeout(busy_timeout)
                )
            else:
                engine = create_async_engine(url, pool_pre_ping=True)
            self._engine = engine
            self._owns_engine = True
        # WAL is a property of the database file: set once, in create_table.
        self._wal = self._owns_engine and self._engine.dialect.name == "sqlite"
        self._closed = False
        self._metadata = MetaData()
        self._table = Table(
            table,
            self._metadata,
            Column("user_key", String(MAX_ID_LENGTH), primary_key=True),
            Column("session_id", String(MAX_ID_LENGTH), primary_key=True),
            Column("entry", String(MAX_ID_LENGTH), primary_key=True),
            Column("version", BigInteger, nullable=False),
            Column("updated_at", DateTime(timezone=True), nullable=False),
            Column("state", Text, nullable=False),
        )
        self._ready = False
        self._ready_lock = asyncio.Lock()
        shared = isinstance(self._engine.pool, StaticPool | SingletonThreadPool)
        self._serial = asyncio.Lock() if shared else None

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store uses."""
        return self._engine

    @property
    def table(self) -> Table:
        """The table holding the slots."""
        return self._table

    async def create_table(self) -> None:
        """Create the table if it is missing (done before the first operation too).

        Raises:
            StorageError: The database failed.
        """
        if self._ready:
            return
        async with self._ready_lock:
            if self._ready:
                return
            with _map_errors(f"table {self._table.name}"):
                for attempt in range(_SETUP_ATTEMPTS):
                    try:
                        await self._create_table_once()
                        break
                    except sa_exc.DBAPIError as exc:
                        # Another process may be creating it (or switching SQLite
                        # to WAL, which fails at once rather than waiting).
                        if attempt == _SETUP_ATTEMPTS - 1 or not _is_busy(exc):
                            raise
                    await asyncio.sleep(0.02 * (attempt + 1))
            self._ready = True

    async def _create_table_once(self) -> None:
        async with self._engine.connect() as conn:
            if self._wal:
                await conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            if await conn.run_sync(
                lambda sync: inspect(sync).has_table(self._table.name)
            ):
                return
        async with self._engine.begin() as conn:
            await conn.run_sync(self._metadata.create_all, checkfirst=True)

    def _where(self, slot: SlotKey) -> ColumnElement[bool]:
        c = self._table.c
        return and_(
            c.user_key == slot.user,
            c.session_id == slot.session_id,
            c.entry == slot.entry,
        )

    async def _version(self, slot: SlotKey) -> int:
        async with self._engine.connect() as conn:
            found = await conn.scalar(
                select(self._table.c.version).where(self._where(slot))
            )
        return 0 if found is None else int(found)

    async def _swap(self, slot: SlotKey, encode: StateEncoder, expected: int) -> bool:
        """Write version ``expected + 1`` if the slot is at ``expected``."""
        new = expected + 1
        values = {
            "version": new,
            "updated_at": utc_now(),
            "state": encode(new).decode("utf-8"),
        }
        t = self._table
        if expected == 0:
            try:
                async with self._engine.begin() as conn:
                    await conn.execute(
                        t.insert().values(
                            user_key=slot.user,
                            session_id=slot.session_id,
                            entry=slot.entry,
                            **values,
                        )
                    )
            except sa_exc.IntegrityError:
                return False
            return True
        async with self._engine.begin() as conn:
            result = await conn.execute(
                t.update()
                .where(self._where(slot), t.c.version == expected)
                .values(**values)
            )
        return result.rowcount == 1

    # SQLite in memory (StaticPool) shares one connection between all checkouts, so
    # concurrent transactions would interleave on it: take turns instead.

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        if self._serial is None:
            yield
        else:
            async with self._serial:
                yield

    async def _write(
        self, slot: SlotKey, encode: StateEncoder, expected_version: int | None
    ) -> int:
        async with self._turn():
            return await self._write_now(slot, encode, expected_version)

    async def _read(self, slot: SlotKey) -> SlotBytes | None:
        async with self._turn():
            return await self._read_now(slot)

    async def _delete(self, slot: SlotKey) -> bool:
        async with self._turn():
            return await self._delete_now(slot)

    async def _list_sessions(self, user_id: str | None, user: str) -> list[str]:
        async with self._turn():
            return await self._list_now(user_id, user)

    async def _write_now(
        self, slot: SlotKey, encode: StateEncoder, expected_version: int | None
    ) -> int:
        await self.create_table()
        with _map_errors(slot.label):
            if expected_version is not None and expected_version > _MAX_VERSION:
                # The column cannot hold it, so no slot is at it; the drivers
                # would refuse the parameter (OverflowError, DataError) instead.
                raise StaleStateError(
                    slot.label, expected_version, await self._version(slot)
                )
            for attempt in range(_MAX_ATTEMPTS):
                expected = (
                    await self._version(slot)
                    if expected_version is None
                    else expected_version
                )
                if await self._swap(slot, encode, expected):
                    return expected + 1
                actual = await self._version(slot)
                if expected_version is not None and actual != expected_version:
                    raise StaleStateError(slot.label, expected_version, actual)
                # Lost a race (or the slot was deleted and recreated in between):
                # try again, backing off a little once contention is evident.
                if attempt >= 3:
                    await asyncio.sleep(random.uniform(0, 0.002 * attempt))  # noqa: S311
        raise StorageError(
            f"{slot.label}: gave up saving after {_MAX_ATTEMPTS} lost races",
            transient=True,
        )

    async def _read_now(self, slot: SlotKey) -> SlotBytes | None:
        await self.create_table()
        t = self._table
        with _map_errors(slot.label):
            async with self._engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(t.c.version, t.c.state).where(self._where(slot))
                    )
                ).first()
        if row is None:
            return None
        # The column is text; the adapter decodes bytes.
        return SlotBytes(row[1].encode("utf-8"), int(row[0]))

    async def _delete_now(self, slot: SlotKey) -> bool:
        await self.create_table()
        with _map_errors(slot.label):
            async with self._engine.begin() as conn:
                result = await conn.execute(
                    self._table.delete().where(self._where(slot))
                )
        return result.rowcount > 0

    async def _list_now(self, user_id: str | None, user: str) -> list[str]:
        await self.create_table()
        c = self._table.c
        with _map_errors(f"sessions of user {user_id!r}"):
            async with self._engine.connect() as conn:
                found = await conn.scalars(
                    select(c.session_id).distinct().where(c.user_key == user)
                )
                sessions = set(found)
        # Sorted here, not by the database's collation, to match every other store.
        return sorted(sessions)

    async def aclose(self) -> None:
        """Dispose of the engine if the store created it; else leave it alone."""
        if self._owns_engine and not self._closed:
            self._closed = True
            with _map_errors("close"):
                await self._engine.dispose()
