"""Snapshot-mode state store on Redis (redis-py's asyncio client).

Keys, with ``{u}`` the encoded user (``~`` for the anonymous user) as a cluster hash
tag, so all of one user's keys live in one cluster slot and one script may touch them::

    <prefix>:{u}:slot:<session seg>:<entry seg>   hash: version, state, updated_at
    <prefix>:{u}:entries:<session seg>             set of the session's entry segments
    <prefix>:{u}:sessions                          hash: session segment -> session id

Segments use only ``[A-Za-z0-9_%-]``, so the ``:`` separators are unambiguous. Every
save, delete and listing is one Lua script, so the version check, the write and the
index update are one atomic step on the server. With a TTL, every save sets the slot's
expiry; the index keys live at least as long as the slots they name, and a listing
drops index members whose slot has expired.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.cluster import RedisCluster

from journal.errors import CorruptRecordError, StaleStateError, StorageError
from stores.state.base import AgentStateStoreBase
from stores.state.slots import SlotBytes, utc_now

if TYPE_CHECKING:
    from collections.abc import Iterator

    from stores.state.slots import SlotKey, StateEncoder

__all__ = ["RedisAgentStateStore"]

# KEYS: slot, sessions index, entries index.
# ARGV: expected version (-1: none), state, updated_at, ttl ms (0: none),
#       session segment, session id, entry segment.
_SAVE = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local expected = tonumber(ARGV[1])
if expected >= 0 and current ~= expected then
  return {0, current}
end
local new = current + 1
local ttl = tonumber(ARGV[4])
local fresh_sessions = redis.call('EXISTS', KEYS[2]) == 0
local fresh_entries = redis.call('EXISTS', KEYS[3]) == 0
redis.call('HSET', KEYS[1], 'version', new, 'state', ARGV[2], 'updated_at', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
redis.call('SADD', KEYS[3], ARGV[7])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  -- An index key must outlive every slot it names: only ever extend its expiry,
  -- and leave it persistent when a slot without TTL needs it.
  local function extend(key, fresh)
    if fresh then
      redis.call('PEXPIRE', key, ttl)
    else
      local left = redis.call('PTTL', key)
      if left >= 0 and left < ttl then
        redis.call('PEXPIRE', key, ttl)
      end
    end
  end
  extend(KEYS[2], fresh_sessions)
  extend(KEYS[3], fresh_entries)
else
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
  redis.call('PERSIST', KEYS[3])
end
return {1, new}
"""

# KEYS: slot, sessions index, entries index. ARGV: session segment, entry segment.
_DELETE = """
local removed = redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[3], ARGV[2])
if redis.call('SCARD', KEYS[3]) == 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return removed
"""

# KEYS: sessions index. ARGV: the user's key base ("<prefix>:{u}:").
# The keys built here carry the same hash tag as KEYS[1], so they are in its slot.
_LIST = """
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local segment, session_id = all[i], all[i + 1]
  local entries_key = ARGV[1] .. 'entries:' .. segment
  local live = false
  for _, entry in ipairs(redis.call('SMEMBERS', entries_key)) do
    if redis.call('EXISTS', ARGV[1] .. 'slot:' .. segment .. ':' .. entry) == 1 then
      live = true
    else
      redis.call('SREM', entries_key, entry)
    end
  end
  if live then
    table.insert(out, session_id)
  else
    redis.call('HDEL', KEYS[1], segment)
  end
end
return out
"""

_TRANSIENT: tuple[type[BaseException], ...] = (
    rexc.ConnectionError,
    rexc.TimeoutError,
    rexc.ClusterDownError,
    rexc.TryAgainError,
    rexc.ReadOnlyError,
    rexc.SlotNotCoveredError,
    rexc.BusyLoadingError,
    OSError,
)
_PERMANENT: tuple[type[BaseException], ...] = (
    rexc.AuthenticationError,
    rexc.AuthorizationError,
    rexc.NoPermissionError,
)


@contextlib.contextmanager
def _map_errors(label: str) -> Iterator[None]:
    try:
        yield
    except (rexc.RedisError, rexc.RedisClusterException, OSError) as exc:
        transient = isinstance(exc, _TRANSIENT) and not isinstance(exc, _PERMANENT)
        raise StorageError(
            f"redis error on {label}: {type(exc).__name__}: {exc}", transient=transient
        ) from exc


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def _bytes(value: bytes | str) -> bytes:
    # A client with decode_responses hands back text.
    return value.encode("utf-8") if isinstance(value, str) else value


class RedisAgentStateStore(AgentStateStoreBase):
    """Keeps each slot in a Redis hash; compare-and-swap is one Lua script.

    Args:
        url_or_client: A URL (``redis://[[user]:password@]host:port/db``,
            ``rediss://...`` for TLS, ``unix:///path/redis.sock?db=0``), from which the
            store creates, and later closes, its own client. Or a client you own:
            ``redis.asyncio.Redis``; a cluster client
            ``redis.asyncio.cluster.RedisCluster.from_url("redis://node:7000")``; or
            a sentinel-managed master,
            ``redis.asyncio.sentinel.Sentinel([("host", 26379)]).master_for("name")``.
            Clients may use ``decode_responses`` either way.
        prefix: Prepended to every key; stores with different prefixes never meet.
            Must not contain ``{`` or ``}`` (they would break the cluster hash tag).
        ttl: Expire a slot this long after its last save (seconds or a timedelta);
            None keeps slots until deleted.

    Raises:
        ValueError: Bad ``prefix`` or ``ttl``.
    """

    def __init__(
        self,
        url_or_client: str | aioredis.Redis | RedisCluster,
        *,
        prefix: str = "agent-journal",
        ttl: float | timedelta | None = None,
    ) -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix must be non-empty, without braces: {prefix!r}")
        self.prefix = prefix
        self._ttl_ms = 0
        if ttl is not None:
            seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
            if seconds <= 0:
                raise ValueError(f"ttl must be positive, not {ttl!r}")
            self._ttl_ms = max(1, round(seconds * 1000))
        self._client: aioredis.Redis | RedisCluster
        if isinstance(url_or_client, str):
            self._client = aioredis.from_url(url_or_client)
            self._owns_client = True
        else:
            self._client = url_or_client
            self._owns_client = False
        self._closed = False
        self._save_script = self._client.register_script(_SAVE)
        self._delete_script = self._client.register_script(_DELETE)
        self._list_script = self._client.register_script(_LIST)

    @property
    def client(self) -> aioredis.Redis | RedisCluster:
        """The Redis client this store uses."""
        return self._client

    async def _ready(self) -> None:
        # redis-py's asyncio RedisCluster picks a command's node before it loads the
        # slot map: concurrent first commands on a fresh (or reset) client go to
        # arbitrary nodes, get MOVED, and the reset that repeated MOVEDs trigger
        # closes the connections of the commands still in flight. Load the map first
        # (a no-op once loaded; concurrent callers wait for one load).
        if isinstance(self._client, RedisCluster):
            await self._client.initialize()

    def _base(self, user: str) -> str:
        return f"{self.prefix}:{{{user}}}:"

    def _keys(self, slot: SlotKey) -> list[str]:
        base = self._base(slot.user)
        return [
            f"{base}slot:{slot.session}:{slot.name}",
            f"{base}sessions",
            f"{base}entries:{slot.session}",
        ]

    async def _write(
        self, slot: SlotKey, encode: StateEncoder, expected_version: int | None
    ) -> int:
        # The hash's version field is the truth; the state's own version is stamped
        # when it is known in advance (0 otherwise) and overwritten on load anyway.
        args: list[str | bytes | int] = [
            -1 if expected_version is None else expected_version,
            encode(0 if expected_version is None else expected_version + 1),
            utc_now().isoformat(),
            self._ttl_ms,
            slot.session,
            slot.session_id,
            slot.name,
        ]
        with _map_errors(slot.label):
            await self._ready()
            result: Any = await self._save_script(keys=self._keys(slot), args=args)
        ok, version = int(result[0]), int(result[1])
        if not ok:
            assert expected_version is not None  # noqa: S101 - the script's contract
            raise StaleStateError(slot.label, expected_version, version)
        return version

    async def _read(self, slot: SlotKey) -> SlotBytes | None:
        with _map_errors(slot.label):
            await self._ready()
            raw: Any = await self._client.hmget(
                self._keys(slot)[0], ["version", "state"]
            )
        version, data = raw
        if version is None:
            return None
        if data is None:
            raise CorruptRecordError(slot.label, None, "the slot hash has no state")
        try:
            number = int(version)
        except ValueError as exc:
            raise CorruptRecordError(slot.label, None, str(exc)) from exc
        return SlotBytes(_bytes(data), number)

    async def _delete(self, slot: SlotKey) -> bool:
        with _map_errors(slot.label):
            await self._ready()
            removed: Any = await self._delete_script(
                keys=self._keys(slot), args=[slot.session, slot.name]
            )
        return bool(int(removed))

    async def _list_sessions(self, user_id: str | None, user: str) -> list[str]:
        base = self._base(user)
        with _map_errors(f"sessions of user {user_id!r}"):
            await self._ready()
            found: Any = await self._list_script(keys=[f"{base}sessions"], args=[base])
        return sorted({_text(s) for s in found})

    async def aclose(self) -> None:
        """Close the client if the store created it from a URL; else leave it open."""
        if self._owns_client and not self._closed:
            self._closed = True
            with _map_errors("close"):
                await self._client.aclose()
