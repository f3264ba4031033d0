"""README.md's examples run as printed: every ```python block, and the demo's commands.

Each Python block runs in a fresh interpreter, in a temporary directory, with the
journal paths it names (``/var/lib/agent-journal``) moved under that directory and
the state stores' home there too, so nothing outside it is written. The shell part
runs the demo into a temporary root and then every "Inspect it:" command it prints,
as printed (``agent-journal`` being this checkout's ``python -m journal``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path / "home"),
        "AGENT_JOURNAL_HOME": str(tmp_path / "journal"),
        "AGENT_JOURNAL_STATE_HOME": str(tmp_path / "state"),
    }


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_python_block_runs_as_printed(index, tmp_path):
    code = BLOCKS[index].replace("/var/lib/agent-journal", str(tmp_path / "var"))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"block {index}:\n{BLOCKS[index]}\n{done.stderr}"


def _agent_journal(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journal", *argv],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_demo_and_its_inspect_commands_run_as_printed(tmp_path):
    # The install line activates the venv, so `agent-journal` is on the PATH of
    # the shell the demo's commands are pasted into.
    (install,) = re.findall(r"```sh\n(python3 -m venv.*?)\n```", README)
    assert ". .venv/bin/activate" in install
    assert install.endswith("agent-journal demo")
    done = _agent_journal(["demo"], tmp_path)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.split("Inspect it:", 1)[1].strip().splitlines()
    assert len(printed) >= 5
    for line in printed:
        argv = shlex.split(line)
        assert argv[0] == "agent-journal"
        result = _agent_journal(argv[1:], tmp_path)
        assert result.returncode == 0, (line, result.stderr)
        assert result.stdout
