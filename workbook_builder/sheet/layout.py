"""Lays out a kind's declared sections on a worksheet as labelled blocks.

A block is a rectangle of cells under a four-line header:

    NAME                 <- bold; the workbook-level defined name of the data cells
    equation             <- what every cell of the block computes
    explanation          <- one sentence, small italic (also the NAME cell's hover note)
    corner | col labels  <- the corner names the rows and columns (query / key)
    row label | data ...

Where everything goes is decided first, from the declaration alone (`place_sheet` in
sheet/places.py: sections top to bottom, a band's blocks side by side, compact lines for a
sheet that fits one page); the writer renders that list of placed things in its order. A
compact sheet has headers of three lines (the explanation stays the hover note of the
name) and lower rows. Each band line, with the section title above it, is a print unit: a
page break falls only between units (sheet/printing.py).

The writer renders the blocks, their headers and names; the separate jobs are modules of
their own: charts (sheet/charts.py), live shading (sheet/shading.py), prose rows and their
heights (sheet/text_rows.py), the look (sheet/styles.py), column widths (sheet/widths.py).
The `hand` layout (sheet/hand_layout.py) writes like `cells` but sets every matrix product
between live copies of its operands. A kind's whole sheet is written from a build request
by sheet/kind_sheet.py.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from openpyxl.cell.cell import Cell
from openpyxl.comments import Comment
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.worksheet.formula import ArrayFormula
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.cells import write_text
from workbook_builder.sheet.charts import add_chart
from workbook_builder.sheet.constants import (
    add_constant_block,
    add_formula_region,
    constant_block_at,
    formula_region_at,
)
from workbook_builder.sheet.declare import (
    Env,
    Labels,
    Section,
    Step,
    declared_vector,
    dims,
    text_of,
)
from workbook_builder.sheet.names import define_name
from workbook_builder.sheet.places import (
    COMPACT_HEADER_ROWS,
    FIRST_ROW,
    HEADER_ROWS,
    LAYOUTS,
    MAX_WIDTH,
    Placed,
    SheetPlacement,
    place_sheet,
)
from workbook_builder.sheet.printing import FONT_PT, PrintUnit
from workbook_builder.sheet.refs import quote_sheet, range_ref
from workbook_builder.sheet.shading import heat_map, shade_masked
from workbook_builder.sheet.styles import (
    BOLD_FONT,
    CELL_BORDER,
    COMPACT_ROW_PT,
    EQUATION_FONT,
    EXPLANATION_FONT,
    FORMULA_FILL,
    INPUT_FILL,
    LABEL_FONT,
    NAME_FONT,
    NUMBER_FORMAT,
    SKIP_FILL,
    SKIP_FORMAT,
    TEXT_FONT,
    TITLE_FONT,
)
from workbook_builder.sheet.text_rows import TextRows, wrapped_lines
from workbook_builder.sheet.widths import fit_columns
from workbook_builder.xlsx.of_openpyxl import copy_style, merge_row, openpyxl_shortcuts


class SheetWriter:
    """Writes blocks onto one worksheet and names them in the workbook. Configured once, by
    its constructor: the layout, the parameters and the named label lists the declaration
    refers to (read only; a kind may make its lists when asked), the first row under the
    title, the sheet's language for chart titles (`tr`), the size from which an input block
    is kept as an array instead of cells (`array_block_cells`, sheet/constants.py; None:
    every input is cells) and, for an exercise's hidden answer key (`answer_key_of`: the
    visible sheet's blocks), the same blocks laid out again unnamed, its inputs linked to
    the visible inputs."""

    legend = "yellow = input you may edit    blue = live formula    grey – = masked (holds 0)"

    def __init__(self, ws: Worksheet, layout: str, params=None,
                 label_sets: Mapping[str, Sequence] | None = None,
                 first_row: int = FIRST_ROW, *, tr: Callable[[str], str] = str,
                 array_block_cells: int | None = None,
                 answer_key_of: Mapping[str, Block] | None = None):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}")
        self.ws = ws
        self.layout = layout
        self.params = params
        self.label_sets = label_sets if label_sets is not None else {}
        self.tr = tr
        self.array_block_cells = array_block_cells
        self.name_blocks = answer_key_of is None  # the names stay on the visible sheet
        self.linked_inputs = None if answer_key_of is None else dict(answer_key_of)
        self.row = first_row
        self.margin = 1
        self.max_width = MAX_WIDTH
        self.units: list[PrintUnit] = []  # what a page break must not cut, top to bottom
        self._glued: int | None = None  # first row of text lines kept with the next unit
        self.text_rows = TextRows(self.margin)  # wrapped across their unit by `finish`
        self.blocks: dict[str, Block] = {}
        self.labels: dict[str, tuple[list, list]] = {}
        self.name_cells: dict[str, tuple[int, int]] = {}  # block -> its name cell (row, col)
        self.vectors: dict[str, str] = {}
        # None: decided by `write` (place_sheet: compact when it fits a page's width)
        self.compact: bool | None = None
        self.placement: SheetPlacement | None = None  # what `write` rendered
        self._shaded_masks: set[str] = set()

    @property
    def header_rows(self) -> int:
        return COMPACT_HEADER_ROWS if self.compact else HEADER_ROWS

    # -- sheet furniture -------------------------------------------------------------------
    def title(self, text: str, subtitle: str = "") -> None:
        write_text(self.ws, 1, 1, text).font = TITLE_FONT
        if subtitle:
            write_text(self.ws, 2, 1, subtitle).font = EQUATION_FONT
        write_text(self.ws, 3, 1, self.legend).font = LABEL_FONT
        self._glued = 1
        self.text_rows.add(1, 2, 3)

    def wrap_text_row(self, row: int) -> None:
        """Wrap the prose in column A of `row` across its unit's width at `finish`."""
        self.text_rows.add(row)

    # -- declared sections -----------------------------------------------------------------
    def write(self, sections: Iterable[Section], inputs: Mapping[str, np.ndarray]) -> None:
        """Every section in order, as `place_sheet` places them from the writer's row on:
        each placed thing rendered in the placement's order."""
        self.placement = place_sheet(sections, self.params, self.layout, sheet=self.ws.title,
                                     first_row=self.row, glued_from=self._glued,
                                     compact=self.compact)
        self.compact, self.max_width = self.placement.compact, self.placement.max_width
        self._glued = None
        self.units += self.placement.units
        for placed in self.placement.placed:
            self._render(placed, inputs)
        self.row = self.placement.next_row

    def _render(self, placed: Placed, inputs: Mapping[str, np.ndarray]) -> None:
        if placed.role == "text":  # a section's title line
            cell = write_text(self.ws, placed.top, placed.left, self._section_title(placed.item))
            cell.font = BOLD_FONT if placed.item.bold else TEXT_FONT
            self.text_rows.add(placed.top)
        elif placed.role == "title":  # a section's title in a compact line's title row
            self._section_cell(placed.top, placed.left, placed.left + placed.cols - 1,
                               self._section_title(placed.item), placed.item.bold)
        elif placed.role == "input":
            self._input(placed, inputs.get(placed.name))
        elif placed.role == "step":
            self._step(placed)
        elif placed.role == "table":
            self._table(placed)
        elif placed.role == "chart" and self.name_blocks:
            # an exercise's hidden key keeps the slot empty (nobody sees it; its blocks
            # stay where the visible sheet has them)
            add_chart(self.ws, placed, self.blocks, self.name_cells, self.params, self.tr)
        # a "copy" is written with the product that reads it (sheet/hand_layout.py)

    def _section_title(self, sec: Section) -> str:
        return sec.title(self.label_sets) if callable(sec.title) else \
            text_of(sec.title, self.params)

    def _section_cell(self, row: int, left: int, right: int, text: str, bold: bool) -> None:
        """A section's title in a compact line's title row, wrapped across its columns."""
        cell = write_text(self.ws, row, left, text)
        cell.font = BOLD_FONT if bold else TEXT_FONT
        cell.alignment = Alignment(wrap_text=True, vertical="bottom")  # on its blocks
        if right > left:
            merge_row(self.ws, row, left, right)
        lines = wrapped_lines(text, right - left + 1, FONT_PT)
        current = self.ws.row_dimensions[row].height or COMPACT_ROW_PT
        self.ws.row_dimensions[row].height = max(current, lines * COMPACT_ROW_PT)

    def _labels(self, spec: Labels | None, count: int, derived: Sequence | None) -> list:
        if spec is None:
            return list(derived) if derived is not None else dims("", count)
        if isinstance(spec, str):
            return list(self.label_sets[spec]) if spec in self.label_sets else \
                dims(spec, count)
        if callable(spec):
            return list(spec(self.params))
        return list(spec)

    def _input(self, placed: Placed, values: np.ndarray) -> Block:
        """An input's header, labels and values (or, in an exercise's hidden key, links to
        the visible input) at its placed block."""
        item, block, rows, cols = placed.item, placed.block, placed.rows, placed.cols
        values = np.asarray(values, dtype=float)
        assert values.shape == (rows, cols), (item.name, values.shape, rows, cols)
        row_labels = self._labels(item.row_labels, rows, None)
        col_labels = self._labels(item.col_labels, cols, None)
        self._header(block, text_of(item.title, self.params), row_labels, col_labels,
                     text_of(item.note, self.params), item.corner, placed.above,
                     placed.before)
        source = (self.linked_inputs or {}).get(item.name)
        ws = self.ws
        as_array = source is None and self.array_block_cells is not None and \
            values.size >= self.array_block_cells and bool(np.isfinite(values).all())
        first = Cell(ws) if as_array else ws.cell(block.top, block.left)
        first.fill = INPUT_FILL  # the others copy its style record
        first.font, first.border, first.number_format = TEXT_FONT, CELL_BORDER, NUMBER_FORMAT
        if as_array:  # no cell objects: the values go into the file's XML as they are
            add_constant_block(ws, block.top, block.left, values, first)
            self._name(block, row_labels, col_labels, declared_vector(item))
            return block
        for i in range(rows):
            for j in range(cols):
                value = _plain(values[i, j]) if source is None else \
                    f"={quote_sheet(source.sheet)}!{source.fixed(i, j)}"
                cell = ws.cell(block.top + i, block.left + j, value)
                if i or j:
                    copy_style(first, cell)
        self._name(block, row_labels, col_labels, declared_vector(item))
        return block

    def _env(self) -> Env:
        return Env(self.blocks, self.labels, self.params, vectors=self.vectors)

    def _step_labels(self, step: Step, env: Env, rows: int, cols: int) -> tuple[list, list]:
        derived_rows, derived_cols = step.formula.labels(env) or (None, None)
        return (self._labels(step.row_labels, rows, derived_rows),
                self._labels(step.col_labels, cols, derived_cols))

    def _step(self, placed: Placed) -> Block:
        """A step's header, labels and formulas at its placed block."""
        step, block, env = placed.item, placed.block, self._env()
        row_labels, col_labels = self._step_labels(step, env, block.rows, block.cols)
        env.me = block
        self._header(block, text_of(step.equation, self.params), row_labels, col_labels,
                     text_of(step.explanation, self.params), step.corner, placed.above,
                     placed.before)
        self._fill(step, step.formula, env, row_labels, col_labels)
        return block

    def _fill(self, step: Step, formula, env: Env, row_labels: list, col_labels: list) -> None:
        """The step's formulas into its placed block `env.me` (written by `formula`, which
        is the step's own or, in the hand layout, the product over its operands' copies),
        styled, and named."""
        ws, block = self.ws, env.me
        rows, cols = block.rows, block.cols
        arrays = formula.arrays(env) if self.layout == "blocks" else None
        number_format = step.number_format or NUMBER_FORMAT
        region = None
        if arrays is not None:
            anchors = []
            for a in arrays:
                ref = range_ref(block.top + a.r0, block.left + a.c0, block.top + a.r1,
                                block.left + a.c1)
                anchor = ws.cell(block.top + a.r0, block.left + a.c0)
                anchor.value = ArrayFormula(ref, a.text)
                anchors.append(anchor)
            if self.array_block_cells is not None and rows * cols >= self.array_block_cells \
                    and _covers(arrays, rows, cols):
                # the formulas' other cells get no cell object: written into the file's XML
                first = paint(ws, block, FORMULA_FILL, number_format, only=anchors)
                region = add_formula_region(ws, block.top, block.left, block.bottom,
                                            block.right, first, anchors)
        else:
            for i in range(rows):
                for j in range(cols):
                    cell = formula.cell(i, j, env)
                    target = ws.cell(block.top + i, block.left + j)
                    target.value = ArrayFormula(target.coordinate, cell.text) if cell.array \
                        else cell.text
        if region is None:
            paint(ws, block, FORMULA_FILL, number_format)
        for r in sorted(step.skipped_rows):
            for c in range(cols):
                target = ws.cell(block.top + r, block.left + c)
                if region is not None and not target.has_style:
                    copy_style(region.style, target)  # as painted
                    region.cells.append(target)
                target.number_format, target.fill = SKIP_FORMAT, SKIP_FILL
        if step.masked_by is not None:
            mask = self.blocks[step.masked_by]
            if mask.name not in self._shaded_masks:  # the mask's own 0s are what it masks
                self._shaded_masks.add(mask.name)
                shade_masked(ws, mask, mask)
            shade_masked(ws, block, mask)
        if step.heatmap:
            heat_map(ws, block)
        self._name(block, row_labels, col_labels, declared_vector(step))

    def _table(self, placed: Placed) -> None:
        """Label/value lines in the table's slot, value three columns right."""
        top, left = placed.top, placed.left
        for i, (label, value) in enumerate(placed.item.rows):
            write_text(self.ws, top + i, left, text_of(label, self.params))
            write_text(self.ws, top + i, left + 3, text_of(value, self.params))

    # -- headers and names ----------------------------------------------------------------
    def _header(self, block: Block, equation: str, row_labels: Sequence,
                col_labels: Sequence, explanation: str, corner: str, above: int = 0,
                before: int = 0) -> None:
        """Name, equation and explanation at the top left of the block's slot (`_place`'s
        `above` and `before`), then the corner and the labels beside the data."""
        ws, top = self.ws, block.top - self.header_rows - above
        left = block.left - 1 - before
        self.name_cells[block.name] = (top, left)
        name_cell = write_text(ws, top, left, block.name)
        name_cell.font = NAME_FONT
        self._wrapped(block, top + 1, equation, EQUATION_FONT, left)
        if explanation:
            name_cell.comment = Comment(explanation, "attnsheets", width=300, height=120)
            if not self.compact:  # a compact header keeps it as the note only
                self._wrapped(block, top + 2, explanation, EXPLANATION_FONT, left)
        self._frame(block, corner, row_labels, col_labels)

    def _frame(self, block: Block, corner: str, row_labels: Sequence,
               col_labels: Sequence, corner_font: Font = LABEL_FONT) -> None:
        """The corner (None: left as it is), column labels above and row labels left of a
        block's data."""
        ws, label_col = self.ws, block.left - 1
        if corner is not None:
            write_text(ws, block.top - 1, label_col, corner).font = corner_font
        # a label cell that had no style copies the style record of the first such one
        # (setting a font hashes the whole style: seconds over a model's many labels)
        pattern = None
        for j, label in enumerate(col_labels):
            cell = write_text(ws, block.top - 1, block.left + j, label)
            blank = not cell.has_style
            if blank and pattern is not None:
                copy_style(pattern, cell)
                continue
            cell.font = LABEL_FONT
            cell.alignment = Alignment(horizontal="center")
            pattern = cell if blank else pattern
        pattern = None
        for i, label in enumerate(row_labels):
            cell = write_text(ws, block.top + i, label_col, label)
            blank = not cell.has_style
            if blank and pattern is not None:
                copy_style(pattern, cell)
                continue
            cell.font = LABEL_FONT
            pattern = cell if blank else pattern

    def _wrapped(self, block: Block, row: int, text: str, font: Font,
                 left: int | None = None) -> None:
        """A header line (equation, explanation) wrapped across the block's width, label
        column to last column, its row tall enough for the lines it takes: it never runs
        under the next block or off the printed page."""
        label_col = block.left - 1 if left is None else left
        cell = write_text(self.ws, row, label_col, text)
        cell.font = font
        cell.alignment = Alignment(wrap_text=True, vertical="top")
        if block.right > label_col:
            merge_row(self.ws, row, label_col, block.right)
        lines = wrapped_lines(text, block.right - label_col + 1, font.sz)
        if lines > 1 or font.sz < FONT_PT:
            current = self.ws.row_dimensions[row].height or 0
            line_pt = COMPACT_ROW_PT if self.compact else font.sz * 1.3
            self.ws.row_dimensions[row].height = max(current, lines * line_pt)

    def _name(self, block: Block, row_labels: list, col_labels: list,
              vector: str | None) -> None:
        if block.name in self.blocks:
            raise ValueError(f"block {block.name} placed twice")
        self.blocks[block.name] = block
        self.labels[block.name] = (row_labels, col_labels)
        if vector:
            self.vectors[block.name] = vector
        if self.name_blocks:
            define_name(self.ws.parent, block.name, block.address())

    def finish(self, values: Mapping[str, np.ndarray] | None = None) -> None:
        """Column widths that fit the numbers shown: `values` holds each block's numbers
        by name (inputs, and the reference's steps); without them, 4-decimal numbers. Text
        after the last unit (an exercise's notes) is a unit of its own."""
        if values is not None:
            self._whole_numbers_as_such(values)
        fit_columns(self.ws, self.blocks, self.labels, values)
        self.ws.freeze_panes = "A4"
        last = self.units[-1].bottom if self.units else 0
        if self.ws.max_row > last:
            self.units.append(PrintUnit(last + 1, self.ws.max_row, self.margin))
        self.text_rows.wrap(self.ws, self.units, self.max_width)
        if self.compact:  # every row under the title (a chart's too) as its text needs
            for row in range(4, max([self.ws.max_row, *(u.bottom for u in self.units)]) + 1):
                if self.ws.row_dimensions[row].height is None:
                    self.ws.row_dimensions[row].height = COMPACT_ROW_PT

    def _whole_numbers_as_such(self, values: Mapping[str, np.ndarray]) -> None:
        """A block of whole numbers (a hand example's inputs and products, a mask) shows
        them as 2 and −1, not 2.0000: General, which still shows the decimals of an
        edited input."""
        for name, block in self.blocks.items():
            block_values = values.get(name)
            if block.sheet != self.ws.title or block_values is None:
                continue
            block_values = np.asarray(block_values, dtype=float)
            if block_values.size != block.rows * block.cols or \
                    not np.all(np.isfinite(block_values)) or \
                    not np.all(block_values == np.round(block_values)) or \
                    np.abs(block_values).max() >= 1e9:
                continue
            array = constant_block_at(self.ws, block.top, block.left, block.bottom,
                                      block.right)
            if array is not None:  # one style for the whole block, no cells
                if array.style.number_format == NUMBER_FORMAT:
                    array.style.number_format = "General"
                continue
            region = formula_region_at(self.ws, block.top, block.left, block.bottom,
                                       block.right)
            if region is not None:  # one style, and the few cells the sheet holds there
                for cell in [region.style, *region.cells]:
                    if cell.number_format == NUMBER_FORMAT:
                        cell.number_format = "General"
                continue
            for row in self.ws.iter_rows(block.top, block.bottom, block.left, block.right):
                for cell in row:
                    if cell.number_format == NUMBER_FORMAT:
                        cell.number_format = "General"

    def fit_text_rows(self) -> None:
        """Each wrapped prose row as tall as its text now takes (again after the text is
        translated: Chinese glyphs are taller and wider than the English they replace)."""
        self.text_rows.fit(self.ws)


def paint(ws: Worksheet, block: Block, fill: PatternFill, number_format: str = "",
          only: list[Cell] | None = None) -> Cell:
    """Style every data cell (or `only` these cells of the block) like the first, the
    block's top left cell (one style record copied, not re-hashed); that first cell."""
    first = ws.cell(block.top, block.left)
    first.fill, first.font, first.border = fill, TEXT_FONT, CELL_BORDER
    if number_format:
        first.number_format = number_format
    shortcuts = openpyxl_shortcuts()  # asked once, not once a cell
    if only is not None:
        for cell in only:
            if cell is not first:
                copy_style(first, cell, shortcuts)
        return first
    for i in range(block.rows):
        for j in range(block.cols):
            if i or j:
                copy_style(first, ws.cell(block.top + i, block.left + j), shortcuts)
    return first


def _covers(arrays, rows: int, cols: int) -> bool:
    """Whether the array formulas fill every cell of a rows × cols block, each once."""
    filled = np.zeros((rows, cols), np.int64)
    for a in arrays:
        if not (0 <= a.r0 <= a.r1 < rows and 0 <= a.c0 <= a.c1 < cols):
            return False
        filled[a.r0:a.r1 + 1, a.c0:a.c1 + 1] += 1
    return bool((filled == 1).all())


def _plain(x: float) -> float | int:
    """Write whole numbers as integers so the sheet shows 1, not 1.0."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)
