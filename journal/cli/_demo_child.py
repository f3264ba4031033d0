"""The Agent process that ``agent-journal demo`` kills in the middle of a tool call.

Run as ``python -m journal.cli._demo_child`` with one JSON object on stdin::

    {"root": "...", "options": {...}, "session_id": "...", "user_id": "alice",
     "lease_ttl": 1.5, "run_id": "alice-3", "call_id": "call-email-1",
     "message": "Email Bob the forecast."}

It builds the demo's execution configuration (the same tools, a short lease TTL),
takes a fresh :class:`~journal.Agent` and runs one call whose model asks for
``send_email``. Each record the run commits is reported as one JSON line on stdout
(``{"what": "record", "version": N}``); the runtime commits the
``ToolCallRequested`` before the tool runs (write-ahead). The tool's outbox then
reports ``{"what": "sending", "pid": ...}`` and waits, "talking to the mail server",
for the SIGKILL the demo sends. Nothing after the request reaches the log, so the
call's outcome is unknown: exactly what a real crash leaves behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from journal import Journal, Record, RuntimeContext, ScriptedModel
from journal.cli.demo import EMAIL_TO_BOB, DemoConfig, Outbox, email_script


def _report(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class HangingOutbox(Outbox):
    """An outbox whose mail server never answers: the process dies mid-send."""

    async def deliver(self, to: str, subject: str) -> str:
        _report(what="sending", pid=os.getpid(), to=to)
        await asyncio.sleep(3600)  # the lease is renewed meanwhile, until the kill
        raise RuntimeError("the demo should have killed this process")


async def crash_course(config: dict[str, Any]) -> None:
    """Run one Agent call that hangs in ``send_email`` until the process is killed.

    Args:
        config: The root, storage options, identity, lease TTL and request.
    """
    journal = Journal.open(config["root"], **config.get("options", {}))
    agent_config = DemoConfig(journal, lease_ttl=float(config["lease_ttl"]))
    model = ScriptedModel(email_script(*EMAIL_TO_BOB, call_id=config["call_id"]))
    ctx = RuntimeContext(
        user_id=config["user_id"],
        session_id=config["session_id"],
        run_id=config["run_id"],
    )
    ctx.put(Outbox, HangingOutbox())
    async with agent_config.agent(model) as agent:
        async for item in agent.stream_events(config["message"], ctx):
            if isinstance(item, Record):
                _report(what="record", version=item.version)
    raise SystemExit("send_email returned: the demo should have killed this process")


def main() -> None:
    """Read the configuration from stdin and run until killed."""
    config = json.load(sys.stdin)
    asyncio.run(crash_course(config))


if __name__ == "__main__":
    main()
