"""The `hand` layout: every matrix product set out as it is worked by hand.

The left operand sits to the left of the result, the right operand above it (Kᵀ for Q·Kᵀ,
transposed cell by cell), so each result cell is where its row and its column meet:

    NAME
    equation
                      Bᵀ   | col labels
                      rows | right operand (copy)
                      + b  | bias row (copy)
    A  | inner labels      | result col labels
    row| left operand      | row | result = MMULT(row on its left, column above it)
        (copy)

The operands are live copies (`=C7`, one reference per cell, no TRANSPOSE) of the blocks the
product reads, wherever those are on the sheet; the result keeps its defined name and its
numbers, so `check`, exercises and grading read it as in the other layouts. Every other
step is written as in `cells`. The layout is for teaching sizes: a block wider or longer
than HAND_MAX_SIDE is refused before anything is built (`HandTooLarge`).
"""

from collections.abc import Callable
from dataclasses import dataclass

from openpyxl.styles import Font, PatternFill

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.declare import Env, Formula, Input, MatMul, MatMulT, Step, text_of
from workbook_builder.sheet.layout import (
    COMPACT_WIDTH,
    NUMBER_FORMAT,
    SheetPlan,
    SheetWriter,
    _paint,
)
from workbook_builder.sheet.widths import number_format_of

HAND_MAX_SIDE = 16  # rows or columns of any block: beyond that a product is no longer read by eye
COPY_FILL = PatternFill("solid", fgColor="E4DFEC")  # pale purple: a copy, not an input
CAPTION_FONT = Font(bold=True, italic=True, color="7F7F7F")


@dataclass(frozen=True)
class Copy:
    """A live copy of (a slice of) a block, placed at `block`: cell (i, j) reads
    `source(i, j)`. Its `caption` sits in its corner; a copy with no column labels
    (a bias row right under the right operand) leaves the row above it alone."""

    block: Block
    source: Callable[[int, int], str]
    caption: str | None
    row_labels: list
    col_labels: list


@dataclass(frozen=True)
class Product:
    """A step C = A·B (+ bias) or A·Bᵀ as the hand layout sets it: the result's block has
    `above` more header rows (the right operand and the bias) and `before` more columns
    (the left operand and its row labels) than in `cells`."""

    a: Block
    a_cols: tuple[int, int]
    b: Block
    b_cols: tuple[int, int]
    transposed: bool   # MatMulT: the right operand is B's slice transposed
    bias: Block | None

    @classmethod
    def of(cls, formula: Formula, env: Env) -> "Product | None":
        """The product a step's formula computes, or None for any other formula."""
        if not isinstance(formula, MatMul | MatMulT):
            return None
        a, b, a_cols, b_cols = formula._slices(env)
        bias = env[formula.plus] if isinstance(formula, MatMul) and formula.plus else None
        return cls(a, a_cols, b, b_cols, isinstance(formula, MatMulT), bias)

    @property
    def inner(self) -> int:
        """k: columns of A's slice, rows of the right operand."""
        return self.a_cols[1] - self.a_cols[0] + 1

    @property
    def width(self) -> int:
        """Columns of the right operand (and of the result)."""
        return self.b.rows if self.transposed else self.b_cols[1] - self.b_cols[0] + 1

    @property
    def above(self) -> int:
        return 1 + self.inner + (self.bias is not None)

    @property
    def before(self) -> int:
        return self.inner + 1

    @property
    def copied_cells(self) -> int:
        """Cells of the copies: A's slice, the right operand and the bias row."""
        return (self.a.rows + self.width) * self.inner + (self.bias is not None) * self.width

    def copies(self, me: Block, labels: dict[str, tuple[list, list]]) -> dict[str, Copy]:
        """The copies around the result block `me`: "A" left of it, "B" above it (with
        "BIAS" under B)."""
        a, (a0, a1), b, (b0, b1), k = self.a, self.a_cols, self.b, self.b_cols, self.inner
        a_rows, a_labels = labels[a.name]
        b_rows, b_labels = labels[b.name]
        left = Copy(Block(f"{me.name}:{a.name}", me.sheet, me.top, me.left - 1 - k, a.rows, k),
                    lambda i, j: a.cell(i, a0 + j), a.name, list(a_rows),
                    list(a_labels[a0:a1 + 1]))
        b_top = me.top - 1 - (self.bias is not None) - k
        place = Block(f"{me.name}:{b.name}", me.sheet, b_top, me.left, k, self.width)
        if self.transposed:  # row r of Bᵀ is column b0 + r of B
            above = Copy(place, lambda r, j: b.cell(j, b0 + r), b.name + "ᵀ",
                         list(b_labels[b0:b1 + 1]), list(b_rows))
        else:
            above = Copy(place, lambda r, j: b.cell(r, b0 + j), b.name, list(b_rows),
                         list(b_labels[b0:b1 + 1]))
        copies = {"A": left, "B": above}
        if self.bias is not None:
            bias = self.bias
            copies["BIAS"] = Copy(Block(f"{me.name}:{bias.name}", me.sheet, me.top - 2,
                                        me.left, 1, self.width),
                                  lambda _, j: bias.cell(0, j), None, [f"+ {bias.name}"], [])
        return copies

    def formula(self, copies: dict[str, Copy]) -> MatMul:
        """The result over the copies: MMULT(the row on its left, the column above it)."""
        return MatMul("A", "B", plus="BIAS" if "BIAS" in copies else None)


class _RowsLinedUp:
    """Every block of a band gets as many rows above its data as the band's tallest
    product needs for its right operand, so the data of a band's blocks start on one row
    (SCALED beside SCORES row for row) and their names and equations on another."""

    _pad = 0

    def _begin_band(self, band) -> None:
        self._pad = rows_above(self, band)

    def _place(self, name: str, rows: int, cols: int, above: int = 0,
               before: int = 0) -> Block:
        return super()._place(name, rows, cols, max(above, self._pad), before)


class _CompactByHandPlan:
    """Whether the hand layout fits one page is decided on the hand layout's plan."""

    def compact_fits(self, sections) -> bool:
        try:
            return super().compact_fits(sections)
        except HandTooLarge:  # refused anyway, by the plan of the limits
            return False

    def _compact_plan(self) -> SheetPlan:
        plan = HandPlan(self.params, self.label_sets, None, COMPACT_WIDTH)
        plan.compact, plan.max_width = True, COMPACT_WIDTH
        return plan


class HandWriter(_CompactByHandPlan, _RowsLinedUp, SheetWriter):
    """The `cells` writer, with every product's operands copied around its result."""

    legend = SheetWriter.legend + "    purple = copy of an operand, beside its product"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._copies: list[Block] = []  # named "RESULT:SOURCE"

    def _header(self, block: Block, equation: str, row_labels, col_labels,
                explanation: str, corner: str, above: int = 0, before: int = 0) -> None:
        super()._header(block, equation, row_labels, col_labels, explanation, corner,
                        max(above, self._pad), before)

    def _step(self, step: Step) -> Block:
        env = self._env()
        product = Product.of(step.formula, env)
        if product is None:
            return super()._step(step)
        rows, cols = step.formula.shape(env)
        row_labels, col_labels = self._step_labels(step, env, rows, cols)
        block = self._place(step.name, rows, cols, product.above, product.before)
        self._header(block, text_of(step.equation, self.params), row_labels, col_labels,
                     text_of(step.explanation, self.params), step.corner, product.above,
                     product.before)
        copies = product.copies(block, self.labels)
        for copy in copies.values():
            self._copy(copy)
        over = Env({key: copy.block for key, copy in copies.items()}, {}, self.params,
                   me=block)
        self._fill(step, product.formula(copies), over, row_labels, col_labels)
        return block

    def _whole_numbers_as_such(self, values) -> None:
        """Each copy shown as the block it copies (2, not 2.0000, beside an input of 2)."""
        super()._whole_numbers_as_such(values)
        for copy in self._copies:
            source = self.blocks[copy.name.split(":")[1]]
            number_format = number_format_of(self.ws, source)
            for row in self.ws.iter_rows(copy.top, copy.bottom, copy.left, copy.right):
                for cell in row:
                    cell.number_format = number_format

    def _copy(self, copy: Copy) -> None:
        block = copy.block
        self._copies.append(block)
        for i in range(block.rows):
            for j in range(block.cols):
                self.ws.cell(block.top + i, block.left + j, f"={copy.source(i, j)}")
        _paint(self.ws, block, COPY_FILL, NUMBER_FORMAT)
        self._frame(block, copy.caption, copy.row_labels, copy.col_labels, CAPTION_FONT)


def rows_above(writer: SheetWriter, band) -> int:
    """The most rows any product of the band needs between its equation and its column
    labels, found by placing the band's blocks on a scratch plan (a product's inner size
    may come from a block of the same band)."""
    scratch = SheetPlan(writer.params, writer.label_sets)
    scratch.compact = bool(writer.compact)
    scratch.blocks = dict(writer.blocks)
    scratch._band = [writer.row, writer.margin, writer.row, writer.row]
    most = 0
    for item in band:
        if isinstance(item, Step):
            product = Product.of(item.formula, scratch._env())
            most = max(most, product.above if product else 0)
            scratch._step(item)
        elif isinstance(item, Input):
            scratch._input(item, None)
    return most


class HandTooLarge(Exception):
    """A block of the planned sheet is longer or wider than the hand layout takes."""

    def __init__(self, block: Block):
        super().__init__(block.name)
        self.block = block


class HandPlan(_CompactByHandPlan, _RowsLinedUp, SheetPlan):
    """`SheetPlan` for the hand layout: blocks placed as HandWriter places them, products
    with their copies' cells, and HandTooLarge at the first block with a side over
    HAND_MAX_SIDE."""

    def _step(self, step: Step) -> Block:
        env = self._env()
        product = Product.of(step.formula, env)
        if product is None:
            return super()._step(step)
        self.cells += product.copied_cells  # counted before the block's own check
        return self._reserve(step.name, *step.formula.shape(env), product.above,
                             product.before)

    def _reserve(self, name: str, rows: int, cols: int, above: int = 0,
                 before: int = 0) -> Block:
        block = super()._reserve(name, rows, cols, above, before)
        if max(rows, cols) > HAND_MAX_SIDE:
            raise HandTooLarge(block)
        return block


def sheet_writer(ws, layout: str) -> SheetWriter:
    """The writer of a layout."""
    return HandWriter(ws, layout) if layout == "hand" else SheetWriter(ws, layout)


def plan_for(layout: str) -> type[SheetPlan]:
    """The planner of a layout (`cells` and `blocks` place blocks alike)."""
    return HandPlan if layout == "hand" else SheetPlan
