"""The web UI's documents: what each page shows, as JSON-ready builtins.

No HTTP here. Each function reads the journal through the CLI's commands (the
same reports ``agent-journal ls``, ``log``, ``state``, ``diff`` and ``verify``
print) or the engine's public API, and returns plain data the page renders.
Every string in it is data: the page puts it in text nodes, never in markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from journal import events as ev
from journal.cli.commands.diff import show_diff
from journal.cli.commands.ls import list_threads
from journal.cli.commands.state import show_state
from journal.cli.commands.threads import existing_head, map_bounded
from journal.cli.commands.verify import verify_one
from journal.cli.describe import (
    describe_event,
    event_type_name,
    format_time,
    message_summary,
    thread_label,
)
from journal.cli.options import DiffOptions, LsOptions, StateOptions
from journal.cli.progress import NO_PROGRESS
from journal.cli.render_json import event_json, record_json, render_json, thread_json
from journal.cli.reports import VerifyThreadsReport
from journal.keys import ThreadKey
from journal.web.run_cache import RunCache
from journal.web.runs import call_status, calls_before, pruned, segments

if TYPE_CHECKING:
    from collections.abc import Mapping

    from journal.codec import Record
    from journal.engine import Journal
    from journal.web.attention import AttentionCache
    from journal.web.runs import RunNode

__all__ = [
    "MAX_PAGE",
    "PAGE",
    "THREAD_PARAMS",
    "ThreadQuery",
    "diff_view",
    "key_from_params",
    "page_limit",
    "state_view",
    "thread_params",
    "thread_ref",
    "threads_view",
    "timeline_view",
    "verify_view",
]

THREAD_PARAMS = ("namespace", "agent_id", "user_id", "session_id", "thread_id")
"""The query parameters naming a thread; a missing ``user_id`` is the anonymous user.

Ids may hold any character (``/`` included), so a thread is named by its ids, not
by a path.
"""


def thread_params(key: ThreadKey) -> dict[str, str]:
    """The query parameters naming ``key`` (``user_id`` left out when anonymous)."""
    params = {
        "namespace": key.namespace,
        "agent_id": key.agent_id,
        "session_id": key.session_id,
        "thread_id": key.thread_id,
    }
    if key.user_id is not None:
        params["user_id"] = key.user_id
    return params


def key_from_params(params: Mapping[str, str]) -> ThreadKey:
    """The thread named by query parameters.

    Raises:
        InvalidKeyError: An id is missing or not valid (its message names it).
    """
    return ThreadKey(
        params.get("agent_id", ""),
        params.get("session_id", ""),
        params.get("user_id"),
        params.get("thread_id", "main"),
        params.get("namespace", "default"),
    )


def thread_ref(key: ThreadKey) -> dict[str, Any]:
    """A thread as the page links to it: its ids, label and query parameters."""
    return {
        **thread_json(key),
        "label": thread_label(key),
        "params": thread_params(key),
    }


# --- threads --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThreadQuery:
    """The threads page's filters: case-insensitive substrings of each id.

    Attributes:
        text: Matched against the whole label (namespace/agent/user/session/thread).
        agent: Matched against the agent id.
        user: Matched against the user id (``~`` is the anonymous user).
        session: Matched against the session id.
        attention: Only threads with a badge up.
    """

    text: str = ""
    agent: str = ""
    user: str = ""
    session: str = ""
    attention: bool = False

    def matches(self, key: ThreadKey) -> bool:
        """Whether ``key``'s ids pass the text filters."""
        pairs = (
            (self.text, thread_label(key)),
            (self.agent, key.agent_id),
            (self.user, "~" if key.user_id is None else key.user_id),
            (self.session, key.session_id),
        )
        return all(want.casefold() in have.casefold() for want, have in pairs)


async def threads_view(
    journal: Journal, root: str, query: ThreadQuery, cache: AttentionCache
) -> dict[str, Any]:
    """The threads under ``root`` matching ``query``, with head, activity and badges."""
    report = await list_threads(journal, LsOptions(root=root))
    summaries = [t for t in report.threads if query.matches(t.key)]

    async def badges(head: int, key: ThreadKey) -> dict[str, object]:
        return (await cache.get(journal, key, head)).to_json()

    found = await map_bounded(
        summaries, lambda t: badges(t.head, t.key), NO_PROGRESS, "attention"
    )
    rows = [
        {
            **thread_ref(t.key),
            "head": t.head,
            "records": t.records,
            "last_activity": t.last_activity or None,
            "last_activity_text": format_time(t.last_activity),
            "error": t.error,
            "attention": badge,
        }
        for t, badge in zip(summaries, found, strict=True)
        if not query.attention or badge["needed"] or t.error
    ]
    return {"root": root, "count": len(rows), "threads": rows}


# --- a thread's timeline --------------------------------------------------------------


def event_view(event: object) -> dict[str, Any]:
    """An event: its type, one readable line, and every field."""
    view: dict[str, Any] = {
        "type": event_type_name(event),
        "summary": describe_event(event),
        "data": event_json(event),
    }
    if isinstance(event, ev.MessageAppended):
        view["role"] = event.message.role
    return view


def record_view(record: Record) -> dict[str, Any]:
    """A record's header (as ``export`` writes it) and its events, readable."""
    view = record_json(record)
    view["time"] = format_time(record.committed_at)
    view["events"] = [event_view(e) for e in record.events]
    return view


def _run_view(node: RunNode) -> dict[str, Any]:
    entry = node.entry
    return {
        "run_id": entry.run_id or None,
        "status": entry.status,
        "started_at": entry.started_at,
        "ended_at": entry.ended_at,
        "reason": entry.reason,
        "turn_id": node.turn_id,
        "parent_run_id": node.parent_run_id,
        "parent_thread": node.parent_thread,
        "tool_calls": [
            {
                "call_id": call.call_id,
                "name": call.name,
                "input": call.input,
                "status": call_status(call, entry.status),
                "outcome": call.outcome,
                "output": call.output,
                "requested_at": call.requested_at,
                "resolved_at": call.resolved_at,
            }
            for call in entry.tool_calls
        ],
        "children": [_run_view(child) for child in node.children],
    }


PAGE = 200
"""What a document holds of a long list: a timeline's records (unless ``limit``
asks for another number), a state's context, a diff's messages and records."""

MAX_PAGE = 2000
"""The most records one timeline document holds.

Its records carry every field of every event; a runtime thread of 1,000 turns
(4,160 records) made a document of 7.7 MB when it held them all.
"""


def page_limit(raw: str) -> int:
    """The ``limit`` query parameter (empty: :data:`PAGE`).

    Raises:
        ValueError: It is not a whole number from 1 to :data:`MAX_PAGE`.
    """
    raw = raw.strip()
    if not raw:
        return PAGE
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise ValueError(
            f"limit must be a number of records from 1 to {MAX_PAGE}, not {raw!r}"
        )
    return int(raw)


def _window(
    first: int, head: int, before: int | None, limit: int, run: RunNode | None
) -> range:
    """The versions a timeline document shows.

    The ``limit`` records before ``before``; without it, those ending with the
    selected run (its last record, or the head while it is open), else the newest.
    A ``before`` past the head means the newest (the head only moves forward).
    """
    if before is None:
        end = run.entry.ended_at if run is not None else None
        before = (end or head) + 1
    if before < 1:
        raise ValueError(f"before must be a version number from 1, not {before}")
    stop = min(before, head + 1)
    return range(max(first, stop - limit), max(first, stop))


async def timeline_view(
    journal: Journal,
    root: str,
    key: ThreadKey,
    cache: AttentionCache,
    *,
    before: int | None = None,
    limit: int = PAGE,
    run: str | None = None,
    run_cache: RunCache | None = None,
) -> dict[str, Any]:
    """A page of a thread's records grouped by run, the runs they touch, its badges.

    Args:
        journal: The journal.
        root: Its root, as errors name it.
        key: The thread.
        cache: The attention badges, by thread.
        before: The page ends just before this version (see :func:`_window`).
        limit: Records a page holds at most.
        run: The selected run: its node is always among the runs, and without
            ``before`` the page ends with it.
        run_cache: Where the thread's runs at this head may be kept (without
            one, they are read from all its records for this page).

    Raises:
        CommandError: The thread has no records.
        ValueError: ``before`` is 0.
    """
    head = await existing_head(journal, key, root)
    names = {str(key), key.prefix, thread_label(key)}
    runs_at = await (run_cache or RunCache()).get(journal, key, head, names)
    first, roots, nodes = runs_at.first, runs_at.roots, runs_at.runs
    selected = nodes.get(run) if run is not None else None
    window = _window(first, head, before, limit, selected)
    records = (
        [r async for r in journal.records(key, window.start, window.stop)]
        if window
        else []
    )
    shown = segments(records, known=calls_before(runs_at.requests, window.start))
    # The runs the page's records belong to, those open over any of its versions
    # (a parent run spans its children's records), and the selected one.
    keep = {s.run_id for s in shown if s.run_id is not None}
    keep.update(
        run_id
        for run_id, node in nodes.items()
        if node.entry.started_at < window.stop
        and (node.entry.ended_at or head) >= window.start
    )
    if run is not None:
        keep.add(run)
    attention = await cache.get(journal, key, head, runs_at)
    return {
        "thread": thread_ref(key),
        "head": head,
        "first_version": first,
        "window": {
            "first": window.start,
            "last": window.stop - 1,
            "limit": limit,
            "earlier": window.start > first,
            "later": window.stop <= head,
        },
        "attention": attention.to_json(),
        "runs_total": len(nodes),
        "runs": [_run_view(node) for node in pruned(roots, keep)],
        "segments": [
            {
                "run_id": segment.run_id,
                "records": [record_view(r) for r in segment.records],
            }
            for segment in shown
        ],
    }


# --- state, diff, verify --------------------------------------------------------------


def _messages(messages: list[ev.Msg]) -> list[dict[str, Any]]:
    return [
        {"id": m.id, "role": m.role, "summary": message_summary(m)} for m in messages
    ]


async def state_view(
    journal: Journal,
    root: str,
    key: ThreadKey,
    at: int | None,
    *,
    all_messages: bool = False,
) -> dict[str, Any]:
    """The state as of ``at`` (default: the head), as ``agent-journal state`` has it.

    Unless ``all_messages``, the context is cut to its last :data:`PAGE`
    messages, in the list and in the state's JSON alike (``messages_total`` says
    how many it holds): a long thread's context is most of its bytes.

    Raises:
        CommandError: The thread does not exist or has no version ``at``.
    """
    report = await show_state(journal, StateOptions(root=root, key=key, at=at))
    context = report.state.context
    shown = context if all_messages else context[-PAGE:]
    # The state's own JSON (what ``state --json`` prints) of the messages shown
    # only: not the whole context's, indented, decoded, then cut.
    trimmed = msgspec.structs.replace(report.state, context=shown)
    state = msgspec.json.decode(trimmed.to_json())
    return {
        "thread": thread_ref(key),
        "head": report.head,
        "version": report.version,
        "messages_total": len(context),
        "messages": _messages(shown),
        "state": state,
    }


async def diff_view(
    journal: Journal, root: str, key: ThreadKey, start: int | None, stop: int | None
) -> dict[str, Any]:
    """What changed from ``start`` to ``stop``, as ``agent-journal diff`` has it.

    The messages added, those removed and the records in between are the last
    :data:`PAGE` of each (``added_total``, ``removed_total`` and
    ``records_total`` say how many there are).

    Raises:
        CommandError: The thread does not exist, a version is beyond the head,
            or ``start`` is after ``stop``.
    """
    report = await show_diff(
        journal, DiffOptions(root=root, key=key, start=start, stop=stop)
    )
    return {
        "thread": thread_ref(key),
        "head": await journal.head(key),
        "from": report.start,
        "to": report.stop,
        "changes": [
            {"field": c.field, "kind": c.kind, "old": c.old, "new": c.new}
            for c in report.changes
        ],
        # Each list's last page: a diff over a long thread adds its whole context.
        "added_total": len(report.added),
        "added": _messages(report.added[-PAGE:]),
        "removed_total": len(report.removed),
        "removed": _messages(report.removed[-PAGE:]),
        # The newest page of them, as the timeline pages: the page links to the
        # timeline for those before it.
        "records_total": len(report.records),
        "records": [record_view(r) for r in report.records[-PAGE:]],
    }


async def verify_view(journal: Journal, root: str, key: ThreadKey) -> dict[str, Any]:
    """``agent-journal verify`` of one thread.

    Raises:
        CommandError: The thread has no records.
    """
    await existing_head(journal, key, root)
    report = await verify_one(journal, key)
    document = render_json(VerifyThreadsReport(root, [report]))
    decoded = msgspec.json.decode(document) if document is not None else {}
    return {"thread": thread_ref(key), **decoded["threads"][0]}
