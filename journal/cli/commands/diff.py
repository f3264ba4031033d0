"""``diff``: what changed in a thread's state between two versions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from journal.cli.commands.state import load_at
from journal.cli.commands.threads import existing_head
from journal.cli.errors import usage_error
from journal.cli.reports import DiffReport, FieldChange
from projections.agent_state import AgentState

if TYPE_CHECKING:
    from journal import events as ev
    from journal.cli.options import DiffOptions
    from journal.engine import Journal

__all__ = ["show_diff", "state_changes"]

_ABSENT = object()
_FIELD_ORDER = {name: i for i, name in enumerate(AgentState.__struct_fields__)}


def _flatten(
    prefix: str, value: object, out: dict[str, object], depth: int = 3
) -> None:
    # Dicts are opened up to ``depth`` levels (field.subfield.key); an empty dict
    # adds nothing, so a first rule shows as one added key, not a changed dict.
    if isinstance(value, dict) and depth > 0:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out, depth - 1)
    else:
        out[prefix] = value


def _change(name: str, old: object, new: object) -> FieldChange:
    if old is _ABSENT:
        return FieldChange(name, "added", None, new)
    if new is _ABSENT:
        return FieldChange(name, "removed", old, None)
    return FieldChange(name, "changed", old, new)


def state_changes(
    old: AgentState, new: AgentState
) -> tuple[list[FieldChange], list[ev.Msg], list[ev.Msg]]:
    """Field-by-field changes between two states, and messages added / removed."""
    flat_old: dict[str, object] = {}
    flat_new: dict[str, object] = {}
    for state, flat in ((old, flat_old), (new, flat_new)):
        data = msgspec.to_builtins(state)
        data.pop("context", None)
        data.pop("version", None)
        _flatten("", data, flat)
    names = sorted(
        set(flat_old) | set(flat_new),
        key=lambda n: (_FIELD_ORDER.get(n.split(".", 1)[0], len(_FIELD_ORDER)), n),
    )
    changes = [
        _change(name, flat_old.get(name, _ABSENT), flat_new.get(name, _ABSENT))
        for name in names
        if flat_old.get(name, _ABSENT) != flat_new.get(name, _ABSENT)
    ]
    old_ids = {m.id for m in old.context}
    new_ids = {m.id for m in new.context}
    added = [m for m in new.context if m.id not in old_ids]
    removed = [m for m in old.context if m.id not in new_ids]
    return changes, added, removed


async def show_diff(journal: Journal, options: DiffOptions) -> DiffReport:
    """``diff``: the changes from ``start`` (head-1) to ``stop`` (head).

    Raises:
        CommandError: The thread does not exist, a version is beyond the head,
            or ``start`` is after ``stop`` (exit 2).
    """
    key = options.key
    head = await existing_head(journal, key, options.root)
    stop = options.stop if options.stop is not None else head
    start = options.start if options.start is not None else max(stop - 1, 0)
    if start > stop:
        raise usage_error(f"--from {start} is after --to {stop}")
    old = await load_at(journal, key, start, head)
    new = await load_at(journal, key, stop, head)
    changes, added, removed = state_changes(old, new)
    records = [r async for r in journal.records(key, start + 1, stop + 1)]
    return DiffReport(key, start, stop, changes, added, removed, records)
