"""A cold command imports only what it uses: no rendering library off a terminal,
no other command's dependencies, nothing optional.

Each check runs a fresh interpreter (as an operator's shell does) and reads its
``sys.modules`` after the command; a module count would drift with Python
versions, so the checks name the modules that must stay out.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from journal.cli import build_parser
from tests.cli.test_commands import THREAD, build_root

REPO = Path(__file__).resolve().parents[2]

HEAVY = (
    "rich",  # only a terminal's tables need it
    "aiohttp",  # the ui extra
    "cryptography",  # only an encrypted journal needs it
    "fsspec",  # remote roots only
    "s3fs",
    "redis",
    "sqlalchemy",
    "journal.runtime",  # the agent run loop
    "journal.durable",  # only `turns` reads durable turns
    "journal.adapters",
    "journal.web.server",  # only `ui` serves
    "journal.cli.demo",  # only `demo`
    "stores.state",  # only `import --from` opens a state store
    "pydantic",  # a ThreadKey is a plain class; pydantic checks runtime inputs
    "pydantic_core",
    "importlib.metadata",  # only a store scheme from a plugin needs entry points
)
"""Packages (with their submodules) no reading command may load."""


def _loaded_by(statement: str, tmp_path: Path) -> set[str]:
    dump = tmp_path / "modules.json"
    code = (
        "import json, sys\n"
        f"{statement}\n"
        f"open({str(dump)!r}, 'w').write(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTHONSTARTUP", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,  # stdout is not a terminal, as in a pipe
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(dump.read_text())
    return set(loaded)


def _loaded_by_command(argv: list[str], root: Path, tmp_path: Path) -> set[str]:
    """The modules loaded by running the CLI with ``argv`` on ``root`` (it must
    succeed), its output captured (not a terminal)."""
    full = ["--root", str(root), *argv]
    return _loaded_by(
        "import contextlib, io\n"
        "from journal.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main({full!r}) == 0\n",
        tmp_path,
    )


def _heavy_in(loaded: set[str]) -> list[str]:
    return sorted(
        m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)
    )


def test_import_journal_loads_no_other_project_module_and_nothing_heavy(tmp_path):
    loaded = _loaded_by("import journal", tmp_path)
    project = {m for m in loaded if m.split(".")[0] in ("journal", "stores")}
    assert project == {"journal", "journal.lazy"}  # the root and its lazy exports
    assert "projections" not in loaded
    assert _heavy_in(loaded) == []
    for dependency in ("pydantic", "msgspec", "asyncio"):
        assert dependency not in loaded


def test_opening_a_local_journal_and_building_a_key_loads_nothing_heavy(tmp_path):
    loaded = _loaded_by(
        "from journal import Journal, ThreadKey\n"
        f"Journal.open({str(tmp_path / 'j')!r})\n"
        "ThreadKey('a', 's', 'u')\n",
        tmp_path,
    )
    assert "journal.engine.facade" in loaded
    assert _heavy_in(loaded) == []


@pytest.fixture(scope="module")
def journal_root(tmp_path_factory):
    return build_root(tmp_path_factory.mktemp("cold") / "journal")


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["state", *THREAD],
        ["log", *THREAD, "--tail", "3"],
        ["runs", *THREAD],
        ["history", *THREAD],
        ["diff", *THREAD],
        ["verify"],
        ["--json", "state", *THREAD],
        ["--json", "ls"],
    ],
    ids=[
        "ls",
        "state",
        "log-tail",
        "runs",
        "history",
        "diff",
        "verify",
        "state-json",
        "ls-json",
    ],
)
def test_a_reading_command_off_a_terminal_loads_nothing_heavy(
    argv, journal_root, tmp_path
):
    loaded = _loaded_by_command(argv, journal_root, tmp_path)
    assert "journal.engine" in loaded  # the command did run
    assert _heavy_in(loaded) == []


def test_a_command_loads_its_own_module_and_not_its_siblings(journal_root, tmp_path):
    loaded = _loaded_by(
        "import contextlib, io\n"
        "from journal.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['--root', {str(journal_root)!r}, 'ls']) == 0\n",
        tmp_path,
    )
    assert "journal.cli.commands.ls" in loaded
    for sibling in ("log", "runs", "verify", "recover", "reconcile", "export", "diff"):
        assert f"journal.cli.commands.{sibling}" not in loaded
    assert "journal.cli.render_json" not in loaded  # no --json


def test_building_the_parser_reads_no_package_metadata(monkeypatch, capsys):
    # Looking the version up scans sys.path for distributions: only --version
    # may pay for it, not the parser every command builds.
    def no_metadata(name: str) -> str:
        raise AssertionError(f"read the metadata of {name}")

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    assert build_parser().parse_args(["ls"]).command == "ls"
    with pytest.raises(AssertionError, match="agent-journal"):
        build_parser().parse_args(["--version"])
    monkeypatch.undo()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.startswith("agent-journal ")


def test_the_lazy_cli_packages_still_export_every_name():
    import journal.cli
    import journal.cli.commands

    for package in (journal.cli, journal.cli.commands):
        assert sorted(package.__all__) == sorted(set(package.__all__))
        for name in package.__all__:
            assert getattr(package, name) is not None, name
        assert set(package.__all__) <= set(dir(package))
        with pytest.raises(AttributeError):
            _ = package.no_such_name
    # Two functions share their module's name: the package gives the function.
    from journal.cli.commands import import_export, import_slot

    assert callable(import_export)
    assert callable(import_slot)


@pytest.mark.parametrize("argv", [["state", *THREAD], ["--json", "state", *THREAD]])
def test_showing_a_state_loads_no_web_ui_code(argv, journal_root, tmp_path):
    """The parser names the ``ui`` command's default address; the web UI's address
    and token checks stay out of every other command."""
    loaded = _loaded_by_command(argv, journal_root, tmp_path)
    assert "journal.engine.replay" in loaded  # the state was loaded
    assert not {m for m in loaded if m.startswith("journal.web.")} - {
        "journal.web.defaults"
    }


def test_loading_a_thread_loads_no_verifier(journal_root, tmp_path):
    """A library user who opens a journal and loads a thread does not pay for the
    verifier (``Journal.verify`` imports it on first use), the sealing or the
    audit projections."""
    loaded = _loaded_by(
        "import asyncio\n"
        "from journal import Journal, ThreadKey\n"
        f"journal = Journal.open({str(journal_root)!r})\n"
        "async def main():\n"
        "    async for key in journal.threads():\n"
        "        await journal.load(key)\n"
        "asyncio.run(main())\n",
        tmp_path,
    )
    assert "journal.engine.replay" in loaded
    assert "journal.engine.verify" not in loaded
    # Nor for seals, without a signing key; nor for the audit views.
    assert "journal.engine.sealing" not in loaded
    assert "projections.audit" not in loaded


@pytest.mark.parametrize("argv", [["state", *THREAD], ["--json", "state", *THREAD]])
def test_showing_a_state_loads_no_close_match_search(argv, journal_root, tmp_path):
    """A command line that parsed needs no suggestions (difflib); one printing
    JSON needs no text renderer for its notes."""
    loaded = _loaded_by_command(argv, journal_root, tmp_path)
    assert "journal.engine.replay" in loaded  # the state was loaded
    assert "difflib" not in loaded
    if "--json" in argv:
        assert "journal.cli.render_text" not in loaded


def test_the_process_entry_exits_with_the_status_and_output_of_main(journal_root):
    """``python -m journal`` (and the console script) run ``journal.cli.run``:
    ``main`` with the collector frozen around it. The output and exit status are
    main's: 0 with the state, 2 for a command that does not exist, 1 for a
    thread that does not exist."""
    import contextlib
    import io

    from journal.cli import main

    argv = ["--root", str(journal_root), "--json", "state", *THREAD]
    expected = io.StringIO()
    with contextlib.redirect_stdout(expected):
        assert main(argv) == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cases = [
        (argv, 0),
        (["--root", str(journal_root), "no-such-command"], 2),
        (["--root", str(journal_root), "state", "--agent", "x", "--session", "y"], 1),
    ]
    for args, status in cases:
        done = subprocess.run(
            [sys.executable, "-m", "journal", *args],
            capture_output=True,
            env=env,
            cwd=REPO,
            check=False,
            timeout=120,
        )
        assert done.returncode == status, (args, done.stderr)
        if status == 0:
            assert json.loads(done.stdout) == json.loads(expected.getvalue())


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["state", *THREAD],
        ["--json", "state", *THREAD],
        ["log", *THREAD, "--tail", "3"],
        ["runs", *THREAD],
        ["history", *THREAD],
        ["diff", *THREAD],
        ["verify"],
    ],
    ids=["ls", "state", "state-json", "log-tail", "runs", "history", "diff", "verify"],
)
def test_a_reading_command_on_a_local_root_runs_without_asyncio_or_logging(
    argv, journal_root, tmp_path
):
    """Reading commands drive their coroutines without an event loop
    (``journal.loopless``): asyncio, and the logging a writer may need, stay out."""
    loaded = _loaded_by_command(argv, journal_root, tmp_path)
    assert "journal.engine" in loaded  # the command did run
    assert "asyncio" not in loaded
    assert "logging" not in loaded


@pytest.mark.parametrize(
    "argv",
    [["state", *THREAD], ["--json", "state", *THREAD], ["log", *THREAD, "--tail", "3"]],
    ids=["state", "state-json", "log-tail"],
)
def test_a_reading_command_by_flags_loads_no_path_or_url_modules(
    argv, journal_root, tmp_path
):
    """pathlib, urllib.parse and shutil (with bz2 and lzma) cost a cold command
    several milliseconds and it needs none of them; nor the verifier, which the
    report types name only in annotations."""
    loaded = _loaded_by_command(argv, journal_root, tmp_path)
    assert "journal.engine" in loaded  # the command did run
    for module in ("pathlib", "urllib.parse", "shutil", "lzma"):
        assert module not in loaded
    assert "journal.engine.verify" not in loaded


@pytest.mark.parametrize("columns", [None, "50", "133", "0", "-3", "wide"])
def test_the_help_formatter_is_as_wide_as_argparses(columns, monkeypatch):
    import argparse

    from journal.cli.parser import _Formatter

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _Formatter("p")._width == argparse.HelpFormatter("p")._width


def test_a_cold_load_builds_no_dataclass(journal_root, tmp_path):
    """A dataclass is compiled from generated source when its class is created
    (about 0.5 ms each here; the 18 on this path took 10-20 ms of a cold
    ``state --json``); the structs a load uses are msgspec's, created in
    microseconds."""
    dump = tmp_path / "made.json"
    loaded = _loaded_by(
        "import contextlib, dataclasses, io\n"
        "made = []\n"
        "real = dataclasses.dataclass\n"
        "def counting(cls=None, /, **kw):\n"
        "    def wrap(c):\n"
        "        made.append(f'{c.__module__}.{c.__qualname__}')\n"
        "        return real(**kw)(c)\n"
        "    return wrap if cls is None else wrap(cls)\n"
        "dataclasses.dataclass = counting\n"
        "from journal.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['--root', {str(journal_root)!r}, '--json', 'state', "
        f"*{THREAD!r}]) == 0\n"
        f"open({str(dump)!r}, 'w').write(json.dumps(made))\n",
        tmp_path,
    )
    assert "journal.engine.replay" in loaded  # the load did run
    assert json.loads(dump.read_text()) == []
