"""rich's Markdown, with tables drawn in full box-drawing lines instead of rules only."""
from __future__ import annotations

from rich import box
from rich.markdown import Markdown, TableElement
from rich.table import Table


class BoxedTable(TableElement):
    def __rich_console__(self, console, options):
        for part in super().__rich_console__(console, options):
            if isinstance(part, Table):
                # every cell padded on both sides: collapsed padding left `│1     │`
                part.box, part.pad_edge, part.collapse_padding = box.SQUARE, True, False
                for column in part.columns:  # a long unbreakable cell (a path) wraps, never cut with "…"
                    column.overflow = "fold"
            yield part


class BoxedMarkdown(Markdown):
    elements = {**Markdown.elements, "table_open": BoxedTable}
