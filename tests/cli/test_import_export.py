"""``import --from-export``: the whole file is checked before anything is written.

A record the writer would refuse, a record that would leave the thread unloadable,
ids the writer does not take, a batch id the writer would take for a retry, or a
broken hash chain: each is refused with one line naming the version, and the
target root is left untouched (not even a lease). What still fails while writing
is reported with the versions actually written.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import MessageAppended, Msg, codec
from journal import events as ev
from journal.cli.render_json import event_json
from journal.engine.batches import IDEMPOTENCY_WINDOW
from journal.engine.writer import ThreadWriter
from journal.errors import StorageError
from projections.agent_state import AgentState
from tests.cli.test_commands import build_root, read_thread, run

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

PATH = "default/bot/alice/s1/main"
NO_FSYNC = ["--option", "fsync:=false"]

Lines = list[dict]


@pytest.fixture
def root(tmp_path):
    return build_root(tmp_path / "journal")


@pytest.fixture
def lines(root, tmp_path, capsys) -> Lines:
    """The export of the fixture's thread (7 records), one dict a line."""
    exported = tmp_path / "export.jsonl"
    code, _, err = run(capsys, "--root", str(root), "export", PATH, "-o", str(exported))
    assert code == 0, err
    return [json.loads(line) for line in exported.read_text().splitlines()]


def write_lines(path: Path, lines: Lines) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def import_lines(capsys, tmp_path: Path, lines: Lines, name: str = "other"):
    """Import ``lines`` into a fresh root; ``(code, out, err, root)``."""
    source = write_lines(tmp_path / f"{name}.jsonl", lines)
    other = tmp_path / name
    code, out, err = run(
        capsys, "--root", str(other), *NO_FSYNC,
        "import", PATH, "--from-export", str(source),
    )  # fmt: skip
    return code, out, err, other


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def assert_refused_whole(code: int, out: str, err: str, other: Path, *words: str):
    assert code == 1, err
    assert out == ""
    assert err.startswith("agent-journal import: error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, (word, err)
    assert "nothing written" in err
    # Refused before the lease was taken: the root holds nothing at all.
    assert files_under(other) == []


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


def _unknown(type_name: str, *, required: bool, data: bytes) -> dict:
    # What `export` writes for an event of a type its reader did not know.
    return {
        "type": type_name,
        "unknown": True,
        "schema": 1,
        "required": required,
        "data": base64.b64encode(data).decode(),
    }


def _replaced(**extra: object) -> dict:
    state = msgspec.to_builtins(AgentState(session_id="s1", user_id="alice"))
    return {"type": "AgentStateReplaced", "reason": "x", "state": state, **extra}


def _set(field: str, value: object) -> Callable[[Lines], None]:
    def change(lines: Lines) -> None:
        lines[4][field] = value

    return change


def _events(*events: dict) -> Callable[[Lines], None]:
    def change(lines: Lines) -> None:
        lines[4]["events"] = list(events)

    return change


def _bad_role(lines: Lines) -> None:
    lines[4]["events"][0]["message"]["role"] = 5


def _repeat_batch(lines: Lines) -> None:
    lines[4]["batch_id"] = lines[2]["batch_id"]


# Each case spoils version 5 of 7: the old import wrote versions 1 to 4 first.
REFUSED = {
    "tool input nested too deep": (
        _events(
            {
                "type": "ToolCallRequested",
                "call_id": "c9",
                "name": "t",
                "input": {"v": _nested(70)},
            }
        ),
        ["nested deeper than 64", "ToolCallRequested"],
    ),
    "unknown required event": (
        _events(_unknown("AppSecretEvent", required=True, data=b"\x81\xa1x\x01")),
        ["AppSecretEvent", "required"],
    ),
    "unknown event whose bytes are not one value": (
        _events(_unknown("AppNote", required=False, data=b"\xc1")),
        ["AppNote", "MessagePack"],
    ),
    "unknown event whose data is not base64": (
        _events({**_unknown("AppNote", required=False, data=b""), "data": "%%"}),
        ["AppNote", "base64"],
    ),
    "state replacement naming chunks": (
        _events(_replaced(messages=[], chunks=["ab" * 32])),
        ["AgentStateReplaced", "chunks"],
    ),
    "state replacement whose state is no AgentState": (
        _events({**_replaced(), "state": {"context": 5}}),
        ["AgentStateReplaced", "state"],
    ),
    "event of no registered type": (
        _events({"type": "NoSuchEvent"}),
        ["NoSuchEvent", "not registered"],
    ),
    "event whose fields do not decode": (_bad_role, ["MessageAppended", "role"]),
    "record without events": (_events(), ["no events"]),
    "batch_id not a string": (_set("batch_id", 12345), ["batch_id", "int"]),
    "empty batch_id": (_set("batch_id", ""), ["batch_id", "empty"]),
    "batch_id missing": (_set("batch_id", None), ["batch_id"]),
    "run_id not a string": (_set("run_id", ["r1"]), ["run_id", "list"]),
    "run_id too long": (
        _set("run_id", "r" * (codec.MAX_ID_LENGTH + 1)),
        ["run_id", str(codec.MAX_ID_LENGTH)],
    ),
    "batch_id repeated": (_repeat_batch, ["batch_id", "version 3"]),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_record_anywhere_writes_nothing(lines, tmp_path, capsys, case):
    spoil, words = REFUSED[case]
    spoil(lines)
    code, out, err, other = import_lines(capsys, tmp_path, lines)
    assert_refused_whole(code, out, err, other, "version 5", *words)
    # The same import, after the file is mended, is not blocked by a leftover.
    code, out, err, _ = import_lines(capsys, tmp_path, lines[:4])
    assert code == 0, err
    assert "head 4" in out


def _drop_version_4(lines: Lines) -> None:
    del lines[3]
    for version, line in enumerate(lines, 1):
        line["version"] = version


def _first_not_genesis(lines: Lines) -> None:
    lines[0]["prev_hash"] = "ab" * 32


def _swap_hashes(lines: Lines) -> None:
    lines[5]["prev_hash"] = lines[3]["hash"]


def _hash_missing(lines: Lines) -> None:
    del lines[6]["hash"]


def _hash_not_hex(lines: Lines) -> None:
    lines[2]["hash"] = "z" * 64
    lines[3]["prev_hash"] = "z" * 64


BROKEN_CHAINS = {
    "a record taken out": (_drop_version_4, ["version 4", "prev_hash"]),
    "version 1 not at the start": (_first_not_genesis, ["version 1", "prev_hash"]),
    "a record linked to the wrong one": (_swap_hashes, ["version 6", "prev_hash"]),
    "a hash missing": (_hash_missing, ["version 7", "hash"]),
    "a hash that is not hex": (_hash_not_hex, ["version 3", "hash"]),
}


@pytest.mark.parametrize("case", BROKEN_CHAINS)
def test_a_broken_hash_chain_is_refused(lines, tmp_path, capsys, case):
    spoil, words = BROKEN_CHAINS[case]
    spoil(lines)
    code, out, err, other = import_lines(capsys, tmp_path, lines)
    assert_refused_whole(code, out, err, other, *words)


@pytest.mark.parametrize("version", [3.0, "3", None])
def test_a_version_that_is_not_the_line_number_is_refused(
    lines, tmp_path, capsys, version
):
    lines[2]["version"] = version
    code, out, err, other = import_lines(capsys, tmp_path, lines)
    assert code == 1
    assert out == ""
    assert "line 3: holds version" in err
    assert files_under(other) == []


def test_an_unknown_optional_event_is_imported_as_written(lines, tmp_path, capsys):
    data = msgspec.msgpack.encode({"note": "kept"})
    lines[5]["events"].append(_unknown("AppNote", required=False, data=data))
    code, out, err, other = import_lines(capsys, tmp_path, lines)
    assert code == 0, err
    assert "imported 7 records" in out
    records, _ = read_thread(other)
    assert records[5].events[-1] == ev.UnknownEvent("AppNote", 1, False, data)


def _long_export(lines: Lines, repeat_at: int) -> Lines:
    """An export of ``repeat_at`` records, the last reusing version 2's batch id.

    Its hashes are made up but linked, which is all import can check of them.
    """
    first = dict(lines[0], hash=f"{1:064x}")
    out = [first]
    for version in range(2, repeat_at + 1):
        message = MessageAppended(Msg("user", f"m{version}"))
        out.append(
            {
                "version": version,
                "epoch": 1,
                "writer": "w",
                "batch_id": "again" if version in (2, repeat_at) else f"b{version}",
                "run_id": None,
                "committed_at": 0.0,
                "prev_hash": f"{version - 1:064x}",
                "hash": f"{version:064x}",
                "events": [event_json(message)],
            }
        )
    return out


def test_a_batch_id_repeated_is_refused_only_where_the_writer_would_drop_it(
    lines, tmp_path, capsys
):
    # Version 2's batch id is a retry's for the writer while fewer than
    # IDEMPOTENCY_WINDOW records were committed after it.
    last_retry = 2 + IDEMPOTENCY_WINDOW
    code, out, err, other = import_lines(
        capsys, tmp_path, _long_export(lines, last_retry), "within"
    )
    assert_refused_whole(code, out, err, other, f"version {last_retry}", "version 2")

    beyond = _long_export(lines, last_retry + 1)
    code, out, err, other = import_lines(capsys, tmp_path, beyond, "beyond")
    assert code == 0, err
    assert f"imported {last_retry + 1} records" in out
    assert f"head {last_retry + 1}" in out
    records, state = read_thread(other)
    assert len(records) == last_retry + 1
    assert records[-1].batch_id == records[1].batch_id == "again"
    assert state.context[-1].content == f"m{last_retry + 1}"


def test_a_failure_while_writing_names_the_versions_written(
    lines, tmp_path, capsys, monkeypatch
):
    real = ThreadWriter.append

    async def failing(self, events, **kwargs):
        if self.version == 4:
            raise StorageError("the disk is on fire")
        return await real(self, events, **kwargs)

    monkeypatch.setattr(ThreadWriter, "append", failing)
    code, out, err, other = import_lines(capsys, tmp_path, lines)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1, err
    assert "the disk is on fire" in err
    assert "version 5" in err
    assert "versions 1 to 4" in err
    assert "nothing" not in err
    records, _ = read_thread(other)
    assert [r.version for r in records] == [1, 2, 3, 4]


def test_a_record_that_lands_elsewhere_stops_the_import(
    lines, tmp_path, capsys, monkeypatch
):
    real = ThreadWriter.append

    async def dropping(self, events, **kwargs):
        if self.version == 4:
            # What the writer returns for a batch it takes for a retry: the
            # record already committed, without writing.
            return codec.Record(4, self.epoch, "", "", None, 0.0, "", "", [])
        return await real(self, events, **kwargs)

    monkeypatch.setattr(ThreadWriter, "append", dropping)
    code, out, err, other = import_lines(capsys, tmp_path, lines)
    assert code == 1
    assert out == ""
    assert "version 5" in err
    assert "versions 1 to 4" in err
    assert len(read_thread(other)[0]) == 4
