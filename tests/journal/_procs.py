"""Running ``_child.py`` processes and checking what they acknowledged."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from journal import Journal, MessageAppended, ThreadKey

CHILD = Path(__file__).with_name("_child.py")
TIMEOUT = 120.0


def key_json(key: ThreadKey) -> str:
    return json.dumps(
        {
            "agent_id": key.agent_id,
            "session_id": key.session_id,
            "user_id": key.user_id,
            "thread_id": key.thread_id,
            "namespace": key.namespace,
        }
    )


class Child:
    """One child process; its complete stdout lines are collected as they come."""

    def __init__(self, mode: str, root: Path, key: ThreadKey, *args: object) -> None:
        self._start(
            mode,
            [str(CHILD), mode, str(root), key_json(key), *map(str, args)],
            root.parent,
        )

    def _start(
        self, mode: str, argv: list[str], errors: Path, cwd: Path | None = None
    ) -> None:
        """Run ``python ARGV`` in ``cwd``; its stderr goes to a file in ``errors``."""
        self.mode = mode
        self._stderr = (errors / f"child-{os.urandom(6).hex()}.err").open("w+")
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._eof = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        with stdout:  # closed at its end, by the only thread that reads it
            for line in stdout:
                # A line cut short by a kill was never a complete acknowledgement.
                if line.endswith("\n"):
                    self._queue.put(line[:-1])
        self._queue.put(None)

    def _next(self, timeout: float) -> str | None:
        if self._eof:
            return None
        item = self._queue.get(timeout=timeout)
        if item is None:
            self._eof = True
        else:
            self.lines.append(item)
        return item

    def wait_for(self, prefix: str, count: int = 1, timeout: float = TIMEOUT) -> None:
        """Block until ``count`` lines starting with ``prefix`` were printed."""
        while sum(line.startswith(prefix) for line in self.lines) < count:
            if self._next(timeout) is None:
                raise AssertionError(
                    f"{self.mode} child ended before printing {prefix!r} x{count}: "
                    f"{self.lines[-5:]}, stderr: {self.stderr()}"
                )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = TIMEOUT) -> int:
        """Wait for the exit; collect every remaining line; return the exit code."""
        rc = self.proc.wait(timeout=timeout)
        while self._next(timeout) is not None:
            pass
        return rc

    def stderr(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-3000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()

    def acks(self) -> dict[str, int]:
        """batch id -> version of every ``ACK version batch ...`` line."""
        out: dict[str, int] = {}
        for line in self.lines:
            if line.startswith("ACK "):
                _, version, batch, *_ = line.split()
                out[batch] = int(version)
        return out


def message_text(events: list[object]) -> str | None:
    for event in events:
        if isinstance(event, MessageAppended):
            return event.message.text
    return None


async def check_acknowledged(
    j: Journal, key: ThreadKey, acked: dict[str, int], text: dict[str, str]
) -> list:
    """Every acknowledged batch is in the log once, at its version, with its text.

    Returns:
        All records (each parsed and checked by ``records``).
    """
    records = [r async for r in j.records(key)]
    assert [r.version for r in records] == list(range(1, len(records) + 1))
    batches = [r.batch_id for r in records]
    assert len(set(batches)) == len(batches), "a batch was committed twice"
    for batch, version in acked.items():
        record = records[version - 1]
        assert record.batch_id == batch, (batch, version, record.batch_id)
        assert message_text(record.events) == text[batch]
    return records
