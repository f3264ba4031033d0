"""Snapshot mode: a thread's state in one slot of an ``AgentStateStore``.

:class:`SnapshotSlots` loads and saves a thread's slot and applies the agent's
conflict policy when a turn's save finds a newer version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from journal.errors import StaleStateError
from journal.policy import ConflictPolicy
from projections.agent_state import AgentState, encode_state

if TYPE_CHECKING:
    from journal.keys import ThreadKey
    from stores.state.protocol import AgentStateStore

__all__ = ["STATE_ENTRY", "SnapshotSlots", "policy_of"]

STATE_ENTRY = "agent_state"
"""The snapshot-mode entry name of an agent's state (``ThreadKey.state_entry``)."""


def policy_of(value: ConflictPolicy | str) -> ConflictPolicy:
    """The ``ConflictPolicy`` named by ``value`` (a policy or its value).

    Raises:
        ValueError: ``value`` names no policy.
    """
    try:
        return ConflictPolicy(value)
    except ValueError:
        choices = ", ".join(p.value for p in ConflictPolicy)
        raise ValueError(
            f"unknown conflict_policy {value!r}; use one of {choices}"
        ) from None


class SnapshotSlots:
    """Snapshot-mode access to threads' slots, with the agent's conflict policy."""

    def __init__(self, store: AgentStateStore, policy: ConflictPolicy) -> None:
        self.store = store
        self.policy = policy

    async def load(self, key: ThreadKey) -> tuple[AgentState, int]:
        """The slot's state and version; an empty state at version 0 if absent."""
        entry = key.state_entry(STATE_ENTRY)
        loaded = await self.store.load(key.user_id, key.session_id, entry)
        if loaded is None:
            empty = AgentState(
                session_id=key.session_id, thread_id=key.thread_id, user_id=key.user_id
            )
            return empty, 0
        state, version = loaded
        state.version = version
        return state, version

    async def save(
        self, key: ThreadKey, state: AgentState, expected: int | None
    ) -> AgentState:
        """Save (compare-and-swap on ``expected``); return a copy at its new version."""
        version = await self.store.save(
            key.user_id,
            key.session_id,
            key.state_entry(STATE_ENTRY),
            state,
            expected_version=expected,
        )
        saved = state.copy()
        saved.version = version
        return saved

    async def save_turn(
        self, key: ThreadKey, base: AgentState, final: AgentState, version: int
    ) -> AgentState:
        """Save a turn with the version it loaded, applying the conflict policy.

        Args:
            key: The thread.
            base: The state the turn started from (as loaded).
            final: The state the turn ended with.
            version: The slot version ``base`` was loaded at.

        Raises:
            StaleStateError: ``FAIL`` and the slot moved on; or ``APPEND_MERGE`` and
                the turn changed the context beyond appending, or the retry lost too.
        """
        try:
            return await self.save(key, final, version)
        except StaleStateError:
            if self.policy is ConflictPolicy.OVERWRITE:
                return await self.save(key, final, None)
            if self.policy is not ConflictPolicy.APPEND_MERGE:
                raise
        # APPEND_MERGE: this turn's new messages go after the slot's, once.
        base_ids = [m.id for m in base.context]
        kept = [m.id for m in final.context[: len(base_ids)]]
        fresh, fresh_version = await self.load(key)
        if kept != base_ids or final.summary != base.summary:
            raise StaleStateError(
                f"{key} (snapshot; this turn changed the context beyond appending, "
                "so it cannot be merged)",
                version,
                fresh_version,
            )
        if _besides_context(final) != _besides_context(base):
            # Its todos, plan mode, permissions or tool groups would be dropped
            # while its messages, which report them done, were kept.
            raise StaleStateError(
                f"{key} (snapshot; this turn changed the agent state beyond its "
                "context, so it cannot be merged)",
                version,
                fresh_version,
            )
        fresh.context.extend(final.context[len(base_ids) :])
        fresh.shutdown_interrupted = final.shutdown_interrupted
        return await self.save(key, fresh, fresh_version)


def _besides_context(state: AgentState) -> bytes:
    """What a merge would drop of ``state``: all but its messages and run marks."""
    rest = msgspec.structs.replace(
        state,
        context=[],
        shutdown_interrupted=False,
        active_run_id=None,
        version=0,
    )
    return encode_state(rest)
