"""Blocks printed by ``rich``: tables fitted to a terminal's width, in colour.

Only a terminal needs this (and any output with a control character, whose
handling is rich's): :mod:`~journal.cli.render_text` prints everything else
without importing rich, which costs a cold command tens of milliseconds.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from journal.cli.blocks import Grid, Styled
from journal.cli.controls import CONTROL
from journal.cli.fit import LONG_GRID, fit_grid

if TYPE_CHECKING:
    from collections.abc import Sequence

    from journal.cli.blocks import Block, Cell

__all__ = ["emit_rich"]


_NATURAL_WIDTH = 1_000_000
"""The console width without a terminal: wide enough that nothing folds."""


def _text(cell: Cell, *, sanitize: bool) -> Text:
    # Agent content is untrusted: no escape sequence reaches a terminal.
    spans = cell.spans if isinstance(cell, Styled) else ((cell, ""),)
    if sanitize:
        spans = tuple((CONTROL.sub("?", text), style) for text, style in spans)
    return Text.assemble(*spans)


def _table(grid: Grid, *, fit: bool, color: bool) -> Table:
    table = Table(
        box=None,
        pad_edge=False,
        padding=(0, 1),
        show_edge=False,
        show_header=grid.show_header,
        header_style="bold" if color else "",
    )
    flex = grid.flex if grid.flex is not None else len(grid.headers) - 1
    for i, header in enumerate(grid.headers):
        table.add_column(
            header,
            justify="right" if i in grid.right else "left",
            no_wrap=not (fit and i == flex),
            overflow="fold" if fit and i == flex else "ellipsis",
        )
    for row in grid.rows:
        table.add_row(*(_text(c, sanitize=fit) for c in row))
    return table


def emit_rich(blocks: Sequence[Block], width: int | None, color: bool) -> str:
    """``blocks`` as text laid out by rich.

    Args:
        blocks: What to print, in order.
        width: The terminal's width to fit tables to; None: natural widths.
        color: Colour the styled spans and the headers.

    Returns:
        Whole lines without trailing spaces, each ending in a newline.
    """
    if not blocks:
        return ""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width or _NATURAL_WIDTH,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
    )
    fit = width is not None
    for block in blocks:
        if (
            isinstance(block, Grid)
            and width is not None
            and len(block.rows) > LONG_GRID
        ):
            lines = fit_grid(block, width)
            if lines is not None:
                buffer.write("".join(line + "\n" for line in lines))
                continue
        if isinstance(block, Grid):
            table = _table(block, fit=fit, color=color)
            if block.indent:
                # Not expanded: at the natural width an expanding pad would write
                # a million spaces on every line before they are stripped.
                console.print(Padding(table, (0, 0, 0, block.indent), expand=fit))
            else:
                console.print(table)
        else:
            console.print(_text(block, sanitize=fit), soft_wrap=True)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())
