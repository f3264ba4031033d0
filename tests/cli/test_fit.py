"""Long tables on a terminal are laid out without rich, as rich lays them out."""

from __future__ import annotations

import random

import pytest

from journal.cli import fit, render_rich
from journal.cli.blocks import Grid, Styled

_WORDS = ["a", "to", "the", "agent", "journal", "checkpoint", "x" * 14, "ok,", "(1)"]


def _grid(rows: int, seed: int, *, flex: int | None = None, indent: int = 0) -> Grid:
    rng = random.Random(seed)  # noqa: S311 (test data)

    def text() -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 30)))

    def row(i: int) -> list[str | Styled]:
        number = str(rng.randint(1, 10 ** rng.randint(1, 5)))
        role = rng.choice(["user", "tool"])
        return [number, role, Styled.of(text(), "bold") if i % 3 else text(), f"v{i}"]

    return Grid(
        headers=("N", "ROLE", "TEXT", "AT"),
        rows=[row(i) for i in range(rows)],
        right=(0,),
        indent=indent,
        flex=flex,
    )


@pytest.mark.parametrize("width", [40, 61, 80, 132, 400])
@pytest.mark.parametrize(("flex", "indent"), [(None, 0), (2, 0), (2, 4)])
def test_a_long_grid_is_laid_out_as_rich_lays_it_out(width, flex, indent, monkeypatch):
    grid = _grid(fit.LONG_GRID + 20, seed=width, flex=flex, indent=indent)
    ours = render_rich.emit_rich([grid], width, color=False)
    monkeypatch.setattr(render_rich, "LONG_GRID", 10**9)  # rich lays it out
    assert ours == render_rich.emit_rich([grid], width, color=False)


def test_control_characters_and_wide_text_fit_and_stay_inert():
    grid = Grid(
        headers=("N", "TEXT"),
        rows=[["0", f"\x1b[31mred\x1b[0m 漢字漢字漢字 {'é' * 30}"]] * 300,
    )
    lines = fit.fit_grid(grid, 24)
    assert lines is not None
    assert all("\x1b" not in line for line in lines)
    assert max(fit.cell_len(line) for line in lines) <= 24
    assert lines[1] == "0  ?[31mred?[0m"
    assert "".join(line[3:] for line in lines[1:5]).replace(" ", "") == (
        "?[31mred?[0m漢字漢字漢字" + "é" * 30
    )


def test_a_terminal_too_narrow_for_the_fixed_columns_is_left_to_rich():
    grid = Grid(headers=("ID", "TEXT"), rows=[["x" * 60, "hello"]] * 300)
    assert fit.fit_grid(grid, 40) is None
    assert render_rich.emit_rich([grid], 40, color=False)  # rich shrinks it


def test_a_long_grid_does_not_go_through_rich_tables(monkeypatch):
    # rich lays a table out at about half a millisecond a row: the state of a
    # 5,000-turn thread took over ten seconds on a terminal.
    def no_table(*args: object, **kwargs: object) -> None:
        raise AssertionError("a long grid was laid out by rich")

    monkeypatch.setattr(render_rich, "_table", no_table)
    text = render_rich.emit_rich([_grid(5_000, seed=1, flex=2)], 100, color=True)
    assert text.count("\n") >= 5_001
