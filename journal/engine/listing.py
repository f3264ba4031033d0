"""Listing the threads of a store, directory level by directory level."""

from __future__ import annotations

import contextlib
import enum
from typing import TYPE_CHECKING

import msgspec

from journal import codec
from journal import events as ev
from journal.engine.log import decode_retention
from journal.errors import (
    CorruptRecordError,
    EncryptionError,
    ObjectNotFoundError,
)
from journal.keyring import ThreadCipher
from journal.keys import (
    ANONYMOUS_SEGMENT,
    ThreadKey,
    check_id,
    decode_segment,
    encode_segment,
    is_segment,
    key_from_ids,
    key_of_checked_ids,
)
from journal.layout import ThreadLayout
from journal.loopless import gather

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from types import EllipsisType

    from journal.engine.thread_index import ThreadIndex
    from journal.keyring import Keyring
    from journal.store import ObjectStore

__all__ = [
    "NOT_THREAD",
    "NotThread",
    "list_threads",
    "name_threads",
    "thread_paths",
    "thread_pattern",
    "walk_threads",
]


class NotThread(enum.Enum):
    """A listed path that is no thread of this journal (see :func:`name_threads`)."""

    NOT_THREAD = "not a thread"


NOT_THREAD = NotThread.NOT_THREAD


async def list_threads(
    store: ObjectStore,
    namespace: str | None = None,
    agent_id: str | None = None,
    user_id: str | EllipsisType | None = ...,
    session_id: str | None = None,
    keyring: Keyring | None = None,
    index: ThreadIndex | None = None,
) -> AsyncIterator[ThreadKey]:
    """Yield the keys of the threads stored, filtered by the given ids.

    ``user_id=None`` selects the anonymous user; leave it out for every user. Reads
    the store's thread index when it is complete (see
    :mod:`journal.engine.thread_index`); otherwise walks only the directory levels the
    filters leave open (never the whole store), in one call where the store can
    (the local store). A thread whose ids are too long for its path is named by its
    ``IDS`` object; one written before those existed by its first record:
    ``keyring`` decrypts it when it is encrypted (without a usable key, or once
    retention removed that record, such an older thread is not listed).
    """
    pattern = thread_pattern(namespace, agent_id, user_id, session_id)
    listed = await thread_paths(store, pattern, index)
    keys = await name_threads(store, listed, keyring)
    # Yielded from a plain list: the per-thread work never suspends the generator.
    for key in keys:
        if isinstance(key, ThreadKey):
            yield key


def thread_pattern(
    namespace: str | None = None,
    agent_id: str | None = None,
    user_id: str | EllipsisType | None = ...,
    session_id: str | None = None,
) -> tuple[str | None, ...]:
    """The five path segments the filters fix (None: any), as listing selects.

    Raises:
        InvalidKeyError: A filter names an id no thread key could hold (empty, too
            long, control characters), as a ``ThreadKey`` would refuse it.
    """

    def fixed(value: str | None, field: str) -> str | None:
        return None if value is None else encode_segment(check_id(value, field))

    user: str | None
    if user_id is None:
        user = ANONYMOUS_SEGMENT
    elif user_id is ...:
        user = None
    else:
        user = fixed(user_id, "user_id")
    return (
        fixed(namespace, "namespace"),
        fixed(agent_id, "agent_id"),
        user,
        fixed(session_id, "session_id"),
        None,
    )


async def thread_paths(
    store: ObjectStore,
    pattern: tuple[str | None, ...],
    index: ThreadIndex | None = None,
) -> list[tuple[str, ...]]:
    """The paths (segments) of the threads :func:`thread_pattern` selects.

    As :func:`list_threads` selects them, every one of them: also a thread whose
    key cannot be named.
    """
    listed = None
    if index is not None:
        listed = await index.threads(pattern)
    if listed is None:
        listed = await walk_threads(store, pattern[0], pattern[1:])
    return listed


async def name_threads(
    store: ObjectStore,
    listed: list[tuple[str, ...]],
    keyring: Keyring | None = None,
) -> list[ThreadKey | NotThread | None]:
    """The key of each thread path, position by position.

    :data:`NOT_THREAD` for a path that is not something this journal writes; None
    for a thread whose path hashes an id too long for it and that nothing names:
    written before ``IDS`` objects existed, its first record gone (retention) or
    undecryptable (shredded, or no usable key).
    """
    keys, named_inside = _keys_of(listed)
    for position in named_inside:
        keys[position] = await _key_from_record(store, listed[position], keyring)
    return keys


async def walk_threads(
    store: ObjectStore,
    namespace: str | None = None,
    rest: tuple[str | None, ...] = (None, None, None, None),
) -> list[tuple[str, ...]]:
    """The thread paths found by walking the directories the filters leave open.

    Each path is its segments (namespace, agent, user, session, thread); a level
    is fixed where ``namespace`` or ``rest`` name an encoded segment.
    """
    if namespace is not None:
        return await store.descendants("", (namespace, *rest))
    # The top level also holds trees that are no namespace (the durable turns'
    # index "~durable", the thread index "~threads"): walked as one, each of their paths
    # would be checked as a thread. The namespaces are listed first, then walked.
    names = [n for n in await store.children("") if is_segment(n)]
    walks = await gather(*(store.descendants("", (n, *rest)) for n in names))
    return [path for walk in walks for path in walk]


def _keys_of(
    listed: list[tuple[str, ...]],
) -> tuple[list[ThreadKey | NotThread | None], list[int]]:
    """The keys of the thread paths listed, and where a path hides its ids.

    A path whose segments are not all something this journal writes is no
    thread of it (:data:`NOT_THREAD`): the durable index's tree beside the
    namespaces, say. A
    hashed long-form segment holds no id: its position is returned for
    :func:`_key_from_record`. Segments repeat from path to path (the namespace,
    the agent, a user's sessions, the thread ids), so each is decoded once.
    """
    # Each segment decoded and its id checked once; ValueError: no key holds it.
    ids: dict[str, str | None] = {ANONYMOUS_SEGMENT: None}

    def decoded(segment: str) -> str | None:
        value = decode_segment(segment)
        ids[segment] = None if value is None else check_id(value, "id")
        return value

    keys: list[ThreadKey | NotThread | None] = []
    named_inside: list[int] = []
    for position, segments in enumerate(listed):
        try:
            ns, agent, user, session, thread = [
                ids[s] if s in ids else decoded(s) for s in segments
            ]
        except ValueError:
            keys.append(NOT_THREAD)  # not something this journal wrote, or no key's id
            continue
        if (
            ns is None
            or agent is None
            or session is None
            or thread is None
            or (user is None and segments[2] != ANONYMOUS_SEGMENT)
        ):
            named_inside.append(position)
            keys.append(None)
            continue
        keys.append(key_of_checked_ids((agent, session, user, thread, ns)))
    return keys, named_inside


async def _key_from_record(
    store: ObjectStore, segments: tuple[str, ...], keyring: Keyring | None = None
) -> ThreadKey | None:
    """The key of a thread whose path hashes an id.

    Its ``IDS`` object names it (written before its ``LEASE``), as does its
    ``RETENTION`` marker; a thread written before those held ids has only its
    first record's ``ThreadCreated``, which retention may have removed.
    """
    prefix = "/".join(segments)
    layout = ThreadLayout(prefix)
    # Its IDS object first (or, once retention removed the record, its marker):
    # plain JSON, no key needed. A thread created before IDS existed has none.
    named = await _key_from_ids(store, layout, segments)
    if named is not None:
        return named
    try:
        data, _ = await store.read(layout.record_key(1))
    except ObjectNotFoundError:
        return None
    try:
        if codec.is_encrypted_record(data) and keyring is not None:
            cipher = ThreadCipher(keyring, prefix)
            await cipher.load()
            # Through opening: the key of an owner back after an erasure done by
            # another process is not in this process's cached keys yet.
            parsed = await cipher.opening(
                lambda: codec.parse_record(
                    data, label=prefix, version=1, opener=cipher.open_record
                )
            )
        else:
            parsed = codec.parse_record(data, label=prefix, version=1)
        record = codec.materialize(parsed, label=prefix)
    except (ObjectNotFoundError, CorruptRecordError, EncryptionError):
        return None
    for event in record.events:
        if isinstance(event, ev.ThreadCreated):
            return ThreadKey(
                event.agent_id,
                event.session_id,
                event.user_id,
                event.thread_id,
                event.namespace,
            )
    return None


async def _key_from_ids(
    store: ObjectStore, layout: ThreadLayout, segments: tuple[str, ...]
) -> ThreadKey | None:
    """The key the thread's ``RETENTION`` marker or ``IDS`` names, if it fits.

    Neither is signed: ids that do not encode to the path they lie in (copied
    from another thread, or forged) name nothing.
    """
    marker, ids = await store.read_many([layout.retention_key, layout.ids_key])
    found: list[object] = []
    # Each decoded alone: a damaged marker must not hide the IDS object.
    if marker is not None:
        with contextlib.suppress(msgspec.DecodeError):
            found.append(decode_retention(marker).key)  # None: an earlier version's
    if ids is not None:
        with contextlib.suppress(msgspec.DecodeError):
            found.append(msgspec.json.decode(ids))
    for named in found:
        if not isinstance(named, dict):
            continue
        try:
            key = key_from_ids(named)
        except ValueError:
            continue
        if key.segments == segments:
            return key
    return None
