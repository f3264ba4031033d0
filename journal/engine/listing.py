"""Listing the threads of a store, directory level by directory level."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import codec
from journal import events as ev
from journal.errors import CorruptRecordError, EncryptionError, ObjectNotFoundError
from journal.keyring import ThreadCipher
from journal.keys import (
    ANONYMOUS_SEGMENT,
    ThreadKey,
    checked_key,
    decode_segment,
    encode_segment,
)
from journal.layout import ThreadLayout

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from types import EllipsisType

    from journal.keyring import Keyring
    from journal.store import ObjectStore

__all__ = ["list_threads"]


async def list_threads(
    store: ObjectStore,
    namespace: str | None = None,
    agent_id: str | None = None,
    user_id: str | EllipsisType | None = ...,
    session_id: str | None = None,
    keyring: Keyring | None = None,
) -> AsyncIterator[ThreadKey]:
    """Yield the keys of the threads stored, filtered by the given ids.

    ``user_id=None`` selects the anonymous user; leave it out for every user. Walks
    only the directory levels the filters leave open (never the whole store), in
    one call where the store can (the local store). A thread whose ids are too
    long for its path is named by its first record: ``keyring`` decrypts it when it
    is encrypted (without a usable key such a thread is not listed).
    """

    def fixed(value: str | None) -> str | None:
        return None if value is None else encode_segment(value)

    user: str | None
    if user_id is None:
        user = ANONYMOUS_SEGMENT
    elif user_id is ...:
        user = None
    else:
        user = encode_segment(user_id)
    pattern = (fixed(namespace), fixed(agent_id), user, fixed(session_id), None)
    for segments in await store.descendants("", pattern):
        if namespace is None and not _is_segment(segments[0]):
            continue  # not a namespace (the durable index's tree, say): skip it
        key = await _key_from_segments(store, segments, keyring)
        if key is not None:
            yield key


def _is_segment(name: str) -> bool:
    try:
        decode_segment(name)
    except ValueError:
        return False
    return True


async def _key_from_segments(
    store: ObjectStore, segments: tuple[str, ...], keyring: Keyring | None = None
) -> ThreadKey | None:
    try:
        ids = [None if s == ANONYMOUS_SEGMENT else decode_segment(s) for s in segments]
    except ValueError:
        return None  # not something this journal wrote
    ns, agent, user, session, thread = ids
    if (
        ns is not None
        and agent is not None
        and session is not None
        and thread is not None
        and (user is not None or segments[2] == ANONYMOUS_SEGMENT)
    ):
        return checked_key(agent, session, user, thread, ns)
    # A hashed long-form segment: the ids are in the thread's first record.
    prefix = "/".join(segments)
    try:
        data, _ = await store.read(ThreadLayout(prefix).record_key(1))
        opener = None
        if codec.is_encrypted_record(data) and keyring is not None:
            cipher = ThreadCipher(keyring, prefix)
            await cipher.load()
            opener = cipher.open_record
        record = codec.materialize(
            codec.parse_record(data, label=prefix, version=1, opener=opener),
            label=prefix,
        )
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
