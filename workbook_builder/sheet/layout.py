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

The `hand` layout (sheet/hand_layout.py) writes like `cells` but sets every matrix product
between live copies of its operands.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from openpyxl.cell.cell import Cell
from openpyxl.chart import BarChart, LineChart, ScatterChart
from openpyxl.chart import Series as ChartData
from openpyxl.chart.data_source import AxDataSource
from openpyxl.chart.layout import Layout, ManualLayout
from openpyxl.chart.series import SeriesLabel, StrRef
from openpyxl.comments import Comment
from openpyxl.drawing.spreadsheet_drawing import AnchorMarker, TwoCellAnchor
from openpyxl.drawing.text import CharacterProperties, ParagraphProperties
from openpyxl.formatting.rule import ColorScaleRule, Rule
from openpyxl.styles import Alignment, Border, Font, PatternFill, Side
from openpyxl.styles.differential import DifferentialStyle
from openpyxl.styles.numbers import NumberFormat
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.formula import ArrayFormula
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.engines.internals.of_openpyxl import copy_style, openpyxl_shortcuts
from workbook_builder.sheet.block import Block
from workbook_builder.sheet.cells import write_text
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
    Series,
    Step,
    declared_vector,
    dims,
    text_of,
)
from workbook_builder.sheet.places import (  # noqa: F401 (CHART_MAX_*: kinds read them here)
    CHART_MAX_POINTS,
    CHART_MAX_SERIES,
    COMPACT_HEADER_ROWS,
    HEADER_ROWS,
    LAYOUTS,
    MAX_WIDTH,
    Placed,
    SheetPlacement,
    drawn_series,
    place_sheet,
)
from workbook_builder.sheet.printing import (
    EXPLANATION_PT,
    FONT_NAME,
    FONT_PT,
    MIN_SCALE,
    PrintUnit,
    printable,
)
from workbook_builder.sheet.refs import cell_ref, quote_sheet, range_ref
from workbook_builder.sheet.widths import fit_columns

INPUT_FILL = PatternFill("solid", fgColor="FFF2CC")    # pale yellow: a value you may edit
FORMULA_FILL = PatternFill("solid", fgColor="DDEBF7")  # pale blue: a live formula
SKIP_FILL = PatternFill("solid", fgColor="D9D9D9")     # grey: a tile the algorithm skips
SKIP_FORMAT = '"skip";"skip";"skip"'                   # the cell still holds a number (0)
MASKED_FILL = PatternFill("solid", fgColor="D9D9D9", bgColor="D9D9D9")  # grey: masked out
MASKED_FORMAT = '"–";"–";"–"'                          # the cell still holds its 0
MASKED_FORMAT_ID = 300  # a custom format's id in the rule's style, apart from the cells'
# one sans-serif family on every cell (sheet/printing.py says why this one)
NAME_FONT = Font(name=FONT_NAME, size=FONT_PT, bold=True, color="1F4E79")
EQUATION_FONT = Font(name=FONT_NAME, size=FONT_PT, italic=True, color="404040")
EXPLANATION_FONT = Font(name=FONT_NAME, size=EXPLANATION_PT, italic=True, color="595959")
LABEL_FONT = Font(name=FONT_NAME, size=FONT_PT, color="7F7F7F")
TEXT_FONT = Font(name=FONT_NAME, size=FONT_PT)
BOLD_FONT = Font(name=FONT_NAME, size=FONT_PT, bold=True)
TITLE_FONT = Font(name=FONT_NAME, size=14, bold=True)
THIN = Side(style="thin", color="BFBFBF")
CELL_BORDER = Border(left=THIN, right=THIN, top=THIN, bottom=THIN)  # printed in place of
NUMBER_FORMAT = "0.0000"                                             # gridlines
# a compact sheet's rows: as high as the 10 pt font needs
COMPACT_ROW_PT = 12.75
TITLE_ROWS = 3  # the sheet's title, subtitle and legend, 15 pt each
WRAP_ROWS = 3  # room for section titles and equations that wrap onto a second line
# the last row of a compact sheet that fits one landscape page at MIN_SCALE
COMPACT_ROWS = TITLE_ROWS - WRAP_ROWS + int(
    (printable("landscape")[1] * 100 / MIN_SCALE * 0.95 - TITLE_ROWS * 15.0) / COMPACT_ROW_PT)


class SheetWriter:
    """Writes blocks onto one worksheet and names them in the workbook."""

    legend = "yellow = input you may edit    blue = live formula    grey – = masked (holds 0)"

    def __init__(self, ws: Worksheet, layout: str, params=None,
                 label_sets: Mapping[str, Sequence] | None = None, first_row: int = 4):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}")
        self.ws = ws
        self.layout = layout
        self.params = params
        # read only; kept as given (a kind may make its label lists when asked)
        self.label_sets = label_sets if label_sets is not None else {}
        self.row = first_row
        self.margin = 1
        self.max_width = MAX_WIDTH
        self.units: list[PrintUnit] = []  # what a page break must not cut, top to bottom
        self._glued: int | None = None  # first row of text lines kept with the next unit
        self._text_rows: list[int] = []  # wrapped across their unit's width by `finish`
        self.blocks: dict[str, Block] = {}
        self.labels: dict[str, tuple[list, list]] = {}
        self.name_cells: dict[str, tuple[int, int]] = {}  # block -> its name cell (row, col)
        self.vectors: dict[str, str] = {}
        # an exercise's hidden answer key lays the same blocks out again: unnamed (the
        # names stay on the visible sheet), its inputs linked to the visible inputs
        self.name_blocks = True
        self.linked_inputs: dict[str, Block] | None = None
        # an input block this large (cells) and larger is kept as an array, not as cells
        # (`sheet/constants.py`); None: every input is cells
        self.array_block_cells: int | None = None
        # None: decided by `write` (place_sheet: compact when it fits a page's width)
        self.compact: bool | None = None
        self.placement: SheetPlacement | None = None  # what `write` rendered
        self._shaded_masks: set[str] = set()
        self.tr: Callable[[str], str] = str  # the sheet's language, for chart titles

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
        self._text_rows += [1, 2, 3]

    def wrap_text_row(self, row: int) -> None:
        """Wrap the prose in column A of `row` across its unit's width at `finish`."""
        self._text_rows.append(row)

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
            self._text_rows.append(placed.top)
        elif placed.role == "title":  # a section's title in a compact line's title row
            self._section_cell(placed.top, placed.left, placed.left + placed.cols - 1,
                               self._section_title(placed.item), placed.item.bold)
        elif placed.role == "input":
            self._input(placed, inputs.get(placed.name))
        elif placed.role == "step":
            self._step(placed)
        elif placed.role == "table":
            self._table(placed)
        elif placed.role == "chart":
            self._chart(placed)
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
            self.ws.merge_cells(start_row=row, start_column=left, end_row=row,
                                end_column=right)
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
                first = _paint(ws, block, FORMULA_FILL, number_format, only=anchors)
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
            _paint(ws, block, FORMULA_FILL, number_format)
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
                self._shade_masked(mask, mask)
            self._shade_masked(block, mask)
        if step.heatmap:
            ws.conditional_formatting.add(
                block.whole().replace("$", ""),
                ColorScaleRule(start_type="num", start_value=0, start_color="FFFFFF",
                               end_type="num", end_value=1, end_color="F8696B"))
        self._name(block, row_labels, col_labels, declared_vector(step))

    def _shade_masked(self, block: Block, mask: Block) -> None:
        """Grey with a dash wherever the mask's cell is 0: a live rule reading the mask, so
        the cell keeps the 0 the next formulas add up."""
        masked = DifferentialStyle(fill=MASKED_FILL, numFmt=NumberFormat(
            numFmtId=MASKED_FORMAT_ID, formatCode=MASKED_FORMAT))
        self.ws.conditional_formatting.add(
            block.whole().replace("$", ""),
            Rule(type="expression", formula=[f"{cell_ref(mask.top, mask.left)}=0"],
                 stopIfTrue=True, dxf=masked))

    def _table(self, placed: Placed) -> None:
        """Label/value lines in the table's slot, value three columns right."""
        top, left = placed.top, placed.left
        for i, (label, value) in enumerate(placed.item.rows):
            write_text(self.ws, top + i, left, text_of(label, self.params))
            write_text(self.ws, top + i, left + 3, text_of(value, self.params))

    def _chart(self, placed: Placed) -> None:
        """The chart's title in the first row of its slot and the chart below it, every
        series a reference to the live cells of a placed block. An exercise's hidden key
        keeps the slot empty (nobody sees it; its blocks stay where the visible sheet has
        them)."""
        if not self.name_blocks:
            return
        chart, top, left = placed.item, placed.top, placed.left
        cols, rows = placed.cols, placed.rows - 1
        series = drawn_series(chart, self.blocks)
        write_text(self.ws, top, left, text_of(chart.title, self.params)).font = NAME_FONT
        if cols > 1:  # the title spans the chart (and the sheet's extent its slot)
            self.ws.merge_cells(start_row=top, start_column=left, end_row=top,
                                end_column=left + cols - 1)
        drawn = {"scatter": ScatterChart, "line": LineChart, "bar": BarChart}[chart.kind]()
        if chart.kind == "scatter":  # the schema requires a style: lines and markers
            drawn.scatterStyle = "lineMarker"
        drawn.x_axis.title = self.tr(chart.x_title) if chart.x_title else None
        drawn.y_axis.title = self.tr(chart.y_title) if chart.y_title else None
        if chart.legend_title:
            _legend_title(drawn, self.tr(chart.legend_title))
        drawn.x_axis.delete = drawn.y_axis.delete = False  # openpyxl 3.1 hides them otherwise
        drawn.x_axis.axPos = "b"
        if chart.log_x is not None:
            drawn.x_axis.scaling.logBase = chart.log_x
        if chart.y_range is not None:
            drawn.y_axis.scaling.min, drawn.y_axis.scaling.max = chart.y_range
        drawn.x_axis.tickLblPos = "low"  # under the plot, also when values go below 0
        drawn.y_axis.number_format = "General"  # not the cells' four decimals
        for one in series:
            drawn.series.append(self._chart_data(one, chart.kind))
        # anchored to its cells, corner to corner: whatever height its rows take (a
        # translated line, a compact row), the chart stays inside them, so a page break,
        # which falls only between units, never cuts it, and the print area holds it
        drawn.anchor = TwoCellAnchor(editAs="twoCell",
                                     _from=AnchorMarker(col=left - 1, row=top),
                                     to=AnchorMarker(col=left - 1 + cols, row=top + rows))
        self.ws.add_chart(drawn)

    def _chart_data(self, series: Series, kind: str):
        """Values, x values (categories) and name of one series, as sheet references."""
        block = self.blocks[series.block]
        count = block.cols if series.along == "col" else block.rows
        if not 0 <= series.index < count:
            raise ValueError(f"chart series {series.index} is outside block {block.name}")
        sheet = quote_sheet(block.sheet)
        if series.along == "col":
            column = block.left + series.index
            values = range_ref(block.top, column, block.bottom, column, True, True)
            labels, name = block.row_labels(), cell_ref(block.top - 1, column, True, True)
            if block.cols == 1:  # "max", "α": the block's name says which it is
                name = cell_ref(*self.name_cells[block.name], True, True)
        else:
            row = block.top + series.index
            values = range_ref(row, block.left, row, block.right, True, True)
            labels, name = block.col_labels(), cell_ref(row, block.left - 1, True, True)
        data = ChartData(f"{sheet}!{values}",
                         xvalues=f"{sheet}!{labels}" if kind == "scatter" else None)
        data.smooth = False  # straight segments: a smoothed curve overshoots the points
        if kind == "scatter":
            data.marker.symbol = "circle"
        else:
            data.cat = AxDataSource(strRef=StrRef(f=f"{sheet}!{labels}"))
        data.tx = SeriesLabel(strRef=StrRef(f=f"{sheet}!{name}"))
        return data

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
            self.ws.merge_cells(start_row=row, start_column=label_col, end_row=row,
                                end_column=block.right)
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
        if not self.name_blocks:
            return
        wb = self.ws.parent
        wb.defined_names[block.name] = DefinedName(block.name, attr_text=block.address())

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
        self._wrap_text_rows()
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

    def _wrap_text_rows(self) -> None:
        """Each line of prose wrapped within its unit's columns (never printed past the
        page's right edge), its row as tall as the lines it takes."""
        self._text_columns: dict[int, int] = {}
        for row in self._text_rows:
            unit = next((u for u in self.units if u.top <= row <= u.bottom), None)
            cell = self.ws.cell(row, self.margin)
            if unit is None or not isinstance(cell.value, str):
                continue
            right = min(max(unit.right, self.margin + 5), self.margin + self.max_width - 1)
            self.ws.merge_cells(start_row=row, start_column=self.margin, end_row=row,
                                end_column=right)
            cell.alignment = Alignment(wrap_text=True, vertical="top")
            self._text_columns[row] = right - self.margin + 1
        self.fit_text_rows()

    def fit_text_rows(self) -> None:
        """Each wrapped prose row as tall as its text now takes (again after the text is
        translated: Chinese glyphs are taller and wider than the English they replace)."""
        for row, columns in getattr(self, "_text_columns", {}).items():
            cell = self.ws.cell(row, self.margin)
            if not isinstance(cell.value, str):
                continue
            size = cell.font.sz or FONT_PT
            lines = wrapped_lines(cell.value, columns, size)
            cjk = _has_cjk(cell.value)  # a CJK line prints about 1.6 of its font size high
            height = lines * size * (1.7 if cjk else 1.3)
            if lines > 1 or (cjk and height > 15.0):  # 15 pt: a default row
                self.ws.row_dimensions[row].height = round(height, 2)


def _has_cjk(text: str) -> bool:
    return any(ord(ch) > 0x2E80 for ch in text)


def _sized(title, size: int) -> None:
    """A chart or axis title in bold of `size` hundredths of a point."""
    for paragraph in title.tx.rich.p:
        paragraph.pPr = ParagraphProperties(defRPr=CharacterProperties(sz=size, b=True))
        for piece in paragraph.r or []:
            piece.rPr = CharacterProperties(sz=size, b=True)


def _legend_title(drawn, text: str) -> None:
    """A title over the chart's legend (the file format has no legend title): the chart's
    own title, small, set at the top right above the legend, which sits on the right."""
    drawn.legend.position = "r"
    drawn.title = text
    drawn.title.overlay = True  # over the plot's top right corner, taking no height of it
    _sized(drawn.title, 1000)  # 10 pt: 8 pt or more at the smallest print scale
    drawn.title.layout = Layout(manualLayout=ManualLayout(x=0.78, y=0.02, xMode="edge",
                                                          yMode="edge"))


def wrapped_lines(text: str, columns: int, size: float) -> int:
    """Lines a text of font `size` takes wrapped across `columns` 9-digit columns (an
    estimate that errs long: a short row would cut the last line off)."""
    per_line = max(1, int(columns * 9 * FONT_PT / size * 0.85))
    wide = sum(2 if ord(ch) > 0x2E80 else 1 for ch in text)  # CJK takes two widths
    return max(1, -(-wide // per_line))


def _paint(ws: Worksheet, block: Block, fill: PatternFill, number_format: str = "",
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
