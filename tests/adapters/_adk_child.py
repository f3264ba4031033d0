"""One process appending events to one ADK session through the adapter.

Usage: python -m tests.adapters._adk_child ROOT SESSION_ID NAME COUNT [--ack TTL]
Prints the number of stale retries it needed. With ``--ack TTL`` (a lease of TTL
seconds) it prints ``ack <invocation id>`` after each acknowledged append instead,
so a test may kill it mid-stream and check that every acknowledged event is there.
"""

from __future__ import annotations

import asyncio
import sys

from google.adk.errors import StaleSessionError
from google.adk.events import Event
from google.genai import types

from journal import Journal
from journal.adapters.adk import JournalSessionService


async def main(
    root: str, session_id: str, name: str, count: int, ack_ttl: float | None = None
) -> None:
    journal = Journal.open(root)
    service = JournalSessionService(
        journal, holder=name, lease_wait=30.0, lease_ttl=ack_ttl or 30.0
    )
    retries = 0
    for i in range(count):
        while True:
            session = await service.get_session(
                app_name="app", user_id="u", session_id=session_id
            )
            assert session is not None
            event = Event(
                author=name,
                invocation_id=f"{name}-{i}",
                content=types.Content(
                    role="user", parts=[types.Part(text=f"{name} {i}")]
                ),
            )
            try:
                await service.append_event(session, event)
                break
            except StaleSessionError:
                retries += 1
        if ack_ttl is not None:
            print(f"ack {name}-{i}", flush=True)
    await journal.aclose()
    if ack_ttl is None:
        print(retries)


if __name__ == "__main__":
    root, session_id, name, count = sys.argv[1:5]
    ttl = float(sys.argv[6]) if sys.argv[5:6] == ["--ack"] else None
    asyncio.run(main(root, session_id, name, int(count), ttl))
