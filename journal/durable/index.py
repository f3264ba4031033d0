"""The durable index: queued turns and control requests, spread over shard prefixes.

Every object lives under ``~durable/`` in the journal's store (``~`` is never the
first character of an encoded id, so thread listing skips the tree):

```
~durable/q/<shard>/<thread>/t<seq:012d>.<turn id>  a submitted turn (its input)
~durable/q/<shard>/<thread>/c<ns:020d>.<request>   a pause / resume / cancel request
~durable/cursor/<thread>                           hint: where unfinished turns begin
~durable/q/<shard>/<thread>/x<name>                a copy of an entry that cannot be
                                                   decoded, set aside by a worker
```

A set-aside copy stays in its thread's directory, where an erase of the thread's
entries finds it, under a name no reader takes for an entry.

The shard is a hash of the thread's prefix, so submits spread over ``shards``
prefixes and no object is written by every submit. A turn's index entry *is* its
queued state: one exclusive create, so there is no moment where a turn is queued
but not indexed. The entry stays until the turn ends (a worker that dies mid-turn
leaves it, which is how the next worker finds the turn), and is deleted only after
the turn's end is in the log. Sequence numbers are one more than the highest entry
present; a create that collides re-lists and takes the next.

A turn id whose encoding is too long for a name (see ``journal.keys``) is named in
its hashed long form, which cannot be decoded: the id is read back from the entry
(one ``GET``, once per listing that has not seen the entry yet), as the thread of a
hashed long thread id is.

Workers find work by listing one shard (one ``LIST``) and grouping its keys by
thread; they never list the whole store.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

import msgspec

from journal import events as ev
from journal.errors import (
    KeyUnavailableError,
    ObjectExistsError,
    ObjectNotFoundError,
)
from journal.keyring import ThreadCipher
from journal.keys import ANONYMOUS_SEGMENT, ThreadKey, decode_segment, encode_segment

if TYPE_CHECKING:
    from journal.keyring import Keyring
    from journal.store import ObjectStore

__all__ = [
    "CONTROL_OPS",
    "CURSOR_DIR",
    "DEFAULT_SHARDS",
    "QUEUE_DIR",
    "ROOT",
    "SET_ASIDE",
    "Control",
    "DurableIndex",
    "ThreadEntries",
    "TurnEntry",
    "TurnRef",
]

ROOT = "~durable"
QUEUE_DIR = f"{ROOT}/q/"
CURSOR_DIR = f"{ROOT}/cursor/"
SET_ASIDE = "x"
"""The first letter of a set-aside copy's name (entries begin ``t`` or ``c``)."""
DEFAULT_SHARDS = 64
"""Shard prefixes threads spread over. Part of the layout: every client must agree
on a thread's shard (workers discover the shards by listing)."""

logger = logging.getLogger("journal.durable")

_SEQ_WIDTH = 12
_MAX_CREATE_ATTEMPTS = 64

ControlOp = Literal["pause", "resume", "cancel"]
CONTROL_OPS: tuple[str, ...] = get_args(ControlOp)
"""The control requests a worker applies."""


class TurnEntry(msgspec.Struct, kw_only=True):
    """A submitted turn as the index holds it: its thread, id and input.

    On an encrypting journal the input is stored ``sealed``, with no ``messages``
    field at all: a reader that predates sealed entries (where it was required)
    refuses the entry instead of running the turn with no input.
    :meth:`DurableIndex.read_turn` opens it, so ``messages`` is always the input.
    """

    turn_id: str
    messages: list[ev.Msg] = msgspec.field(default_factory=list)
    sealed: bytes | None = None
    """The input encrypted under the owner's data key (as stored), or None."""
    submitted_at: float
    agent_id: str
    session_id: str
    user_id: str | None
    thread_id: str
    namespace: str

    @property
    def key(self) -> ThreadKey:
        """The turn's thread."""
        return ThreadKey(
            self.agent_id, self.session_id, self.user_id, self.thread_id, self.namespace
        )


SEALED_INPUT_MAGIC = b"AJT1"
"""The container magic of a sealed turn input (a ``journal.crypto`` container)."""


def _sealed_name(turn_id: str) -> str:
    # What the ciphertext is bound to besides its thread: the entry's own name
    # changes with its sequence number, which a create that collides retakes.
    return f"turn {turn_id}"


_messages_decoder = msgspec.msgpack.Decoder(list[ev.Msg])


class _TurnId(msgspec.Struct):
    turn_id: str


_turn_id_decoder = msgspec.json.Decoder(_TurnId)


class Control(msgspec.Struct, kw_only=True):
    """A pause, resume or cancel request for one turn, applied by the lease holder.

    ``op`` is any string as stored: a request whose op the worker does not know
    (a newer client's) is refused in the log (``TurnControlRefused``), not taken
    for an unreadable object.
    """

    op: str
    turn_id: str
    request_id: str
    revision: int | None = None
    reason: str = ""
    requested_at: float = 0.0
    agent_id: str
    session_id: str
    user_id: str | None
    thread_id: str
    namespace: str


class _Ids(msgspec.Struct):
    """The thread ids every entry carries."""

    agent_id: str
    session_id: str
    user_id: str | None
    thread_id: str
    namespace: str


_turn_encoder = msgspec.json.Encoder()
_turn_decoder = msgspec.json.Decoder(TurnEntry)
_control_decoder = msgspec.json.Decoder(Control)


@dataclass(frozen=True, slots=True)
class TurnRef:
    """A turn entry's name in the index: its store key, sequence and turn id."""

    key: str
    seq: int
    turn_id: str


@dataclass(slots=True)
class ThreadEntries:
    """What the index holds for one thread, in order.

    Attributes:
        prefix: The thread's prefix (``ThreadKey.prefix``).
        base: The index directory they were listed from (their shard's).
        turns: The turn entries, by sequence number (FIFO).
        controls: The control request keys, oldest first.
        unread: Turn entries whose name holds a hashed long turn id that was not
            read back (key, sequence number): a shard scan does not read them,
            and an entry that cannot be read stays here.
    """

    prefix: str
    base: str = ""
    turns: list[TurnRef] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    unread: list[tuple[str, int]] = field(default_factory=list)

    @property
    def names(self) -> frozenset[str]:
        """Every key, for telling whether the thread's entries changed."""
        return frozenset(
            [t.key for t in self.turns] + [k for k, _ in self.unread] + self.controls
        )

    @property
    def last_seq(self) -> int:
        """The highest sequence number present (0 for none)."""
        return max(
            [t.seq for t in self.turns] + [seq for _, seq in self.unread], default=0
        )

    def find(self, turn_id: str) -> TurnRef | None:
        """The entry of ``turn_id``, if queued."""
        return next((t for t in self.turns if t.turn_id == turn_id), None)


def shard_of(key: ThreadKey, shards: int) -> str:
    """The shard prefix of a thread: a stable hash of its prefix."""
    digest = hashlib.sha256(key.prefix.encode("utf-8")).digest()
    return f"{int.from_bytes(digest[:4], 'big') % shards:02x}"


def key_of_prefix(prefix: str) -> ThreadKey | None:
    """The thread key a prefix names; None when a segment is a hashed long id."""
    segments = prefix.split("/")
    if len(segments) != 5:
        raise ValueError(f"not a thread prefix: {prefix!r}")
    ns, agent, user, session, thread = (
        None if s == ANONYMOUS_SEGMENT else decode_segment(s) for s in segments
    )
    if ns is None or agent is None or session is None or thread is None:
        return None
    if user is None and segments[2] != ANONYMOUS_SEGMENT:
        return None
    return ThreadKey(agent, session, user, thread, ns)


class DurableIndex:
    """The durable index on an object store (see the module docstring).

    Args:
        store: The journal's object store.
        shards: How many shard prefixes threads spread over (1 to 256). Every
            client of a journal must use the same (the default); workers
            discover the shards present.

    Raises:
        ValueError: ``shards`` is out of range.
    """

    def __init__(
        self,
        store: ObjectStore,
        shards: int = DEFAULT_SHARDS,
        *,
        keyring: Keyring | None = None,
        encrypt: bool = False,
    ) -> None:
        if not 1 <= shards <= 256:
            raise ValueError(f"shards must be between 1 and 256, not {shards}")
        if encrypt and keyring is None:
            raise ValueError("encrypting turn inputs needs a keyring")
        self.store = store
        self.shards = shards
        self.keyring = keyring
        self.encrypt = encrypt

    def thread_dir(self, key: ThreadKey) -> str:
        """The index prefix of one thread's entries."""
        return f"{QUEUE_DIR}{shard_of(key, self.shards)}/{key.prefix}/"

    # --- reading ---

    async def list_thread(self, key: ThreadKey) -> ThreadEntries:
        """One thread's entries (one ``LIST``, and a ``GET`` per hashed turn id)."""
        base = self.thread_dir(key)
        found = _entries(key.prefix, base, await self.store.list(base))
        return await self._read_long_ids(found, None)

    async def relist(self, entries: ThreadEntries) -> ThreadEntries:
        """The same thread's entries again, from the shard they were found in.

        A hashed turn id already read in ``entries`` is not read again.
        """
        found = _entries(
            entries.prefix, entries.base, await self.store.list(entries.base)
        )
        return await self._read_long_ids(found, entries)

    async def _read_long_ids(
        self, found: ThreadEntries, known: ThreadEntries | None
    ) -> ThreadEntries:
        """Read back the turn ids that the names of ``found``'s entries hash."""
        if not found.unread:
            return found
        seen = {t.key: t.turn_id for t in known.turns} if known is not None else {}
        unread: list[tuple[str, int]] = []
        for name, seq in found.unread:
            turn_id = seen.get(name)
            if turn_id is None:
                try:
                    turn_id = await self._turn_id_of(name)
                except ObjectNotFoundError:
                    continue  # the turn ended and its entry left meanwhile
                except msgspec.DecodeError as exc:
                    logger.warning("%s: unreadable turn entry: %s", name, exc)
                    unread.append((name, seq))
                    continue
                if _turn_segment(name) != encode_segment(turn_id):
                    # Not the turn the name was made for: trust neither.
                    logger.warning("%s: holds another turn, %r", name, turn_id)
                    unread.append((name, seq))
                    continue
            found.turns.append(TurnRef(name, seq, turn_id))
        found.turns.sort(key=lambda t: t.seq)
        found.unread = unread
        return found

    async def shard_names(self) -> list[str]:
        """The shard prefixes that hold entries (one ``LIST`` of directories)."""
        return await self.store.children(QUEUE_DIR)

    async def list_shard(self, shard: str) -> list[ThreadEntries]:
        """Every thread with entries in one shard (one ``LIST``, paged).

        A thread with nothing but set-aside copies has no entries: it is left out.
        """
        base = f"{QUEUE_DIR}{shard}/"
        grouped: dict[str, list[str]] = {}
        for full in await self.store.list(base):
            rest = full[len(base) :]
            prefix, _, _ = rest.rpartition("/")
            grouped.setdefault(prefix, []).append(full)
        found = [
            _entries(prefix, f"{base}{prefix}/", names)
            for prefix, names in grouped.items()
            if prefix.count("/") == 4
        ]
        return [entries for entries in found if entries.names]

    async def read_turn(self, ref: TurnRef | str) -> TurnEntry:
        """A turn entry's content.

        Raises:
            ObjectNotFoundError: The entry is gone (its turn ended).
            msgspec.DecodeError: The object is not a turn entry.
        """
        data, _ = await self.store.read(ref.key if isinstance(ref, TurnRef) else ref)
        entry = _turn_decoder.decode(data)
        if entry.sealed is not None:
            entry.messages = await self._open(entry)
            entry.sealed = None
        return entry

    async def _turn_id_of(self, name: str) -> str:
        """The turn id an entry holds, without opening its input.

        Raises:
            ObjectNotFoundError: The entry is gone.
            msgspec.DecodeError: The object is not a turn entry.
        """
        data, _ = await self.store.read(name)
        return _turn_id_decoder.decode(data).turn_id

    async def _open(self, entry: TurnEntry) -> list[ev.Msg]:
        """The input of a sealed entry.

        Raises:
            msgspec.DecodeError: It does not decrypt here (altered, or moved from
                another thread or turn), or is not a list of messages.
            EncryptionError: Its data key cannot be had (erased, or no keys).
        """
        sealed = entry.sealed
        assert sealed is not None  # noqa: S101 - the caller checked
        if self.keyring is None:
            raise KeyUnavailableError(entry.key.prefix, "", "no keyring was given")
        cipher = ThreadCipher(self.keyring, entry.key.prefix)
        await cipher.load()
        name = _sealed_name(entry.turn_id)
        try:
            plain = await cipher.opening(
                lambda: cipher.open(SEALED_INPUT_MAGIC, name, sealed)
            )
        except ValueError as exc:
            why = f"the sealed input does not open: {exc}"
            raise msgspec.DecodeError(why) from None
        return _messages_decoder.decode(plain)

    async def read_control(self, key: str) -> Control:
        """A control request's content.

        Raises:
            ObjectNotFoundError: The request is gone (applied).
            msgspec.DecodeError: The object is not a control request.
        """
        data, _ = await self.store.read(key)
        return _control_decoder.decode(data)

    async def key_of(self, entries: ThreadEntries) -> ThreadKey | None:
        """The thread of ``entries`` (read from an entry for hashed long ids)."""
        key = key_of_prefix(entries.prefix)
        if key is not None:
            return key
        names = [t.key for t in entries.turns] + [k for k, _ in entries.unread]
        for name in names + entries.controls:
            try:
                data, _ = await self.store.read(name)
            except ObjectNotFoundError:
                continue
            try:
                ids = msgspec.json.decode(data, type=_Ids)
            except msgspec.DecodeError as exc:
                logger.warning("%s: unreadable index entry: %s", name, exc)
                continue
            return ThreadKey(
                ids.agent_id, ids.session_id, ids.user_id, ids.thread_id, ids.namespace
            )
        return None

    # --- writing ---

    async def add_turn(
        self, entry: TurnEntry, known: ThreadEntries | None = None
    ) -> TurnRef:
        """Queue a turn: create its entry after every entry present.

        Args:
            entry: The turn.
            known: The thread's entries as just listed (saves a ``LIST``).

        Returns:
            The entry created, or the turn's entry already present (a retry).
        """
        key = entry.key
        base = self.thread_dir(key)
        listing = known if known is not None else await self.list_thread(key)
        data = await self._encoded(entry)
        for _ in range(_MAX_CREATE_ATTEMPTS):
            mine = listing.find(entry.turn_id)
            if mine is not None:
                return mine
            seq = listing.last_seq + 1
            name = f"{base}t{seq:0{_SEQ_WIDTH}d}.{encode_segment(entry.turn_id)}"
            try:
                await self.store.create(name, data)
            except ObjectExistsError:
                listing = await self.list_thread(key)
                continue
            return TurnRef(name, seq, entry.turn_id)
        raise RuntimeError(
            f"{key}: could not queue turn {entry.turn_id!r}: the sequence kept "
            f"colliding ({_MAX_CREATE_ATTEMPTS} attempts)"
        )

    async def _encoded(self, entry: TurnEntry) -> bytes:
        """The entry as stored: its input sealed when the journal encrypts."""
        if not self.encrypt:
            return _turn_encoder.encode(entry)
        assert self.keyring is not None  # noqa: S101 - checked in __init__
        cipher = ThreadCipher(self.keyring, entry.key.prefix)
        await cipher.writable()
        plain = msgspec.msgpack.encode(entry.messages)
        stored = msgspec.structs.asdict(entry)
        del stored["messages"]  # see TurnEntry
        stored["sealed"] = cipher.seal(
            SEALED_INPUT_MAGIC, _sealed_name(entry.turn_id), plain
        )
        return _turn_encoder.encode(stored)

    async def add_control(self, control: Control) -> str:
        """Record a control request; returns its key."""
        key = ThreadKey(
            control.agent_id,
            control.session_id,
            control.user_id,
            control.thread_id,
            control.namespace,
        )
        name = f"{self.thread_dir(key)}c{time.time_ns():020d}.{uuid.uuid4().hex}"
        await self.store.create(name, _turn_encoder.encode(control))
        return name

    async def delete(self, name: str) -> None:
        """Delete an entry (a turn that ended, a control request applied)."""
        await self.store.delete(name)

    async def set_aside(self, name: str, *, delete: bool = True) -> str:
        """Copy an entry that cannot be decoded out of the queue, for an operator.

        The copy is named ``x<entry name>`` beside it, which no reader takes for
        an entry. Repeating it (a worker died between the copy and the delete) is
        harmless.

        Args:
            name: The entry's key.
            delete: Delete the entry too (False: its caller ends it otherwise).

        Returns:
            The copy's key.
        """
        base, _, leaf = name.rpartition("/")
        kept = f"{base}/{SET_ASIDE}{leaf}"
        try:
            data, _ = await self.store.read(name)
        except ObjectNotFoundError:
            return kept  # set aside (or applied) by another worker meanwhile
        with contextlib.suppress(ObjectExistsError):
            await self.store.create(kept, data)
        if delete:
            await self.store.delete(name)
        return kept

    # --- the cursor hint ---

    async def read_cursor(self, key: ThreadKey) -> int:
        """The first log version a reader of the thread's turns needs (1 if unknown).

        Every turn queued in the log before it has ended and left the index. The
        hint may lag (a lower version only means reading more) and may be lost.
        """
        try:
            data, _ = await self.store.read(f"{CURSOR_DIR}{key.prefix}")
            return max(1, int(data.decode("ascii")))
        except (ObjectNotFoundError, ValueError, UnicodeDecodeError):
            return 1

    async def write_cursor(self, key: ThreadKey, version: int) -> None:
        """Move the cursor hint (only ever written by the lease holder)."""
        await self.store.put_hint(f"{CURSOR_DIR}{key.prefix}", str(version).encode())


def _entries(prefix: str, base: str, names: list[str]) -> ThreadEntries:
    out = ThreadEntries(prefix, base)
    for full in sorted(names):
        leaf = full[len(base) :]
        if "/" in leaf:
            continue
        if leaf.startswith("t"):
            seq_text, _, turn = leaf[1:].partition(".")
            try:
                turn_id = decode_segment(turn)
                seq = int(seq_text)
            except ValueError:
                continue
            if turn_id is not None:
                out.turns.append(TurnRef(full, seq, turn_id))
            else:
                out.unread.append((full, seq))  # a hashed long id: read it back
        elif leaf.startswith("c"):
            out.controls.append(full)
    out.turns.sort(key=lambda t: t.seq)
    return out


def _turn_segment(name: str) -> str:
    """The encoded turn id in a turn entry's key (``.../t<seq>.<turn id>``)."""
    return name.rpartition("/")[2].partition(".")[2]


def new_request_id() -> str:
    """A fresh control request id."""
    return uuid.uuid4().hex
