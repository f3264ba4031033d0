"""``import --from-export``: an ``export`` file becomes a new thread.

Each exported record becomes one record of the new thread, carrying the same
events, run id and batch id, in the same order, so versions match one for one.
The export's first record (``ThreadCreated`` and the original writer's
``LeaseAcquired``) is replaced by the import's own fence record, which carries its
other events; the importer's epoch, writer id, commit times and hashes are new.
An ``AgentStateReplaced``'s state, which ``export`` writes as JSON, is encoded back.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import msgspec

from journal import codec
from journal import events as ev
from journal.cli.errors import CommandError
from journal.cli.reports import ImportExportReport
from journal.errors import VersionConflictError
from projections.agent_state import AgentState, encode_state

if TYPE_CHECKING:
    from collections.abc import Iterator

    from journal.cli.options import ImportExportOptions
    from journal.engine import Journal

__all__ = ["event_from_json", "import_export", "read_export"]

# Events of the original thread's identity and fences, which the import's own
# fence record replaces in version 1.
_FENCE_TYPES = (ev.ThreadCreated, ev.LeaseAcquired)


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

    Raises:
        ValueError: The object is not an event this reader can rebuild.
    """
    classes = classes if classes is not None else _event_classes()
    fields = dict(data)
    type_name = fields.pop("type", None)
    if not isinstance(type_name, str):
        raise ValueError("an event without a 'type'")
    if fields.pop("unknown", False):
        return ev.UnknownEvent(
            type_name,
            int(fields["schema"]),
            bool(fields["required"]),
            base64.b64decode(fields["data"]),
        )
    cls = classes.get(type_name)
    if cls is None:
        raise ValueError(f"event type {type_name!r} is not registered in this reader")
    if cls is ev.AgentStateReplaced:
        state = msgspec.convert(fields["state"], AgentState)
        fields["state"] = encode_state(state)
    try:
        return msgspec.convert(fields, cls)
    except msgspec.ValidationError as exc:
        raise ValueError(f"a {type_name} event does not decode: {exc}") from None


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
            if record.get("version") != number:
                raise CommandError(
                    f"{path} line {number}: holds version {record.get('version')!r}, "
                    f"not {number}; import takes a whole export, in order"
                )
            yield record


async def import_export(
    journal: Journal, options: ImportExportOptions
) -> ImportExportReport:
    """``import --from-export``: create the thread from the records of an export.

    The whole file is read and decoded before anything is written.

    Raises:
        CommandError: The thread exists, or the file is not a whole export.
    """
    key = options.key
    head = await journal.head(key)
    if head:
        raise CommandError(
            f"{key} already exists (head {head}); import only creates new threads"
        )
    classes = _event_classes()
    batches: list[tuple[list[object], str | None, str | None]] = []
    for number, record in enumerate(read_export(options.path), 1):
        try:
            events = [event_from_json(e, classes) for e in record["events"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"{options.path} version {number}: {exc}") from None
        batches.append((events, record.get("batch_id"), record.get("run_id")))
    if not batches:
        raise CommandError(f"{options.path} holds no records; nothing written")
    first = [e for e in batches[0][0] if not isinstance(e, _FENCE_TYPES)]
    count = sum(len(events) for events, _, _ in batches)
    try:
        async with journal.writer(
            key,
            options.holder,
            fence_events=first,
            create_only=True,
            recover_runs=False,
        ) as writer:
            epoch = writer.epoch
            version = writer.version
            for events, batch_id, run_id in batches[1:]:
                appended = await writer.append(
                    events, batch_id=batch_id or None, run_id=run_id or None
                )
                version = appended.version
    except VersionConflictError as exc:
        raise CommandError(f"{key} was created meanwhile: {exc}") from None
    return ImportExportReport(key, options.path, len(batches), count, version, epoch)
