"""Where everything on a kind's sheet goes, decided from its declaration before a cell is
written.

`place_sheet` turns the declared sections and the parameters (and the layout) into a
`SheetPlacement`: the list of placed things, in the order the writer writes them, each a
frozen `Placed` (role, name, sheet, first cell, rows × cols, print unit), and the print
units, extent and cell count that follow. It is pure: no workbook, the same list for the
same declaration. Everyone reads that list: the writer renders it (sheet/layout.py), the
size plan refuses a sheet beyond a limit from it (sheet/limits.py), the hand layout sets
its copies where it says, and `check`/`grade` hold a file's defined names to it
(checking/placement.py).

The rules it follows (sheet/layout.py shows what they look like):
- a block is its data cells under a header of HEADER_ROWS lines (name, equation,
  explanation, column labels) and right of one column of row labels;
- sections are placed top to bottom, each under a line of text (its title); the blocks of
  one band side by side, one empty column apart, wrapping onto a new line of the band
  before the line grows wider than `MAX_WIDTH` columns; each band line, with the text
  above it, is a print unit, and a page break falls only between units;
- a sheet small enough is compact, to print on one page: every block flows on from the one
  before across section ends, in lines of COMPACT_WIDTH columns, each line under one row of
  section titles (a section's title above its first block); headers of
  COMPACT_HEADER_ROWS lines and smaller charts. Compact when a trial placement of that kind
  fits COMPACT_WIDTH columns;
- a chart takes a rectangle of the band (its title above it) and reads its series from
  blocks placed before it; past CHART_MAX_SERIES × CHART_MAX_POINTS it is left out;
- the `hand` layout sets every matrix product between copies of its operands (the left one
  left of the result, the right one above it), and lines up a band's blocks so their data
  start on one row (`Product`).
"""

import dataclasses
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from workbook_builder.sheet.block import Area, Block
from workbook_builder.sheet.declare import (
    Chart,
    Env,
    Formula,
    Input,
    MatMul,
    Section,
    Series,
    Step,
    Table,
    size_of,
)
from workbook_builder.sheet.printing import PrintUnit

LAYOUTS = ("cells", "blocks", "hand")
HEADER_ROWS = 4  # name, equation, explanation, column labels
# columns of a band line: one landscape A4 page at 90 % holds 17 of the narrowest (9
# characters); 15 leaves room for the columns `finish` widens to fit wider numbers
MAX_WIDTH = 15
# a chart is drawn with at most this many series of at most this many points each (8
# queries over 16 keys); past that it would be a thicket, and the heatmap says more
CHART_MAX_SERIES, CHART_MAX_POINTS = 8, 16
# the compact layout: lines as wide as one landscape A4 page at 89 % holds columns of 9
# characters; a chart of this many columns and rows
COMPACT_WIDTH = 17
COMPACT_HEADER_ROWS = 3  # name, equation, column labels
COMPACT_CHART = (7, 7)
HAND_MAX_SIDE = 16  # rows or columns of any block: beyond that a product is no longer read by eye
TABLE_COLS = 4  # a table's label, and its value three columns right
FIRST_ROW = 4  # under the sheet's title, subtitle and legend
MARGIN = 1  # the column of section titles and of the first block's row labels

ROLES = ("text", "title", "input", "step", "copy", "table", "chart")


@dataclass(frozen=True)
class Placed(Area):
    """One thing placed on a sheet, the area it takes. `role`:
    - "input", "step": a block's data cells (`top`, `left`, `rows` × `cols`), named `name`;
      its header starts `above` rows higher and its labels `before` columns further left
      than a plain block's (a hand product's operands, a band lined up);
    - "copy": a hand product's live copy of an operand, named "RESULT:SOURCE";
    - "table", "chart": the slot the label/value lines or the chart (title row included)
      take;
    - "text": a section's title line across the sheet (column `left`);
    - "title": a section's title in a compact line's title row, `cols` wide.
    `unit` is the print unit it belongs to (an index into `SheetPlacement.units`); `item`
    the declaration it places (Input, Step, Table, Chart or Section), not compared."""

    role: str
    unit: int
    above: int = 0
    before: int = 0
    item: object = field(default=None, compare=False, repr=False)

    @property
    def block(self) -> Block:
        return Block(self.name, self.sheet, self.top, self.left, self.rows, self.cols)


@dataclass(frozen=True)
class SheetPlacement:
    """A sheet's placement: what goes where, in writing order, and what follows from it."""

    placed: tuple[Placed, ...]
    units: tuple[PrintUnit, ...]  # what a page break must not cut, top to bottom
    compact: bool
    bottom: int  # the last row and column anything placed takes (the title's 3 rows at least)
    right: int
    cells: int  # data cells of the inputs and steps (and of a hand product's copies)
    next_row: int  # the first row free under the last band
    array_cells: int = 0  # of the input blocks held as arrays (not among `cells`)

    @property
    def header_rows(self) -> int:
        return COMPACT_HEADER_ROWS if self.compact else HEADER_ROWS

    @property
    def max_width(self) -> int:
        return COMPACT_WIDTH if self.compact else MAX_WIDTH

    @property
    def blocks(self) -> dict[str, Block]:
        """Every named block (inputs and steps) by name, in sheet order."""
        return {p.name: p.block for p in self.placed if p.role in ("input", "step")}

    def copies_of(self, name: str) -> list[Block]:
        """The copies a hand product `name` reads, in the order `Product.copy_blocks` gives."""
        return [p.block for p in self.placed if p.role == "copy" and
                p.name.partition(":")[0] == name]


@dataclass(frozen=True)
class Limits:
    """Where a placement stops (PlanBeyond): a block ending below `rows`, right of `cols`,
    or past `cells` data cells; with `hand_side`, a block with a longer side
    (HandTooLarge). With `array_from`, an input block of that many cells or more (held as
    an array, not as cells: `sheet/constants.py`) counts towards `array_cells` instead of
    `cells`. None: no limit."""

    rows: int | None = None
    cols: int | None = None
    cells: int | None = None
    hand_side: int | None = None
    array_cells: int | None = None
    array_from: int | None = None


NO_LIMITS = Limits()


class PlanBeyond(Exception):
    """A planned block crosses a limit; raised at the first such block, before the rest of
    the sheet is even declared (a sheet far too large is refused at once). `blocks`: the
    named blocks placed so far, this one included; `arrays`: those of them held as arrays
    (counted towards `array_cells`, not `cells`)."""

    def __init__(self, block: Block, blocks: dict[str, Block], limit: str = "",
                 arrays: frozenset[str] = frozenset()):
        super().__init__(block.name)
        self.block, self.blocks, self.arrays = block, blocks, arrays
        self.limit = limit  # "cells" or "array_cells" when it is a count that is crossed


class HandTooLarge(Exception):
    """A block of the planned sheet is longer or wider than the hand layout takes."""

    def __init__(self, block: Block):
        super().__init__(block.name)
        self.block = block


def place_sheet(sections: Iterable[Section], params, layout: str = "cells", *,
                sheet: str = "Sheet", first_row: int = FIRST_ROW,
                glued_from: int | None = None, limits: Limits = NO_LIMITS,
                compact: bool | None = None) -> SheetPlacement:
    """Where every declared section goes on sheet `sheet`, from row `first_row` on;
    `glued_from`: the first row of text lines above it kept on the first unit's page (the
    sheet's title). `compact` None: decided here (compact when it fits COMPACT_WIDTH
    columns). Sections are drawn from `sections` as they are placed: a placement stopped at
    a limit has drawn only the ones before (a million flash tiles are never all declared)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}")
    sections = iter(sections)
    where = dict(params=params, layout=layout, sheet=sheet, first_row=first_row,
                 glued_from=glued_from)
    if compact is None:
        seen: list[Section] = []  # what the compact trial drew, placed again below

        def drawn() -> Iterator[Section]:
            for sec in sections:
                seen.append(sec)
                yield sec

        compact = _compact_fits(drawn(), limits, **where)
        sections = itertools.chain(seen, sections)
    placer = _Placer(compact=compact, limits=limits, **where)
    placer.place(sections)
    return placer.result()


def _compact_fits(sections: Iterator[Section], limits: Limits, **where) -> bool:
    """Whether the compact placement fits the width of one landscape page (its lines then
    fill the pages one after the other): tried with the same rows and cells limits, stopped
    as soon as a block is wider than COMPACT_WIDTH columns (a hand block beyond
    HAND_MAX_SIDE is not compact either)."""
    hand_side = limits.hand_side or (HAND_MAX_SIDE if where["layout"] == "hand" else None)
    trial = _Placer(compact=True, limits=dataclasses.replace(
        limits, cols=COMPACT_WIDTH, hand_side=hand_side), **where)
    try:
        trial.place(sections)
    except (PlanBeyond, HandTooLarge):
        return False
    return trial.right <= COMPACT_WIDTH


@dataclass
class _Line:
    """The band line being filled: its first row, the next free column, its lowest row so
    far, and the first row of its print unit (text lines kept with it start there)."""

    top: int
    left: int
    bottom: int
    unit_top: int


class _Placer:
    """One placement, item by item (used by `place_sheet` only)."""

    def __init__(self, params, layout: str, sheet: str, first_row: int,
                 glued_from: int | None, limits: Limits, compact: bool):
        self.params, self.layout, self.sheet, self.limits = params, layout, sheet, limits
        self.compact = compact
        self.header_rows = COMPACT_HEADER_ROWS if compact else HEADER_ROWS
        self.max_width = COMPACT_WIDTH if compact else MAX_WIDTH
        self.row = first_row
        self.glued = glued_from
        self.line: _Line | None = None
        self.placed: list[Placed] = []
        self.units: list[PrintUnit] = []
        self.blocks: dict[str, Block] = {}
        self.titles: list[tuple[int, Section]] = []  # the line's (column, section)
        self.pending: Section | None = None  # a compact section whose title is not placed
        self.pad = 0  # rows above every block of the band (hand: its tallest operand)
        self.bottom, self.right = 3, 1  # the title's three lines
        self.cells = 0
        self.array_cells = 0  # of input blocks held as arrays (Limits.array_from)
        self.arrays: set[str] = set()  # their names

    def result(self) -> SheetPlacement:
        return SheetPlacement(tuple(self.placed), tuple(self.units), self.compact,
                              self.bottom, self.right, self.cells, self.row,
                              self.array_cells)

    # -- sections, bands, lines -------------------------------------------------------------
    def place(self, sections: Iterable[Section]) -> None:
        if self.compact:
            self._place_compact(sections)
            return
        for sec in sections:
            self._add("text", "", self.row, MARGIN, 1, 1, item=sec)
            self._grow(self.row, MARGIN)
            self._glue(self.row)
            self.row += 1
            for band in sec.bands:
                self.line = _Line(self.row, MARGIN, self.row, self._take_glued(self.row))
                self._band(band)
                self._end_line()

    def _place_compact(self, sections: Iterable[Section]) -> None:
        """Every block flowing on from the one before, across sections, in lines of
        COMPACT_WIDTH columns; each section's title in its line's title row, above the
        section's first block."""
        top = self.row
        self.line = _Line(top + 1, MARGIN, top + 1, self._take_glued(top))
        for sec in sections:
            self.pending = sec
            for band in sec.bands:
                self._band(band)
        self._end_line()

    def _band(self, band) -> None:
        if self.layout == "hand":
            self.pad = self._rows_above(band)
        for item in band:
            if isinstance(item, Input):
                self._input(item)
            elif isinstance(item, Step):
                self._step(item)
            elif isinstance(item, Chart):
                self._chart(item)
            else:
                self._table(item)

    def _glue(self, row: int) -> None:
        """Keep text lines from `row` on with the unit that follows them."""
        if self.glued is None:
            self.glued = row

    def _take_glued(self, top: int) -> int:
        glued, self.glued = self.glued, None
        return top if glued is None else glued

    def _end_line(self) -> None:
        self._close_unit()
        self.row = self.line.bottom + 2
        self.line = None

    def _close_unit(self) -> None:
        """The line is a print unit; the section titles of its title row each span up to
        the next one."""
        line = self.line
        right = max(MARGIN, line.left - 2)
        self.units.append(PrintUnit(line.unit_top, line.bottom, right))
        # the last title may run on over the empty columns to the sheet's right edge so
        # far: a title over one narrow block would wrap into a row taller than a page's share
        last_right = max(right, min(self.max_width, self.right))
        titles, self.titles = self.titles, []
        for n, (left, sec) in enumerate(titles):
            last = max(left, titles[n + 1][0] - 2 if n + 1 < len(titles) else last_right)
            self._add("title", "", line.top - 1, left, 1, last - left + 1, item=sec,
                      unit=len(self.units) - 1)
            self._grow(line.top - 1, last)

    def _room(self, width: int) -> None:
        """Start a new line of the band when `width` more columns would make it wider
        than `max_width` (a band line never needs a page break inside it)."""
        line = self.line
        if line.left == MARGIN or line.left - 1 + width <= self.max_width:
            return
        self._close_unit()
        # a compact line's first row holds its section titles, and parts it from the last
        top = line.bottom + (1 if self.compact else 2)
        self.line = _Line(top + self.compact, MARGIN, top + self.compact, top)

    def _line_title(self, left: int) -> None:
        """The pending section title goes above the block placed at column `left`."""
        if self.pending is not None:
            self.titles.append((left, self.pending))
            self.pending = None

    # -- items ------------------------------------------------------------------------------
    def _env(self) -> Env:
        return Env(self.blocks, {}, self.params)

    def _input(self, item: Input) -> None:
        self._reserve("input", item.name, size_of(item.rows, self.params),
                      size_of(item.cols, self.params), item)

    def _step(self, step: Step) -> None:
        env = self._env()
        product = Product.of(step.formula, env) if self.layout == "hand" else None
        rows, cols = step.formula.shape(env)
        if product is None:
            self._reserve("step", step.name, rows, cols, step)
            return
        self.cells += product.copied_cells  # counted before the block's own check
        me = self._reserve("step", step.name, rows, cols, step, product.above,
                           product.before)
        for copy in product.copy_blocks(me).values():
            self._add("copy", copy.name, copy.top, copy.left, copy.rows, copy.cols)

    def _table(self, table: Table) -> None:
        """Label/value lines in the band's next slot, value three columns right."""
        top, left = self._slot(TABLE_COLS, len(table.rows))
        self._add("table", "", top, left, len(table.rows), TABLE_COLS, item=table)
        self._grow(top + len(table.rows) - 1, left + TABLE_COLS - 1)

    def _chart(self, chart: Chart) -> None:
        """The chart's title row and the chart under it in the band's next slot; a chart
        beyond CHART_MAX_SERIES × CHART_MAX_POINTS is left out, with its slot."""
        if drawn_series(chart, self.blocks) is None:
            return
        cols, rows = chart_size(chart, self.compact)
        top, left = self._slot(cols, rows + 1)
        self._add("chart", "", top, left, rows + 1, cols, item=chart)
        self._grow(top, left + cols - 1)  # the title, merged across the chart's width

    def _slot(self, cols: int, rows: int) -> tuple[int, int]:
        """The top-left cell of the band's next `rows` × `cols` slot (a table, a chart),
        with one empty column after it."""
        self._room(cols)
        line = self.line
        top, left = line.top, line.left
        self._line_title(left)
        line.left = left + cols + 1
        line.bottom = max(line.bottom, top + rows - 1)
        return top, left

    def _reserve(self, role: str, name: str, rows: int, cols: int, item,
                 above: int = 0, before: int = 0) -> Block:
        """The block's data cells at the band's next slot, under its header; `above` more
        rows under the equation and `before` more columns left of the row labels (where
        the hand layout sets a product's operands). Checked against the limits."""
        if self.layout == "hand":
            above = max(above, self.pad)
        self._room(cols + 1 + before)
        line = self.line
        top, label_col = line.top, line.left
        self._line_title(label_col)
        block = Block(name, self.sheet, top + self.header_rows + above,
                      label_col + 1 + before, rows, cols)
        line.left = block.right + 2
        line.bottom = max(line.bottom, block.bottom)
        self._add(role, name, block.top, block.left, rows, cols, above, before, item)
        self.blocks[name] = block
        limits = self.limits
        if role == "input" and limits.array_from is not None and \
                rows * cols >= limits.array_from:
            self.array_cells += rows * cols
            self.arrays.add(name)
        else:
            self.cells += rows * cols
        self._grow(block.bottom, block.right)
        if (limits.rows is not None and block.bottom > limits.rows) or \
                (limits.cols is not None and block.right > limits.cols):
            raise PlanBeyond(block, dict(self.blocks))
        if limits.cells is not None and self.cells > limits.cells:
            raise PlanBeyond(block, dict(self.blocks), "cells", frozenset(self.arrays))
        if limits.array_cells is not None and self.array_cells > limits.array_cells:
            raise PlanBeyond(block, dict(self.blocks), "array_cells", frozenset(self.arrays))
        if limits.hand_side is not None and max(rows, cols) > limits.hand_side:
            raise HandTooLarge(block)
        return block

    def _rows_above(self, band) -> int:
        """The most rows any product of the band needs between its equation and its column
        labels (a product's inner size may come from a block of the same band)."""
        scratch, most = dict(self.blocks), 0
        for item in band:
            env = Env(scratch, {}, self.params)
            if isinstance(item, Step):
                product = Product.of(item.formula, env)
                most = max(most, product.above if product else 0)
                rows, cols = item.formula.shape(env)
            elif isinstance(item, Input):
                rows, cols = size_of(item.rows, self.params), size_of(item.cols, self.params)
            else:
                continue
            scratch[item.name] = Block(item.name, self.sheet, 1, 1, rows, cols)
        return most

    def _add(self, role: str, name: str, top: int, left: int, rows: int, cols: int,
             above: int = 0, before: int = 0, item=None, unit: int | None = None) -> None:
        self.placed.append(Placed(name, self.sheet, top, left, rows, cols, role=role,
                                  unit=len(self.units) if unit is None else unit,
                                  above=above, before=before, item=item))

    def _grow(self, row: int, col: int) -> None:
        self.bottom, self.right = max(self.bottom, row), max(self.right, col)


# -- charts ---------------------------------------------------------------------------------
def chart_size(chart: Chart, compact: bool) -> tuple[int, int]:
    """Columns and rows of the chart (smaller in a compact line)."""
    if compact:
        return min(chart.cols, COMPACT_CHART[0]), min(chart.rows, COMPACT_CHART[1])
    return chart.cols, chart.rows


def drawn_series(chart: Chart, blocks: dict[str, Block]) -> list[Series] | None:
    """The chart's series, one per column (row) where an index is left open; None past
    CHART_MAX_SERIES series or CHART_MAX_POINTS points (the chart is left out)."""
    series = [one for s in chart.series for one in _every_series(s, blocks)]
    points = max((_series_points(s, blocks) for s in series), default=0)
    return None if len(series) > CHART_MAX_SERIES or points > CHART_MAX_POINTS \
        else series


def _every_series(series: Series, blocks: dict[str, Block]) -> list[Series]:
    """A series, or with index None one per column (row) of its block."""
    if series.index is not None:
        return [series]
    block = blocks[series.block]
    count = block.cols if series.along == "col" else block.rows
    return [Series(series.block, i, series.along) for i in range(count)]


def _series_points(series: Series, blocks: dict[str, Block]) -> int:
    block = blocks[series.block]
    return block.rows if series.along == "col" else block.cols


# -- the hand layout's products -------------------------------------------------------------
@dataclass(frozen=True)
class Product:
    """A step C = A·B or A·Bᵀ (+ bias) as the hand layout sets it (Aᵀ·B is written as in
    `cells`): the result's block has
    `above` more header rows (the right operand and the bias) and `before` more columns
    (the left operand and its row labels) than in `cells`."""

    a: Block
    a_cols: tuple[int, int]
    b: Block
    b_cols: tuple[int, int]
    transposed: bool   # A·Bᵀ: the right operand is B's slice transposed
    bias: Block | None

    @classmethod
    def of(cls, formula: Formula, env: Env) -> "Product | None":
        """The product a step's formula computes, or None for any other formula."""
        if not isinstance(formula, MatMul) or formula.transpose == "a":
            return None
        a, b, a_cols, b_cols = formula._slices(env)
        bias = env[formula.plus] if formula.plus else None
        return cls(a, a_cols, b, b_cols, formula.transpose == "b", bias)

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

    def copy_blocks(self, me: Block) -> dict[str, Block]:
        """Where the copies go around the result block `me`: "A" (k columns) left of it,
        "B" (k rows) above it, "BIAS" (one row) under B; each named "RESULT:SOURCE"."""
        k = self.inner
        copies = {
            "A": Block(f"{me.name}:{self.a.name}", me.sheet, me.top, me.left - 1 - k,
                       self.a.rows, k),
            "B": Block(f"{me.name}:{self.b.name}", me.sheet,
                       me.top - 1 - (self.bias is not None) - k, me.left, k, self.width)}
        if self.bias is not None:
            copies["BIAS"] = Block(f"{me.name}:{self.bias.name}", me.sheet, me.top - 2,
                                   me.left, 1, self.width)
        return copies
