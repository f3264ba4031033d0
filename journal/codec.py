"""Record and checkpoint byte formats, the event registry and upcasters.

The formats are specified in ``docs/FORMAT.md`` (format version 1). Everything here is
pure: no I/O, so the replay hot path and the tests exercise it directly.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import operator
import re
import struct
import types
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import msgspec

from journal import compression
from journal import events as ev
from journal.checksum import crc32
from journal.errors import CorruptRecordError, InvalidEventError
from journal.turn_events import TURN_EVENTS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "BLOB_THRESHOLD",
    "GENESIS_HASH",
    "MAX_ID_LENGTH",
    "MAX_NESTING",
    "CheckpointBody",
    "EncodedRecord",
    "EncryptedBody",
    "Envelope",
    "ParsedRecord",
    "Record",
    "RecordBody",
    "decode_checkpoint",
    "decode_event",
    "encode_checkpoint",
    "encode_record",
    "event_type_name",
    "gc_paused",
    "is_registered",
    "parse_record",
    "register_event",
    "register_upcaster",
    "seal_record",
]

FORMAT_VERSION = 1
RECORD_MAGIC = b"AJR1"
RECORD_ZMAGIC = b"AJZ1"
"""A record whose body is zstd-compressed (``Journal(compression="zstd")``)."""
RECORD_EMAGIC = b"AJE1"
"""A record whose body is encrypted (``Journal(encryption=...)``)."""
CHECKPOINT_MAGIC = b"AJC1"
GENESIS_HASH = bytes(32)
"""The ``prev_hash`` of version 1."""

BLOB_THRESHOLD = 64 * 1024
"""Encoded events larger than this are stored once as ``blobs/<sha256>``."""

MAX_NESTING = 64
"""How deep an event's values may nest, the event itself being level 1.

Every list, tuple, dict or struct inside an event adds a level; an append deeper than
this is refused. Decoders (msgspec's and ours) recurse, and Python's recursion limit
(1000 frames, shared with the caller's stack) would otherwise make a deep enough
record unreadable; 64 leaves tool inputs and metadata room while keeping every read
far from that limit.
"""

MAX_ID_LENGTH = 256
"""The longest ``batch_id`` and ``run_id`` an append takes, in characters."""

_TOO_DEEP = (
    f"a value is nested too deeply to decode (appends refuse more than {MAX_NESTING} "
    "levels; this was written without that check)"
)

_HEADER = struct.Struct(">4sI")
_CRC = struct.Struct(">I")
_NIL = msgspec.Raw(b"\xc0")


# --- wire structures ------------------------------------------------------------


class Envelope(msgspec.Struct, array_like=True, frozen=True):
    """One event on the wire: its type name, schema, flag, and bytes or blob ref."""

    type: str
    schema: int
    required: bool
    data: msgspec.Raw
    blob: str | None = None


class RecordBody(msgspec.Struct, array_like=True, frozen=True):
    """The canonical body of a record; its bytes are what the hash chain covers."""

    format: int
    version: int
    epoch: int
    writer: str
    batch_id: str
    run_id: str | None
    committed_at: float
    prev_hash: bytes
    events: list[Envelope]


class _RecordBodyOut(msgspec.Struct, array_like=True, frozen=True):
    """RecordBody as written, with its envelopes already encoded.

    The bytes the idempotency digest covers are encoded once and embedded as they
    are; the result is byte for byte what encoding a RecordBody gives.
    """

    format: int
    version: int
    epoch: int
    writer: str
    batch_id: str
    run_id: str | None
    committed_at: float
    prev_hash: bytes
    events: msgspec.Raw


class Record(msgspec.Struct, frozen=True):
    """One decoded commit of a thread.

    Attributes:
        version: 1-based position in the thread.
        epoch: The writer's fencing epoch.
        writer: The writer's holder id.
        batch_id: The idempotency key of the append.
        run_id: The run the record belongs to, if any.
        committed_at: The writer's wall clock at commit (informational only).
        prev_hash: Hex SHA-256 of the previous record (zeros for version 1).
        hash: Hex SHA-256 of ``prev_hash`` and this record's canonical body.
        events: The events, decoded; unknown types are ``UnknownEvent``.
        size: The record's size in bytes on storage.
    """

    version: int
    epoch: int
    writer: str
    batch_id: str
    run_id: str | None
    committed_at: float
    prev_hash: str
    hash: str
    events: list[Any]
    size: int = 0


class CheckpointBody(msgspec.Struct, array_like=True, frozen=True):
    """A checkpoint: the non-message state, and message chunks by reference.

    ``batches`` (added later, hence last and optional) holds the idempotency window
    of the records up to ``version``: see ``journal.engine.batches``. Checkpoints
    written before it decode with it empty, and older readers ignore it.
    """

    format: int
    version: int
    record_hash: bytes
    created_at: float
    state: bytes
    chunks: list[str]
    message_count: int
    batches: bytes = b""


class EncryptedBody(msgspec.Struct, array_like=True, frozen=True):
    """The body of an encrypted record (``AJE1``): clear structure, sealed content.

    ``ciphertext`` is ``nonce || AES-GCM(RecordBody bytes, zstd-compressed or not)
    || tag`` under the data key ``key_id``; the clear fields repeat the body's, so
    that the chain, contiguity and epochs can be checked without keys.
    """

    format: int
    version: int
    epoch: int
    prev_hash: bytes
    key_id: str
    ciphertext: bytes


class EncodedRecord(msgspec.Struct):
    """A record ready to publish, with the blobs that must exist before it."""

    data: bytes
    hash: bytes
    content_digest: bytes
    blobs: dict[str, bytes] = msgspec.field(default_factory=dict)
    events: list[object] | None = None
    """The events as readers will decode them (None when not validated)."""
    epoch: int = 0
    prev_hash: bytes = GENESIS_HASH
    stored_body: bytes = b""
    """The body as framed: the canonical body, or its zstd frame."""


class ParsedRecord(msgspec.Struct):
    """A record whose framing, checksum and hash were verified; events still raw.

    ``sealed`` records are encrypted ones read without their key: only the clear
    fields of ``body`` (format, version, epoch, prev_hash) are real, it holds no
    events, and ``writer``, ``batch_id`` and ``committed_at`` are empty.
    """

    body: RecordBody
    hash: bytes
    size: int
    sealed: bool = False
    encrypted: bool = False

    @property
    def blob_refs(self) -> list[str]:
        """The blobs this record's events are stored in."""
        return [e.blob for e in self.body.events if e.blob is not None]

    def content_digest(self, skip: int = 0) -> bytes:
        """The digest that idempotent retries compare (events only).

        ``skip``: leave out that many leading events (a deferred fence's, which
        are the writer's, not the batch's).
        """
        return _content_digest(self.body.events[skip:] if skip else self.body.events)

    def fence_events(self) -> int:
        """How many leading events are a writer's fence, not the batch's.

        ``ThreadCreated`` and ``LeaseAcquired``: what a deferred fence puts before
        the events of the batch that carries it.
        """
        count = 0
        for envelope in self.body.events:
            if envelope.type not in _FENCE_TYPES:
                break
            count += 1
        return count


# --- the event registry ---------------------------------------------------------


class EventType(msgspec.Struct):
    """One registered event type, as :func:`unregister_event` hands it back.

    Attributes:
        cls: The event class.
        name: Its type name on the wire.
        required: Whether readers that do not know it must fail closed.
        schema: The schema version written.
        decoder: Decodes its fields (msgpack).
    """

    cls: type[msgspec.Struct]
    name: str
    required: bool
    schema: int
    _decoder: msgspec.msgpack.Decoder[Any] | None = None

    def __eq__(self, other: object) -> bool:
        # The decoder is a cache: two registrations of a type are equal whether
        # or not either has built it.
        if type(other) is not EventType:
            return NotImplemented
        return (self.cls, self.name, self.required, self.schema) == (
            other.cls,
            other.name,
            other.required,
            other.schema,
        )

    def __repr__(self) -> str:
        return (
            f"EventType(cls={self.cls!r}, name={self.name!r}, "
            f"required={self.required!r}, schema={self.schema!r})"
        )

    @property
    def decoder(self) -> msgspec.msgpack.Decoder[Any]:
        """Decodes its fields (msgpack); built on first use for the built-ins.

        Building one resolves the class's annotations: for the built-in types
        together, about a third of what importing this module cost, paid by
        every cold start whether or not it read an event of each type.
        """
        if self._decoder is None:
            self._decoder = msgspec.msgpack.Decoder(self.cls)
        return self._decoder


_BY_NAME: dict[str, EventType] = {}
_BY_CLASS: dict[type, EventType] = {}
_UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}

_message_decoder: msgspec.msgpack.Decoder[Any] | None = None
"""Built from the registry on first use; any change to the registry drops it."""


def _forget_message_decoder() -> None:
    global _message_decoder
    _message_decoder = None


def register_event(
    cls: type[msgspec.Struct],
    *,
    name: str | None = None,
    required: bool | None = None,
    schema: int | None = None,
) -> type[msgspec.Struct]:
    """Register an application event type so records can carry it.

    Usable as a decorator. Extensions are optional (``required=False``) unless
    declared: a reader that does not know an optional event skips it, while one that
    does not know a required event refuses to build state.

    Args:
        cls: A ``journal.Event`` subclass (a frozen, tagged ``msgspec.Struct``).
        name: The type name on the wire; defaults to the class name.
        required: Whether unknown readers must fail closed.
        schema: The schema version written; older versions are upgraded by the
            upcasters registered for this type.

    Returns:
        ``cls``, unchanged.

    Raises:
        ValueError: The name is taken by another class.
        TypeError: ``cls`` is not a msgspec Struct.
    """
    _register(cls, name, required, schema, build=True)
    return cls


def _register(
    cls: type[msgspec.Struct],
    name: str | None,
    required: bool | None,
    schema: int | None,
    *,
    build: bool,
) -> None:
    # ``build``: make the decoder now, so that a type msgspec cannot decode is
    # refused at registration (an application's type); the built-ins are known
    # good, and leave it for first use.
    if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
        raise TypeError(f"register_event needs a msgspec.Struct class, not {cls!r}")
    type_name = name or cls.__name__
    existing = _BY_NAME.get(type_name)
    if existing is not None and existing.cls is not cls:
        raise ValueError(
            f"event type name {type_name!r} is already registered to "
            f"{existing.cls.__module__}.{existing.cls.__qualname__}"
        )
    # Extensions are optional unless declared here or on the class itself; the
    # inherited ``Event.required`` default describes the built-ins only.
    declared = cls.__dict__.get("required", False)
    is_required = bool(required) if required is not None else bool(declared)
    version = schema if schema is not None else int(getattr(cls, "schema", 1))
    if version < 1:
        raise ValueError(f"schema must be >= 1, not {version}")
    info = EventType(cls, type_name, is_required, version)
    if build:
        info.decoder  # noqa: B018 - built now, for its errors
    _BY_NAME[type_name] = info
    _BY_CLASS[cls] = info
    _forget_message_decoder()


def unregister_event(type_name: str) -> EventType:
    """Forget an application event type: this process then reads it as unknown.

    Meant for tests that play a reader older than the writer (re-register the
    returned type's ``cls`` with its ``name``, ``required`` and ``schema`` to
    restore it). Upcasters registered for the name stay.

    Returns:
        The registration removed.

    Raises:
        KeyError: ``type_name`` is not registered.
        ValueError: ``type_name`` is a built-in event type.
    """
    if type_name in _BUILTIN_NAMES:
        raise ValueError(f"{type_name!r} is a built-in event type; it stays registered")
    info = _BY_NAME.pop(type_name)
    _forget_message_decoder()
    _BY_CLASS.pop(info.cls, None)
    return info


def register_upcaster(
    type_name: str,
    from_schema: int,
    upcaster: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    """Register a function upgrading ``type_name`` events from ``from_schema``.

    The function receives the old event's fields as a dict and returns them as of
    schema ``from_schema + 1``. Chains run until the registered schema is reached.
    """
    if from_schema < 1:
        raise ValueError(f"from_schema must be >= 1, not {from_schema}")
    _UPCASTERS[(type_name, from_schema)] = upcaster


def is_registered(type_name: str) -> bool:
    """Whether ``type_name`` is a known event type."""
    return type_name in _BY_NAME


def event_type_name(event: object) -> str:
    """The wire type name of an event instance."""
    if isinstance(event, ev.UnknownEvent):
        return event.type
    info = _BY_CLASS.get(type(event))
    if info is None:
        raise TypeError(
            f"{type(event).__qualname__} is not a registered event type; "
            "call journal.register_event on it first"
        )
    return info.name


_BUILTINS: tuple[type[ev.Event], ...] = (
    ev.ThreadCreated,
    ev.LeaseAcquired,
    ev.RunStarted,
    ev.RunCompleted,
    ev.RunFailed,
    ev.RunInterrupted,
    ev.MessageAppended,
    ev.ContextCompacted,
    ev.SummarySet,
    ev.ContextCleared,
    ev.ToolCallRequested,
    ev.ToolCallCompleted,
    ev.ToolCallReconciled,
    ev.ToolGroupActivated,
    ev.ToolGroupDeactivated,
    ev.PermissionRuleSet,
    ev.PermissionRuleRemoved,
    ev.PermissionModeSet,
    ev.PlanModeEntered,
    ev.PlanModeExited,
    ev.TodosWritten,
    ev.TaskBegun,
    ev.RequirementDecided,
    ev.EvidenceBound,
    ev.VerificationRecorded,
    ev.RequirementProposed,
    ev.ObjectVersionSet,
    ev.AgentStateReplaced,
)
for _cls in _BUILTINS:
    _register(_cls, None, True, None, build=False)
# Durable turns' events leave AgentState unchanged: optional, so an older reader
# skips them and still builds the same state.
for _cls in TURN_EVENTS:
    _register(_cls, None, False, None, build=False)
_BUILTIN_NAMES = frozenset(_BY_NAME)


def _tool_call_completed_v2(fields: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 had no message_id: its tool message was a MessageAppended of its own.
    return fields


register_upcaster("ToolCallCompleted", 1, _tool_call_completed_v2)


# --- records --------------------------------------------------------------------

_encoder = msgspec.msgpack.Encoder()
_body_decoder = msgspec.msgpack.Decoder(RecordBody)
_checkpoint_decoder = msgspec.msgpack.Decoder(CheckpointBody)


_FENCE_TYPES = frozenset({"ThreadCreated", "LeaseAcquired"})


def _content_digest(envelopes: Sequence[Envelope]) -> bytes:
    return hashlib.sha256(_encoder.encode(envelopes)).digest()


def _frame(magic: bytes, body: bytes, trailer: bytes = b"") -> bytes:
    head = _HEADER.pack(magic, len(body))
    crc = crc32(trailer, crc32(body, crc32(head)))
    return b"".join((head, body, trailer, _CRC.pack(crc)))


def _unframe(
    magic: bytes, raw: bytes, trailer_len: int, what: str
) -> tuple[bytes, bytes]:
    """Check framing and checksum; return (body, trailer)."""
    end = _frame_end(magic, raw, trailer_len, what)
    return raw[_HEADER.size : end], raw[end : end + trailer_len]


def _frame_end(
    magic: bytes, raw: bytes | memoryview, trailer_len: int, what: str
) -> int:
    """Check framing and checksum; return where the body ends (it starts at 8)."""
    minimum = _HEADER.size + trailer_len + _CRC.size
    if len(raw) < minimum:
        raise ValueError(f"{what} is truncated ({len(raw)} bytes)")
    (crc,) = _CRC.unpack_from(raw, len(raw) - _CRC.size)
    if crc32(memoryview(raw)[: -_CRC.size]) != crc:
        raise ValueError(f"{what} checksum mismatch")
    found, length = _HEADER.unpack_from(raw)
    if found != magic:
        raise ValueError(f"{what} has magic {found!r}, expected {magic!r}")
    end: int = _HEADER.size + length
    if end + trailer_len + _CRC.size != len(raw):
        raise ValueError(f"{what} length field disagrees with its size")
    return end


def _envelope(
    event: object,
    threshold: int,
    blobs: dict[str, bytes],
    index: int,
    decoded: list[object] | None,
) -> Envelope:
    """Encode one event; with ``decoded``, check it as a reader, collecting its view."""
    if isinstance(event, ev.UnknownEvent):
        if decoded is not None:
            decoded.append(_check_unknown(event, index))
        # Re-emitting an unknown event keeps its bytes exactly as the writer made them.
        return Envelope(
            event.type, event.schema, event.required, msgspec.Raw(event.data)
        )
    info = _BY_CLASS.get(type(event))
    if info is None:
        raise TypeError(
            f"{type(event).__qualname__} is not a registered event type; "
            "call journal.register_event on it first"
        )
    if decoded is None:
        data = _encoder.encode(event)
    else:
        try:
            data = _encoder.encode(event)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise _unencodable(event, info.name, index, exc) from None
        decoded.append(_check_decodes(info, data, event, index))
    if len(data) > threshold:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return Envelope(info.name, info.schema, info.required, _NIL, digest)
    return Envelope(info.name, info.schema, info.required, msgspec.Raw(data))


# --- checking an event as a reader will see it ------------------------------------

_LEAVES = frozenset({str, int, bool, type(None), bytes})

# Every bytes value that may start a MessagePack map or array (fixmap, fixarray,
# array16/32, map16/32). An event's nesting cannot exceed how many of them its bytes
# hold, so counting them (at C speed) clears almost every event without a walk.
_NOT_CONTAINER = bytes(
    b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF)
)
# A float64 whose exponent is all ones: NaN or an infinity (msgspec writes every
# float as a float64). Infinities are fine; the walk tells them apart.
_NON_FINITE = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")


def _may_need_inspection(data: bytes) -> bool:
    """Whether an event's bytes might nest too deeply or hold a NaN (cheap)."""
    return (
        len(data.translate(None, _NOT_CONTAINER)) > MAX_NESTING
        or _NON_FINITE.search(data) is not None
    )


def _children(obj: object) -> list[tuple[str, object]] | None:
    """The contained values of a container, with their path segments (else None)."""
    if isinstance(obj, list | tuple | set | frozenset):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        out: list[tuple[str, object]] = []
        for k, v in obj.items():
            out.append((f"[{k!r}] (a key)", k))
            out.append((f"[{k!r}]", v))
        return out
    fields = getattr(type(obj), "__struct_fields__", None)
    if fields is None:
        return None
    return [(f".{name}", getattr(obj, name)) for name in fields]


def _needs_inspection(root: object) -> bool:
    """Whether a decoded event nests too deeply or holds a NaN (fast, no paths)."""
    stack: list[tuple[object, int]] = [(root, 1)]
    pop, push, leaves = stack.pop, stack.append, _LEAVES
    while stack:
        obj, depth = pop()
        t = type(obj)
        if t is list or t is tuple:
            items: Iterable[object] = obj  # type: ignore[assignment]
        elif t is dict:
            mapping: dict[object, object] = obj  # type: ignore[assignment]
            items = (*mapping, *mapping.values())
        else:
            fields = getattr(t, "__struct_fields__", None)
            if fields is None:
                continue  # a scalar the decoder produced (datetime, Ext, ...)
            items = [getattr(obj, f) for f in fields]
        if depth > MAX_NESTING:
            return True
        for item in items:
            it = type(item)
            if it in leaves:
                continue
            if it is float:
                if item != item:
                    return True
                continue
            push((item, depth + 1))
    return False


def _inspect(root: object, type_name: str, index: int) -> InvalidEventError | None:
    """The first too-deep container or NaN in ``root``, with its path (slow)."""
    # Each entry: the value, its level, its path, and the path up to the last struct
    # field on the way (a too-deep value is named by the field holding it).
    stack: list[tuple[object, int, str, str]] = [(root, 1, "", "")]
    while stack:
        obj, depth, path, field_path = stack.pop()
        if isinstance(obj, float) and obj != obj:
            return InvalidEventError(
                index,
                type_name,
                f"events[{index}]{path}",
                "NaN is not allowed (it is not equal to itself, so a state holding "
                "it never equals its own copy)",
                "float",
            )
        children = _children(obj)
        if children is None:
            continue
        if depth > MAX_NESTING:
            return InvalidEventError(
                index,
                type_name,
                f"events[{index}]{field_path}",
                f"nested deeper than {MAX_NESTING} levels",
                type(obj).__name__,
            )
        is_struct = hasattr(type(obj), "__struct_fields__")
        for segment, child in reversed(children):
            child_path = path + segment
            stack.append(
                (child, depth + 1, child_path, child_path if is_struct else field_path)
            )
    return None


def _check_decodes(info: EventType, data: bytes, event: object, index: int) -> object:
    """Decode ``data`` as readers will; return what they will see, or raise."""
    try:
        decoded = info.decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _not_decodable(event, info.name, index, exc) from None
    except RecursionError:
        problem = _inspect(event, info.name, index)
        raise problem or InvalidEventError(
            index, info.name, f"events[{index}]", "nested too deeply to decode"
        ) from None
    if _may_need_inspection(data) and _needs_inspection(decoded):
        problem = _inspect(decoded, info.name, index)
        if problem is not None:
            raise problem
    return decoded


def _not_decodable(
    event: object, type_name: str, index: int, exc: msgspec.ValidationError
) -> InvalidEventError:
    """Name a reader's validation error by the field it points at."""
    text = str(exc)
    detail, _, where = text.rpartition(" - at `")
    if not detail:
        return InvalidEventError(index, type_name, f"events[{index}]", text)
    where = where.rstrip("`").removeprefix("$")
    return InvalidEventError(
        index,
        type_name,
        f"events[{index}]{where}",
        detail[:1].lower() + detail[1:],
        _type_at(event, where),
    )


def _type_at(obj: object, where: str) -> str | None:
    """The type name of the value at a msgspec path like ``.message.content[1]``."""
    rest = where
    while rest:
        if rest.startswith("."):
            name, rest = _split_segment(rest[1:])
            if not hasattr(type(obj), "__struct_fields__"):
                return None
            obj = getattr(obj, name, None)
        elif rest.startswith("["):
            key, _, rest = rest[1:].partition("]")
            if not key.isdigit() or not isinstance(obj, list | tuple):
                return None
            position = int(key)
            if position >= len(obj):
                return None
            obj = obj[position]
        else:
            return None
    return type(obj).__name__


def _split_segment(text: str) -> tuple[str, str]:
    for i, ch in enumerate(text):
        if ch in ".[":
            return text[:i], text[i:]
    return text, ""


def _unencodable(
    event: object, type_name: str, index: int, exc: BaseException
) -> InvalidEventError:
    """Find the value that would not encode, descending while a child fails too."""
    if isinstance(exc, RecursionError):
        return _inspect(event, type_name, index) or InvalidEventError(
            index, type_name, f"events[{index}]", "nested too deeply to encode"
        )
    obj, path, error = event, "", exc
    for _ in range(MAX_NESTING + 1):
        for segment, child in _children(obj) or ():
            try:
                _encoder.encode(child)
            except (TypeError, ValueError, OverflowError) as child_exc:
                obj, path, error = child, path + segment, child_exc
                break
        else:
            break
    return InvalidEventError(
        index,
        type_name,
        f"events[{index}]{path}",
        f"cannot be encoded: {error}",
        type(obj).__name__,
    )


def _bad_data(index: int, name: str, detail: str) -> InvalidEventError:
    """The error for an ``UnknownEvent`` whose bytes readers would not decode."""
    return InvalidEventError(index, name, f"events[{index}].data", detail, "bytes")


def _check_unknown(event: ev.UnknownEvent, index: int) -> object:
    """Check an UnknownEvent's envelope fields and bytes as a reader will read them."""
    name = event.type if isinstance(event.type, str) else "UnknownEvent"
    for field_name, value, kind in (
        ("type", event.type, str),
        ("schema", event.schema, int),
        ("required", event.required, bool),
        ("data", event.data, bytes),
    ):
        if type(value) is not kind and not (kind is int and type(value) is bool):
            raise InvalidEventError(
                index,
                name,
                f"events[{index}].{field_name}",
                f"expected {kind.__name__}",
                type(value).__name__,
            )
    if not event.type:
        raise InvalidEventError(index, name, f"events[{index}].type", "is empty", "str")
    if not 1 <= event.schema < 2**31:
        raise InvalidEventError(
            index, name, f"events[{index}].schema", f"{event.schema} is not >= 1", "int"
        )
    info = _BY_NAME.get(event.type)
    if info is not None and info.schema == event.schema:
        # A reader knows this type: it decodes the bytes as that type.
        return _check_decodes(info, event.data, event, index)
    if info is not None and event.schema < info.schema:
        # A reader upcasts it to that type: the writer must fold what they fold.
        envelope = Envelope(
            event.type, event.schema, event.required, msgspec.Raw(event.data)
        )
        try:
            upcast = _decode_event(envelope, None)
        except (ValueError, msgspec.DecodeError, RecursionError) as exc:
            why = f"does not decode as {name} at schema {event.schema}: {exc}"
            raise _bad_data(index, name, why) from None
        if _needs_inspection(upcast):
            problem = _inspect(upcast, name, index)
            if problem is not None:
                raise problem
        return upcast
    try:
        value = msgspec.msgpack.decode(event.data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise _bad_data(index, name, f"is not one MessagePack value: {exc}") from None
    if _needs_inspection(value):
        problem = _inspect(value, name, index)
        if problem is not None:
            raise InvalidEventError(
                index,
                name,
                problem.path.replace(f"events[{index}]", f"events[{index}].data", 1),
                problem.detail,
                problem.value_type,
            )
    return event


def encode_record(
    *,
    version: int,
    epoch: int,
    writer: str,
    batch_id: str,
    run_id: str | None,
    committed_at: float,
    prev_hash: bytes,
    events: Iterable[object],
    blob_threshold: int = BLOB_THRESHOLD,
    compress: Callable[[bytes], bytes] | None = None,
    validate: bool = True,
) -> EncodedRecord:
    """Encode one record (pure).

    ``compress`` (see :mod:`journal.compression`) compresses the stored body (the
    blobs are compressed by whoever stores them); the record's hash is the
    uncompressed body's either way.

    With ``validate`` (the default) each event's bytes are decoded back with the
    decoder readers use, so a record is only ever produced if every reader will
    accept it; ``EncodedRecord.events`` is then what they will see. Besides the
    event types' own field types, readers need: values nested at most
    :data:`MAX_NESTING` levels, no NaN, integers within 64 bits, and (for an
    ``UnknownEvent``) bytes that are one MessagePack value. There is no limit on an
    event's size: one larger than ``blob_threshold`` is stored as a blob.
    ``validate=False`` exists to write what an older writer could have written.

    Raises:
        TypeError: An event's type is not registered.
        InvalidEventError: An event readers would refuse (a ``ValueError``).
    """
    blobs: dict[str, bytes] = {}
    decoded: list[object] | None = [] if validate else None
    envelopes = _encoder.encode(
        [_envelope(e, blob_threshold, blobs, i, decoded) for i, e in enumerate(events)]
    )
    body = _encoder.encode(
        _RecordBodyOut(
            FORMAT_VERSION,
            version,
            epoch,
            writer,
            batch_id,
            run_id,
            committed_at,
            prev_hash,
            msgspec.Raw(envelopes),
        )
    )
    digest = hashlib.sha256(prev_hash + body).digest()
    stored = compress(body) if compress is not None else body
    magic = RECORD_ZMAGIC if compress is not None else RECORD_MAGIC
    framed = _frame(magic, stored, digest)
    return EncodedRecord(
        framed,
        digest,
        hashlib.sha256(envelopes).digest(),
        blobs,
        decoded,
        epoch,
        prev_hash,
        stored,
    )


def seal_record(
    encoded: EncodedRecord,
    *,
    version: int,
    key_id: str,
    encrypt: Callable[[bytes], bytes],
) -> None:
    """Turn an encoded record into its encrypted form (``AJE1``), in place.

    ``encrypt`` seals the stored body (compressed or not) with the data key
    ``key_id`` and the associated data of this record's place. The record's hash
    becomes SHA-256(prev_hash || encrypted body): the chain covers the bytes as
    stored, so it can be checked without keys and reveals nothing of the content.
    ``data`` and ``hash`` are replaced; the events, blobs and content digest stay.
    """
    body = _encoder.encode(
        EncryptedBody(
            FORMAT_VERSION,
            version,
            encoded.epoch,
            encoded.prev_hash,
            key_id,
            encrypt(encoded.stored_body),
        )
    )
    digest = hashlib.sha256(encoded.prev_hash + body).digest()
    encoded.data = _frame(RECORD_EMAGIC, body, digest)
    encoded.hash = digest


def is_encrypted_record(raw: bytes) -> bool:
    """Whether a record's stored bytes are an encrypted record."""
    return raw[:4] == RECORD_EMAGIC


def parse_record(
    raw: bytes,
    *,
    label: str,
    version: int,
    opener: Callable[[int, str, bytes], bytes] | None = None,
) -> ParsedRecord:
    """Verify a record's framing, checksum and own hash (pure).

    Args:
        raw: The object's bytes.
        label: The thread's readable name, for errors.
        version: The version the record's key says it is.
        opener: Decrypts an encrypted record's ciphertext (it raises
            ``KeyUnavailableError`` or ``ErasedError`` when it cannot, and
            ``ValueError`` when the ciphertext does not decrypt). Without one, an
            encrypted record is checked as stored and returned ``sealed``.

    Raises:
        CorruptRecordError: Any check failed, naming the thread and version.
    """
    magic = raw[:4]
    if magic == RECORD_EMAGIC:
        return _parse_encrypted(raw, label, version, opener)
    body_bytes: bytes | memoryview
    try:
        if magic == RECORD_ZMAGIC:
            stored, digest = _unframe(RECORD_ZMAGIC, raw, 32, "record")
            body_bytes = compression.decompress(stored)
        else:
            # The body is decoded and hashed in place: a view, not a copy.
            end = _frame_end(RECORD_MAGIC, raw, 32, "record")
            body_bytes = memoryview(raw)[_HEADER.size : end]
            digest = raw[end : end + 32]
        body = _body_decoder.decode(body_bytes)
    except (ValueError, msgspec.DecodeError) as exc:
        raise CorruptRecordError(label, version, str(exc)) from None
    except RecursionError:
        raise CorruptRecordError(label, version, _TOO_DEEP) from None
    if body.format != FORMAT_VERSION:
        raise CorruptRecordError(label, version, f"unknown format {body.format}")
    if body.version != version:
        raise CorruptRecordError(
            label, version, f"record says it is version {body.version}"
        )
    hasher = hashlib.sha256(body.prev_hash)
    hasher.update(body_bytes)
    if hasher.digest() != digest:
        raise CorruptRecordError(label, version, "hash does not match the body")
    return ParsedRecord(body, digest, len(raw))


_encrypted_decoder = msgspec.msgpack.Decoder(EncryptedBody)


def _parse_encrypted(
    raw: bytes,
    label: str,
    version: int,
    opener: Callable[[int, str, bytes], bytes] | None,
) -> ParsedRecord:
    try:
        stored, digest = _unframe(RECORD_EMAGIC, raw, 32, "record")
        outer = _encrypted_decoder.decode(stored)
    except (ValueError, msgspec.DecodeError) as exc:
        raise CorruptRecordError(label, version, str(exc)) from None
    if outer.format != FORMAT_VERSION:
        raise CorruptRecordError(label, version, f"unknown format {outer.format}")
    if outer.version != version:
        raise CorruptRecordError(
            label, version, f"record says it is version {outer.version}"
        )
    if hashlib.sha256(outer.prev_hash + stored).digest() != digest:
        raise CorruptRecordError(label, version, "hash does not match the body")
    if opener is None:
        body = RecordBody(
            outer.format, version, outer.epoch, "", "", None, 0.0, outer.prev_hash, []
        )
        return ParsedRecord(body, digest, len(raw), sealed=True, encrypted=True)
    try:
        plain = opener(version, outer.key_id, outer.ciphertext)
    except ValueError as exc:
        raise CorruptRecordError(label, version, f"ciphertext {exc}") from None
    try:
        if compression.is_compressed(plain):
            plain = compression.decompress(plain)
        body = _body_decoder.decode(plain)
    except (ValueError, msgspec.DecodeError) as exc:
        raise CorruptRecordError(label, version, f"decrypted body: {exc}") from None
    except RecursionError:
        raise CorruptRecordError(label, version, _TOO_DEEP) from None
    if (
        body.format != FORMAT_VERSION
        or body.version != version
        or body.epoch != outer.epoch
        or body.prev_hash != outer.prev_hash
    ):
        raise CorruptRecordError(
            label, version, "decrypted body disagrees with the record's clear fields"
        )
    return ParsedRecord(body, digest, len(raw), encrypted=True)


def decode_event(envelope: Envelope, data: bytes | None = None) -> object:
    """Decode one event, upgrading old schemas; unknown types become UnknownEvent.

    Args:
        envelope: The wire envelope.
        data: The event bytes when they were stored as a blob.

    Raises:
        ValueError: The bytes do not decode as the registered type, or nest too
            deeply to decode.
    """
    try:
        return _decode_event(envelope, data)
    except RecursionError:
        raise ValueError(f"event {envelope.type}: {_TOO_DEEP}") from None


def _decode_event(envelope: Envelope, data: bytes | None) -> object:
    raw = bytes(envelope.data) if data is None else data
    info = _BY_NAME.get(envelope.type)
    if info is None:
        return ev.UnknownEvent(envelope.type, envelope.schema, envelope.required, raw)
    if envelope.schema == info.schema:
        try:
            return info.decoder.decode(raw)
        except msgspec.ValidationError as exc:
            raise ValueError(f"event {envelope.type}: {exc}") from None
    if envelope.schema > info.schema:
        # Written by a newer schema: treat as unknown rather than guess.
        return ev.UnknownEvent(envelope.type, envelope.schema, envelope.required, raw)
    fields: dict[str, Any] = msgspec.msgpack.decode(raw)
    for schema in range(envelope.schema, info.schema):
        upcaster = _UPCASTERS.get((envelope.type, schema))
        if upcaster is None:
            raise ValueError(
                f"event {envelope.type} schema {schema} has no upcaster to "
                f"schema {schema + 1}"
            )
        fields = upcaster(fields)
    fields.pop("type", None)
    try:
        return msgspec.convert(fields, info.cls)
    except msgspec.ValidationError as exc:
        raise ValueError(f"event {envelope.type} after upcasting: {exc}") from None


def materialize(
    parsed: ParsedRecord, *, label: str, blobs: Mapping[str, bytes] | None = None
) -> Record:
    """Decode a parsed record's events into a :class:`Record`.

    Args:
        parsed: The verified record.
        label: The thread's readable name, for errors.
        blobs: Event bytes by blob hash, for envelopes stored as blobs.

    Raises:
        CorruptRecordError: An event does not decode, or a blob is missing.
    """
    body = parsed.body
    decoded: list[object] = []
    by_name = _BY_NAME
    for envelope in body.events:
        info = by_name.get(envelope.type)
        if (
            envelope.blob is None
            and info is not None
            and envelope.schema == info.schema
        ):
            # The common case, decoded here rather than through decode_event: one
            # call per event less, and the bytes decoded in place.
            try:
                decoded.append(info.decoder.decode(envelope.data))
                continue
            except msgspec.ValidationError as exc:
                message = f"event {envelope.type}: {exc}"
            except msgspec.DecodeError as exc:
                message = str(exc)
            except RecursionError:
                message = f"event {envelope.type}: {_TOO_DEEP}"
            raise CorruptRecordError(label, body.version, message) from None
        data = None
        if envelope.blob is not None:
            data = (blobs or {}).get(envelope.blob)
            if data is None:
                raise CorruptRecordError(
                    label, body.version, f"blob {envelope.blob} is missing"
                )
        try:
            decoded.append(decode_event(envelope, data))
        except (ValueError, msgspec.DecodeError) as exc:
            raise CorruptRecordError(label, body.version, str(exc)) from None
    return Record(
        body.version,
        body.epoch,
        body.writer,
        body.batch_id,
        body.run_id,
        body.committed_at,
        body.prev_hash.hex(),
        parsed.hash.hex(),
        decoded,
        parsed.size,
    )


def _message_body_decoder() -> msgspec.msgpack.Decoder[Any]:
    """A record body decoder that decodes only the events that may add a message.

    One tagged array-like struct per registered type (the envelope's type name is
    its first element, as msgspec's tag): ``MessageAppended`` and
    ``ToolCallCompleted`` (and subclasses) get their event class as ``data`` and
    their current schema as the only valid ``schema``, every other type its bytes,
    skipped. A type name not registered, and a message event at another schema or
    kept in a blob, fail validation: the checks run inside the one decode.
    """
    global _message_decoder
    if _message_decoder is not None:
        return _message_decoder
    members: list[Any] = []
    for name, info in _BY_NAME.items():
        # A message event at its current schema decodes to its class; at another
        # schema, or kept in a blob (no data), it fails validation, sending the
        # record down the general path, which upcasts or fetches it.
        adds = issubclass(info.cls, (ev.MessageAppended, ev.ToolCallCompleted))
        members.append(
            msgspec.defstruct(
                f"_Envelope_{len(members)}",
                [
                    ("schema", Literal[info.schema] if adds else int),
                    ("required", bool),
                    ("data", info.cls if adds else msgspec.Raw),
                    ("blob", str | None, None),
                ],
                array_like=True,
                frozen=True,
                gc=False,  # dropped at once, never part of a cycle
                tag=name,
            )
        )
    body = msgspec.defstruct(
        "_MessageBody",
        [
            ("format", int),
            ("version", int),
            ("epoch", int),
            ("writer", str),
            ("batch_id", str),
            ("run_id", str | None),
            ("committed_at", float),
            ("prev_hash", bytes),
            (
                "events",
                types.GenericAlias(list, (functools.reduce(operator.or_, members),)),
            ),
        ],
        array_like=True,
        frozen=True,
        gc=False,
    )
    _message_decoder = msgspec.msgpack.Decoder(body)
    return _message_decoder


class SpanRun(NamedTuple):
    """What :func:`parse_messages` read of a run of consecutive records."""

    read: int
    """How many records it read, from the first given: all of them, or up to the
    first that needs the general path or does not chain on the one before."""
    prev_hash: bytes
    """The stored ``prev_hash`` of the first record read (empty when none was)."""
    hash: bytes
    """The stored hash of the last record read (not recomputed; empty when none
    was)."""
    epoch: int
    """The last record's fencing epoch (0 when none was read)."""
    broken: bool
    """The record after the last read is whole but its ``prev_hash`` is not the
    stored hash of the one before it: the chain is broken there."""


_NO_RUN = SpanRun(0, b"", b"", 0, False)


def parse_messages(
    raws: Sequence[bytes | memoryview],
    first: int,
    *,
    label: str,
    messages: list[ev.Msg],
    ends: list[int],
) -> SpanRun:
    """Check records' checksums and chain; decode only the messages they add.

    For reading the messages a checkpoint's log span names: one decode per record,
    and no :class:`Record` built. ``raws`` are the stored bytes of the records
    ``first``, ``first + 1``, ... (or views of them). The messages each record's
    events add to the context (:func:`journal.events.message_added`) are appended
    to ``messages``, in order, and after each record the length of ``messages``
    to ``ends``: nothing is built per record that the caller would hold (a tuple
    or list per record would be tracked by the cyclic collector, which would then
    rescan them all once the load lets it run again).

    Reading stops before the first record that needs the general path
    (:func:`parse_record` then :func:`materialize`): encrypted, keeping a message
    event in a blob or at an older schema, or holding an event type this process
    has not registered; and before one whose ``prev_hash`` is not the stored hash
    of the record before it (``broken``). The caller checks that the first
    record's ``prev_hash`` continues what came before.

    Each record's framing, CRC-32, format and version are checked, as
    :func:`parse_record` does, but not its SHA-256: like the checkpoint that names
    them, these reads guard against damage, not forgery (the CRC covers every
    byte; ``verify`` checks the hash chain).

    Raises:
        CorruptRecordError: A check failed, naming the thread and version.
    """
    # A load runs this loop once per record of its spans: what it looks up on each
    # pass is bound to locals first (0.92x the time of the loop without that, the
    # tuple built in C and the view reused: 20 threads of 101 records).
    decode = _message_body_decoder().decode
    message_type, raw_type, added = ev.MessageAppended, msgspec.Raw, ev.message_added
    header, crc_at, checksum = _HEADER.unpack_from, _CRC.unpack_from, crc32
    head_size, crc_size, plain_magic = _HEADER.size, _CRC.size, RECORD_MAGIC
    overhead = head_size + 32 + crc_size  # header, stored hash, checksum
    append, end_at = messages.append, ends.append
    count, epoch, broken = 0, 0, False
    first_prev: bytes = b""
    digest: bytes | memoryview = b""
    for version, raw in enumerate(raws, first):
        size = len(raw)
        stored_hash: bytes | memoryview
        try:
            magic, length = header(raw) if size >= head_size else (b"", -1)
            if magic == plain_magic:
                view = raw if type(raw) is memoryview else memoryview(raw)
                end = size - 32 - crc_size
                if (
                    length + overhead != size
                    or checksum(view[: size - crc_size]) != crc_at(raw, end + 32)[0]
                ):
                    _frame_end(RECORD_MAGIC, raw, 32, "record")  # names the damage
                body_bytes: bytes | memoryview = view[head_size:end]
                stored_hash = view[end : end + 32]
            elif magic == RECORD_ZMAGIC:
                stored, stored_hash = _unframe(RECORD_ZMAGIC, bytes(raw), 32, "record")
                body_bytes = compression.decompress(stored)
            else:
                break  # encrypted, or damage parse_record will name
            try:
                body = decode(body_bytes)
            except msgspec.ValidationError:
                # An unknown type, a message event at an older schema or in a blob:
                # the general path tells which, and reads it or names it.
                break
        except (ValueError, msgspec.DecodeError) as exc:
            raise CorruptRecordError(label, version, str(exc)) from None
        except RecursionError:
            raise CorruptRecordError(label, version, _TOO_DEEP) from None
        if body.format != FORMAT_VERSION or body.version != version:
            break  # parse_record names what is wrong
        if count:
            if body.prev_hash != digest:
                broken = True
                break
        else:
            first_prev = body.prev_hash
        for envelope in body.events:
            data = envelope.data
            if type(data) is message_type:
                append(data.message)
            elif type(data) is not raw_type and (message := added(data)) is not None:
                append(message)
        end_at(len(messages))
        digest, epoch = stored_hash, body.epoch
        count += 1
    if not count:
        return _NO_RUN
    return SpanRun(count, first_prev, bytes(digest), epoch, broken)


# --- checkpoints ----------------------------------------------------------------


def encode_checkpoint(body: CheckpointBody) -> bytes:
    """Frame a checkpoint with its checksum."""
    return _frame(CHECKPOINT_MAGIC, _encoder.encode(body))


def decode_checkpoint(raw: bytes) -> CheckpointBody:
    """Verify and decode a checkpoint.

    Raises:
        ValueError: The bytes are truncated, corrupt or of another format.
    """
    body_bytes, _ = _unframe(CHECKPOINT_MAGIC, raw, 0, "checkpoint")
    try:
        body = _checkpoint_decoder.decode(body_bytes)
    except msgspec.DecodeError as exc:
        raise ValueError(f"checkpoint does not decode: {exc}") from None
    except RecursionError:
        raise ValueError(f"checkpoint does not decode: {_TOO_DEEP}") from None
    if body.format != FORMAT_VERSION:
        raise ValueError(f"checkpoint has unknown format {body.format}")
    return body


class gc_paused:
    """Pause the cyclic garbage collector (if it was on) for a bulk decode.

    Decoding allocates an object per event, message and block, none of which can
    form a cycle; with a large live state the collector would only rescan it,
    costing a third of a long replay. Use around synchronous code only. A class,
    not a generator: a load enters it once per batch of records.
    """

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *_: object) -> None:
        if self._was_enabled:
            gc.enable()
