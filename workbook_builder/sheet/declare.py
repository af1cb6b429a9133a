"""The vocabulary a kind is declared in: inputs, steps, the formulas that fill them, and the
sections that place them on the sheet.

A kind returns its sheet as a list of `Section`s for given parameters. Each section is a
bold header line and bands of blocks placed side by side; a block is an `Input` (constants a
user may edit) or a `Step` (a formula block). A step's formula is one object that writes
both layouts: a cell reference per cell in `cells`, the whole block in `blocks`.

Placeholders in formula templates:
    {NAME}        a block (upper case): the cell this cell reads in `cells` (a 1-row or
                  1-column block broadcasts along the missing axis), the whole block in
                  `blocks`; aliases bind short names to blocks: Map("={P}/{L}", P="EXP")
    {ROW_LABEL}   this block's row label (its column label: {COL_LABEL}), e.g. a position
    {param}       a parameter (lower case), e.g. {d_k}
Sizes are parameter names ("seq_len"), numbers, or functions of the parameters; a size
given as a name is also what `build` infers from an input given by hand.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.refs import range_ref


@dataclass(frozen=True)
class Dim:
    """A size named after the parameter an input given by hand sets, with its value when
    that parameter is unset: Dim("d_v", lambda p: p.value_width)."""

    name: str
    value: Callable[[Any], int]


Size = str | int | Dim | Callable[[Any], int]
# a named label set of the sheet ("tokens", "src", …), a prefix numbered along the axis
# ("d" -> d1, d2, …), an explicit list, or a function of the parameters
Labels = str | Sequence | Callable[[Any], Sequence]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SELF_LABELS = {"ROW_LABEL", "COL_LABEL"}


def size_of(size: Size, params) -> int:
    if isinstance(size, Dim):
        return int(size.value(params))
    if isinstance(size, str):
        return int(getattr(params, size))
    if callable(size):
        return int(size(params))
    return int(size)


def size_name(size: Size) -> str | None:
    """The parameter a size infers (None: it is derived, not inferred)."""
    return size.name if isinstance(size, Dim) else size if isinstance(size, str) else None


_PARAM_SLOT = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def text_of(template: str, params) -> str:
    """A header, equation or note with its {param} slots filled from the parameters; other
    braces (h_{t−1}) stay as written."""
    def fill(match: re.Match) -> str:
        value = getattr(params, match.group(1), None)
        return match.group(0) if value is None else str(value)

    return _PARAM_SLOT.sub(fill, template) if params is not None else template


@dataclass
class Env:
    """What a formula sees while its block is written: the blocks placed so far, their
    labels, the block being written (`me`) and the parameters."""

    blocks: dict[str, Block]
    labels: dict[str, tuple[list, list]]
    params: Any
    me: Block | None = None
    # "row", "col" or "one" for blocks declared as a single row, column or cell (a bias
    # row, a row max): those broadcast; any other block is read cell for cell
    vectors: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Block:
        return self.blocks[name]


# -- formulas ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One cell's formula; `array` marks a single-cell array formula (needed where a
    function must see a range as an array in every Excel, e.g. MAX(IF(range…)))."""

    text: str
    array: bool = False


@dataclass(frozen=True)
class Array:
    """One array formula over rows r0..r1, columns c0..c1 of the block (0-based, inclusive)."""

    r0: int
    c0: int
    r1: int
    c1: int
    text: str


class Formula:
    """Fills one step block. Subclasses give the cell formula; `arrays` the array formulas
    of the `blocks` layout (None: one formula per cell there too)."""

    def shape(self, env: Env) -> tuple[int, int] | None:
        return None

    def labels(self, env: Env) -> tuple[list, list] | None:
        return None

    def cell(self, i: int, j: int, env: Env) -> Cell:
        raise NotImplementedError

    def arrays(self, env: Env) -> list[Array] | None:
        return None


def _whole_block(env: Env, text: str) -> list[Array]:
    """One array formula over the whole block being written."""
    return [Array(0, 0, env.me.rows - 1, env.me.cols - 1, text)]


def _broadcast_ref(block: Block, vector: str | None, i: int, j: int) -> str:
    """The cell of `block` that cell (i, j) reads: the same cell of a matrix; along its
    single row or column (anchored there) for a block declared as one row or column."""
    if vector == "one":
        return block.fixed(0, 0)
    if vector == "col":
        return block.row(i)
    if vector == "row":
        return block.col(j)
    return block.cell(i, j)


def vector_kind(rows: Size | None, cols: Size | None,
                formula: Formula | None = None) -> str | None:
    """"one", "col" or "row" for a block declared with a literal size 1 (or produced per
    row), else None."""
    one_row, one_col = rows == 1, cols == 1 or isinstance(formula, Rows)
    return "one" if one_row and one_col else "col" if one_col else "row" if one_row else None


@dataclass(frozen=True)
class Map(Formula):
    """An elementwise formula over blocks, e.g. Map("={P}/{L}", P="EXP", L="ROW_SUM").
    Its shape is the broadcast of the blocks it reads (or `rows` × `cols`)."""

    template: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    rows: Size | None = None
    cols: Size | None = None
    per_cell: bool = False          # one formula per cell in `blocks` too
    labels_from: str | None = None  # the block whose labels this one takes

    def __init__(self, template: str, rows: Size | None = None, cols: Size | None = None,
                 per_cell: bool = False, labels_from: str | None = None, **aliases: str):
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "cols", cols)
        object.__setattr__(self, "per_cell", per_cell)
        object.__setattr__(self, "labels_from", labels_from)

    def _refs(self, env: Env) -> list[str]:
        names = []
        for slot in _PLACEHOLDER.findall(self.template):
            name = self.aliases.get(slot, slot)
            if slot not in _SELF_LABELS and name.isupper() and name not in names:
                names.append(name)
        return names

    def shape(self, env):
        if self.rows is not None and self.cols is not None:
            return size_of(self.rows, env.params), size_of(self.cols, env.params)
        blocks = [env[name] for name in self._refs(env)]
        return max(b.rows for b in blocks), max(b.cols for b in blocks)

    def labels(self, env):
        if self.labels_from is not None:
            return env.labels[self.labels_from]
        rows, cols = self.shape(env)
        row_labels = col_labels = None
        for name in self._refs(env):
            block_rows, block_cols = env.labels[name]
            if row_labels is None and env[name].rows == rows:
                row_labels = block_rows
            if col_labels is None and env[name].cols == cols:
                col_labels = block_cols
        return row_labels, col_labels

    def _render(self, env: Env, ref: Callable[[Block], str], row_label: str,
                col_label: str) -> str:
        def fill(match: re.Match) -> str:
            slot = match.group(1)
            if slot == "ROW_LABEL":
                return row_label
            if slot == "COL_LABEL":
                return col_label
            name = self.aliases.get(slot, slot)
            if name.isupper():
                return ref(env[name])
            return str(getattr(env.params, name))

        return _PLACEHOLDER.sub(fill, self.template)

    def cell(self, i, j, env):
        def ref(block: Block) -> str:
            return _broadcast_ref(block, env.vectors.get(block.name), i, j)

        return Cell(self._render(env, ref, env.me.row_label(i), env.me.col_label(j)))

    def arrays(self, env):
        if self.per_cell:
            return None
        me = env.me
        return _whole_block(env, self._render(env, Block.whole, me.row_labels(),
                                              me.col_labels()))


@dataclass(frozen=True)
class Rows(Formula):
    """A formula per row reading whole rows, e.g. Rows("=SUM({P})", P="EXP"): {NAME} is
    row i of the block (a 1-row block: its only row). `upto(i)` ends the rows at column
    upto(i) (a causal prefix). One formula per cell in both layouts; the block is n×1."""

    template: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    upto: Callable[[int], int] | None = None

    def __init__(self, template: str, upto: Callable[[int], int] | None = None,
                 **aliases: str):
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "upto", upto)

    def _names(self) -> list[str]:
        return [self.aliases.get(s, s) for s in _PLACEHOLDER.findall(self.template)
                if self.aliases.get(s, s).isupper()]

    def shape(self, env):
        return max(env[name].rows for name in self._names()), 1

    def labels(self, env):
        rows = self.shape(env)[0]
        first = next(n for n in self._names() if env[n].rows == rows)
        return env.labels[first][0], None

    def cell(self, i, j, env):
        def fill(match: re.Match) -> str:
            name = self.aliases.get(match.group(1), match.group(1))
            if not name.isupper():
                return str(getattr(env.params, name))
            block = env[name]
            row = 0 if block.rows == 1 else i
            last = None if self.upto is None else self.upto(i)
            return block.row(row, 0, last)

        return Cell(_PLACEHOLDER.sub(fill, self.template))


@dataclass(frozen=True)
class _Product(Formula):
    """A product of blocks A and B over optional column slices (0-based, inclusive)."""

    a: str
    b: str
    a_cols: tuple[int, int] | None = None
    b_cols: tuple[int, int] | None = None

    def _slices(self, env):
        a, b = env[self.a], env[self.b]
        return a, b, self.a_cols or (0, a.cols - 1), self.b_cols or (0, b.cols - 1)


@dataclass(frozen=True)
class MatMul(_Product):
    """C = A·B (+ a bias row), over optional column slices of A and B. Cell (i, j) is
    MMULT(row i of A, column j of B)."""

    plus: str | None = None  # a 1-row block added to every row

    def shape(self, env):
        a, _, _, (b0, b1) = self._slices(env)
        return a.rows, b1 - b0 + 1

    def labels(self, env):
        _, _, _, (b0, b1) = self._slices(env)
        return env.labels[self.a][0], env.labels[self.b][1][b0:b1 + 1]

    def _bias(self, env, j: int | None) -> str:
        if self.plus is None:
            return ""
        bias = env[self.plus]
        return "+" + (bias.whole() if j is None else bias.col(j))

    def cell(self, i, j, env):
        a, b, (a0, a1), (b0, _) = self._slices(env)
        return Cell(f"=MMULT({a.row(i, a0, a1)},{b.col(b0 + j)}){self._bias(env, j)}")

    def arrays(self, env):
        a, b, (a0, a1), (b0, b1) = self._slices(env)
        return _whole_block(env, f"=MMULT({a.cols_range(a0, a1)},{b.cols_range(b0, b1)})"
                                 f"{self._bias(env, None)}")


@dataclass(frozen=True)
class MatMulT(_Product):
    """C = A·Bᵀ: cell (i, j) is the dot product of row i of A with row j of B."""

    def shape(self, env):
        return env[self.a].rows, env[self.b].rows

    def labels(self, env):
        return env.labels[self.a][0], env.labels[self.b][0]

    def cell(self, i, j, env):
        a, b, (a0, a1), (b0, b1) = self._slices(env)
        return Cell(f"=SUMPRODUCT({a.row(i, a0, a1)},{b.row(j, b0, b1)})")

    def arrays(self, env):
        a, b, (a0, a1), (b0, b1) = self._slices(env)
        return _whole_block(env, f"=MMULT({a.cols_range(a0, a1)},"
                                 f"TRANSPOSE({b.cols_range(b0, b1)}))")


CellFn = Callable[[int, int, Env], str | Cell]


@dataclass(frozen=True)
class Custom(Formula):
    """The escape hatch for loops (a recurrence down the rows, tiles, pairings): explicit
    functions of (i, j, env) for the cell, and of env for the `blocks` layout —
    `whole` (one array formula), `per_row` (one per row, for a row that reads the row
    above) or `per_slice` = (width, fn(k, env)) (one per slice of `width` columns)."""

    rows: Size
    cols: Size
    each: CellFn
    whole: Callable[[Env], str] | None = None
    per_row: Callable[[int, Env], str] | None = None
    per_slice: tuple[int, Callable[[int, Env], str]] | None = None

    def shape(self, env):
        return size_of(self.rows, env.params), size_of(self.cols, env.params)

    def cell(self, i, j, env):
        got = self.each(i, j, env)
        return got if isinstance(got, Cell) else Cell(got)

    def arrays(self, env):
        me = env.me
        if self.whole is not None:
            return _whole_block(env, self.whole(env))
        if self.per_row is not None:
            return [Array(i, 0, i, me.cols - 1, self.per_row(i, env)) for i in range(me.rows)]
        if self.per_slice is not None:
            width, fn = self.per_slice
            return [Array(0, k * width, me.rows - 1, (k + 1) * width - 1, fn(k, env))
                    for k in range(me.cols // width)]
        return None


def rows_of(block: Block, first: int, last: int) -> str:
    """Rows first..last (inclusive, 0-based) of every column of a block, anchored."""
    return range_ref(block.top + first, block.left, block.top + last, block.right,
                     fix_row=True, fix_col=True)


# -- blocks and sections -------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    """An input block: constants the user may edit. `rows`/`cols` give its shape."""

    name: str
    rows: Size
    cols: Size
    title: str
    row_labels: Labels = "tokens"
    col_labels: Labels = "d"
    note: str = ""
    corner: str = ""
    # a bool parameter that switches this input on (its name), or a function of the
    # parameters; giving a switched input by hand turns its switch on
    when: str | Callable[[Any], bool] | None = None

    def present(self, params) -> bool:
        if self.when is None:
            return True
        return bool(getattr(params, self.when) if isinstance(self.when, str)
                    else self.when(params))


@dataclass(frozen=True)
class Step:
    """A step block: `name` (its defined name), `equation` (its header; {param} slots are
    filled), the formula, and a one-sentence explanation. Labels default to the ones the
    formula derives from the blocks it reads."""

    name: str
    equation: str
    formula: Formula
    explanation: str = ""
    row_labels: Labels | None = None
    col_labels: Labels | None = None
    corner: str = ""
    heatmap: bool = False
    number_format: str | None = None
    skipped_rows: frozenset[int] = frozenset()  # shown grey as "skip" (the cells hold 0)
    masked_by: str | None = None  # a 0/1 mask block: shown grey as "–" where it is 0


@dataclass(frozen=True)
class Table:
    """Label/value text beside the blocks of a band (no formulas, no name)."""

    rows: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Series:
    """One series of a `Chart`: column `index` of a placed block (its row with
    along="row"), named by that column's (row's) label cell — a one-column block's by the
    block's name — and plotted against the block's row (column) labels, all as live
    references. `index` None: one series for every column (row) of the block."""

    block: str
    index: int | None = None
    along: str = "col"  # "col": a column over the row labels; "row": a row over the column labels


CHART_KINDS = ("scatter", "line", "bar")


@dataclass(frozen=True)
class Chart:
    """A chart in a band, beside the blocks it reads. `kind` "scatter" plots the series
    against numeric labels (e.g. widths), "line" against labels as categories (e.g. the
    keys of a row of weights), "bar" as clustered columns over the categories. `title`
    sits in the cell above the chart, so it is translated with the sheet, as are the axis
    titles and `legend_title` (what the series, each a colour, are: e.g. the queries), by
    the sheet's catalog. The chart takes `cols` × `rows` cells of the band;
    `log_x` is a base for a logarithmic x axis (scatter only); `y_range` fixes the y axis
    (weights: 0 to 1), else it follows the values."""

    title: str
    series: tuple[Series, ...]
    kind: str = "scatter"
    x_title: str = ""
    y_title: str = ""
    legend_title: str = ""
    log_x: int | None = None
    y_range: tuple[float, float] | None = None
    cols: int = 9
    rows: int = 16

    def __post_init__(self):
        if self.kind not in CHART_KINDS:
            raise ValueError(f"chart kind must be one of {CHART_KINDS}, got {self.kind!r}")
        if any(s.along not in ("col", "row") for s in self.series):
            raise ValueError("a series runs along a block's \"col\" or \"row\"")
        if self.log_x is not None and self.kind != "scatter":
            raise ValueError("only a scatter chart has a numeric (logarithmic) x axis")


Item = Input | Step | Table | Chart


@dataclass(frozen=True)
class Section:
    """A header line, then bands of blocks, each band placed side by side. A title that
    names tokens is a function of the sheet's label sets."""

    title: str | Callable[[Mapping[str, Sequence]], str]
    bands: tuple[tuple[Item, ...], ...] = ()
    bold: bool = True


Title = str | Callable[[Mapping[str, Sequence]], str]


def section(title: Title, *bands: Item | Sequence[Item], bold: bool = True) -> Section:
    """section("Step 1 — inputs", [X, W_Q], [Q]): each list is a band; a lone item is a
    band of its own."""
    return Section(title, tuple(tuple(b) if isinstance(b, list | tuple) else (b,)
                                for b in bands), bold)


def dims(prefix: str, count: int, first: int = 1) -> list[str]:
    """Numbered labels: dims("d", 3) -> d1, d2, d3."""
    return [f"{prefix}{first + j}" for j in range(count)]
