"""A fault-injecting object store driven by the simulation's seeded random source.

:class:`FaultyStore` wraps a real store (memory or local) and, for every call,
asks its :class:`Chaos` what to do: delay it (in virtual time, which reorders
concurrent requests), freeze the calling actor (a paused process whose lease runs
out: a zombie when it resumes), crash the calling actor (cancel every task it
started, mid-operation, before or after the call applies), fail before applying,
or apply and then lose the reply. ``semantics="s3"`` reports a lost reply the way
the S3 store does after its own resend: a create comes back as
``ObjectExistsError``, a compare-and-swap as ``PreconditionFailedError``, anything
idempotent as success.

Every call that lands is shown to the chaos's observer, which keeps the shadow
history and checks the invariants that must hold at the moment of a write.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from journal.store import ObjectStore

if TYPE_CHECKING:
    import builtins
    from collections.abc import Awaitable, Callable
    from typing import TypeVar

    T = TypeVar("T")

__all__ = ["Chaos", "FaultyStore"]


class Chaos(Protocol):
    """What the store asks before and after every call (the simulator)."""

    async def before(self, op: str, key: str) -> None:
        """Delay, freeze or crash the caller; raise to fail before applying."""

    async def after(self, op: str, key: str) -> bool:
        """Delay, freeze or crash after applying; True loses the reply."""

    def landed(self, op: str, key: str, data: bytes | None) -> None:
        """A call was applied to the store underneath."""

    def draw(self) -> float:
        """A number from the run's random source, in [0, 1)."""


class FaultyStore(ObjectStore):
    """``inner`` with faults injected by ``chaos`` (see the module docstring)."""

    def __init__(self, inner: ObjectStore, chaos: Chaos, semantics: str) -> None:
        self.inner = inner
        self.chaos = chaos
        self.semantics = semantics
        self.url = f"sim+{inner.url}"
        # The local store's checkpoints name log spans: exercised under faults too.
        self.reads_log_in_bulk = inner.reads_log_in_bulk

    async def _call(
        self,
        op: str,
        key: str,
        apply: Callable[[], Awaitable[T]],
        data: bytes | None = None,
        *,
        resent: Callable[[T], T] | None = None,
    ) -> T:
        await self.chaos.before(op, key)
        try:
            result = await apply()
        except asyncio.CancelledError:
            # A crash can cancel the call after the store applied it (the local
            # store yields to the loop once an inline write is done): what landed
            # must still be known, or the history misses an unacknowledged record.
            if op == "create" and data is not None and await self._holds(key, data):
                self.chaos.landed(op, key, data)
            raise
        self.chaos.landed(op, key, data)
        if await self.chaos.after(op, key):
            # On S3 the HTTP layer resends a request whose connection dropped (and
            # the store retries idempotent ones): the resend meets the write that
            # landed. Sometimes it gives up instead, with a transient error.
            if (
                self.semantics == "s3"
                and resent is not None
                and self.chaos.draw() < 0.7
            ):
                return resent(result)
            raise StorageError(f"sim: the reply to {op} {key} was lost", transient=True)
        return result

    async def _holds(self, key: str, data: bytes) -> bool:
        try:
            return (await self.inner.read(key))[0] == data
        except ObjectNotFoundError:
            return False

    async def create(self, key: str, data: bytes) -> str:
        def resent(_: str) -> str:
            raise ObjectExistsError(key)

        return await self._call(
            "create", key, lambda: self.inner.create(key, data), data, resent=resent
        )

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        def resent(etag: str) -> str:
            if if_match is None:
                return etag  # an unconditional PUT resent is the same PUT
            raise PreconditionFailedError(key, "sim: the resend met our own write")

        return await self._call(
            "replace",
            key,
            lambda: self.inner.replace(key, data, if_match=if_match),
            data,
            resent=resent,
        )

    async def read(self, key: str) -> tuple[bytes, str]:
        return await self._call(
            "read", key, lambda: self.inner.read(key), resent=lambda r: r
        )

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        return await self._call(
            "list",
            prefix,
            lambda: self.inner.list(prefix, start_after=start_after),
            resent=lambda r: r,
        )

    async def delete(self, key: str) -> bool:
        # A resent DELETE finds nothing left to delete.
        return await self._call(
            "delete", key, lambda: self.inner.delete(key), resent=lambda _: False
        )

    async def children(self, prefix: str) -> builtins.list[str]:
        return await self._call(
            "children", prefix, lambda: self.inner.children(prefix), resent=lambda r: r
        )

    async def put_hint(self, key: str, data: bytes) -> None:
        await self.replace(key, data, if_match=None)

    async def aclose(self) -> None:
        await self.inner.aclose()
