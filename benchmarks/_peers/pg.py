"""PostgreSQL helpers for the peers that run on it: one database per system."""

from __future__ import annotations

import dataclasses

import psycopg


@dataclasses.dataclass(frozen=True)
class Server:
    """A PostgreSQL server: host, port and superuser (trust auth, no password)."""

    host: str
    port: int
    user: str = "postgres"

    def dsn(self, database: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def url(self, database: str, driver: str) -> str:
        """A SQLAlchemy URL (``driver``: asyncpg, psycopg)."""
        return f"postgresql+{driver}://{self.user}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def footprint(self, database: str) -> tuple[int, int]:
        """Bytes of every table in the database's public schema, with its TOAST
        data and indexes (``pg_total_relation_size``); the pages are allocated, so
        both numbers are the same. The write-ahead log is not counted."""
        with psycopg.connect(self.dsn(database)) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"
            ).fetchone()
        size = int(row[0]) if row else 0
        return size, size

    def settings(self) -> dict[str, str]:
        with psycopg.connect(self.dsn("postgres")) as conn:
            out = {}
            for name in (
                "server_version",
                "fsync",
                "synchronous_commit",
                "full_page_writes",
                "wal_sync_method",
            ):
                row = conn.execute(f"SHOW {name}").fetchone()
                out[name] = str(row[0]) if row else "?"
        return out
