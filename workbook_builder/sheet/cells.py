"""Text cells that stay text, and telling a formula cell from a text cell.

openpyxl stores a str starting with "=" as a live formula and "#N/A", "#REF!" … as error
values. A token, a student id or a label is never meant as either, so every text the
builder writes goes through `write_text`, which marks the cell as a string whatever its
first character. Readers then ask the cell's type (`is_formula_cell`), never the text's
first character.
"""

import re

from openpyxl.cell.cell import Cell
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.errors import UserError

# the characters an .xlsx cannot hold (XML 1.0 forbids them): openpyxl refuses them
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def set_text(cell: Cell, text) -> Cell:
    """Give `cell` the value `text`; a str stays a string cell (never a formula or an
    error value)."""
    cell.value = text
    if isinstance(text, str):
        cell.data_type = "s"
    return cell


def write_text(ws: Worksheet, row: int, col: int, text) -> Cell:
    """`ws.cell(row, col, text)`, the text kept as text."""
    return set_text(ws.cell(row, col), text)


def is_formula_cell(cell: Cell) -> bool:
    """A formula (single-cell or array), as opposed to a text that starts with "="."""
    return cell.data_type == "f"


def check_cell_text(text: str, what: str) -> str:
    """`text`, or a one-line error when it holds a character no cell can hold."""
    bad = _CONTROL.search(text)
    if bad:
        raise UserError(f"{what} {text!r} holds the control character "
                        f"U+{ord(bad.group()):04X}, which a workbook cannot store")
    return text
