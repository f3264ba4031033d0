"""The writer process that ``agent-journal demo`` kills in the middle of a tool call.

Run as ``python -m journal._demo_child`` with one JSON object on stdin::

    {"root": "...", "options": {...}, "key": {...ThreadKey fields...},
     "holder": "worker-2", "lease_ttl": 2.0}

It takes the thread's lease with a short TTL, commits the start of a run and a
``ToolCallRequested`` (write-ahead: before the tool runs), reports each commit as one
JSON line on stdout, says that the tool is running, and then waits forever for the
SIGKILL that the demo sends it. Nothing after the request ever reaches the log, so the
call's outcome is unknown: exactly what a real crash leaves behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from journal import (
    Journal,
    MessageAppended,
    Msg,
    RunStarted,
    TextBlock,
    ThreadKey,
    ToolCallRequested,
    ToolUseBlock,
)

RUN_ID = "run-3"
CALL_ID = "call-email-1"


def _report(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def crash_course(config: dict[str, Any]) -> None:
    """Commit a run start and a tool request, then "run the tool" until killed.

    Args:
        config: The root, storage options, thread key, holder and lease TTL.
    """
    journal = Journal.open(config["root"], **config.get("options", {}))
    key = ThreadKey(**config["key"])
    writer = await journal.acquire(
        key, holder=config["holder"], lease_ttl=float(config["lease_ttl"])
    )
    _report(what="fence", version=writer.version, epoch=writer.epoch)

    user = Msg("user", "Great. Email Bob the forecast, please.")
    record = await writer.append(
        [RunStarted(RUN_ID), MessageAppended(user)], run_id=RUN_ID
    )
    _report(what="input", version=record.version)

    email = {"to": "bob@example.com", "subject": "Paris", "body": "18 C and sunny"}
    call = ToolUseBlock(CALL_ID, "send_email", email)
    reply = Msg("assistant", [TextBlock("Sending it now."), call])
    record = await writer.append(
        [
            MessageAppended(reply),
            # Write-ahead: the request is durable before the tool runs.
            ToolCallRequested(CALL_ID, "send_email", email, run_id=RUN_ID),
        ],
        run_id=RUN_ID,
    )
    _report(what="tool_call", version=record.version)

    _report(what="tool_running", pid=os.getpid(), tool="send_email")
    # "Sending the email": the lease keeps being renewed in the background until
    # the parent kills this process.
    await asyncio.sleep(3600)


def main() -> None:
    """Read the configuration from stdin and run until killed."""
    config = json.load(sys.stdin)
    asyncio.run(crash_course(config))


if __name__ == "__main__":
    main()
