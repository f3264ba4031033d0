"""Plain output (not a terminal) is laid out without rich, and is what rich prints.

Rich lays out a terminal's tables; everything else gets the same text from a
plain layout that does not import it. These checks keep the two identical.
"""

from __future__ import annotations

import asyncio
import random
import tracemalloc

import pytest

from journal import Journal, Msg, ThreadKey
from journal.cli.blocks import Grid, Styled
from journal.cli.commands import (
    list_threads,
    show_diff,
    show_history,
    show_log,
    show_runs,
    show_state,
    verify_threads,
)
from journal.cli.describe import shorten
from journal.cli.options import (
    DiffOptions,
    HistoryOptions,
    LogOptions,
    LsOptions,
    RunsOptions,
    StateOptions,
    VerifyOptions,
)
from journal.cli.render_rich import emit_rich
from journal.cli.render_text import (
    emit,
    emit_plain,
    needs_rich,
    render_text,
    report_blocks,
)
from journal.events import MessageAppended
from tests.cli.test_commands import KEY, build_root

GRIDS = {
    "aligned": [
        Grid(("A", "BB", "C"), [["1", "x", "long text"], ["22", "", "y"]], right=(0,))
    ],
    "no header, indented": [
        Grid(("A", "", ""), [["a", "->", "b"]], show_header=False, indent=2)
    ],
    "no rows": [Grid(("A", "B"), [])],
    "nothing at all": [Grid(("A", "B"), [], show_header=False)],
    "wide and zero-width": [
        Grid(
            ("N", "T"),
            [
                ["日本語", "x"],
                ["é", "y"],
                ["e\u0301", "z"],
                ["👍🏽", "w"],
                ["\U0001f468\u200d\U0001f469\u200d\U0001f467", "v"],
                ["\u200b", "u"],
                ["\uff57\uff49\uff44\uff45", "t"],  # fullwidth "wide"
                ["a\ufe0f", "s"],
            ],
            right=(0,),
        )
    ],
    "lines and styles": [
        "line one",
        Styled.assemble(Styled.of("ok  ", "green"), "  rest "),
        "",
        "two\nlines  ",
        Grid(("X",), [[Styled.of("s", "red")]]),
    ],
    "trailing spaces": ["trailing   ", Grid(("A", "B"), [["x   ", "   "]])],
    "empty cells": [Grid(("A", "B", "C"), [["", "", ""]])],
}


@pytest.mark.parametrize("blocks", GRIDS.values(), ids=GRIDS.keys())
def test_plain_layout_is_what_rich_prints(blocks):
    assert not needs_rich(blocks)
    assert emit_plain(blocks) == emit_rich(blocks, None, False)
    assert emit(blocks) == emit_plain(blocks)


@pytest.mark.parametrize(
    "blocks",
    [
        [Grid(("A", "B"), [["tab\there", "x"]])],
        [Grid(("A",), [["two\nlines"]])],
        ["bell \x07 and carriage \r return"],
        [Grid(("A",), [["escape \x1b[31m"]])],
        [Grid(("A",), [["line\u2028separator"]])],
        [Grid(("A", "B"), [["plain", Styled.of("styled\ttab", "red")]])],
    ],
)
def test_text_rich_treats_specially_goes_to_rich(blocks):
    assert needs_rich(blocks)
    assert emit(blocks) == emit_rich(blocks, None, False)


class _Marked(Styled, frozen=True):
    """A subclass of Styled: still styled text, not a plain string."""


def test_a_styled_subclass_in_a_cell_is_laid_out_as_its_text():
    blocks = [Grid(("A", "B"), [["x", _Marked.of("ok", "green")], ["yy", "z"]])]
    assert emit_plain(blocks) == "A   B\nx   ok\nyy  z\n"
    assert emit_plain(blocks) == emit_rich(blocks, None, False)


def test_a_grid_row_with_a_cell_missing_is_refused():
    with pytest.raises(ValueError, match="does not have 2 cells"):
        emit_plain([Grid(("A", "B"), [["1", "2"], ["3"]])])


def test_an_indented_table_at_the_natural_width_is_not_padded_out():
    # The natural width is a million columns: padding each line out to it
    # before stripping took gigabytes for a long thread's state.
    grid = Grid(("#", "TEXT"), [[str(i), "x"] for i in range(50)], indent=2)
    tracemalloc.start()
    try:
        text = emit_rich([grid], None, False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.splitlines()[:2] == ["  #   TEXT", "  0   x"]
    assert peak < 5_000_000


async def _reports(root):
    journal = Journal.open(root, fsync=False)
    other = ThreadKey("bot", "s9", "bob")
    async with journal.writer(other, holder="test") as w:
        for text in ("日本語のメッセージ", "emoji 👍🏽 and é", "tab\tand\nnewline"):
            await w.append([MessageAppended(Msg(role="user", content=text))])
    r = str(root)
    try:
        return [
            await list_threads(journal, LsOptions(root=r)),
            await show_state(journal, StateOptions(root=r, key=KEY)),
            await show_state(journal, StateOptions(root=r, key=other)),
            await show_log(journal, LogOptions(root=r, key=KEY)),
            await show_log(journal, LogOptions(root=r, key=other)),
            await show_runs(journal, RunsOptions(root=r, key=KEY)),
            await show_history(journal, HistoryOptions(root=r, key=KEY)),
            await show_diff(journal, DiffOptions(root=r, key=KEY)),
            await verify_threads(journal, VerifyOptions(root=r)),
        ]
    finally:
        await journal.aclose()


def test_every_report_prints_as_rich_would_print_it(tmp_path):
    reports = asyncio.run(_reports(build_root(tmp_path / "journal")))
    for report in reports:
        blocks = report_blocks(report)
        assert blocks, report
        assert render_text(report) == emit_rich(blocks, None, False), report


def test_shorten_cuts_long_text_as_if_it_had_collapsed_all_of_it():
    # shorten looks at a prefix first; the result must not depend on that.
    rng = random.Random(7)  # noqa: S311 - test inputs, not secrets
    pieces = ["word", "x", " ", "  ", "\n", "\t", "\u00e9t\u00e9", "a" * 300, " " * 500]
    # Whitespace other than the space, and characters that are not printable
    # but are no whitespace either.
    pieces += ["\xa0", "\u2028", "\x1c", "\x85", "\u3000", "\x07", "\u200b"]
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 120)))
        width = rng.choice([0, 1, 2, 3, 4, 10, 40, 50, 60, 90, 200])
        flat = " ".join(text.split())
        expected = flat if len(flat) <= width else flat[: width - 3] + "..."
        assert shorten(text, width) == expected, (text, width)


@pytest.mark.parametrize(
    ("text", "width", "expected"),
    [
        ("a" * 9 + " ", 9, "a" * 9),  # one character over, a space: it fits
        ("a" * 10, 9, "a" * 6 + "..."),
        ("a" * 9 + " b", 9, "a" * 6 + "..."),
        ("a" * 7 + " b", 9, "a" * 7 + " b"),  # exactly the width
        ("a b\u00a0c", 9, "a b c"),  # a non-breaking space collapses too
    ],
)
def test_shorten_at_the_edge_of_the_width(text, width, expected):
    flat = " ".join(text.split())
    assert expected == (flat if len(flat) <= width else flat[: width - 3] + "...")
    assert shorten(text, width) == expected
