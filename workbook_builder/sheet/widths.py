"""Column widths that fit the numbers a sheet shows.

A number wider than its column shows as `###`. Each column gets the width of the widest
text it shows: every block's values (inputs as given, steps as the NumPy reference computes
them) in the block's number format, and the row labels. Widths are in Excel's unit, the
width of one digit of the default font; two more leave the cell's padding free.
"""

import re
from collections.abc import Mapping

import numpy as np
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.constants import constant_block_at

MIN_WIDTH = 9       # a 4-decimal number below 100, "-12.3456"
PADDING = 2
LABEL_WIDTH_CAP = 24  # longer labels are cut by the cell beside them, as before
GENERAL_CAP = 9     # "General" rounds decimals away to fit; only whole digits must fit
_FIXED = re.compile(r"^0(?:\.(0+))?$")   # 0, 0.0000, …
_SCIENTIFIC = re.compile(r"^0(?:\.(0+))?E\+00$")


def shown_chars(values: np.ndarray, number_format: str) -> int:
    """Characters the widest of `values` takes when shown in `number_format`."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return 0
    sign = int(bool((values < 0).any()))
    largest = float(np.abs(values).max())
    fixed = _FIXED.match(number_format)
    if fixed:
        return len(f"{largest:.{len(fixed.group(1) or '')}f}") + sign
    scientific = _SCIENTIFIC.match(number_format)
    if scientific:
        return len(f"{largest:.{len(scientific.group(1) or '')}E}") + sign
    if number_format.startswith("[<1000000]"):  # the cost tables: whole or 6.87E+10
        return min(len(f"{largest:.0f}"), 8) + sign
    if number_format == "General":
        whole = len(f"{np.floor(largest):.0f}") + sign
        exact = bool(np.all(values == np.round(values)))
        return whole if exact else min(max(whole + 2, 6), GENERAL_CAP)
    return MIN_WIDTH - PADDING  # a text format ("skip")


def fit_columns(ws: Worksheet, blocks: Mapping[str, Block], labels: Mapping[str, tuple],
                values: Mapping[str, np.ndarray] | None) -> None:
    """Set every used column of `ws` to the widest text it shows (at least MIN_WIDTH)."""
    widths = dict.fromkeys(range(1, ws.max_column + 1), MIN_WIDTH)

    def need(col: int, chars: int) -> None:
        widths[col] = max(widths.get(col, MIN_WIDTH), chars + PADDING)

    for name, block in blocks.items():
        if block.sheet != ws.title:
            continue
        row_labels = labels.get(name, ([], []))[0]
        if row_labels:
            need(block.left - 1, min(max(len(str(t)) for t in row_labels),
                                     LABEL_WIDTH_CAP - PADDING))
        block_values = None if values is None else values.get(name)
        if block_values is None:
            continue
        block_values = np.atleast_2d(np.asarray(block_values, dtype=float))
        if block_values.shape != (block.rows, block.cols):
            continue
        number_format = number_format_of(ws, block)
        for j in range(block.cols):
            need(block.left + j, shown_chars(block_values[:, j], number_format))
    for col, width in widths.items():
        ws.column_dimensions[get_column_letter(col)].width = width


def number_format_of(ws: Worksheet, block: Block) -> str:
    """The format of the block's first cell, read without making a cell in an array block
    (a cell made there would turn the block back into cells)."""
    array = constant_block_at(ws, block.top, block.left, block.bottom, block.right)
    if array is not None:
        return array.style.number_format
    return ws.cell(block.top, block.left).number_format
