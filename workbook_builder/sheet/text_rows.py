"""Rows of prose and their heights: a line of text in column A (a title, a section's title,
an exercise's instructions) wrapped across its print unit's width, never printed past the
page's right edge, and every wrapped row as tall as its text takes."""

from collections.abc import Sequence

from openpyxl.styles import Alignment
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.printing import FONT_PT, PrintUnit
from workbook_builder.xlsx.of_openpyxl import merge_row


def has_cjk(text: str) -> bool:
    return any(ord(ch) > 0x2E80 for ch in text)


def wrapped_lines(text: str, columns: int, size: float) -> int:
    """Lines a text of font `size` takes wrapped across `columns` 9-digit columns (an
    estimate that errs long: a short row would cut the last line off)."""
    per_line = max(1, int(columns * 9 * FONT_PT / size * 0.85))
    wide = sum(2 if ord(ch) > 0x2E80 else 1 for ch in text)  # CJK takes two widths
    return max(1, -(-wide // per_line))


class TextRows:
    """The prose rows of one sheet: noted while it is written (`add`), wrapped within their
    unit's columns when it is finished (`wrap`), and made as tall as their text
    (`fit`: again after the text is translated)."""

    def __init__(self, margin: int):
        self.margin = margin  # the column the prose is written in
        self.rows: list[int] = []
        self.columns: dict[int, int] = {}  # a wrapped row -> the columns it spans

    def add(self, *rows: int) -> None:
        self.rows += rows

    def wrap(self, ws: Worksheet, units: Sequence[PrintUnit], max_width: int) -> None:
        """Each row's text merged across its unit's columns (at most `max_width`)."""
        self.columns = {}
        for row in self.rows:
            unit = next((u for u in units if u.top <= row <= u.bottom), None)
            cell = ws.cell(row, self.margin)
            if unit is None or not isinstance(cell.value, str):
                continue
            right = min(max(unit.right, self.margin + 5), self.margin + max_width - 1)
            merge_row(ws, row, self.margin, right)
            cell.alignment = Alignment(wrap_text=True, vertical="top")
            self.columns[row] = right - self.margin + 1
        self.fit(ws)

    def fit(self, ws: Worksheet) -> None:
        """Each wrapped prose row as tall as its text now takes (Chinese glyphs are taller
        and wider than the English they replace)."""
        for row, columns in self.columns.items():
            cell = ws.cell(row, self.margin)
            if not isinstance(cell.value, str):
                continue
            size = cell.font.sz or FONT_PT
            lines = wrapped_lines(cell.value, columns, size)
            cjk = has_cjk(cell.value)  # a CJK line prints about 1.6 of its font size high
            height = lines * size * (1.7 if cjk else 1.3)
            if lines > 1 or (cjk and height > 15.0):  # 15 pt: a default row
                ws.row_dimensions[row].height = round(height, 2)
