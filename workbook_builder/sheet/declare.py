"""The vocabulary a kind is declared in: inputs, steps, the formulas that fill them, and the
sections that place them on the sheet.

A kind returns its sheet as a list of `Section`s for given parameters. Each section is a
bold header line and bands of blocks placed side by side; a block is an `Input` (constants a
user may edit) or a `Step` (a formula block). A step's formula is one object that writes
both layouts: a cell reference per cell in `cells`, the whole block in `blocks`.

Placeholders in formula templates:
    {NAME}        a block (upper case): the cell this cell reads in `cells` (a block
                  declared BROADCAST rows or columns is read along its one row or column),
                  the whole block in `blocks`; aliases bind short names to blocks:
                  Map("={P}/{L}", P="EXP")
    {ROW_LABEL}   this block's row label (its column label: {COL_LABEL}), e.g. a position
    {param}       a parameter (lower case), e.g. {d_k}
A template is parsed once, when its formula is declared: a brace that opens no slot, an
alias the template never uses or one that names no block (upper case) is a ValueError
there and then.
Sizes are parameter names ("seq_len"), numbers, functions of the parameters, or
BROADCAST: one row (as `rows`) or one column (as `cols`) that every row or column of a
larger block reads, as a bias row or a row max does. Only BROADCAST broadcasts: a size that
is 1 by number or by function is read cell for cell. A size given as a name is also what
`build` infers from an input given by hand.

A kind's sections are checked as they are drawn (`checked_sections`; `Kind` wraps every
kind's `sections`), so before anything of them is planned or written: a slot naming no
block or parameter, or blocks whose shapes do not fit, is a ValueError naming the kind, the
step and the template.
"""

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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


class Broadcast:
    """The size of a block that is one row (as `rows`) or one column (as `cols`) read by
    every row (column) of the larger blocks it is combined with: BROADCAST."""

    def __repr__(self) -> str:
        return "BROADCAST"


BROADCAST = Broadcast()

Size = str | int | Dim | Broadcast | Callable[[Any], int]
# a named label set of the sheet ("tokens", "src", …), a prefix numbered along the axis
# ("d" -> d1, d2, …), an explicit list, or a function of the parameters
Labels = str | Sequence | Callable[[Any], Sequence]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SELF_LABELS = {"ROW_LABEL", "COL_LABEL"}
# a template as its pieces: the text before each {slot} and the slot's name (None after the
# last slot)
Pieces = tuple[tuple[str, str | None], ...]


@functools.cache
def parse_template(template: str) -> Pieces:
    """A template as (text, slot) pieces, parsed once per template text; a brace that
    opens or closes no {slot} is a ValueError naming the template."""
    pieces, at = [], 0
    for match in _PLACEHOLDER.finditer(template):
        pieces.append((template[at:match.start()], match.group(1)))
        at = match.end()
    pieces.append((template[at:], None))
    if any("{" in text or "}" in text for text, _ in pieces):
        raise ValueError(f"{template!r}: a brace that opens no {{slot}} (a slot is "
                         f"{{NAME}} or {{param}})")
    return tuple(pieces)


def slots_of(pieces: Pieces) -> list[str]:
    return [slot for _, slot in pieces if slot is not None]


def declared_template(item: str, template: str, aliases: Mapping[str, str],
                      self_labels: bool = True) -> Pieces:
    """The template parsed, at declaration: every alias used and naming a block (upper
    case), {ROW_LABEL}/{COL_LABEL} only where the formula has labels of its own. A
    ValueError names the formula and the template."""
    def refused(problem: str) -> ValueError:
        return ValueError(f"{item}({template!r}{_aliases_text(aliases)}): {problem}")

    try:
        pieces = parse_template(template)
    except ValueError as exc:
        raise refused(str(exc).split(": ", 1)[1]) from None
    slots = slots_of(pieces)
    for alias, name in aliases.items():
        if alias not in slots:
            raise refused(f"the alias {alias} is not a slot of the template")
        if not name.isupper():
            raise refused(f"the alias {alias} names {name!r}, not a block (upper case)")
    if not self_labels:
        labels = sorted(_SELF_LABELS & set(slots))
        if labels:
            raise refused(f"{{{labels[0]}}}: this formula has no labels of its own to read")
    return pieces


def fill_template(pieces: Pieces, fill: Callable[[str], str]) -> str:
    """The template's text with each slot replaced by `fill(slot)`."""
    return "".join(text + (fill(slot) if slot is not None else "") for text, slot in pieces)


def size_of(size: Size, params) -> int:
    if isinstance(size, Broadcast):
        return 1
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

    def check(self, env: Env) -> None:
        """Raise ValueError if the formula reads a block or parameter that does not exist,
        or blocks whose shapes do not fit; by default its shape must be computable."""
        self.shape(env)

    def describe(self) -> str:
        """The formula as an error message names it."""
        return type(self).__name__


def _aliases_text(aliases: Mapping[str, str]) -> str:
    """A formula's aliases as its `describe` writes them: ", P='EXP', L='ROW_SUM'"."""
    return "".join(f", {k}={v!r}" for k, v in aliases.items())


def _as_cell(got: "str | Cell") -> "Cell":
    """A cell function's result as a Cell (a plain formula text is one)."""
    return got if isinstance(got, Cell) else Cell(got)


def block_named(env: Env, name: str) -> Block:
    """The block `name` placed before this step, or a ValueError saying there is none."""
    try:
        return env[name]
    except KeyError:
        raise ValueError(f"no block {name} is placed before this step") from None


def check_slots(pieces: Pieces, aliases: Mapping[str, str], env: Env,
                self_labels: bool = True) -> None:
    """Every {slot} of a parsed template names a block placed so far, a parameter, or
    (where allowed) this block's own labels."""
    for slot in slots_of(pieces):
        if self_labels and slot in _SELF_LABELS:
            continue
        name = aliases.get(slot, slot)
        if name.isupper():
            block_named(env, name)
        elif not hasattr(env.params, name):
            raise ValueError(f"{{{slot}}} names no block and no parameter")


def check_broadcast(env: Env, names: Sequence[str], rows: int, cols: int) -> None:
    """Each block is rows × cols, or one row (column) declared BROADCAST along that axis."""
    for name in names:
        block = block_named(env, name)
        along_rows, along_cols = reads_along(env, block)
        fits_rows = block.rows == rows or (along_rows and block.rows == 1)
        fits_cols = block.cols == cols or (along_cols and block.cols == 1)
        if not (fits_rows and fits_cols):
            hint = " (a single row or column broadcasts only when declared BROADCAST)" \
                if 1 in (block.rows, block.cols) else ""
            raise ValueError(f"{name} is {block.rows}×{block.cols}, which does not "
                             f"broadcast to {rows}×{cols}{hint}")


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
    """"one", "col" or "row" for a block declared with BROADCAST rows and/or columns (a
    `Rows` block is a column that broadcasts), else None."""
    one_row = isinstance(rows, Broadcast)
    one_col = isinstance(cols, Broadcast) or isinstance(formula, Rows)
    return "one" if one_row and one_col else "col" if one_col else "row" if one_row else None


def declared_vector(item: "Input | Step") -> str | None:
    """`vector_kind` of an input or step as declared: an input's sizes, a step's formula's
    (a `Rows` step is a column)."""
    if isinstance(item, Input):
        return vector_kind(item.rows, item.cols)
    formula = item.formula
    return vector_kind(getattr(formula, "rows", None), getattr(formula, "cols", None), formula)


def reads_along(env: Env, block: Block) -> tuple[bool, bool]:
    """Whether `block` broadcasts along rows (one row read by every row) and along
    columns, as declared."""
    vector = env.vectors.get(block.name)
    return vector in ("row", "one"), vector in ("col", "one")


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
    pieces: Pieces = field(default=(), compare=False, repr=False)

    def __init__(self, template: str, rows: Size | None = None, cols: Size | None = None,
                 per_cell: bool = False, labels_from: str | None = None, **aliases: str):
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "cols", cols)
        object.__setattr__(self, "per_cell", per_cell)
        object.__setattr__(self, "labels_from", labels_from)
        object.__setattr__(self, "pieces", declared_template("Map", template, aliases))

    def _refs(self, env: Env) -> list[str]:
        names = []
        for slot in slots_of(self.pieces):
            name = self.aliases.get(slot, slot)
            if slot not in _SELF_LABELS and name.isupper() and name not in names:
                names.append(name)
        return names

    def shape(self, env):
        if self.rows is not None and self.cols is not None:
            return size_of(self.rows, env.params), size_of(self.cols, env.params)
        blocks = [env[name] for name in self._refs(env)]
        return max(b.rows for b in blocks), max(b.cols for b in blocks)

    def check(self, env):
        check_slots(self.pieces, self.aliases, env)
        if self.labels_from is not None:
            block_named(env, self.labels_from)
        if not self._refs(env) and (self.rows is None or self.cols is None):
            raise ValueError("reads no block, so it needs rows and cols")
        check_broadcast(env, self._refs(env), *self.shape(env))

    def describe(self):
        return f"Map({self.template!r}{_aliases_text(self.aliases)})"

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
        def fill(slot: str) -> str:
            if slot == "ROW_LABEL":
                return row_label
            if slot == "COL_LABEL":
                return col_label
            name = self.aliases.get(slot, slot)
            if name.isupper():
                return ref(env[name])
            return str(getattr(env.params, name))

        return fill_template(self.pieces, fill)

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
    row i of the block (a block declared BROADCAST rows: its only row). `upto(i)` ends the
    rows at column upto(i) (a causal prefix). One formula per cell in both layouts; the
    block is n×1 and broadcasts along the columns of the blocks it is combined with."""

    template: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    upto: Callable[[int], int] | None = None
    pieces: Pieces = field(default=(), compare=False, repr=False)

    def __init__(self, template: str, upto: Callable[[int], int] | None = None,
                 **aliases: str):
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "upto", upto)
        object.__setattr__(self, "pieces",
                           declared_template("Rows", template, aliases, self_labels=False))

    def _names(self) -> list[str]:
        return [self.aliases.get(s, s) for s in slots_of(self.pieces)
                if self.aliases.get(s, s).isupper()]

    def shape(self, env):
        return max(env[name].rows for name in self._names()), 1

    def check(self, env):
        check_slots(self.pieces, self.aliases, env, self_labels=False)
        if not self._names():
            raise ValueError("reads no block")
        rows = self.shape(env)[0]
        for name in self._names():
            block = env[name]
            if block.rows != rows and not (reads_along(env, block)[0] and block.rows == 1):
                raise ValueError(f"{name} has {block.rows} rows, not {rows}, and is not "
                                 f"declared BROADCAST rows")

    def describe(self):
        return f"Rows({self.template!r}{_aliases_text(self.aliases)})"

    def labels(self, env):
        rows = self.shape(env)[0]
        first = next(n for n in self._names() if env[n].rows == rows)
        return env.labels[first][0], None

    def cell(self, i, j, env):
        def fill(slot: str) -> str:
            name = self.aliases.get(slot, slot)
            if not name.isupper():
                return str(getattr(env.params, name))
            block = env[name]
            row = 0 if reads_along(env, block)[0] else i
            last = None if self.upto is None else self.upto(i)
            return block.row(row, 0, last)

        return Cell(fill_template(self.pieces, fill))


TRANSPOSES = (None, "a", "b")


@dataclass(frozen=True)
class MatMul(Formula):
    """C = A·B (+ a bias row added to every row), over optional column slices of A and B
    (0-based, inclusive). `transpose="b"` makes it A·Bᵀ: cell (i, j) the dot product of row
    i of A's slice with row j of B's; `transpose="a"` Aᵀ·B: the dot product of column i of
    A's slice with column j of B's. Cell (i, j) of A·B is MMULT(row i of A, column j of B);
    `blocks` writes the product as one MMULT, with TRANSPOSE of the transposed operand."""

    a: str
    b: str
    a_cols: tuple[int, int] | None = None
    b_cols: tuple[int, int] | None = None
    plus: str | None = None  # a 1-row block added to every row
    transpose: str | None = None  # None: A·B; "b": A·Bᵀ; "a": Aᵀ·B

    def __post_init__(self):
        if self.transpose not in TRANSPOSES:
            raise ValueError(f"MatMul({self.a}, {self.b}): transpose is None, \"a\" (Aᵀ·B) "
                             f"or \"b\" (A·Bᵀ), not {self.transpose!r}")

    def _slices(self, env):
        a, b = env[self.a], env[self.b]
        return a, b, self.a_cols or (0, a.cols - 1), self.b_cols or (0, b.cols - 1)

    def _checked_slices(self, env):
        a, b = block_named(env, self.a), block_named(env, self.b)
        for block, (first, last) in ((a, self.a_cols or (0, a.cols - 1)),
                                     (b, self.b_cols or (0, b.cols - 1))):
            if not 0 <= first <= last < block.cols:
                raise ValueError(f"columns {first}…{last} are not columns of {block.name} "
                                 f"({block.cols} columns)")
        return self._slices(env)

    def describe(self):
        given = (("a_cols", self.a_cols), ("b_cols", self.b_cols), ("plus", self.plus),
                 ("transpose", self.transpose))
        return f"MatMul({self.a}, {self.b}" + "".join(f", {k}={v!r}" for k, v in given if v) \
            + ")"

    def shape(self, env):
        a, b, (a0, a1), (b0, b1) = self._slices(env)
        rows = a1 - a0 + 1 if self.transpose == "a" else a.rows
        return rows, b.rows if self.transpose == "b" else b1 - b0 + 1

    def check(self, env):
        a, b, (a0, a1), (b0, b1) = self._checked_slices(env)
        if self.transpose is None and a1 - a0 + 1 != b.rows:
            raise ValueError(f"inner sizes disagree: {a.name} gives {a1 - a0 + 1} columns, "
                             f"{b.name} has {b.rows} rows")
        if self.transpose == "b" and a1 - a0 != b1 - b0:
            raise ValueError(f"inner sizes disagree: {a.name} gives {a1 - a0 + 1} columns, "
                             f"{b.name} gives {b1 - b0 + 1}")
        if self.transpose == "a" and a.rows != b.rows:
            raise ValueError(f"inner sizes disagree: {a.name} has {a.rows} rows, {b.name} "
                             f"has {b.rows}")
        if self.plus is not None:
            bias, cols = block_named(env, self.plus), self.shape(env)[1]
            if (bias.rows, bias.cols) != (1, cols):
                raise ValueError(f"bias {bias.name} is {bias.rows}×{bias.cols}, not one row "
                                 f"of {cols}")

    def labels(self, env):
        _, _, (a0, a1), (b0, b1) = self._slices(env)
        a_rows, a_cols = env.labels[self.a]
        b_rows, b_cols = env.labels[self.b]
        if self.transpose == "b":
            return a_rows, b_rows
        b_side = b_cols[b0:b1 + 1]
        return (a_cols[a0:a1 + 1], b_side) if self.transpose == "a" else (a_rows, b_side)

    def _bias(self, env, j: int | None) -> str:
        if self.plus is None:
            return ""
        bias = env[self.plus]
        return "+" + (bias.whole() if j is None else bias.col(j))

    def cell(self, i, j, env):
        a, b, (a0, a1), (b0, b1) = self._slices(env)
        if self.transpose == "b":  # row i of A · row j of B
            product = f"=SUMPRODUCT({a.row(i, a0, a1)},{b.row(j, b0, b1)})"
        elif self.transpose == "a":  # column i of A · column j of B
            product = f"=SUMPRODUCT({a.col(a0 + i)},{b.col(b0 + j)})"
        else:
            product = f"=MMULT({a.row(i, a0, a1)},{b.col(b0 + j)})"
        return Cell(product + self._bias(env, j))

    def arrays(self, env):
        a, b, (a0, a1), (b0, b1) = self._slices(env)
        left, right = a.cols_range(a0, a1), b.cols_range(b0, b1)
        if self.transpose == "a":
            left = f"TRANSPOSE({left})"
        elif self.transpose == "b":
            right = f"TRANSPOSE({right})"
        return _whole_block(env, f"=MMULT({left},{right}){self._bias(env, None)}")


def row_or_cell(block: Block, i: int, j: int | None) -> str:
    """Row i of a block (j None), else its cell (i, j): what a `ByRow` formula reads."""
    return block.row(i) if j is None else block.cell(i, j)


# row(i, j, env): the formula of row i for column j, or for the whole row when j is None.
# Every function a formula is declared with takes the indices of what it writes first and
# the Env last, as `Formula.cell(i, j, env)` does
RowFn = Callable[[int, int | None, Env], str | Cell]


class _Sized(Formula):
    """A formula whose block has the size it declares (`rows` × `cols`)."""

    def shape(self, env):
        return size_of(self.rows, env.params), size_of(self.cols, env.params)


@dataclass(frozen=True)
class ByRow(_Sized):
    """A block written row by row from one function `row(i, j, env)`: the formula of row
    i for its column j (each cell in `cells` and `hand`) or, with j None, for the whole
    row at once (one array formula per row in `blocks`). `whole(env)` writes the block
    as one array formula in `blocks` instead; `per_cell` keeps one formula per cell there
    too (a single-cell array formula a row max needs, an INDEX per row). With either,
    `row` is never asked for a whole row. A row that reads this block's own rows above
    it is a `Scan`."""

    rows: Size
    cols: Size
    row: RowFn
    whole: Callable[[Env], str] | None = None
    per_cell: bool = False

    def cell(self, i, j, env):
        return _as_cell(self.row(i, j, env))

    def arrays(self, env):
        me = env.me
        if self.per_cell:
            return None
        if self.whole is not None:
            return _whole_block(env, self.whole(env))
        return [Array(i, 0, i, me.cols - 1, _as_cell(self.row(i, None, env)).text)
                for i in range(me.rows)]


class _ReadsOfOwnRows:
    """The block a `Scan` writes, as its row function sees it while it is checked: every
    data reference it asks for (a cell, a row, a column, the block) notes the rows it
    covers; labels are not data."""

    def __init__(self, block: Block):
        self._block, self.rows = block, set()

    def __getattr__(self, name: str):
        return getattr(self._block, name)

    def _all(self) -> None:
        self.rows.update(range(self._block.rows))

    def cell(self, i, j):
        self.rows.add(i)
        return self._block.cell(i, j)

    def fixed(self, i, j):
        self.rows.add(i)
        return self._block.fixed(i, j)

    def row(self, i, first=0, last=None):
        self.rows.add(i)
        return self._block.row(i, first, last)

    def col(self, j, first=0, last=None):
        self.rows.update(range(first, self._block.rows if last is None else last + 1))
        return self._block.col(j, first, last)

    def cols_range(self, first, last):
        self._all()
        return self._block.cols_range(first, last)

    def whole(self):
        self._all()
        return self._block.whole()


class Scan(ByRow):
    """A recurrence down the rows, e.g. h_t = Ā_t ⊙ h_{t−1} + B̄_t u_t: `row(t, j, env)`
    reads rows of other blocks and this block's rows above t (`env.me`, through
    `row_or_cell`), and nothing else of it: the declaration check renders the first three
    rows and the last two, whole and at their first two columns and last, and refuses a
    row t that reads a row t or below of its own block, which would be a reference cycle
    (a sample, so the check costs the same at any size: a sheet too large is refused by
    the size plan, not by rendering it). One rendering for every
    layout: a cell formula per cell in `cells` and `hand`; in `blocks` one array formula
    per row, since a formula over the whole block cannot read its own earlier rows."""

    def __init__(self, rows: Size, cols: Size, row: RowFn):
        super().__init__(rows, cols, row)

    def check(self, env):
        rows, cols = self.shape(env)
        me = _ReadsOfOwnRows(Block("", "", 2, 2, rows, cols))
        probe = dataclasses.replace(env, me=me)
        sampled_cols = sorted({0, 1, cols - 1} & set(range(cols)))
        for t in sorted({0, 1, 2, rows - 2, rows - 1} & set(range(rows))):
            for j in (None, *sampled_cols):
                me.rows.clear()
                self.row(t, j, probe)
                if me.rows and max(me.rows) >= t:
                    where = "" if j is None else f", column {j + 1}"
                    raise ValueError(f"row {t + 1}{where} reads row {max(me.rows) + 1} of "
                                     f"its own block: a Scan's row t reads only the rows "
                                     f"above it")

    def describe(self):
        return f"Scan({getattr(self.row, '__name__', 'row')})"


@dataclass(frozen=True)
class Reduce(Formula):
    """One cell from whole blocks, e.g. Reduce("=SUM({NLL})/{seq_len}", NLL="NLL_T1"):
    {NAME} is the whole block, {param} a parameter, in every layout; the template may be a
    function of the parameters (parsed when first drawn). `array` makes it a single-cell
    array formula (a function such as ABS applied to a range needs it). The cell
    broadcasts, like a BROADCAST × BROADCAST block."""

    template: str | Callable[[Any], str]
    aliases: Mapping[str, str] = field(default_factory=dict)
    array: bool = False
    rows: Size = field(default=BROADCAST, init=False)
    cols: Size = field(default=BROADCAST, init=False)
    pieces: Pieces = field(default=(), compare=False, repr=False)

    def __init__(self, template: str | Callable[[Any], str], array: bool = False,
                 **aliases: str):
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "array", array)
        if not callable(template):
            object.__setattr__(self, "pieces", self._declared(template))

    def shape(self, env):
        return 1, 1

    def _declared(self, template: str) -> Pieces:
        return declared_template("Reduce", template, self.aliases, self_labels=False)

    def _pieces(self, params) -> Pieces:
        return self._declared(self.template(params)) if callable(self.template) \
            else self.pieces

    def check(self, env):
        check_slots(self._pieces(env.params), self.aliases, env, self_labels=False)

    def describe(self):
        return f"Reduce({self.template!r}{_aliases_text(self.aliases)})"

    def cell(self, i, j, env):
        def fill(slot: str) -> str:
            name = self.aliases.get(slot, slot)
            return env[name].whole() if name.isupper() else str(getattr(env.params, name))

        return Cell(fill_template(self._pieces(env.params), fill), array=self.array)


@dataclass(frozen=True)
class MaxAbsDiff(Formula):
    """max |A − B| over two blocks of one shape, in one cell (B None: max |A|); given
    several pairs, `MaxAbsDiff.column`, one row per pair. A single-cell array formula in
    every layout: ABS over a range needs array evaluation."""

    pairs: tuple[tuple[str, str | None], ...]

    def __init__(self, a: str, b: str | None = None):
        object.__setattr__(self, "pairs", ((a, b),))

    @classmethod
    def column(cls, *pairs: tuple[str, str | None]) -> "MaxAbsDiff":
        made = cls(*pairs[0])
        object.__setattr__(made, "pairs", tuple(pairs))
        return made

    def shape(self, env):
        return len(self.pairs), 1

    def check(self, env):
        for a, b in self.pairs:
            block_a = block_named(env, a)
            if b is not None:
                block_b = block_named(env, b)
                if (block_a.rows, block_a.cols) != (block_b.rows, block_b.cols):
                    raise ValueError(f"{a} is {block_a.rows}×{block_a.cols} but {b} is "
                                     f"{block_b.rows}×{block_b.cols}")

    def describe(self):
        return "MaxAbsDiff(" + "; ".join(a if b is None else f"{a}, {b}"
                                         for a, b in self.pairs) + ")"

    def cell(self, i, j, env):
        a, b = self.pairs[i]
        diff = env[a].whole() if b is None else f"{env[a].whole()}-{env[b].whole()}"
        return Cell(f"=MAX(ABS({diff}))", array=True)


CellFn = Callable[[int, int, Env], str | Cell]


@dataclass(frozen=True)
class Custom(_Sized):
    """The escape hatch where no other item says it (a reshape, a one-hot by column, a
    table of numbers; a row formula is `ByRow`, a recurrence `Scan`, a check cell
    `Reduce` or `MaxAbsDiff`): `each(i, j, env)` writes cell (i, j); in `blocks`, `whole(env)`
    writes one array formula, or `per_slice` = (width, fn(k, env)) one per slice k of
    `width` columns (else one formula per cell there too)."""

    rows: Size
    cols: Size
    each: CellFn
    whole: Callable[[Env], str] | None = None
    per_slice: tuple[int, Callable[[int, Env], str]] | None = None

    def cell(self, i, j, env):
        return _as_cell(self.each(i, j, env))

    def arrays(self, env):
        me = env.me
        if self.whole is not None:
            return _whole_block(env, self.whole(env))
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
class WholeNumbers:
    """An input's rule: every entry a whole number in range(first, stop), e.g. token ids
    `WholeNumbers(0, "vocab", "a token id")` (0 … vocab − 1); `first` and `stop` are
    sizes (a parameter name, a number or a function of the parameters), `what` names one
    entry in the error a value outside the rule gets."""

    first: Size
    stop: Size
    what: str = "an entry"

    def refused(self, values, params) -> tuple[int, int, str] | None:
        """(row, column, why) of the first entry of a 2-D block outside the rule, or None."""
        first, last = size_of(self.first, params), size_of(self.stop, params) - 1
        for i, row in enumerate(values):
            for j, value in enumerate(row):
                if not (float(value).is_integer() and first <= value <= last):
                    return i, j, f"{self.what} is a whole number {first} … {last}"
        return None

    def draw(self, shape: tuple[int, int], params, rng):
        """Entries drawn uniformly from the rule's range (the seed's numbers for an input
        not given by hand)."""
        first, stop = size_of(self.first, params), size_of(self.stop, params)
        return rng.integers(first, stop, size=shape).astype(float)


@dataclass(frozen=True)
class Input:
    """An input block: constants the user may edit. `rows`/`cols` give its shape;
    `values` a rule its entries follow (`WholeNumbers`), checked wherever inputs are
    completed (`kind.complete_inputs`) and read back from a file (`check`, `grade`)."""

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
    values: WholeNumbers | None = None

    def present(self, params) -> bool:
        if self.when is None:
            return True
        return bool(getattr(params, self.when) if isinstance(self.when, str)
                    else self.when(params))

    def refused(self, values, params) -> tuple[int, int, str] | None:
        """(row, column, why) of the first entry its rule refuses, or None."""
        return None if self.values is None else self.values.refused(values, params)


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


def checked_sections(kind: str, sections: Iterable[Section], params) -> Iterator[Section]:
    """The sections, each checked as it is drawn (a kind may declare them lazily): every
    step's template must name blocks placed before it and parameters that exist, and its
    blocks' shapes must fit (broadcast for `Map`, inner sizes for `MatMul`). A ValueError
    names the kind, the step and the template."""
    return _checked_into(Env({}, {}, params), kind, sections, params)


def _checked_into(env: Env, kind: str, sections: Iterable[Section],
                  params) -> Iterator[Section]:
    for sec in sections:
        for item in (item for band in sec.bands for item in band):
            if isinstance(item, Input):
                rows, cols = size_of(item.rows, params), size_of(item.cols, params)
            elif isinstance(item, Step):
                rows, cols = _checked_shape(kind, item, env)
            else:
                continue
            env.blocks[item.name] = Block(item.name, "", 2, 2, rows, cols)  # where: unused
            vector = declared_vector(item)
            if vector:
                env.vectors[item.name] = vector
        yield sec


def check_sections(kind: str, sections: Iterable[Section], params) -> None:
    """`checked_sections`, drawn to the end."""
    for _ in checked_sections(kind, sections, params):
        pass


def block_shapes(sections: Iterable[Section], params, kind: str = "") -> dict[str, tuple[int, int]]:
    """(rows, cols) of every input and step block the sections declare, in sheet order, as
    the declaration check works them out (nothing is placed or written)."""
    env = Env({}, {}, params)
    for _ in _checked_into(env, kind, sections, params):
        pass
    return {name: (block.rows, block.cols) for name, block in env.blocks.items()}


def _checked_shape(kind: str, step: Step, env: Env) -> tuple[int, int]:
    try:
        step.formula.check(env)
        return step.formula.shape(env)
    except KeyError as exc:  # a kind's own formula reading a missing block
        problem = f"no block {exc.args[0]} is placed before this step"
    except ValueError as exc:
        problem = str(exc)
    raise ValueError(f"kind {kind}, step {step.name}, {step.formula.describe()}: {problem}")
