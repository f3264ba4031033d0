"""``parse_command_line`` parses exactly as the whole parser does, building less.

It builds the subparser of the command a line names and no other; every line must
come out as the whole parser's ``parse_args`` has it, and every bad line must
fail with the whole parser's message and status.
"""

from __future__ import annotations

import argparse

import pytest

from journal.cli.parser import COMMANDS, build_parser, parse_command_line

THREAD = ["--agent", "a", "--session", "s", "--user", "u"]

GOOD = [
    ["state", *THREAD],
    ["state", "--json", *THREAD, "--at", "3"],
    ["--root", "/srv/j", "state", "ns/a/u/s/t"],
    ["--json", "--root", "/srv/j", "log", *THREAD, "--tail", "2", "--type", "X"],
    ["log", "--follow", "--poll", "0.1", "ns/a/u/s/t", "--root", "/x"],
    ["ls"],
    ["ls", "--attention", "--agent", "state"],  # a value that is a command's name
    ["--root", "log", "state", *THREAD],  # a root named like a command
    ["log", *THREAD, "--session", "state"],
    ["verify"],
    ["verify", "--trust", "ed25519:abc", "--anchor", "f"],
    ["diff", *THREAD, "--from", "1", "--to", "2"],
    ["runs", *THREAD, "--run", "r1"],
    ["history", *THREAD],
    ["export", *THREAD, "-o", "out.jsonl"],
    ["checkpoint", *THREAD, "--wait", "1.5", "--holder", "h"],
    ["recover", *THREAD],
    ["reconcile", *THREAD, "--call", "c=sent", "--error", "d=boom"],
    ["import", *THREAD, "--from", "file:///x"],
    ["seal", *THREAD, "--new"],
    ["demo", "--incident"],
    ["index"],
    ["ui", "--port", "0", "--poll", "2"],
    ["turns", "--status", "running", "--agent", "a"],
    ["--option", "fsync:=false", "state", *THREAD, "--option", "a=b"],
    [],
]

BAD = [
    ["state", *THREAD, "--at", "-1"],
    ["state", *THREAD, "--nope"],
    ["log", *THREAD, "--tail", "x"],
    ["stat", *THREAD],
    ["ui", "--port", "many"],
    ["turns", "--pause", "t1", "--resume", "t2"],
    ["turns", "--status", "nope"],
    ["reconcile", *THREAD, "--call", "no-equals"],
    ["--root"],
    ["state", "a", "b"],
]


def test_the_command_names_are_the_parsers():
    sub = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    assert sorted(sub.choices) == sorted(COMMANDS)


def test_a_partial_parser_holds_one_command():
    sub = next(
        a
        for a in build_parser("state")._actions
        if isinstance(a, argparse._SubParsersAction)
    )
    assert list(sub.choices) == ["state"]


@pytest.mark.parametrize("argv", GOOD, ids=[" ".join(a) or "nothing" for a in GOOD])
def test_a_good_line_parses_as_the_whole_parser_has_it(argv):
    assert vars(parse_command_line(argv)) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_a_bad_line_fails_as_the_whole_parser_fails(argv, capsys):
    with pytest.raises(SystemExit) as whole:
        build_parser().parse_args(argv)
    expected = capsys.readouterr()
    with pytest.raises(SystemExit) as partial:
        parse_command_line(argv)
    got = capsys.readouterr()
    assert partial.value.code == whole.value.code == 2
    assert (got.out, got.err) == (expected.out, expected.err)
    assert got.err.count("error:") == 1


@pytest.mark.parametrize(
    "argv", [["--help"], ["--he", "state"], ["state", "-h"], ["--vers", "state"]]
)
def test_help_and_version_are_the_whole_parsers(argv, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    expected = capsys.readouterr()
    with pytest.raises(SystemExit):
        parse_command_line(argv)
    assert capsys.readouterr() == expected
