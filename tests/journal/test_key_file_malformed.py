"""A malformed key file is the ValueError KeyFile documents, naming the file.

Never an AttributeError or TypeError from deep inside the parsing (which the CLI
would show as a traceback), and never the key material.
"""

from __future__ import annotations

import base64
import json

import pytest

from journal.cli import main
from journal.crypto import KeyFile, generate_key, kek_id

MALFORMED = {
    "keys is a list": {"current": "k-1", "keys": ["AAAA"]},
    "keys is null": {"current": "k-1", "keys": None},
    "a key is a number": {"current": "k-1", "keys": {"k-1": 5}},
    "a key is null": {"current": "k-1", "keys": {"k-1": None}},
    "the document is a list": [{"current": "k-1"}],
    "the document is a string": "k-1",
    "current is a number": {"current": 1, "keys": {}},
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_key_file_is_a_value_error(tmp_path, case):
    path = tmp_path / "kek.json"
    path.write_text(json.dumps(MALFORMED[case]))
    with pytest.raises(ValueError, match=r"kek\.json") as caught:
        KeyFile(path)
    assert type(caught.value) is ValueError  # not a decoding error's subclass


def test_a_malformed_key_names_the_file_never_the_key(tmp_path):
    path = tmp_path / "kek.json"
    key = generate_key()
    good = base64.b64encode(key).decode()
    path.write_text(json.dumps({"current": kek_id(key), "keys": {kek_id(key): [good]}}))
    with pytest.raises(ValueError, match=r"kek\.json") as caught:
        KeyFile(path)
    assert good not in str(caught.value)
    assert kek_id(key) in str(caught.value)


def test_the_cli_reports_a_malformed_key_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "kek.json"
    path.write_text(json.dumps(MALFORMED["keys is a list"]))
    monkeypatch.setenv("AGENT_JOURNAL_KEY_FILE", str(path))
    code = main(["--root", str(tmp_path / "journal"), "ls"])
    err = capsys.readouterr().err
    assert code == 2
    assert "kek.json" in err
    assert "Traceback" not in err
