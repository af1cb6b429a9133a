"""Large blocks of plain numbers kept as arrays beside a worksheet, not as cells.

openpyxl makes an object of every cell (~1 KB each with its style): a 512×512 weight
matrix costs a quarter of a gigabyte and seconds to create, write and read back. A block at
least `CONSTANT_BLOCK_CELLS` large is kept here instead, as a float array with one style,
and its cells go into the sheet's XML when the file is written (`book/sheet_xml.py`);
`check` reads such blocks back the same way. Code that reads cells of a workbook that may
hold such blocks asks `constant_value` (or `constant_block_at`) first.
"""

import weakref
from dataclasses import dataclass

import numpy as np
from openpyxl.cell.cell import Cell
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.xlsx.of_openpyxl import copy_style, stored_cells

# a block this large (cells) and larger is kept as an array; teaching sizes stay cells
CONSTANT_BLOCK_CELLS = 4096
EXACT_INTEGERS = 2.0**53


@dataclass(eq=False)
class ConstantBlock:
    """A rectangle of numbers whose top-left cell is (top, left), 1-based. `integers` marks
    the cells that are whole numbers written without a decimal point (a reader gets an int
    for them); `style` is a detached cell carrying the style every cell of the block has."""

    top: int
    left: int
    values: np.ndarray
    integers: np.ndarray
    style: Cell

    @property
    def bottom(self) -> int:
        return self.top + self.values.shape[0] - 1

    @property
    def right(self) -> int:
        return self.left + self.values.shape[1] - 1

    def holds(self, row: int, col: int) -> bool:
        return self.top <= row <= self.bottom and self.left <= col <= self.right

    def value(self, i: int, j: int) -> int | float:
        """Cell (i, j), 0-based, as a reader of the file gets it."""
        x = float(self.values[i, j])
        return int(x) if self.integers[i, j] else x

    def rows(self) -> list[list[int | float]]:
        """Every cell's value, row by row (as `value`)."""
        values = self.values.tolist()
        if self.integers.any():
            for i, j in zip(*np.nonzero(self.integers), strict=True):
                values[i][j] = int(values[i][j])
        return values


_BLOCKS: "weakref.WeakKeyDictionary[Worksheet, list[ConstantBlock]]" = \
    weakref.WeakKeyDictionary()


def constant_blocks(ws) -> list[ConstantBlock]:
    """The array blocks of a worksheet (none for most sheets)."""
    return _BLOCKS.get(ws, []) if isinstance(ws, Worksheet) else []


_WHOLE_NUMBER_ROWS_AT_ONCE = 1 << 20


def whole_numbers(values: np.ndarray) -> np.ndarray:
    """The cells written as integers (the sheet shows 1, not 1.0): whole numbers within the
    range a double holds exactly."""
    if values.size <= _WHOLE_NUMBER_ROWS_AT_ONCE:
        return (np.mod(values, 1) == 0) & (np.abs(values) < EXACT_INTEGERS)
    # a row at a time: a model's table would take two temporary copies of itself
    whole = np.empty(values.shape, bool)
    for i, row in enumerate(values):
        whole[i] = (np.mod(row, 1) == 0) & (np.abs(row) < EXACT_INTEGERS)
    return whole


def _style_cell(ws: Worksheet, style: Cell) -> Cell:
    """A cell in no place, styled as `style`, that reaches its sheet through a weak proxy:
    a strong reference from a value of _BLOCKS or _REGIONS would keep its key, the sheet,
    and every cell of it alive for good."""
    template = Cell(weakref.proxy(ws))
    copy_style(style, template)
    return template


def add_constant_block(ws: Worksheet, top: int, left: int, values: np.ndarray,
                       style: Cell, integers: np.ndarray | None = None) -> ConstantBlock:
    """Keep `values` as the cells from (top, left) on, each styled as `style` (a cell of
    the same workbook; its style is copied)."""
    # the caller's array itself, read-only (a model's weights are not held twice)
    values = np.asarray(values, dtype=float).view()
    values.flags.writeable = False
    template = _style_cell(ws, style)
    if integers is None:
        integers = whole_numbers(values)
    if not integers.any():  # a model's weights: one False for every cell, not a byte each
        integers = np.broadcast_to(np.False_, values.shape)
    block = ConstantBlock(top, left, values, integers, template)
    _BLOCKS.setdefault(ws, []).append(block)
    return block


@dataclass(eq=False)
class FormulaRegion:
    """A rectangle that array formulas fill, whose cells besides the formulas' own first
    cells have no cell object: the file gets them straight into its XML, styled as `style`
    and holding the value the evaluation gives each (as openpyxl would write them).
    `cells` are the cell objects the sheet holds inside it (the formulas' first cells, a
    skipped row's cells), written as they are."""

    top: int
    left: int
    bottom: int
    right: int
    style: Cell
    cells: list[Cell]

    def holds(self, row: int, col: int) -> bool:
        return self.top <= row <= self.bottom and self.left <= col <= self.right


_REGIONS: "weakref.WeakKeyDictionary[Worksheet, list[FormulaRegion]]" = \
    weakref.WeakKeyDictionary()


def add_formula_region(ws: Worksheet, top: int, left: int, bottom: int, right: int,
                       style: Cell, cells: list[Cell]) -> FormulaRegion:
    """Keep the rectangle's cells other than `cells` (held by the sheet) out of the sheet,
    each styled as `style` when written (its style is copied)."""
    template = _style_cell(ws, style)
    region = FormulaRegion(top, left, bottom, right, template, list(cells))
    _REGIONS.setdefault(ws, []).append(region)
    return region


def formula_regions(ws) -> list[FormulaRegion]:
    """The formula regions of a worksheet (none for most sheets)."""
    return _REGIONS.get(ws, []) if isinstance(ws, Worksheet) else []


def formula_region_at(ws, top: int, left: int, bottom: int, right: int) -> FormulaRegion | None:
    """The formula region spanning exactly this rectangle, if there is one."""
    for region in formula_regions(ws):
        if (region.top, region.left, region.bottom, region.right) == (top, left, bottom, right):
            return region
    return None


def constant_block_at(ws, top: int, left: int, bottom: int, right: int) -> ConstantBlock | None:
    """The array block spanning exactly this rectangle, if there is one."""
    for block in constant_blocks(ws):
        if (block.top, block.left, block.bottom, block.right) == (top, left, bottom, right):
            return block
    return None


def constant_value(ws, row: int, col: int):
    """(True, value) for a cell of an array block, else (False, None)."""
    for block in constant_blocks(ws):
        if block.holds(row, col):
            return True, block.value(row - block.top, col - block.left)
    return False, None


def set_number(ws: Worksheet, row: int, col: int, value: float) -> None:
    """Put a number into a cell, in its array block if it has one."""
    for block in constant_blocks(ws):
        if block.holds(row, col):
            i, j = row - block.top, col - block.left
            if not block.values.flags.writeable:  # the layout's inputs themselves: copied
                block.values = block.values.copy()
            if not block.integers.flags.writeable:
                block.integers = block.integers.copy()
            block.values[i, j] = value
            block.integers[i, j] = False  # a float stays a float, as in a cell
            return
    ws.cell(row, col).value = value


def positions_inside(blocks: list[ConstantBlock],
                     positions: list[tuple[int, int]]) -> list[set[tuple[int, int]]]:
    """For each block, the (row, col) of `positions` inside it: one array comparison per
    block, not a call per cell and block (a sheet of 60,000 cells beside 20 blocks)."""
    if not blocks or not positions:
        return [set() for _ in blocks]
    coordinates = np.array(positions, dtype=np.int64)
    rows, cols = coordinates[:, 0], coordinates[:, 1]
    inside = []
    for block in blocks:
        found = np.flatnonzero((rows >= block.top) & (rows <= block.bottom) &
                               (cols >= block.left) & (cols <= block.right))
        inside.append({positions[k] for k in found.tolist()})
    return inside


def blocks_with_cells(ws: Worksheet) -> list[ConstantBlock]:
    """The array blocks inside which the worksheet holds a cell object (made after the
    block was kept: a style set on one of its cells, say)."""
    blocks = constant_blocks(ws)
    if not blocks:
        return []
    held = positions_inside(blocks, [(cell.row, cell.column) for cell in stored_cells(ws)])
    return [block for block, cells in zip(blocks, held, strict=True) if cells]


def materialise(ws: Worksheet, block: ConstantBlock) -> None:
    """Turn an array block into ordinary cells (a cell the sheet holds there already keeps
    its own value, or takes the block's, and its own style)."""
    _BLOCKS[ws].remove(block)
    held = {(cell.row, cell.column) for cell in stored_cells(ws) if block.holds(cell.row,
                                                                                cell.column)}
    for i in range(block.values.shape[0]):
        for j in range(block.values.shape[1]):
            row, col = block.top + i, block.left + j
            cell = ws.cell(row, col)
            if cell.value is None:
                cell.value = block.value(i, j)
            if (row, col) not in held:
                copy_style(block.style, cell)
