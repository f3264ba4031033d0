r"""Thread identity and its mapping to storage paths.

Every id component maps to exactly one path segment by percent-encoding each UTF-8 byte
outside ``[A-Za-z0-9_-]``, so ``.``, ``..``, ``/``, ``\\`` and ``%`` can never escape
the root or collide. The anonymous user is the segment ``~``, which no encoded id can
produce. A segment whose encoding would exceed :data:`MAX_SEGMENT_BYTES` (file systems
cap a name at 255 bytes) is shortened to ``%%<prefix>%%<sha256>``; ``%%`` cannot occur
in a normal encoding, so the long form never collides with a short one.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, cast

import msgspec

from journal.errors import InvalidKeyError

__all__ = [
    "ANONYMOUS_SEGMENT",
    "MAX_ID_LENGTH",
    "ThreadKey",
    "check_id",
    "decode_segment",
    "encode_segment",
    "is_hashed",
    "is_segment",
    "key_from_ids",
    "key_ids",
    "key_of_checked_ids",
]

MAX_ID_LENGTH = 256
"""The longest id (in characters) any ThreadKey component may have."""

MAX_SEGMENT_BYTES = 150
"""Encoded segments longer than this use the hashed long form (at most 100 bytes).

Five segments of at most 150 bytes keep a record key under 800 bytes, within S3's
1,024-byte limit with room for a URL prefix."""

ANONYMOUS_SEGMENT = "~"
"""The path segment of the anonymous user (``user_id=None``)."""

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HEX = "0123456789ABCDEF"


def _quote(value: str) -> str:
    out: list[str] = []
    for byte in value.encode("utf-8"):
        if byte in _SAFE:
            out.append(chr(byte))
        else:
            out.append("%" + _HEX[byte >> 4] + _HEX[byte & 15])
    return "".join(out)


def encode_segment(value: str) -> str:
    """Encode one id as a single, collision-free path segment.

    Args:
        value: A validated id.

    Returns:
        The segment: only ``[A-Za-z0-9_%-]`` characters, at most about 280 bytes.
    """
    quoted = _quote(value)
    if len(quoted) <= MAX_SEGMENT_BYTES:
        return quoted
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
    # Cut at a whole escape so the prefix stays decodable for humans.
    prefix = quoted[:32]
    cut = prefix.rfind("%")
    if cut >= len(prefix) - 2:
        prefix = prefix[:cut]
    return f"%%{prefix}%%{digest}"


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.decode

_ESCAPE = re.compile(r"%([0-9A-F]{2})")
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")


def is_hashed(segment: str) -> bool:
    """Whether ``segment`` is the hashed long form of an id (which it cannot name)."""
    return segment.startswith("%%")


def decode_segment(segment: str) -> str | None:
    """Invert :func:`encode_segment`.

    Returns:
        The id, or None for a hashed long-form segment, whose id must be read from
        the thread's ``ThreadCreated`` record.

    Raises:
        ValueError: ``segment`` is not something ``encode_segment`` produces.
    """
    if is_hashed(segment):
        return None
    if _PLAIN.fullmatch(segment):
        return segment  # nothing escaped: the common case, at regex speed
    raw = bytearray()
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "%":
            match = _ESCAPE.match(segment, i)
            if match is None:
                raise ValueError(f"not an encoded id segment: {segment!r}")
            raw.append(int(match.group(1), 16))
            i += 3
        elif ord(ch) < 128 and ord(ch) in _SAFE:
            raw.append(ord(ch))
            i += 1
        else:
            raise ValueError(f"not an encoded id segment: {segment!r}")
    return raw.decode("utf-8")


def is_segment(name: str) -> bool:
    """Whether ``name`` is something :func:`encode_segment` writes."""
    try:
        decode_segment(name)
    except ValueError:
        return False
    return True


def check_id(value: object, field: str) -> str:
    """Validate one id: a non-empty str of at most 256 characters, no control chars.

    Returns:
        ``value``.

    Raises:
        InvalidKeyError: It is not.
    """
    try:
        return _check_id(value, field)
    except ValueError as exc:
        raise InvalidKeyError(str(exc)) from None


def _check_id(value: object, field: str) -> str:
    if not isinstance(value, str):
        # ValueError, not TypeError: the callers turn it into the InvalidKeyError.
        raise ValueError(f"{field} must be a string, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{field} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(
            f"{field} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    if value.isascii() and value.isprintable():
        return value  # no control character, no surrogate: skip the walk
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cc":
            raise ValueError(f"{field} contains the control character {ch!r}")
        if category == "Cs":
            # Not valid Unicode on its own: it cannot be encoded as UTF-8.
            raise ValueError(f"{field} contains the lone surrogate {ch!r}")
    return value


_FIELDS = ("agent_id", "session_id", "user_id", "thread_id", "namespace")


class ThreadKey:
    """The identity of one thread: where its log lives.

    Frozen and hashable; equal when every id is. It offers the part of pydantic's
    model interface that keys are used through (``model_dump``, ``model_dump_json``,
    ``model_validate``, ``model_validate_json``, ``model_copy``) and can be a field
    of a pydantic model, but it is a plain class: importing pydantic and building a
    model's validator cost 100-200 ms of every cold start (the library's and each
    CLI command's), for five string checks.

    Args:
        agent_id: The agent the thread belongs to.
        session_id: The conversation session.
        user_id: The user, or None for the anonymous user.
        thread_id: The thread within the session (default ``"main"``).
        namespace: A tenant or deployment namespace (default ``"default"``).

    Raises:
        InvalidKeyError: An id is empty, longer than 256 characters, not a string, or
            contains a control character; or an unknown field was given.
    """

    __slots__ = ("_hash", "agent_id", "namespace", "session_id", "thread_id", "user_id")

    agent_id: str
    session_id: str
    user_id: str | None
    thread_id: str
    namespace: str
    _hash: int

    def __init__(
        self,
        agent_id: str,
        session_id: str,
        user_id: str | None = None,
        thread_id: str = "main",
        namespace: str = "default",
        **extra: Any,
    ) -> None:
        values = (agent_id, session_id, user_id, thread_id, namespace)
        if not extra and _plain_ids(values):
            self._set(values)
            return
        problems = [f"{name}: unexpected field" for name in extra]
        for name, value in zip(_FIELDS, values, strict=True):
            if value is None and name == "user_id":
                continue
            try:
                _check_id(value, name)
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
        if problems:
            raise InvalidKeyError(f"invalid thread key: {'; '.join(problems)}")
        self._set(values)

    def _set(self, values: tuple[str, str, str | None, str, str]) -> None:
        # Unrolled (a third faster than a loop over _FIELDS): listing builds a key
        # per thread.
        put = object.__setattr__
        put(self, "agent_id", values[0])
        put(self, "session_id", values[1])
        put(self, "user_id", values[2])
        put(self, "thread_id", values[3])
        put(self, "namespace", values[4])
        put(self, "_hash", hash(values))

    @classmethod
    def _trusted(cls, values: tuple[str, str, str | None, str, str]) -> ThreadKey:
        key = object.__new__(cls)
        key._set(values)
        return key

    def _values(self) -> tuple[str, str, str | None, str, str]:
        return (
            self.agent_id,
            self.session_id,
            self.user_id,
            self.thread_id,
            self.namespace,
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise InvalidKeyError(
            f"a ThreadKey is frozen: {name} cannot be set "
            "(key.model_copy(update={...}) makes a changed copy)"
        )

    def __delattr__(self, name: str) -> None:
        raise InvalidKeyError(f"a ThreadKey is frozen: {name} cannot be deleted")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ThreadKey) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._hash == other._hash and self._values() == other._values()

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{n}={v!r}" for n, v in zip(_FIELDS, self._values(), strict=True)
        )
        return f"ThreadKey({fields})"

    def __reduce__(self) -> tuple[type[ThreadKey], tuple[str | None, ...]]:
        return (type(self), self._values())

    def __copy__(self) -> ThreadKey:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> ThreadKey:
        return self

    def model_dump(self, *, exclude_none: bool = False) -> dict[str, str | None]:
        """The five ids by field name (``user_id`` left out if None and asked)."""
        out = dict(zip(_FIELDS, self._values(), strict=True))
        if exclude_none and self.user_id is None:
            del out["user_id"]
        return out

    def model_dump_json(self, *, exclude_none: bool = False) -> str:
        """:meth:`model_dump` as compact JSON, fields in declaration order."""
        return _json_encode(self.model_dump(exclude_none=exclude_none)).decode()

    @classmethod
    def model_validate(cls, obj: object) -> ThreadKey:
        """A key from a key (returned as is) or a mapping of its fields.

        Raises:
            InvalidKeyError: ``obj`` is neither, or its ids are not valid.
        """
        if isinstance(obj, ThreadKey):
            return obj
        if not isinstance(obj, Mapping):
            raise InvalidKeyError(
                "invalid thread key: expected a ThreadKey or a mapping of its "
                f"fields, not {type(obj).__name__}"
            )
        if not all(isinstance(name, str) for name in obj):
            raise InvalidKeyError("invalid thread key: field names must be strings")
        missing = [n for n in ("agent_id", "session_id") if n not in obj]
        if missing:
            raise InvalidKeyError(
                f"invalid thread key: {', '.join(missing)}: field required"
            )
        return cls(**obj)

    @classmethod
    def model_validate_json(cls, data: str | bytes) -> ThreadKey:
        """A key from the JSON :meth:`model_dump_json` writes.

        Raises:
            InvalidKeyError: ``data`` is not JSON of a key's fields.
        """
        try:
            obj = _json_decode(data)
        except ValueError as exc:
            raise InvalidKeyError(f"invalid thread key: {exc}") from None
        return cls.model_validate(obj)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> ThreadKey:
        """A key with some ids replaced, validated like the constructor."""
        if not update:
            return self
        return ThreadKey(**{**self.model_dump(), **update})

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Let a pydantic model have a ThreadKey field (pydantic imported only then).

        It validates from a key or a mapping of its fields, and serializes to that
        mapping.
        """
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            cls.model_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda key: key.model_dump()
            ),
        )

    @property
    def segments(self) -> tuple[str, str, str, str, str]:
        """The five encoded path segments: namespace, agent, user, session, thread."""
        user = (
            ANONYMOUS_SEGMENT if self.user_id is None else encode_segment(self.user_id)
        )
        return (
            encode_segment(self.namespace),
            encode_segment(self.agent_id),
            user,
            encode_segment(self.session_id),
            encode_segment(self.thread_id),
        )

    @property
    def prefix(self) -> str:
        """The thread's directory relative to the journal root, without a slash."""
        return "/".join(self.segments)

    def state_entry(self, name: str = "agent_state") -> str:
        """The snapshot-mode entry key for this thread's state named ``name``.

        Distinct agents, namespaces and threads of one (user, session) get distinct
        entries, so they never share a snapshot slot.
        """
        _check_id(name, "name")
        entry = "/".join(
            (
                encode_segment(self.namespace),
                encode_segment(self.agent_id),
                encode_segment(self.thread_id),
                encode_segment(name),
            )
        )
        if len(entry) <= MAX_ID_LENGTH:
            return entry
        # Snapshot stores take ids of at most 256 characters: shorten long entries
        # with a digest of the full one (collision-free in practice).
        digest = hashlib.sha256(entry.encode()).hexdigest()
        return f"{entry[: MAX_ID_LENGTH - 66]}%%{digest}"

    def __str__(self) -> str:
        user = "~" if self.user_id is None else self.user_id
        return (
            f"thread {self.namespace}/{self.agent_id}/{user}/"
            f"{self.session_id}/{self.thread_id}"
        )


def key_of_checked_ids(values: tuple[str, str, str | None, str, str]) -> ThreadKey:
    """The key of ``(agent, session, user, thread, namespace)``, each id checked.

    For ids that each passed :func:`check_id` already (listing checks each distinct
    segment once, and a thousand keys share most of them): nothing is checked
    again.
    """
    return ThreadKey._trusted(values)


def _plain_ids(values: tuple[object, ...]) -> bool:
    """Whether the five ids pass :func:`check_id` on its fast path (most do).

    Inline, not a call per id: listing builds a key per thread. False sends the
    ids through the full checks, which name what is wrong.
    """
    for position, value in enumerate(values):
        if value is None and position == 2:  # the anonymous user
            continue
        if (
            type(value) is not str
            or not value
            or len(value) > MAX_ID_LENGTH
            or not value.isascii()
            or not value.isprintable()
        ):
            return False
    return True


def key_ids(key: ThreadKey) -> dict[str, str | None]:
    """``key``'s ids by field name, as ``IDS`` and ``RETENTION`` objects hold them."""
    return {
        "namespace": key.namespace,
        "agent_id": key.agent_id,
        "user_id": key.user_id,
        "session_id": key.session_id,
        "thread_id": key.thread_id,
    }


def key_from_ids(ids: Mapping[str, object]) -> ThreadKey:
    """The key of ids as :func:`key_ids` gives them.

    Raises:
        InvalidKeyError: An id is missing or not one a key may hold.
    """
    fields = ("agent_id", "session_id", "user_id", "thread_id", "namespace")
    values = [ids.get(field) for field in fields]
    user = values[2]
    if any(type(v) is not str for i, v in enumerate(values) if i != 2) or not (
        user is None or type(user) is str
    ):
        raise InvalidKeyError(f"not a thread's ids: {dict(ids)!r}")
    agent, session, _, thread, namespace = cast("list[str]", values)
    return ThreadKey(agent, session, user, thread, namespace)
