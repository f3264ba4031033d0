"""``import --from-export``: an ``export`` file becomes a new thread.

Each exported record becomes one record of the new thread, carrying the same
events, run id and batch id, in the same order, so versions match one for one.
The export's first record (``ThreadCreated`` and the original writer's
``LeaseAcquired``) is replaced by the import's own fence record, which carries its
other events; the importer's epoch, writer id, commit times, hashes and the first
record's batch id are new. An ``AgentStateReplaced``'s state, which ``export``
writes as JSON, is encoded back.

The whole file is read and checked before the lease is taken (:func:`check_export`):
every record must be one the writer takes as it is and that leaves the thread
loadable, so a file that is refused writes nothing at all. docs/CLI.md lists the
checks.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any

import msgspec

from journal import codec
from journal import events as ev
from journal.cli.errors import CommandError
from journal.cli.reports import ImportExportReport
from journal.engine.batches import BatchWindow
from journal.errors import (
    InvalidEventError,
    JournalError,
    StorageError,
    UnknownEventError,
    VersionConflictError,
)
from projections.agent_state import AgentState, AgentStateProjection, encode_state

if TYPE_CHECKING:
    from collections.abc import Iterator

    from journal.cli.options import ImportExportOptions
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = [
    "ExportBatch",
    "check_export",
    "event_from_json",
    "import_export",
    "read_export",
]

# Events of the original thread's identity and fences, which the import's own
# fence record replaces in version 1.
_FENCE_TYPES = (ev.ThreadCreated, ev.LeaseAcquired)

_HASH = re.compile(r"[0-9a-f]{64}")
_GENESIS = codec.GENESIS_HASH.hex()


class ExportBatch(msgspec.Struct, frozen=True):
    """One checked record of an export, as the import appends it.

    Attributes:
        version: Its version, in the export and in the new thread.
        events: The events to append (for version 1: those beside the fence).
        batch_id: The batch id to append them under.
        run_id: The run they belong to, if any.
        exported: How many events the export's line holds.
    """

    version: int
    events: list[object]
    batch_id: str
    run_id: str | None
    exported: int


def _event_classes() -> dict[str, type[msgspec.Struct]]:
    # Every registered event class, by its type name: the built-ins and the
    # application's (they subclass Event), however deep.
    found: dict[str, type[msgspec.Struct]] = {}
    stack: list[type] = [ev.Event]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        tag = getattr(getattr(cls, "__struct_config__", None), "tag", None)
        name = tag if isinstance(tag, str) else cls.__name__
        if cls is not ev.Event and codec.is_registered(name):
            found[name] = cls
    return found


def event_from_json(
    data: dict[str, Any], classes: dict[str, type] | None = None
) -> object:
    """The event an exported JSON object (``record_json``'s ``events``) stands for.

    An unknown event's ``schema``, ``required`` and bytes are taken as written:
    ``codec.encode_record`` checks them as a reader will.

    Raises:
        ValueError: The object is not an event this reader can rebuild.
    """
    classes = classes if classes is not None else _event_classes()
    if not isinstance(data, dict):
        raise ValueError(f"an event is a JSON object, not {type(data).__name__}")
    fields = dict(data)
    type_name = fields.pop("type", None)
    if not isinstance(type_name, str):
        raise ValueError("an event without a 'type'")
    if fields.pop("unknown", False):
        encoded = fields.get("data")
        if not isinstance(encoded, str):
            raise ValueError(f"the unknown event {type_name!r} has no base64 'data'")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise ValueError(
                f"the unknown event {type_name!r} has 'data' that is not base64: {exc}"
            ) from None
        # Taken as given, whatever their types: the codec refuses what a reader
        # would (``codec.encode_record``), with the field named.
        schema: Any = fields.get("schema")
        required: Any = fields.get("required")
        return ev.UnknownEvent(type_name, schema, required, raw)
    cls = classes.get(type_name)
    if cls is None:
        raise ValueError(f"event type {type_name!r} is not registered in this reader")
    if cls is ev.AgentStateReplaced:
        try:
            state = msgspec.convert(fields.get("state"), AgentState)
        except msgspec.ValidationError as exc:
            raise ValueError(
                f"the state of the {type_name} event is not an AgentState: {exc}"
            ) from None
        fields["state"] = encode_state(state)
    try:
        return msgspec.convert(fields, cls)
    except msgspec.ValidationError as exc:
        raise ValueError(f"the {type_name} event does not decode: {exc}") from None


def read_export(path: str) -> Iterator[dict[str, Any]]:
    """The records of an export file, one JSON object per line, checked for order.

    Raises:
        CommandError: The file cannot be read, a line is not a record, or the
            versions do not run 1, 2, 3, ...
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 -- closed below, after the iteration
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from None
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = msgspec.json.decode(line)
            except msgspec.DecodeError as exc:
                raise CommandError(f"{path} line {number}: not JSON: {exc}") from None
            if not isinstance(record, dict) or not isinstance(
                record.get("events"), list
            ):
                raise CommandError(
                    f"{path} line {number}: not a record `export` writes"
                )
            version = record.get("version")
            # Not 1.0 or true, which compare equal to 1.
            if type(version) is not int or version != number:
                raise CommandError(
                    f"{path} line {number}: holds version {version!r}, "
                    f"not {number}; import takes a whole export, in order"
                )
            yield record


def _id(name: str, value: object) -> str:
    """A ``batch_id`` or ``run_id`` the writer takes, or why not (ValueError).

    The writer refuses ids that are not strings, empty or longer than
    ``codec.MAX_ID_LENGTH``; an export holds none of those.
    """
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} is empty")
    if len(value) > codec.MAX_ID_LENGTH:
        raise ValueError(
            f"{name} is {len(value)} characters long; the writer takes at most "
            f"{codec.MAX_ID_LENGTH}"
        )
    return value


def _hash(record: dict[str, Any], name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str) or _HASH.fullmatch(value) is None:
        raise ValueError(f"its {name} is not 64 lowercase hex digits")
    return value


def _link(record: dict[str, Any], version: int, previous: str) -> str:
    """The record's ``hash``, once its ``prev_hash`` is the previous one's.

    Raises:
        ValueError: A hash is not 64 hex digits, or the link is broken.
    """
    prev_hash, own = _hash(record, "prev_hash"), _hash(record, "hash")
    if prev_hash != previous:
        expected = (
            "all zeros, as version 1's is"
            if version == 1
            else f"version {version - 1}'s hash {previous[:16]}..."
        )
        raise ValueError(
            f"its prev_hash {prev_hash[:16]}... is not {expected}: the export's "
            "hash chain is broken (a record was removed, reordered, or its hashes "
            "were changed)"
        )
    return own


def _refusal(error: InvalidEventError) -> str:
    of_type = f" (a value of type {error.value_type})" if error.value_type else ""
    return (
        f"the {error.type_name} event would be refused by the writer: "
        f"{error.path}: {error.detail}{of_type}"
    )


def _as_read(version: int, encoded: codec.EncodedRecord, label: str) -> codec.Record:
    """The record readers will decode from ``encoded``, as loading folds it."""
    parsed = codec.parse_record(encoded.data, label=label, version=version)
    return codec.materialize(parsed, label=label, blobs=encoded.blobs)


def check_export(path: str, key: ThreadKey, holder: str) -> list[ExportBatch]:
    """Read the export at ``path`` whole and check it can become thread ``key``.

    Checked, for every record in turn: the versions run 1, 2, 3, ...; each
    ``prev_hash`` is the previous record's ``hash``; the batch and run ids are
    what the writer takes; no batch id is one the writer would take for a retry
    of an earlier record (within ``IDEMPOTENCY_WINDOW`` records) and so not
    write; every event decodes and passes ``codec.encode_record``'s checks (the
    writer's); no ``AgentStateReplaced`` names ``chunks``; and the records,
    decoded back as readers will, fold through ``AgentStateProjection`` (the
    projection loading uses) without error. Nothing is written.

    Args:
        path: The export file.
        key: The thread it is to become.
        holder: The importer's holder id (written in the fence record).

    Returns:
        The records, in order, ready to append.

    Raises:
        CommandError: The first problem found, one line naming the version.
    """
    label = f"{key} (imported)"
    classes = _event_classes()
    projection = AgentStateProjection(label)
    state = projection.initial(key)
    # The writer's own idempotency window, filled as the writer will fill it: a
    # batch id found in it is a retry to the writer, which then writes nothing.
    window = BatchWindow()
    batch_ids: dict[int, str] = {}
    previous = _GENESIS
    batches: list[ExportBatch] = []
    for record in read_export(path):
        version: int = record["version"]
        where = f"{path} version {version}"
        try:
            previous = _link(record, version, previous)
            batch_id = _id("batch_id", record.get("batch_id"))
            given_run = record.get("run_id")
            run_id = None if given_run is None else _id("run_id", given_run)
        except ValueError as exc:
            raise CommandError(f"{where}: {exc}; nothing written") from None
        events: list[object] = []
        for index, data in enumerate(record["events"]):
            try:
                events.append(event_from_json(data, classes))
            except ValueError as exc:
                raise CommandError(
                    f"{where}: events[{index}]: {exc}; nothing written"
                ) from None
        if version > 1 and not events:
            raise CommandError(
                f"{where}: holds no events (every record after the first needs one); "
                "nothing written"
            )
        for index, event in enumerate(events):
            if isinstance(event, ev.AgentStateReplaced) and event.chunks:
                # An export resolves chunks into messages: these name blobs that
                # exist in the exported root only.
                raise CommandError(
                    f"{where}: the AgentStateReplaced event events[{index}] names "
                    "chunks (message blobs of the journal it came from; an export "
                    "carries the messages instead); nothing written"
                )
        try:
            encoded = codec.encode_record(
                version=version,
                epoch=1,
                writer=holder,
                batch_id=batch_id,
                run_id=run_id,
                committed_at=0.0,
                prev_hash=codec.GENESIS_HASH,
                events=events,
            )
        except InvalidEventError as exc:
            raise CommandError(f"{where}: {_refusal(exc)}; nothing written") from None
        if version > 1:
            found = window.find(batch_id)
            # The window keeps a short key: only the same id is a retry.
            if found is not None and batch_ids.get(found[0]) == batch_id:
                raise CommandError(
                    f"{where}: batch_id {batch_id!r} is version {found[0]}'s too: "
                    "the writer would take this record for a retry of that one "
                    "and not write it; nothing written"
                )
            # Version 1's is not: the fence record is written under a new one.
            batch_ids[version] = batch_id
        window.add(version, batch_id, encoded.content_digest)
        try:
            as_read = _as_read(version, encoded, label)
            for event in as_read.events:
                state = projection.apply(state, as_read, event)
        except UnknownEventError as exc:
            raise CommandError(
                f"{where}: the event type {exc.type_name!r} is marked required and "
                "this reader does not know it, so no state could be loaded from "
                "the thread; nothing written"
            ) from None
        except (JournalError, ValueError, TypeError, msgspec.DecodeError) as exc:
            raise CommandError(
                f"{where}: the thread could not be loaded with this record: {exc}; "
                "nothing written"
            ) from None
        if version == 1:
            events = [e for e in events if not isinstance(e, _FENCE_TYPES)]
        batches.append(
            ExportBatch(version, events, batch_id, run_id, len(record["events"]))
        )
    if not batches:
        raise CommandError(f"{path} holds no records; nothing written")
    return batches


async def import_export(
    journal: Journal, options: ImportExportOptions
) -> ImportExportReport:
    """``import --from-export``: create the thread from the records of an export.

    The whole file is read and checked (:func:`check_export`) before the lease
    is taken. Each record is then appended at its version; one that lands
    elsewhere, or any failure after the fence record, stops the import with the
    versions written named.

    Raises:
        CommandError: The thread exists, the file is refused (nothing written),
            or writing stopped part way (the error says which versions the
            thread holds).
    """
    key = options.key
    head = await journal.head(key)
    if head:
        raise CommandError(
            f"{key} already exists (head {head}); import only creates new threads"
        )
    batches = check_export(options.path, key, options.holder)
    total = len(batches)
    written = epoch = 0
    try:
        async with journal.writer(
            key,
            options.holder,
            fence_events=batches[0].events,
            create_only=True,
            recover_runs=False,
        ) as writer:
            epoch, written = writer.epoch, writer.version
            for batch in batches[1:]:
                appended = await writer.append(
                    batch.events,
                    expected_version=written,
                    batch_id=batch.batch_id,
                    run_id=batch.run_id,
                )
                if appended.version != batch.version:
                    # check_export leaves the writer no batch to take for a
                    # retry; if it still answers with another version, the
                    # record was not written and the versions no longer match.
                    reason = (
                        f"it was not written (the writer answered with version "
                        f"{appended.version})"
                    )
                    raise CommandError(
                        await _stopped(journal, key, written, total, reason)
                    )
                written = appended.version
    except (JournalError, ValueError, TypeError) as exc:
        if written == 0 and not isinstance(exc, StorageError | ValueError | TypeError):
            # Refused while taking the lease or before the fence record was
            # written (a storage failure may have come after it landed).
            if isinstance(exc, VersionConflictError):
                raise CommandError(f"{key} was created meanwhile: {exc}") from None
            raise
        raise CommandError(
            await _stopped(journal, key, written, total, str(exc))
        ) from None
    count = sum(batch.exported for batch in batches)
    return ImportExportReport(key, options.path, total, count, written, epoch)


async def _stopped(
    journal: Journal, key: ThreadKey, written: int, total: int, reason: str
) -> str:
    """The one line saying where an import stopped and what the thread holds.

    ``written``: the versions the writer acknowledged; the head is read back,
    since a write whose reply was lost may have landed after them.
    """
    try:
        head: int | None = await journal.head(key)
    except JournalError:
        head = None
    where = (
        f"after writing all {total} versions"
        if written == total
        else f"at version {written + 1}"
    )
    if head is None:
        held = (
            f"versions 1 to {written} of {total} were written, perhaps more (the "
            "head could not be read back)"
            if written
            else "whether anything was written could not be read back"
        )
    elif head == 0:
        held = "nothing was written"
    elif head < total:
        held = f"versions 1 to {head} of {total} were written: the thread is incomplete"
    else:
        held = f"all {total} versions were written"
    return f"import into {key} stopped {where}: {reason}; {held}"
