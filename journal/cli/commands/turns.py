"""``turns``: durable turns by status, across threads or of one; pause/resume/cancel."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from journal.cli.controls import is_terminal, printable
from journal.cli.describe import thread_label
from journal.cli.errors import CommandError
from journal.keys import ThreadKey

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TextIO

    from journal.durable import TurnView
    from journal.engine import Journal

__all__ = ["add_turns_command", "run_turns"]


class _TurnStatuses:
    """The ``--status`` choices, read from ``TurnStatus`` only when argparse asks.

    The parser is built for every command, and the durable-turn package is
    imported only by ``turns`` (argparse reads the choices when a value is given
    or the help is printed).
    """

    def _values(self) -> list[str]:
        from journal.durable import TurnStatus

        return [s.value for s in TurnStatus]

    def __contains__(self, value: object) -> bool:
        return value in self._values()

    def __iter__(self) -> Iterator[str]:
        return iter(self._values())

    def __len__(self) -> int:
        return len(self._values())


def add_turns_command(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``turns`` to the parser's subcommands."""
    p = sub.add_parser(
        "turns",
        help="durable turns by status (every thread, or one); pause, resume, cancel",
        description="durable turns by status (every thread, or one); pause, "
        "resume, cancel",
    )
    p.add_argument("--agent", help="agent id (with --session: one thread)")
    p.add_argument("--session", help="session id")
    p.add_argument("--user", help="user id, ~ for the anonymous user")
    p.add_argument("--thread", default=None, help="thread id (default: any)")
    p.add_argument("--namespace", default=None, help="namespace (default: any)")
    p.add_argument(
        "--status",
        action="append",
        default=[],
        choices=_TurnStatuses(),
        # A metavar keeps argparse from listing the choices while it builds
        # the parser; the help lists them when printed.
        metavar="STATUS",
        help="only turns with this status: %(choices)s (repeat for several)",
    )
    act = p.add_mutually_exclusive_group()
    act.add_argument("--pause", metavar="TURN_ID", help="ask a turn to pause")
    act.add_argument("--resume", metavar="TURN_ID", help="resume a paused turn")
    act.add_argument("--cancel", metavar="TURN_ID", help="cancel a turn")
    p.add_argument(
        "--revision", type=int, help="with --resume: the revision it was paused at"
    )
    p.add_argument("--reason", default="", help="recorded with a pause or cancel")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS)


def _matches(key: ThreadKey, args: argparse.Namespace) -> bool:
    user = None if args.user == "~" else args.user
    return (
        (args.agent is None or key.agent_id == args.agent)
        and (args.session is None or key.session_id == args.session)
        and (args.user is None or key.user_id == user)
        and (args.thread is None or key.thread_id == args.thread)
        and (args.namespace is None or key.namespace == args.namespace)
    )


async def _threads(journal: Journal, args: argparse.Namespace) -> list[ThreadKey]:
    from journal.durable import DurableClient

    seen: dict[str, ThreadKey] = {}
    async for key in journal.threads(namespace=args.namespace, agent_id=args.agent):
        if _matches(key, args):
            seen[str(key)] = key
    # Threads whose first turn is still queued have no log yet.
    for key in await DurableClient(journal, "index").threads_with_work():
        if _matches(key, args):
            seen.setdefault(str(key), key)
    return list(seen.values())


def _row(view: TurnView) -> dict[str, object]:
    return {
        "thread": thread_label(view.key),
        "turn_id": view.turn_id,
        "status": view.status.value,
        "revision": view.revision,
        "in_log": view.in_log,
        "runs": list(view.runs),
        "error": view.error,
        "pending_controls": view.pending_controls,
    }


async def run_turns(journal: Journal, args: argparse.Namespace, out: TextIO) -> int:
    """Run ``turns``; returns the exit status.

    Raises:
        CommandError: A control without one thread, or ``--resume`` without
            ``--revision``, or an unknown turn.
    """
    from journal.durable import DurableClient

    target = args.pause or args.resume or args.cancel
    if target is not None:
        if args.agent is None or args.session is None:
            raise CommandError("--pause/--resume/--cancel need --agent and --session")
        user = None if args.user in (None, "~") else args.user
        key = ThreadKey(
            args.agent,
            args.session,
            user,
            args.thread or "main",
            args.namespace or "default",
        )
        client = DurableClient(journal, key.agent_id, namespace=key.namespace)
        turn = client.turn(key, target)
        if args.pause:
            request = await turn.pause(reason=args.reason)
        elif args.cancel:
            request = await turn.cancel(args.reason or "cancelled")
        else:
            if args.revision is None:
                raise CommandError("--resume needs --revision (see `turns`)", code=2)
            request = await turn.resume(args.revision)
        op = "pause" if args.pause else "cancel" if args.cancel else "resume"
        doc = {
            "thread": thread_label(key),
            "turn_id": target,
            "request": op,
            "id": request,
        }
        if getattr(args, "json", False):
            out.write(_json_line(doc))
        else:
            out.write(
                f"{op} of {target} on {thread_label(key)} requested ({request})\n"
            )
        return 0
    wanted = set(args.status)
    rows: list[dict[str, object]] = []
    for key in await _threads(journal, args):
        client = DurableClient(journal, key.agent_id, namespace=key.namespace)
        views = await client.turns(key)
        rows.extend(_row(v) for v in views if not wanted or v.status.value in wanted)
    if getattr(args, "json", False):
        out.write(_json_line({"turns": rows}))
        return 0
    if not rows:
        out.write("no turns\n")
        return 0
    # Turn ids and errors are clients' and agents' text: on a terminal their
    # control characters show as ?, as in every other command's output.
    shown = printable if is_terminal(out) else str
    turn_ids = [shown(str(r["turn_id"])) for r in rows]
    width = max(len(turn_id) for turn_id in turn_ids)
    for r, turn_id in zip(rows, turn_ids, strict=True):
        error = f"  {shown(str(r['error']))}" if r["error"] else ""
        out.write(
            f"{r['thread']}  {turn_id:<{width}}  {r['status']!s:<9}  "
            f"rev {r['revision']}{error}\n"
        )
    return 0


def _json_line(doc: object) -> str:
    import json  # the only user of the module in a command's cold start

    return json.dumps(doc) + "\n"
