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
from workbook_builder.sheet.declare import Env, MatMul, text_of
from workbook_builder.sheet.layout import SheetWriter, paint
from workbook_builder.sheet.places import (  # noqa: F401 (the hand layout's, read here)
    HAND_MAX_SIDE,
    HandTooLarge,
    Placed,
    Product,
)
from workbook_builder.sheet.styles import NUMBER_FORMAT
from workbook_builder.sheet.widths import number_format_of

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


def copies(product: Product, places: list[Block],
           labels: dict[str, tuple[list, list]]) -> dict[str, Copy]:
    """The copies of a product's operands at their `places` (as `Product.copy_blocks`
    gives them): "A" left of the result, "B" above it (with "BIAS" under B)."""
    a, (a0, a1), b, (b0, b1) = product.a, product.a_cols, product.b, product.b_cols
    a_rows, a_labels = labels[a.name]
    b_rows, b_labels = labels[b.name]
    at = dict(zip(("A", "B", "BIAS"), places, strict=False))
    made = {"A": Copy(at["A"], lambda i, j: a.cell(i, a0 + j), a.name, list(a_rows),
                      list(a_labels[a0:a1 + 1]))}
    if product.transposed:  # row r of Bᵀ is column b0 + r of B
        made["B"] = Copy(at["B"], lambda r, j: b.cell(j, b0 + r), b.name + "ᵀ",
                         list(b_labels[b0:b1 + 1]), list(b_rows))
    else:
        made["B"] = Copy(at["B"], lambda r, j: b.cell(r, b0 + j), b.name, list(b_rows),
                         list(b_labels[b0:b1 + 1]))
    if product.bias is not None:
        bias = product.bias
        made["BIAS"] = Copy(at["BIAS"], lambda _, j: bias.cell(0, j), None,
                            [f"+ {bias.name}"], [])
    return made


def product_formula(made: dict[str, Copy]) -> MatMul:
    """The result over the copies: MMULT(the row on its left, the column above it)."""
    return MatMul("A", "B", plus="BIAS" if "BIAS" in made else None)


class HandWriter(SheetWriter):
    """The `cells` writer, with every product's operands copied around its result (where
    the placement puts the copies; it also lines up the rows of a band's blocks)."""

    legend = SheetWriter.legend + "    purple = copy of an operand, beside its product"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._copies: list[Block] = []  # named "RESULT:SOURCE"

    def _step(self, placed: Placed) -> Block:
        step, env = placed.item, self._env()
        product = Product.of(step.formula, env)
        if product is None:
            return super()._step(placed)
        block = placed.block
        row_labels, col_labels = self._step_labels(step, env, block.rows, block.cols)
        self._header(block, text_of(step.equation, self.params), row_labels, col_labels,
                     text_of(step.explanation, self.params), step.corner, placed.above,
                     placed.before)
        made = copies(product, self.placement.copies_of(block.name), self.labels)
        for copy in made.values():
            self._copy(copy)
        over = Env({key: copy.block for key, copy in made.items()}, {}, self.params,
                   me=block)
        self._fill(step, product_formula(made), over, row_labels, col_labels)
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
        paint(self.ws, block, COPY_FILL, NUMBER_FORMAT)
        self._frame(block, copy.caption, copy.row_labels, copy.col_labels, CAPTION_FONT)
