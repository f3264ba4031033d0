"""Child process of test_crash: an Agent whose tool kills its own process.

Usage: python _crash_child.py <journal root> <lease ttl>

The tool's ToolCallRequested is committed (write-ahead), then the tool writes the
marker file ``<root>/started`` and SIGKILLs the process: no cleanup runs, the lease
stays unexpired until its TTL passes, and the run never finishes.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sys

from journal import (
    Agent,
    Journal,
    ModelResponse,
    RuntimeContext,
    ScriptedModel,
    ToolCall,
)


async def main(root: str, ttl: float) -> None:
    marker = pathlib.Path(root) / "started"

    async def transfer(amount: int) -> str:
        """Move money (a side effect whose outcome the crash makes uncertain)."""
        marker.write_text(str(amount))
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    model = ScriptedModel(
        [ModelResponse("paying", [ToolCall("transfer", {"amount": 100}, id="pay-1")])]
    )
    journal = Journal.open(root)
    agent = Agent(
        "Payer", "payer", model, tools=[transfer], journal=journal, lease_ttl=ttl
    )
    await agent.call(
        "pay the invoice", RuntimeContext(user_id="alice", session_id="s1")
    )
    raise SystemExit("the tool should have killed the process")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
