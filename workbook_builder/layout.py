"""Lays out labelled blocks of inputs and formulas on a worksheet.

A block is a rectangle of cells under a three-line header:

    NAME                 <- bold; the workbook-level defined name of the data cells
    equation             <- what every cell of the block computes
    corner | col labels
    row label | data ...

Blocks are placed top to bottom, or left to right inside a `band()`.
"""

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from copy import copy
from dataclasses import dataclass

import numpy as np
from openpyxl.comments import Comment
from openpyxl.formatting.rule import ColorScaleRule
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.formula import ArrayFormula
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.refs import cell_ref, quote_sheet, range_ref

LAYOUTS = ("cells", "blocks")

INPUT_FILL = PatternFill("solid", fgColor="FFF2CC")    # pale yellow: a value you may edit
FORMULA_FILL = PatternFill("solid", fgColor="DDEBF7")  # pale blue: a live formula
NAME_FONT = Font(bold=True, color="1F4E79")
EQUATION_FONT = Font(italic=True, color="404040")
LABEL_FONT = Font(color="7F7F7F")
TITLE_FONT = Font(bold=True, size=14)
NUMBER_FORMAT = "0.0000"
HEADER_ROWS = 3  # name, equation, column labels


@dataclass(frozen=True)
class Block:
    """A placed rectangle of data cells; `top`/`left` is its first data cell (1-based)."""

    name: str
    sheet: str
    top: int
    left: int
    rows: int
    cols: int

    @property
    def bottom(self) -> int:
        return self.top + self.rows - 1

    @property
    def right(self) -> int:
        return self.left + self.cols - 1

    def cell(self, i: int, j: int) -> str:
        """Data cell (i, j), 0-based, as a relative reference."""
        return cell_ref(self.top + i, self.left + j)

    def fixed(self, i: int, j: int) -> str:
        """Data cell (i, j) with both anchors, for constants shared by many formulas."""
        return cell_ref(self.top + i, self.left + j, fix_row=True, fix_col=True)

    def row(self, i: int, first: int = 0, last: int | None = None) -> str:
        """Row i, columns first..last (inclusive), e.g. '$C5:$F5'."""
        last = self.cols - 1 if last is None else last
        return range_ref(self.top + i, self.left + first, self.top + i, self.left + last,
                         fix_col=True)

    def col(self, j: int, first: int = 0, last: int | None = None) -> str:
        """Column j, rows first..last (inclusive), e.g. 'G$5:G$8'."""
        last = self.rows - 1 if last is None else last
        return range_ref(self.top + first, self.left + j, self.top + last, self.left + j,
                         fix_row=True)

    def cols_range(self, first: int, last: int) -> str:
        """All rows of columns first..last (a column slice, e.g. one head)."""
        return range_ref(self.top, self.left + first, self.bottom, self.left + last,
                         fix_row=True, fix_col=True)

    def whole(self) -> str:
        return range_ref(self.top, self.left, self.bottom, self.right, fix_row=True, fix_col=True)

    def row_label(self, i: int) -> str:
        """The label cell left of row i (anchored column)."""
        return cell_ref(self.top + i, self.left - 1, fix_col=True)

    def col_label(self, j: int) -> str:
        """The label cell above column j (anchored row)."""
        return cell_ref(self.top - 1, self.left + j, fix_row=True)

    def col_labels(self) -> str:
        return range_ref(self.top - 1, self.left, self.top - 1, self.right, fix_row=True,
                         fix_col=True)

    def row_labels(self) -> str:
        return range_ref(self.top, self.left - 1, self.bottom, self.left - 1, fix_row=True,
                         fix_col=True)

    def address(self) -> str:
        """Workbook-level address, as a defined name holds it."""
        return f"{quote_sheet(self.sheet)}!{self.whole()}"


CellFormula = Callable[[int, int], str]


class SheetWriter:
    """Writes blocks onto one worksheet and names them in the workbook."""

    def __init__(self, ws: Worksheet, layout: str, first_row: int = 4):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}")
        self.ws = ws
        self.layout = layout
        self.row = first_row
        self.margin = 1
        self.current: Block | None = None
        self._band: list[int] | None = None  # [top, next left, lowest bottom]
        self.blocks: dict[str, Block] = {}
        # an exercise's hidden answer key lays the same blocks out again: unnamed (the
        # names stay on the visible sheet), its inputs linked to the visible inputs
        self.name_blocks = True
        self.linked_inputs: dict[str, Block] | None = None

    # -- sheet furniture -------------------------------------------------------------------
    def title(self, text: str, subtitle: str = "") -> None:
        self.ws.cell(1, 1, text).font = TITLE_FONT
        if subtitle:
            self.ws.cell(2, 1, subtitle).font = EQUATION_FONT
        legend = self.ws.cell(3, 1, "yellow = input you may edit    blue = live formula")
        legend.font = LABEL_FONT

    def text(self, text: str, bold: bool = False) -> None:
        """One line of prose across the sheet, outside any band."""
        cell = self.ws.cell(self.row, self.margin, text)
        cell.font = Font(bold=bold)
        self.row += 1

    @contextmanager
    def band(self) -> Iterator[None]:
        """Place the blocks created inside side by side."""
        self._band = [self.row, self.margin, self.row]
        try:
            yield
        finally:
            self.row = self._band[2] + 2
            self._band = None

    # -- blocks ----------------------------------------------------------------------------
    def _place(self, name: str, rows: int, cols: int) -> Block:
        if self._band is None:
            top, label_col = self.row, self.margin
        else:
            top, label_col = self._band[0], self._band[1]
        block = Block(name, self.ws.title, top + HEADER_ROWS, label_col + 1, rows, cols)
        if self._band is None:
            self.row = block.bottom + 2
        else:
            self._band[1] = block.right + 2
            self._band[2] = max(self._band[2], block.bottom)
        return block

    def _header(self, block: Block, equation: str, row_labels: Sequence, col_labels: Sequence,
                explanation: str, corner: str) -> None:
        ws, label_col = self.ws, block.left - 1
        name_cell = ws.cell(block.top - 3, label_col, block.name)
        name_cell.font = NAME_FONT
        if explanation:
            name_cell.comment = Comment(explanation, "attnsheets", width=300, height=120)
        ws.cell(block.top - 2, label_col, equation).font = EQUATION_FONT
        ws.cell(block.top - 1, label_col, corner).font = LABEL_FONT
        for j, label in enumerate(col_labels):
            cell = ws.cell(block.top - 1, block.left + j, label)
            cell.font = LABEL_FONT
            cell.alignment = Alignment(horizontal="center")
        for i, label in enumerate(row_labels):
            ws.cell(block.top + i, label_col, label).font = LABEL_FONT

    def _name(self, block: Block) -> None:
        if block.name in self.blocks:
            raise ValueError(f"block {block.name} placed twice")
        self.blocks[block.name] = block
        if not self.name_blocks:
            return
        wb = self.ws.parent
        wb.defined_names[block.name] = DefinedName(block.name, attr_text=block.address())

    def input_block(self, name: str, values: np.ndarray, equation: str,
                    row_labels: Sequence, col_labels: Sequence, explanation: str = "",
                    corner: str = "") -> Block:
        """Constants the user may edit; named like every block."""
        values = np.asarray(values, dtype=float)
        rows, cols = values.shape
        block = self._place(name, rows, cols)
        self._header(block, equation, row_labels, col_labels, explanation, corner)
        source = (self.linked_inputs or {}).get(name)
        first = self.ws.cell(block.top, block.left)
        first.fill = INPUT_FILL  # the others copy its style record (see _paint)
        for i in range(rows):
            for j in range(cols):
                value = _plain(values[i, j]) if source is None else \
                    f"={quote_sheet(source.sheet)}!{source.fixed(i, j)}"
                cell = self.ws.cell(block.top + i, block.left + j, value)
                if i or j:
                    cell._style = copy(first._style)
        self._name(block)
        return block

    def step_block(self, name: str, equation: str, rows: int, cols: int,
                   row_labels: Sequence, col_labels: Sequence, cells: CellFormula,
                   array: Callable[[Block], str] | None = None,
                   row_array: Callable[[int, Block], str] | None = None,
                   col_array: tuple[int, Callable[[int, Block], str]] | None = None,
                   explanation: str = "", corner: str = "", heatmap: bool = False) -> Block:
        """A step: one formula per cell (`cells` layout, or when neither `array` nor
        `row_array` is given); in the `blocks` layout one array formula for the whole block
        (`array`), or one per row (`row_array(i, block)`, for recurrences down the rows, where
        a whole-block formula would read itself), or one per slice of `width` columns
        (`col_array = (width, formula(k, block))`, e.g. one per head or channel). Both layouts
        must compute the same numbers."""
        block = self._place(name, rows, cols)
        self.current = block
        self._header(block, equation, row_labels, col_labels, explanation, corner)
        ws = self.ws
        if self.layout == "blocks" and array is not None:
            text = array(block)
            ws.cell(block.top, block.left).value = ArrayFormula(block.whole().replace("$", ""),
                                                                text)
        elif self.layout == "blocks" and row_array is not None:
            for i in range(rows):
                ref = block.row(i).replace("$", "")
                ws.cell(block.top + i, block.left).value = ArrayFormula(ref, row_array(i, block))
        elif self.layout == "blocks" and col_array is not None:
            width, formula = col_array
            for k in range(cols // width):
                ref = block.cols_range(k * width, (k + 1) * width - 1).replace("$", "")
                ws.cell(block.top, block.left + k * width).value = ArrayFormula(
                    ref, formula(k, block))
        else:
            for i in range(rows):
                for j in range(cols):
                    ws.cell(block.top + i, block.left + j).value = cells(i, j)
        _paint(ws, block, FORMULA_FILL, NUMBER_FORMAT)
        if heatmap:
            ws.conditional_formatting.add(
                block.whole().replace("$", ""),
                ColorScaleRule(start_type="num", start_value=0, start_color="FFFFFF",
                               end_type="num", end_value=1, end_color="F8696B"))
        self._name(block)
        self.current = None
        return block

    def finish(self) -> None:
        """Column widths wide enough for 4-decimal numbers."""
        for col in range(1, self.ws.max_column + 1):
            self.ws.column_dimensions[cell_ref(1, col)[:-1]].width = 9
        self.ws.freeze_panes = "A4"


def _paint(ws: Worksheet, block: Block, fill: PatternFill, number_format: str = "") -> None:
    """Style every data cell like the first. Setting a style attribute hashes the whole
    style each time (~10 µs); copying the first cell's style record (what openpyxl's own
    copy_worksheet does) keeps a 512×512 block to a fraction of a second."""
    first = ws.cell(block.top, block.left)
    first.fill = fill
    if number_format:
        first.number_format = number_format
    for i in range(block.rows):
        for j in range(block.cols):
            if i or j:
                ws.cell(block.top + i, block.left + j)._style = copy(first._style)



def _plain(x: float) -> float | int:
    """Write whole numbers as integers so the sheet shows 1, not 1.0."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)
