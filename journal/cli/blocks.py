"""What a report is laid out as before it is printed: lines, styled text and grids.

:mod:`~journal.cli.render_text` turns a report into these blocks and prints
them as plain text; :mod:`~journal.cli.render_rich` prints them for a terminal
(fitted to its width, coloured). Nothing here imports a rendering library, so
output that is not a terminal never loads one; the types are msgspec Structs,
which (unlike dataclasses) cost a cold command nothing to define.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

__all__ = ["Block", "Cell", "Grid", "Styled"]


class Styled(msgspec.Struct, frozen=True):
    """Text whose spans carry a style (a rich style string; "" for none).

    Args:
        spans: ``(text, style)`` pairs, in order.
    """

    spans: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, text: str, style: str = "") -> Styled:
        """``text`` in one ``style``."""
        return cls(((text, style),))

    @classmethod
    def assemble(cls, *parts: str | Styled) -> Styled:
        """The parts one after another; a plain ``str`` part has no style."""
        spans: list[tuple[str, str]] = []
        for part in parts:
            if isinstance(part, Styled):
                spans.extend(part.spans)
            else:
                spans.append((part, ""))
        return cls(tuple(spans))

    @property
    def plain(self) -> str:
        """The text without its styles."""
        return "".join(text for text, _ in self.spans)


Cell = str | Styled
"""One table cell."""


class Grid(msgspec.Struct):
    """A table to lay out: ``right`` columns right-aligned, ``flex`` may fold.

    Args:
        headers: The column headers.
        rows: The cells, one list per row.
        right: The indexes of right-aligned columns.
        indent: Spaces before every line.
        show_header: Print the header line.
        flex: The column that folds to fit a terminal (default: the last).
    """

    headers: Sequence[str]
    rows: list[list[Cell]]
    right: Sequence[int] = ()
    indent: int = 0
    show_header: bool = True
    flex: int | None = None


Block = str | Styled | Grid
"""One printed item: a line (or lines) of text, or a table."""
