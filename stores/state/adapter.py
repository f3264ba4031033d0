"""The one place snapshot-mode stores meet ``AgentState``: state to slot bytes and back.

A slot's bytes are the state's JSON (:meth:`AgentState.to_json`) with its ``version``
field stamped; the slot's own version is the truth and replaces the stamp on load.
:class:`~stores.state.base.AgentStateStoreBase` calls this module, so the backends
only store and return bytes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec

from journal.errors import CorruptRecordError
from projections.agent_state import AgentState

if TYPE_CHECKING:
    from stores.state.slots import StateEncoder

__all__ = [
    "MAX_STATE_NESTING",
    "check_state",
    "decode_state",
    "state_encoder",
    "with_version",
]

MAX_STATE_NESTING = 65
"""How deep a saved state's values may nest, the state itself being level 1.

Every list, dict or struct adds a level; a save deeper than this is refused. Loading
decodes with msgspec, which recurses once per level within Python's recursion limit
(1,000 frames, shared with the caller's stack): without a fixed limit, a state saved
from a shallow stack may not load for a deeper caller. The journal's limit is
``journal.codec.MAX_NESTING`` (64) for an event; a message nests one level deeper in
a state (state, context, message) than in the event appending it (event, message).
"""

# What is left of a JSON string once only brackets and quotes are kept, and an
# innermost (empty) container.
_STRING = re.compile(rb'"[^"]*"')
_PAIR = re.compile(rb"\[\]|\{\}")
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


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
    The encoder raises ``ValueError`` for a state nested deeper than
    :data:`MAX_STATE_NESTING` levels, before the backend writes anything.
    """

    def encode(version: int) -> bytes:
        try:
            data = with_version(state, version).to_json()
        except RecursionError:
            data = b""  # deeper than the encoder goes: certainly too deep
        if not data or _too_deep(data):
            raise ValueError(
                f"the state is nested deeper than {MAX_STATE_NESTING} levels; "
                "a load could not decode it"
            )
        return data

    return encode


def _too_deep(data: bytes) -> bool:
    """Whether the JSON ``data`` nests deeper than :data:`MAX_STATE_NESTING`."""
    if data.count(b"[") + data.count(b"{") <= MAX_STATE_NESTING:
        return False  # not even that many containers (brackets in text count too)
    # Drop the escaped backslashes, then the escaped quotes (a backslash left is
    # an escape's first byte), then all but brackets and quotes: what is left of
    # each string is quotes around the brackets it holds, adjacent strings merge
    # (their separators are gone), and empty ones go with the fast replace.
    rest = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    rest = rest.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    brackets = _STRING.sub(b"", rest) if b'"' in rest else rest
    # Each pass removes the innermost (empty) containers, and only those: the pairs
    # a pass leaves behind are met by the next, so a value L levels deep takes L.
    for _ in range(MAX_STATE_NESTING):
        if not brackets:
            return False
        brackets = _PAIR.sub(b"", brackets)
    return bool(brackets)


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
