"""A1-style cell-reference helpers (rows and columns are 1-based, as in Excel)."""

import re

from openpyxl.utils import column_index_from_string, get_column_letter

_CELL = re.compile(r"^\$?([A-Z]{1,3})\$?(\d+)$")


def cell_ref(row: int, col: int, fix_row: bool = False, fix_col: bool = False) -> str:
    """`cell_ref(5, 3)` -> 'C5'; fix_row/fix_col add the `$` anchors."""
    return f"{'$' if fix_col else ''}{get_column_letter(col)}{'$' if fix_row else ''}{row}"


def range_ref(top: int, left: int, bottom: int, right: int,
              fix_row: bool = False, fix_col: bool = False) -> str:
    """A rectangle; a single cell is written as one reference."""
    first = cell_ref(top, left, fix_row, fix_col)
    if (top, left) == (bottom, right):
        return first
    return f"{first}:{cell_ref(bottom, right, fix_row, fix_col)}"


def quote_sheet(title: str) -> str:
    """Sheet titles are always quoted, which Excel accepts for any title."""
    return "'" + title.replace("'", "''") + "'"


def parse_cell(ref: str) -> tuple[int, int]:
    """'$C$5' -> (5, 3)."""
    match = _CELL.match(ref.upper())
    if not match:
        raise ValueError(f"not a cell reference: {ref!r}")
    return int(match.group(2)), column_index_from_string(match.group(1))


def parse_range(ref: str) -> tuple[int, int, int, int]:
    """'C5:F9' -> (top, left, bottom, right); a single cell is a 1x1 range."""
    first, _, last = ref.partition(":")
    top, left = parse_cell(first)
    bottom, right = parse_cell(last) if last else (top, left)
    return top, left, bottom, right


# the form of every name a workbook of ours holds: a quoted sheet and one cell or range
_QUOTED_SHEET_RANGE = re.compile(r"'((?:[^']|'')+)'!(\$?[A-Z]{1,3}\$?\d+(?::\$?[A-Z]{1,3}\$?\d+)?)")


def name_destinations(defined) -> list[tuple[str, str]]:
    """A defined name's (sheet, cells) pairs, each sheet as it is called: openpyxl 3.1's
    `destinations` keeps a quoted name's doubled apostrophes ('Bob''s sheet'!A1). A name
    openpyxl cannot read (an empty one, a formula) has none. A name of our one form is
    read as openpyxl reads it without its formula tokenizer (~30 µs a name, and a check
    asks for each name several times)."""
    text = getattr(defined, "attr_text", None)
    ours = _QUOTED_SHEET_RANGE.fullmatch(text) if isinstance(text, str) else None
    if ours:
        return [(ours.group(1).replace("''", "'"), ours.group(2))]
    try:
        return [(sheet.replace("''", "'"), cells) for sheet, cells in defined.destinations]
    except Exception:  # openpyxl's tokenizer raises TypeError, ValueError, … on odd text
        return []
