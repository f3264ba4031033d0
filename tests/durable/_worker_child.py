"""Child process of test_processes: one durable worker until its stop file appears.

Usage: python _worker_child.py <journal url> <stop file> <worker id> [s3 endpoint]

Prints ``started <turn id>`` when a turn's tool begins (the parent kills a worker
mid-turn on that line). Uncertain calls at a takeover are reconciled as sent.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys

from journal import Agent, Journal, ModelResponse, ScriptedModel, ToolCall
from journal.durable import Reconcile, Worker


def reply(messages):
    users = [m for m in messages if m.role == "user"]
    last = messages[-1]
    if last.role == "user" and users:
        return ModelResponse(tool_calls=[ToolCall("work", {"text": users[-1].text})])
    return f"echo {users[-1].text}" if users else "echo"


async def main(url: str, stop_file: str, worker_id: str, endpoint: str | None) -> None:
    options = {}
    if endpoint:
        options = {
            "endpoint_url": endpoint,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }
    journal = Journal.open(url, **options)

    async def work(text: str) -> str:
        """A step with a side effect."""
        print(f"started {text}", flush=True)
        await asyncio.sleep(0.01)
        return f"worked {text}"

    model = ScriptedModel([reply] * 100_000)
    agent = Agent("W", "w", model, tools=[work], journal=journal)
    worker = Worker(
        agent,
        worker_id=worker_id,
        lease_ttl=float(os.environ.get("AJ_DURABLE_TTL", "2.0")),
        poll=0.05,
        control_poll=0.5,
        concurrency=3,
        uncertain=lambda u: Reconcile(
            {c.call_id: "worked (reconciled)" for c in u.calls}
        ),
    )
    stop = asyncio.Event()

    async def watch() -> None:
        while not pathlib.Path(stop_file).exists():
            await asyncio.sleep(0.05)
        stop.set()

    watcher = asyncio.create_task(watch())
    await worker.run(stop)
    watcher.cancel()
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(
        main(
            sys.argv[1],
            sys.argv[2],
            sys.argv[3],
            sys.argv[4] if len(sys.argv) > 4 else None,
        )
    )
