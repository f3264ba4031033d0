"""Copies of a thread's state that cost what is touched, not the length of its context.

A run hands out copies of its state often: a tool's ``ctx.agent_state``, the state
``ctx.update_state`` edits and the one it returns, the state a call leaves on the
caller's context. A deep copy of a long thread's context (tens of thousands of
messages) made each of those cost milliseconds and flooded the garbage collector.

:func:`state_copy` copies everything but the messages, and gives the copy a
:class:`SharedMessages` context: a list holding the very message objects of the
state it was copied from, which hands a message out only as a copy of its own (made
on first read, kept in the list, so edits to it stay in the copy). An edit made
through the copy never reaches the state it came from, as with a deep copy, while a
message nobody reads is never copied. What committed state holds is never edited
in place (the projection appends to, or replaces, the context list), so sharing its
messages is safe.

:func:`detached` turns such a copy back into a plain state for comparing and
committing: its context a plain list of the same objects (shared messages compare
equal by identity at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsIndex, overload

import msgspec

from journal import events as ev
from projections.agent_state import AgentState, decode_state, encode_state

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

__all__ = [
    "SharedMessages",
    "StateSnapshot",
    "copy_message",
    "detached",
    "own_messages",
    "state_copy",
]

_msg_encoder = msgspec.msgpack.Encoder()
_msg_decoder = msgspec.msgpack.Decoder(ev.Msg)


def copy_message(message: ev.Msg) -> ev.Msg:
    """A deep copy of one message."""
    return _msg_decoder.decode(_msg_encoder.encode(message))


class SharedMessages(list[ev.Msg]):
    """A copied state's context: the source's messages, each copied on first read.

    It is a ``list``: code that only reads it, appends to it, slices, deletes or
    compares it works as on a plain list. Every way Python code gets a message out
    of it (indexing, slicing, iterating, ``pop``, ``copy``, ``+``) yields the list's
    own copy of that message: the first read of a message copies it and puts the
    copy in its place. A message put in by the holder (``append``, ``insert``, item
    assignment, ...) is the holder's already and is never copied.

    Encoding it (msgspec), comparing it and ``list.copy(it)`` see the stored objects
    as they are, which is what committing a copy wants: an unread message is the
    source's own object, so comparing it with the source is an identity check.
    """

    __slots__ = ("_owned",)

    def __init__(self, messages: Iterable[ev.Msg] = ()) -> None:
        # The source's objects: none is this list's own until it is read.
        super().__init__(messages)
        self._owned: set[int] = set()

    # --- reading: a message leaves only as this list's own copy ---

    def _own(self, index: int) -> ev.Msg:
        message = list.__getitem__(self, index)
        if id(message) in self._owned:
            return message
        mine = copy_message(message)
        list.__setitem__(self, index, mine)
        self._owned.add(id(mine))
        return mine

    def _own_all(self) -> None:
        for index in range(len(self)):
            self._own(index)

    @overload
    def __getitem__(self, index: SupportsIndex) -> ev.Msg: ...

    @overload
    def __getitem__(self, index: slice) -> list[ev.Msg]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> ev.Msg | list[ev.Msg]:
        if isinstance(index, slice):
            return [self._own(i) for i in range(*index.indices(len(self)))]
        return self._own(index.__index__())

    def __iter__(self) -> Iterator[ev.Msg]:
        # By position, as a list iterator goes: edits while iterating behave alike.
        index = 0
        while index < len(self):
            yield self._own(index)
            index += 1

    def __reversed__(self) -> Iterator[ev.Msg]:
        index = len(self) - 1
        while index >= 0:
            if index < len(self):
                yield self._own(index)
            index -= 1

    def pop(self, index: SupportsIndex = -1) -> ev.Msg:
        """Remove and return the message at ``index`` (this list's copy of it)."""
        message = self._own(index.__index__())
        list.pop(self, index)
        return message

    def copy(self) -> list[ev.Msg]:
        """A plain list of this list's copies of its messages."""
        return list(self)

    def __add__(self, other: list[Any]) -> list[Any]:
        return [*self, *other]

    def __radd__(self, other: list[Any]) -> list[Any]:
        return [*other, *self]

    def __mul__(self, count: SupportsIndex) -> list[ev.Msg]:
        return list(self) * count

    __rmul__ = __mul__

    def sort(
        self, *, key: Callable[[ev.Msg], Any] | None = None, reverse: bool = False
    ) -> None:
        """Sort in place (a key function sees this list's copies)."""
        self._own_all()
        list.sort(self, key=key, reverse=reverse)  # type: ignore[type-var,arg-type]

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        # Pickled (or deep-copied) as a plain list of its own copies.
        return (list, (list(self),))

    # --- writing: what the holder puts in is its own ---

    def append(self, message: ev.Msg) -> None:
        """Append a message (the holder's own: never copied)."""
        list.append(self, message)
        self._owned.add(id(message))

    def extend(self, messages: Iterable[ev.Msg]) -> None:
        """Append messages (the holder's own: never copied)."""
        items = list(messages)
        list.extend(self, items)
        self._owned.update(id(m) for m in items)

    def __iadd__(self, messages: Iterable[ev.Msg]) -> SharedMessages:  # type: ignore[override,misc]
        self.extend(messages)
        return self

    def insert(self, index: SupportsIndex, message: ev.Msg) -> None:
        """Insert a message (the holder's own: never copied)."""
        list.insert(self, index, message)
        self._owned.add(id(message))

    @overload
    def __setitem__(self, index: SupportsIndex, value: ev.Msg) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[ev.Msg]) -> None: ...

    def __setitem__(self, index: SupportsIndex | slice, value: Any) -> None:
        if isinstance(index, slice):
            items = list(value)
            list.__setitem__(self, index, items)
            self._owned.update(id(m) for m in items)
        else:
            list.__setitem__(self, index, value)
            self._owned.add(id(value))


def state_copy(state: AgentState) -> AgentState:
    """A copy of ``state`` that nothing done to it can change ``state`` through.

    Everything but the context is copied deeply (its size does not grow with the
    thread's history); the context is a :class:`SharedMessages` over ``state``'s
    messages, so the copy costs a pointer per message, not a copy of each. That
    relies on ``state``'s messages never being edited in place, which holds for
    committed state (a plain list); the messages of a state handed out (whose
    holder may edit them) are copied at once.
    """
    copy = _bare_copy(state)
    if type(state.context) is list:
        copy.context = SharedMessages(state.context)
    else:
        copy.context = SharedMessages(
            [copy_message(m) for m in list.copy(state.context)]
        )
    return copy


def _bare_copy(state: AgentState) -> AgentState:
    """A deep copy of everything in ``state`` but its context (left empty)."""
    return decode_state(encode_state(state.without_context()))


class StateSnapshot:
    """The state as of now, made into a :func:`state_copy` only when first read.

    For the state a call leaves on its contexts, which is often never read: taking
    the snapshot copies what is not the context (it is edited in place as the
    thread goes on) and remembers the context list and its length. That is enough
    because committed state never rewrites its context list in place: it appends
    to it, or replaces the list (see ``AgentStateProjection.apply``), so the
    list's first ``length`` messages stay as they are.

    Args:
        state: Committed state (a writer's or a snapshot sink's); any other is
            copied at once.
    """

    __slots__ = ("_bare", "_length", "_messages", "_state")

    def __init__(self, state: AgentState) -> None:
        self._bare = _bare_copy(state)
        self._messages = state.context
        self._length = len(state.context)
        self._state: AgentState | None = None
        if type(state.context) is not list:
            # Not committed state after all: its messages may be edited, copy now.
            self._state = state_copy(state)

    def get(self) -> AgentState:
        """The state as it was when the snapshot was taken (one object every time)."""
        state = self._state
        if state is None:
            state = self._bare
            context = SharedMessages(self._messages)
            del context[self._length :]
            state.context = context
            self._state, self._messages = state, []
        return state


def detached(state: AgentState) -> AgentState:
    """``state`` with a plain-list context of the same objects (for diffs, commits).

    The result shares everything else with ``state``; it is for comparing with the
    committed state and deriving events, not for handing out.
    """
    if type(state.context) is list:
        return state
    return msgspec.structs.replace(state, context=list.copy(state.context))


def own_messages(events: list[object]) -> list[object]:
    """``events`` with each appended message copied (so the committer owns it).

    Events derived from a copy carry the copy's messages, which their holder may
    still edit: committed state must not share them.
    """
    return [
        ev.MessageAppended(copy_message(e.message))
        if isinstance(e, ev.MessageAppended)
        else e
        for e in events
    ]
