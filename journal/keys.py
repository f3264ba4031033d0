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
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from journal.errors import InvalidKeyError

__all__ = [
    "ANONYMOUS_SEGMENT",
    "MAX_ID_LENGTH",
    "ThreadKey",
    "check_id",
    "checked_key",
    "decode_segment",
    "encode_segment",
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


_ESCAPE = re.compile(r"%([0-9A-F]{2})")
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")


def decode_segment(segment: str) -> str | None:
    """Invert :func:`encode_segment`.

    Returns:
        The id, or None for a hashed long-form segment, whose id must be read from
        the thread's ``ThreadCreated`` record.

    Raises:
        ValueError: ``segment`` is not something ``encode_segment`` produces.
    """
    if segment.startswith("%%"):
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
        # ValueError, not TypeError: pydantic turns it into the InvalidKeyError.
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


class ThreadKey(BaseModel):
    """The identity of one thread: where its log lives.

    Args:
        agent_id: The agent the thread belongs to.
        session_id: The conversation session.
        user_id: The user, or None for the anonymous user.
        thread_id: The thread within the session (default ``"main"``).
        namespace: A tenant or deployment namespace (default ``"default"``).

    Raises:
        InvalidKeyError: An id is empty, longer than 256 characters, not a string, or
            contains a control character.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    agent_id: str
    session_id: str
    user_id: str | None = None
    thread_id: str = "main"
    namespace: str = "default"

    def __init__(
        self,
        agent_id: str,
        session_id: str,
        user_id: str | None = None,
        thread_id: str = "main",
        namespace: str = "default",
        **extra: Any,
    ) -> None:
        try:
            super().__init__(
                agent_id=agent_id,
                session_id=session_id,
                user_id=user_id,
                thread_id=thread_id,
                namespace=namespace,
                **extra,
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'key'}: {err['msg']}"
                for err in exc.errors()
            )
            raise InvalidKeyError(f"invalid thread key: {problems}") from None

    @field_validator("agent_id", "session_id", "thread_id", "namespace", mode="before")
    @classmethod
    def _valid_id(cls, value: object, info: Any) -> str:
        return _check_id(value, info.field_name)

    @field_validator("user_id", mode="before")
    @classmethod
    def _valid_user(cls, value: object) -> str | None:
        return None if value is None else _check_id(value, "user_id")

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


def checked_key(
    agent_id: str,
    session_id: str,
    user_id: str | None,
    thread_id: str,
    namespace: str,
) -> ThreadKey:
    """A :class:`ThreadKey` of ids read back from storage, checked like the constructor.

    The same checks as ``ThreadKey(...)`` (:func:`check_id` on every id) without
    the validation machinery around them: listing builds one key per thread, and
    for a thousand threads that machinery cost more than the walk of the disk.

    Raises:
        InvalidKeyError: An id is not valid.
    """
    for field, value in (
        ("agent_id", agent_id),
        ("session_id", session_id),
        ("thread_id", thread_id),
        ("namespace", namespace),
    ):
        check_id(value, field)
    if user_id is not None:
        check_id(user_id, "user_id")
    return ThreadKey.model_construct(
        agent_id=agent_id,
        session_id=session_id,
        user_id=user_id,
        thread_id=thread_id,
        namespace=namespace,
    )
