"""The one place snapshot-mode stores meet ``AgentState``: state to slot bytes and back.

A slot's bytes are the state's JSON (:meth:`AgentState.to_json`) with its ``version``
field stamped; the slot's own version is the truth and replaces the stamp on load.
:class:`~stores.state.base.AgentStateStoreBase` calls this module, so the backends
only store and return bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from journal.errors import CorruptRecordError
from projections.agent_state import AgentState

if TYPE_CHECKING:
    from stores.state.slots import StateEncoder

__all__ = ["check_state", "decode_state", "state_encoder", "with_version"]


def check_state(state: object) -> AgentState:
    """``state`` itself, once it is known to be an ``AgentState``.

    Raises:
        TypeError: It is not one.
    """
    if not isinstance(state, AgentState):
        raise TypeError(f"state must be an AgentState, not {type(state).__name__}")
    return state


def with_version(state: AgentState, version: int) -> AgentState:
    """A shallow copy of ``state`` whose ``version`` is ``version``."""
    return msgspec.structs.replace(state, version=version)


def state_encoder(state: AgentState) -> StateEncoder:
    """The :data:`~stores.state.slots.StateEncoder` of ``state``.

    The caller's object is never modified: each call of the encoder stamps a copy.
    """

    def encode(version: int) -> bytes:
        return with_version(state, version).to_json()

    return encode


def decode_state(
    data: bytes, version: int, *, label: str, origin: str | None = None
) -> AgentState:
    """The state a slot's bytes hold, its ``version`` set to the slot's.

    Args:
        data: The bytes a backend read.
        version: The slot's version.
        label: The slot's readable name, for the error.
        origin: Where the bytes came from (e.g. a file path), for the error.

    Raises:
        CorruptRecordError: The bytes are not an ``AgentState``; names the slot.
    """
    try:
        state = AgentState.from_json(data)
    # msgspec.DecodeError is a ValueError. The decoder recurses once per nesting
    # level: bytes nested deeply enough (hostile, or damaged) exhaust Python's
    # recursion limit; that is the slot's fault, and the caller is told which.
    except (ValueError, RecursionError) as exc:
        detail = str(exc) if origin is None else f"{origin}: {exc}"
        raise CorruptRecordError(label, version, detail) from exc
    state.version = version
    return state
