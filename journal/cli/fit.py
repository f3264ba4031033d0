"""Long tables fitted to a terminal's width without rich.

rich lays a table out cell by cell (measuring, wrapping, styling each): about half
a millisecond a row, so the state of a 5,000-turn thread (20,000 messages) took
over ten seconds to print on a terminal. A grid of more than :data:`LONG_GRID`
rows is laid out here instead, as rich lays out the tables this CLI prints (no
box, columns two spaces apart, every column its natural width but the flex one,
which takes what is left and wraps at spaces, folding words longer than a line),
uncoloured.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.cells import cell_len, get_character_cell_size

from journal.cli.blocks import Styled
from journal.cli.controls import CONTROL

if TYPE_CHECKING:
    from collections.abc import Sequence

    from journal.cli.blocks import Cell, Grid

__all__ = ["CONTROL", "LONG_GRID", "fit_grid"]

LONG_GRID = 200
"""Grids with more rows than this are laid out by :func:`fit_grid` on a terminal."""

_MIN_FLEX = 10
"""Narrower than this, the flex column is not worth folding into: rich decides."""

_WORDS = re.compile(r"\S+\s*")


def _clean(cell: Cell) -> str:
    # Agent content is untrusted: no escape sequence reaches a terminal.
    text = cell.plain if isinstance(cell, Styled) else cell
    return CONTROL.sub("?", text.expandtabs(8))


def _fold(word: str, width: int) -> list[str]:
    """``word`` cut into pieces of at most ``width`` cells."""
    if word.isascii():
        return [word[i : i + width] for i in range(0, len(word), width)]
    pieces: list[str] = []
    start, used = 0, 0
    for i, ch in enumerate(word):
        size = get_character_cell_size(ch)
        if used + size > width and i > start:
            pieces.append(word[start:i])
            start, used = i, 0
        used += size
    pieces.append(word[start:])
    return pieces


def _width(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken at spaces."""
    if "\n" not in text and _width(text) <= width:
        return [text.rstrip()]  # most cells: nothing to wrap
    measure = len if text.isascii() else _width
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line, used = "", 0
        for match in _WORDS.finditer(paragraph):
            chunk = match.group()
            word = chunk.rstrip()
            size = measure(word)
            if used + size <= width:
                line += chunk
                used += measure(chunk)
                continue
            if line:
                lines.append(line.rstrip())
            if size > width:
                *full, last = _fold(word, width)
                lines += full
                line, used = last + chunk[len(word) :], measure(last)
                used += len(chunk) - len(word)
            else:
                line, used = chunk, measure(chunk)
        lines.append(line.rstrip())
    return lines


def _pad(text: str, width: int, right: bool) -> str:
    gap = width - _width(text)
    return " " * gap + text if right else text + " " * gap


def fit_grid(grid: Grid, width: int) -> list[str] | None:
    """``grid``'s lines fitted to ``width`` cells, or None to leave it to rich.

    None when the columns that do not fold leave the flex column fewer than
    :data:`_MIN_FLEX` cells (rich then shrinks them with ellipses).
    """
    rows: list[Sequence[str]] = [[_clean(c) for c in row] for row in grid.rows]
    if grid.show_header:
        rows.insert(0, list(grid.headers))
    if not rows:
        return []
    count = len(grid.headers)
    flex = grid.flex if grid.flex is not None else count - 1
    widths = [max((_width(r[i]) for r in rows), default=0) for i in range(count)]
    fixed = grid.indent + sum(widths) - widths[flex] + 2 * (count - 1)
    room = width - fixed
    if room < _MIN_FLEX:
        return None
    flex_width = min(widths[flex], room)
    widths[flex] = flex_width
    indent = " " * grid.indent
    blank = ["" for _ in range(count)]
    out: list[str] = []
    for row in rows:
        pieces = _wrap(row[flex], flex_width) if row[flex] else [""]
        for n, piece in enumerate(pieces):
            cells = list(row) if n == 0 else list(blank)
            cells[flex] = piece
            line = "  ".join(
                _pad(cell, widths[i], i in grid.right) for i, cell in enumerate(cells)
            )
            out.append((indent + line).rstrip())
    return out
