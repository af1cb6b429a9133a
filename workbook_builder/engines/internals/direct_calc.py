"""A workbook's calculation straight from its cells, without the engine's graph.

The `formulas` engine turns a workbook into a schedula dispatcher: a Cell object, a graph
function and a data node for every formula cell, and a range assembler node for every range
a formula reads. Building that graph costs more than the calculation itself, and once each
formula form is compiled once (`of_formulas.model_from_dict`) it is most of a check. Here
the graph is never built. Each formula form is parsed and compiled once by the engine (its
compiled pipe, run as a plain loop by `of_schedula.FormulaLoop`); every formula cell keeps
its own input boxes (sheet, rows, columns); the cells are ordered by their dependencies (a
box depends on every formula cell inside it); the values live in one grid per sheet; and
each input is handed to the compiled pipe exactly as the engine's own nodes would hand it
(the same `Ranges`, holding the referenced node's value or the box assembled from the
cells, empty cells as the engine's EMPTY).

Anything the engine would treat in a way not reproduced here raises CalculationRefused, and
the caller takes the engine's path (`of_formulas.model_from_dict`): references to other
books or to whole rows and columns, spilled (#) ranges, a defined name that is not a plain
range, a reference the engine cannot resolve, a function reading the dispatcher
(INDIRECT), overlapping cells, circular references, a formula that raises. Taken only
within the releases of formulas and schedula `versions.SUPPORTED` names;
tests/test_fast_calc.py shows both paths give identical values.
"""

import functools
import re
from typing import Any

import numpy as np

from workbook_builder.engines.internals import CalculationRefused
from workbook_builder.engines.internals.fast_functions import block_numbers
from workbook_builder.engines.internals.of_formulas import (
    formula_shortcuts,
    formulas_changes,
    formulas_engine,
    independent_of_position,
    template_keys,
)
from workbook_builder.engines.internals.of_schedula import FormulaLoop
from workbook_builder.sheet.refs import column_letters, column_number, formula_form, sheet_name

# "'[book.xlsx]SHEET'!C5:F9" (a cell or a range of a sheet) and "'[book.xlsx]'!NAME"
_SHEET_KEY = re.compile(r"^'\[(?P<book>[^\]]*)\](?P<sheet>[^']+)'!"
                        r"(?P<top>[A-Z]{1,3}\d+)(?::(?P<bottom>[A-Z]{1,3}\d+))?$")
_NAME_KEY = re.compile(r"^'\[(?P<book>[^\]]*)\]'!\w+$")
_CELL = re.compile(r"([A-Z]{1,3})(\d+)")
# the grids hold every cell a formula fills or a constant written cell by cell holds (the
# blocks of numbers kept as arrays, ArrayRows, lie over them); beyond this many such cells
# the engine's sparse graph is the better store
MOST_GRID_CELLS = 16_000_000
# a grid's cells are stored in tiles of this size: narrow, as a model's sheet has columns of
# labels 50,257 rows tall (tiles 256 wide held 100 MB of nothing for each, in each grid)
_TILE_ROWS, _TILE_COLS = 128, 32

_BOX, _NAME = 0, 1
_PLAIN = (str, int, float, bool)  # values np.asarray([[value]], object) holds as they are


_NUMBERS = frozenset({float, int, bool, np.float64, np.int64, np.bool_})


def _replace_empty(value, replace_empty):
    """The engine's `replace_empty` filter of a formula's result (EMPTY -> 0), without its
    array comparison where nothing can be EMPTY (a token that compares equal to its text):
    an array of numbers, or one number."""
    if isinstance(value, np.ndarray) and (value.dtype.kind in "biuf" or (
            value.size == 1 and type(value.flat[0]) in _NUMBERS)):
        return value
    return replace_empty(value)


class _Value:
    """A solution entry of a box or a constant: what `_solution_values` reads (`.value`, a
    2-D object array), without building a `Ranges` for each; assembled from the grid when
    read (an input block's entry, millions of numbers, is never read)."""

    __slots__ = ("_grid", "_box")

    def __init__(self, grid: "_Grid", box: tuple):
        self._grid, self._box = grid, box

    @property
    def value(self) -> np.ndarray:
        _, r0, r1, c0, c1 = self._box
        return self._grid.get(r0, r1, c0, c1)


class ArrayRows:
    """A block of numbers kept as an array (`values`, float64; `integers`: the cells a
    reader gets as ints), standing for the rows of Python numbers `ExcelModel.from_dict`
    takes: made into Python numbers only where a formula reads them."""

    __slots__ = ("values", "integers")

    def __init__(self, values: np.ndarray, integers: np.ndarray):
        self.values, self.integers = values, integers

    def rows(self) -> list[list]:
        """Every cell's number, row by row, as the engine's entry holds them."""
        rows = self.values.tolist()
        if self.integers.any():
            for i, j in zip(*np.nonzero(self.integers), strict=True):
                rows[i][j] = int(rows[i][j])
        return rows

    def cells(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Rows r0…r1-1, columns c0…c1-1 (0-based, of the block) as the engine's node holds
        them: an object array of Python floats, and ints where `integers` says; without an
        int, the block's own float64 numbers (BlockNumbers)."""
        part = self.values[r0:r1, c0:c1]
        whole = self.integers[r0:r1, c0:c1]
        if not whole.any():
            return block_numbers(part)
        held = part.astype(object)
        at = np.nonzero(whole)
        held[at] = [int(x) for x in part[at].tolist()]
        return held


class _Grid:
    """One sheet's cells for the calculation: stored in tiles made where a cell is set (a
    model's sheet spans a hundred million cells, nearly all of them weights), with blocks
    laid over them (`lay`: an ArrayRows, or one value for every cell), `fill` elsewhere."""

    def __init__(self, fill, dtype=object):
        self.fill, self.dtype = fill, dtype
        self.tiles: dict[tuple[int, int], np.ndarray] = {}
        self.laid: list[tuple[int, int, int, int, Any]] = []  # r0, r1, c0, c1, source
        self._borrowed: set[tuple[int, int]] = set()  # tiles shared with the grid copied

    def copy(self) -> "_Grid":
        """A grid of the same cells whose tiles are copied when first written (a model's
        grid of labels and results is a gigabyte; a calculation writes a part of it)."""
        grid = _Grid(self.fill, self.dtype)
        grid.tiles = dict(self.tiles)
        grid._borrowed = set(self.tiles)
        self._borrowed.update(self.tiles)  # written here later, the copy must not see it
        grid.laid = list(self.laid)
        return grid

    def lay(self, r0: int, r1: int, c0: int, c1: int, source) -> None:
        self.laid.append((r0, r1, c0, c1, source))

    def unlay(self, source) -> None:
        self.laid = [laid for laid in self.laid if laid[4] is not source]

    def _tile(self, at: tuple[int, int]) -> np.ndarray:
        """The tile at `at`, to be written: made if missing, copied if borrowed."""
        tile = self.tiles.get(at)
        if tile is not None and at in self._borrowed:
            tile = self.tiles[at] = tile.copy()
            self._borrowed.discard(at)
        if tile is None:
            tile = self.tiles[at] = np.empty((_TILE_ROWS, _TILE_COLS), self.dtype)
            tile.fill(self.fill)  # np.full would store the EMPTY token as a plain str
        return tile

    @staticmethod
    def _pieces(r0: int, r1: int, c0: int, c1: int):
        """(tile, rows in it, columns in it, rows in the box, columns in the box)."""
        for ti in range(r0 // _TILE_ROWS, (r1 - 1) // _TILE_ROWS + 1):
            top = ti * _TILE_ROWS
            rows = slice(max(r0, top) - top, min(r1, top + _TILE_ROWS) - top)
            out_rows = slice(max(r0, top) - r0, min(r1, top + _TILE_ROWS) - r0)
            for tj in range(c0 // _TILE_COLS, (c1 - 1) // _TILE_COLS + 1):
                left = tj * _TILE_COLS
                cols = slice(max(c0, left) - left, min(c1, left + _TILE_COLS) - left)
                out_cols = slice(max(c0, left) - c0, min(c1, left + _TILE_COLS) - c0)
                yield (ti, tj), rows, cols, out_rows, out_cols

    def set(self, r0: int, r1: int, c0: int, c1: int, value) -> None:
        """Cells r0…r1-1 × c0…c1-1 (0-based) set to `value`, one value or an array of the
        box's shape."""
        if r1 - r0 == 1 and c1 - c0 == 1 and not isinstance(value, np.ndarray):
            self._tile((r0 // _TILE_ROWS, c0 // _TILE_COLS))[r0 % _TILE_ROWS,
                                                              c0 % _TILE_COLS] = value
            return
        array = isinstance(value, np.ndarray)
        for at, rows, cols, out_rows, out_cols in self._pieces(r0, r1, c0, c1):
            self._tile(at)[rows, cols] = value[out_rows, out_cols] if array else value

    def get(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """A new array of the cells r0…r1-1 × c0…c1-1 (0-based)."""
        out = np.empty((r1 - r0, c1 - c0), self.dtype)
        if r1 - r0 == 1 and c1 - c0 == 1 and not self.laid:
            tile = self.tiles.get((r0 // _TILE_ROWS, c0 // _TILE_COLS))
            out[0, 0] = self.fill if tile is None else tile[r0 % _TILE_ROWS, c0 % _TILE_COLS]
            return out
        out.fill(self.fill)
        for at, rows, cols, out_rows, out_cols in self._pieces(r0, r1, c0, c1):
            tile = self.tiles.get(at)
            if tile is not None:
                out[out_rows, out_cols] = tile[rows, cols]
        for top, bottom, left, right, source in self.laid:
            a, b, c, d = max(r0, top), min(r1, bottom), max(c0, left), min(c1, right)
            if a < b and c < d:
                out[a - r0:b - r0, c - c0:d - c0] = \
                    source.cells(a - top, b - top, c - left, d - left) \
                    if isinstance(source, ArrayRows) else source
        return out

    def laid_over(self, r0: int, r1: int, c0: int, c1: int) -> bool:
        """Whether one laid block holds every cell of the box."""
        return any(top <= r0 and r1 <= bottom and left <= c0 and c1 <= right
                   for top, bottom, left, right, _ in self.laid)


_letters = functools.lru_cache(maxsize=None)(column_letters)


def _corner(text: str) -> tuple[int, int]:
    letters, digits = _CELL.fullmatch(text).groups()
    return int(digits), column_number(letters)


class _RangeDicts:
    """The engine's description of a cell or range (`Ranges.get_range`: rows as text,
    columns as letters and numbers, its name, its sheet and book), made from a parsed one
    of the same sheet and kind by putting in the new place: parsing costs ~20 µs a
    reference, thousands a workbook. The first one made of each kind is compared with the
    engine's own parse; the grid's last row and column, which the engine writes
    differently, are always parsed."""

    def __init__(self, book: str):
        from formulas.tokens.operand import maxcol, maxrow

        self._book, self._last = book, (maxrow, maxcol)
        self._models: dict[tuple[str, bool], dict] = {}

    def __call__(self, sheet: str, top: int, left: int, bottom: int, right: int) -> dict:
        maxrow, maxcol = self._last
        single = (top, left) == (bottom, right)
        first, last = _letters(left), _letters(right)
        ref = f"{first}{top}" if single else f"{first}{top}:{last}{bottom}"
        key = f"'[{self._book}]{sheet}'!{ref}"
        model = self._models.get((sheet, single))
        if model is None or max(bottom, top) >= maxrow or max(left, right) >= maxcol:
            from formulas.ranges import Ranges

            parsed = Ranges().push(key, raise_anchor=False).ranges[0]
            if model is None and bottom < maxrow and right < maxcol:
                self._models[(sheet, single)] = parsed
                if self._moved(parsed, top, left, bottom, right, first, last, ref,
                               key) != parsed:
                    raise CalculationRefused("the engine describes ranges otherwise")
            return parsed
        return self._moved(model, top, left, bottom, right, first, last, ref, key)

    @staticmethod
    def _moved(model, top, left, bottom, right, first, last, ref, key) -> dict:
        moved = dict(model)
        moved.update(r1=str(top), r2=str(bottom), c1=first, c2=last, n1=left, n2=right,
                     ref=ref, name=key)
        return moved


def _shape_key(sheet: str, size: tuple, form: str, refs, places: list) -> tuple:
    """What a formula's compiled pipe depends on: its text without the places of its
    references (`form`, formula_form's without them; the size of each reference, whether
    it is a range, which of them are one cell),
    the sheet and the size it fills. The engine's compiled pipe is the same for every
    formula with the same key, up to the names of its inputs (the references, matched by
    their place in the formula); anything that would read a reference's place when
    compiling (ROW, COLUMN, OFFSET, ...) has no form (`formula_form`), and a reference
    folded away when compiling (INDEX with constant arguments, ROWS, an intersection)
    makes the template refuse to be shared (`_template_keys`)."""
    first_seen: dict = {}
    geometry = []
    for (_, corners), place in zip(refs, places, strict=True):
        (top, left), (bottom, right) = corners[0], corners[-1]
        same = first_seen.setdefault(place or object(), len(first_seen))
        geometry.append((len(corners), bottom - top, right - left, same))
    return sheet, size, form, tuple(geometry)


@functools.cache
def _cell_parser():
    """The engine's parser of a cell's formula (the one its Cell objects use)."""
    import formulas

    return formulas.Parser(is_cell=True)


def compiled_formula(reference: str, text: str, references: dict):
    """(the engine's compiled function of `text`, the range of the cell `reference` as the
    engine describes it), compiled through the engine's public parser as the engine
    compiles a cell's formula: `Parser().ast(text)[1].compile()`, in the cell's context
    (its book, sheet, row and column), the cell itself as the CELL input. (None, range)
    when `text` is not a formula."""
    import formulas

    own_range = formulas.Ranges().push(reference, raise_anchor=False)
    where = own_range.ranges[0]
    context = {"cr": where["r1"], "cc": where["n1"]}
    context.update((k, where[k]) for k in ("filename", "sheet") if k in where)
    parser = _cell_parser()
    if not (isinstance(text, str) and parser.is_formula(text)):
        return None, where
    builder = parser.ast(text, context=context)[1]
    return builder.compile(references=references, **{formulas.CELL: own_range}), where


class _Template:
    """The first cell of a formula form, compiled, and what every other cell of the form
    needs of it: its pipe (as a loop), its input names and which reference each one is."""

    def __init__(self, loop: FormulaLoop, inputs: dict, keys: list[str]):
        self.loop, self.inputs, self.keys = loop, inputs, keys


class DirectCalculation:
    """The calculation of `ExcelModel.from_dict(entries)` (the entries of
    `formulas_engine.model_dict`), planned once; `calculate` gives what the engine's
    `calculate(inputs=…)` gives for every cell, or raises CalculationRefused."""

    @formulas_changes()
    def __init__(self, entries: dict, book: str):
        if not formula_shortcuts():
            raise CalculationRefused("library releases")
        import schedula as sh
        from formulas.cell import Ref

        formulas_engine()  # imported as `formulas_engine` imports it
        self._book = book
        self._sheets: dict[str, int] = {}  # the engine's sheet name -> its grid's index
        self._sheet_names: list[str] = []
        self._extent: list[list[int]] = []  # each sheet's rows, columns
        self._constants: dict[str, tuple] = {}  # key -> (box, value)
        formula_entries: list[tuple[str, tuple, str]] = []
        names: dict[str, str | None] = {}  # a defined name's node -> its range's key
        is_formula = _cell_parser().is_formula
        for key, value in entries.items():
            if isinstance(value, str) and value.upper() == "#EMPTY":
                value = [[sh.EMPTY]]
            match = _SHEET_KEY.match(key)
            if match is None:
                if not _NAME_KEY.match(key) or not key.startswith(f"'[{book}]'!"):
                    raise CalculationRefused(f"the key {key!r}")
                target = _SHEET_KEY.match(value[1:]) if isinstance(value, str) and \
                    value.startswith("=") else None
                plain = target is not None and target.group("book") == book
                names[Ref(key, None).output] = value[1:] if plain else None
                continue
            if match.group("book") != book:
                raise CalculationRefused(f"the key {key!r}")
            box = self._box_of(match)
            if isinstance(value, str) and is_formula(value):
                formula_entries.append((key, box, value))
            elif value is not None:
                self._constants[key] = (box, value)
        self._check_keys_are_the_engines(entries)
        self._names: dict[str, tuple] = {}  # a name used by a formula -> how to get its value
        self._name_targets = names
        self._loops: dict[int, tuple] = {}
        self._range_dicts = _RangeDicts(book)
        self._ref_sheets: dict[str, str] = {}  # a formula's sheet text -> the sheet's name
        self._place_specs: dict[tuple, tuple] = {}
        forms: dict[tuple, _Template | None] = {}
        self._formulas = [self._formula_step(key, box, text, forms)
                          for key, box, text in formula_entries]
        self._forms = sum(1 for form in forms.values() if form is not None)
        self._order = self._dependency_order()
        self._base = self._constant_grids()

    @property
    def compiled_formulas(self) -> int:
        """The compiled pipes this calculation holds (formula forms and defined names)."""
        return len(self._loops)

    # -- reading the entries ---------------------------------------------------------------

    def _sheet(self, name: str) -> int:
        if name not in self._sheets:
            self._sheets[name] = len(self._sheets)
            self._sheet_names.append(name)
            self._extent.append([0, 0])
        return self._sheets[name]

    def _box_of(self, match: re.Match) -> tuple[int, int, int, int, int]:
        """(sheet, first row, last row + 1, first column, last column + 1), 0-based."""
        top, left = _corner(match.group("top"))
        bottom, right = _corner(match.group("bottom")) if match.group("bottom") else (top, left)
        if match.group("bottom") and (bottom, right) == (top, left) or \
                bottom < top or right < left:
            raise CalculationRefused("a range written unusually")
        return self._boxed(match.group("sheet"), top, bottom, left, right)

    def _boxed(self, sheet: str, top: int, bottom: int, left: int, right: int) -> tuple:
        index = self._sheet(sheet)
        extent = self._extent[index]
        extent[0], extent[1] = max(extent[0], bottom), max(extent[1], right)
        return index, top - 1, bottom, left - 1, right

    def _check_keys_are_the_engines(self, entries: dict) -> None:
        """Each key is the name the engine gives its node (checked on one key a sheet)."""
        from formulas.ranges import Ranges

        seen = set()
        for key in entries:
            match = _SHEET_KEY.match(key)
            if match and match.group("sheet") not in seen:
                seen.add(match.group("sheet"))
                if Ranges().push(key).ranges[0]["name"] != key:
                    raise CalculationRefused(f"the key {key!r}")

    # -- compiling ---------------------------------------------------------------------------

    def _formula_step(self, key: str, box: tuple, text: str, forms: dict) -> tuple:
        """(loop, each pipe input's spec, output box, output range, output key) of one
        formula node; its form's compiled pipe when the form was seen before."""
        sheet = self._sheet_names[box[0]]
        found = formula_form(text, box[1] + 1, box[3] + 1, relative=False) \
            if text.startswith("=") else None
        form_key = None
        if found is not None:
            form, refs = found
            places = self._places(sheet, refs)
            form_key = _shape_key(sheet, (box[2] - box[1], box[4] - box[3]), form, refs,
                                  places)
            template = forms.get(form_key)
            if template is not None:
                inputs = self._shared_inputs(template, places)
                if inputs is not None:
                    return template.loop, inputs, box, self._output_range(box), key
        try:
            pipe, own_range = compiled_formula(key, text, self._name_targets)
        except Exception as error:  # the engine's own path says what is wrong
            raise CalculationRefused(f"{type(error).__name__} compiling {key}") from error
        if pipe is None:
            raise CalculationRefused(f"the formula of {key}")
        loop = self._loop(pipe)
        inputs = tuple(self._input_spec(k, r) for k, r in pipe.inputs.items())
        if form_key is not None and form_key not in forms:
            keys = template_keys(pipe, self._book, sheet, found[1]) \
                if independent_of_position(pipe) else None
            forms[form_key] = None if keys is None else _Template(loop, pipe.inputs, keys)
        return loop, inputs, box, own_range, key

    def _loop(self, pipe) -> FormulaLoop:
        import schedula as sh

        if not isinstance(pipe, sh.DispatchPipe):
            raise CalculationRefused("a formula compiled to something else")
        if id(pipe) not in self._loops:  # the pipe kept alive, so its id stays its own
            self._loops[id(pipe)] = (pipe, FormulaLoop(pipe))
        return self._loops[id(pipe)][1]

    def _places(self, sheet: str, refs) -> list[tuple | None]:
        """Each reference's (sheet, top, left, bottom, right); None for one written
        unusually (corners not top-left and bottom-right, one cell as a range)."""
        places = []
        for sheet_text, corners in refs:
            (top, left), (bottom, right) = corners[0], corners[-1]
            if min(top, left) < 1 or bottom < top or right < left or \
                    len(corners) == 2 and (top, left) == (bottom, right):
                places.append(None)
                continue
            if sheet_text not in self._ref_sheets:
                self._ref_sheets[sheet_text] = sheet_name(sheet_text).upper()
            places.append((self._ref_sheets[sheet_text] if sheet_text else sheet,
                           top, left, bottom, right))
        return places

    def _shared_inputs(self, template: _Template, places: list) -> tuple | None:
        """The input specs of a cell of the template's form: the template's inputs, each
        reference replaced by the cell's own (matched by its place in the formula). None
        when the cell's references do not map one-to-one onto the template's."""
        own: dict[str, tuple] = {}
        for template_key, place in zip(template.keys, places, strict=True):
            if place is None or own.setdefault(template_key, place) != place:
                return None
        if len(set(own.values())) != len(own):  # two template inputs onto one cell
            return None
        return tuple(self._input_spec(k, r) if k not in own else self._place_spec(own[k])
                     for k, r in template.inputs.items())

    def _place_spec(self, place: tuple) -> tuple:
        """`_box_spec` of a reference's place (one for every cell reading the place, as
        the engine's cells share one parsed range, `of_formulas._parsed_range`)."""
        spec = self._place_specs.get(place)
        if spec is None:
            sheet, top, left, bottom, right = place
            rng = self._range_dicts(sheet, top, left, bottom, right)
            spec = self._place_specs[place] = \
                _BOX, (rng,), self._boxed(sheet, top, bottom, left, right), rng["name"], rng
        return spec

    def _input_spec(self, key, ranges) -> tuple:
        """How the engine feeds one input of a compiled formula (formulas.cell.Cell
        `update_inputs` and `_args`): a defined name's value, or a box of cells."""
        import schedula as sh

        if not isinstance(key, str):  # the dispatcher itself: INDIRECT and the like
            raise CalculationRefused("a formula reads the dispatcher")
        if key in self._name_targets:
            self._name_value_spec(key)
            return _NAME, ranges, key
        if ranges is sh.NONE or not hasattr(ranges, "ranges"):
            raise CalculationRefused(f"the reference {key!r}")
        return self._box_spec(ranges.ranges)

    def _box_spec(self, ranges: tuple) -> tuple:
        """(_BOX, the input's range descriptions, its box, its node's name, its range)."""
        if len(ranges) != 1:
            raise CalculationRefused("a union of ranges")
        rng = ranges[0]
        if rng.get("filename") != self._book or not rng.get("sheet") or rng.get("anchor"):
            raise CalculationRefused(f"the reference {rng.get('name')!r}")
        top, bottom, left, right = int(rng["r1"]), int(rng["r2"]), rng["n1"], rng["n2"]
        if min(top, left) < 1 or bottom < top or right < left:
            raise CalculationRefused(f"the reference {rng['name']!r}")
        return _BOX, ranges, self._boxed(rng["sheet"], top, bottom, left, right), \
            rng["name"], rng

    def _name_value_spec(self, name: str) -> None:
        """A defined name a formula reads: the engine's Ref node, compiled, fed its range."""
        from formulas.cell import Ref

        if name in self._names:
            return
        target = self._name_targets[name]
        if target is None:
            raise CalculationRefused(f"the defined name {name!r}")
        ref = Ref(name, f"={target}").compile()
        func = ref.func
        if func is None or func.parse_kwargs() != {} or list(ref.inputs) != [target] or \
                ref.inputs[target] != [target] or list(func.func.inputs) != [target]:
            raise CalculationRefused(f"the defined name {name!r}")
        self._names[name] = (self._loop(func.func),
                             self._box_spec(func.func.inputs[target].ranges))

    def _output_range(self, box: tuple) -> dict:
        """The range of a node's cells, as the engine's Cell describes it."""
        sheet, r0, r1, c0, c1 = box
        return self._range_dicts(self._sheet_names[sheet], r0 + 1, c0 + 1, r1, c1)

    # -- ordering ----------------------------------------------------------------------------

    def _check_grid_cells(self) -> None:
        """Refused beyond MOST_GRID_CELLS cells held cell by cell (formulas' and constants'
        other than the blocks kept as arrays)."""
        held = sum((r1 - r0) * (c1 - c0) for _, _, (_, r0, r1, c0, c1), _, _ in self._formulas)
        held += sum((r1 - r0) * (c1 - c0) for (_, r0, r1, c0, c1), value
                    in self._constants.values() if not isinstance(value, ArrayRows))
        if held > MOST_GRID_CELLS:
            raise CalculationRefused("too many cells for the grids")

    def _dependency_order(self) -> list[int]:
        """The formula nodes in an order where each comes after every formula node inside
        the boxes it reads."""
        self._check_grid_cells()
        # each cell's formula node (its index), -2 for a constant, -1 for none
        owners = [_Grid(-1, np.int64) for _ in self._sheet_names]

        def held() -> int:  # cells the grids hold: as many as were set if no two overlap
            return sum(int((tile != -1).sum()) for grid in owners for tile in grid.tiles.values())

        boxed = 0
        for index, (_, _, (sheet, r0, r1, c0, c1), _, _) in enumerate(self._formulas):
            owners[sheet].set(r0, r1, c0, c1, index)
            boxed += (r1 - r0) * (c1 - c0)
        if boxed != held():
            raise CalculationRefused("two formulas fill one cell")
        blocks = []
        for (sheet, r0, r1, c0, c1), value in self._constants.values():
            if isinstance(value, ArrayRows):  # a block of numbers: laid over, not stored
                blocks.append((sheet, r0, r1, c0, c1))
            else:
                owners[sheet].set(r0, r1, c0, c1, -2)
                boxed += (r1 - r0) * (c1 - c0)
        if boxed != held():
            raise CalculationRefused("two nodes hold one cell")
        for sheet, r0, r1, c0, c1 in blocks:
            if (owners[sheet].get(r0, r1, c0, c1) != -1).any():
                raise CalculationRefused("two nodes hold one cell")
            owners[sheet].lay(r0, r1, c0, c1, -2)
        found: dict[tuple, tuple[int, ...]] = {}
        # the boxes holding a cell of no node: only their solution entries give those
        # cells' (empty) values; the others' cells all come with their nodes
        self._open_boxes: set[str] = set()

        def inside(spec) -> tuple[int, ...]:
            box = spec[2]
            if box not in found:
                sheet, r0, r1, c0, c1 = box
                if owners[sheet].laid_over(r0, r1, c0, c1):  # inside a block of numbers
                    found[box] = ()
                    return found[box]
                block = owners[sheet].get(r0, r1, c0, c1)
                found[box] = tuple(np.unique(block[block >= 0]).tolist()) \
                    if block.size > 1 else ((int(block[0, 0]),) if block[0, 0] >= 0 else ())
                if (block == -1).any():
                    self._open_boxes.add(spec[3])
            return found[box]

        count = len(self._formulas)
        waiting = [0] * count
        users: list[list[int]] = [[] for _ in range(count)]
        for index, (_, inputs, _, _, _) in enumerate(self._formulas):
            needs = set()
            for spec in inputs:
                needs.update(inside(spec if spec[0] == _BOX else self._names[spec[2]][1]))
            for need in needs:
                users[need].append(index)
            waiting[index] = len(needs)
        order = [index for index in range(count) if not waiting[index]]
        for index in order:  # grows while it is walked
            for user in users[index]:
                waiting[user] -= 1
                if not waiting[user]:
                    order.append(user)
        if len(order) != count:
            raise CalculationRefused("circular references")
        return order

    def _constant_grids(self) -> list[_Grid]:
        """Each sheet's cells with the constants in place, EMPTY elsewhere."""
        import schedula as sh

        grids = [_Grid(sh.EMPTY) for _ in self._sheet_names]
        for key, (box, value) in self._constants.items():
            self._place(grids, key, box, value)
        return grids

    def _place(self, grids: list, key: str, box: tuple, value) -> None:
        """A constant's value into its cells, as its node holds it (a block kept as an
        array laid over the grid as it is)."""
        sheet, r0, r1, c0, c1 = box
        grid = grids[sheet]
        if isinstance(value, ArrayRows) and value.values.shape == (r1 - r0, c1 - c0):
            grid.lay(r0, r1, c0, c1, value)
            return
        if r1 - r0 == c1 - c0 == 1:
            if type(value) is list and len(value) == 1 and type(value[0]) is list and \
                    len(value[0]) == 1:
                value = value[0][0]  # a text cell, [[text]]
            if type(value) in _PLAIN:
                grid.set(r0, r1, c0, c1, value)  # what np.asarray([[value]], object) holds
                return
        grid.set(r0, r1, c0, c1, self._constant_node(key, box, value).values[key][1])

    def _constant_node(self, key: str, box: tuple, value):
        """The engine's node value of a constant cell or block (Cell.add's format_output)."""
        from formulas.ranges import Ranges

        if isinstance(value, ArrayRows):
            value = value.cells(0, value.values.shape[0], 0, value.values.shape[1])
        return Ranges().set_value(self._output_range(box), value)

    # -- calculating -------------------------------------------------------------------------

    @formulas_changes()
    def calculate(self, inputs: dict | None = None) -> dict:
        """Every node's value, the constants of `inputs` (key -> value) replaced: formula
        cells as the engine's nodes (`Ranges`), constants and the boxes formulas read as
        `_Value`s."""
        import schedula as sh
        from formulas.functions import replace_empty
        from formulas.ranges import Ranges

        grids = [grid.copy() for grid in self._base]
        constants = self._constants
        if inputs:
            constants = dict(constants)
            for key, value in inputs.items():
                if key not in constants:
                    raise CalculationRefused(f"no constant node {key!r}")
                box, before = constants[key]
                constants[key] = (box, value)
                if isinstance(before, ArrayRows):  # no longer laid over the grid
                    grids[box[0]].unlay(before)
                self._place(grids, key, box, value)
        nodes: dict[str, Any] = {}  # formula (and constant) nodes' values so far
        names: dict[str, Any] = {}
        boxes: dict[str, tuple] = {}  # the boxes formulas read that hold empty cells
        open_boxes = self._open_boxes

        last_block: list = []  # (key, node) of the block of numbers read last

        def node_value(key):
            node = nodes.get(key)
            if node is None and key in constants:
                box, value = constants[key]
                if not isinstance(value, ArrayRows):
                    node = nodes[key] = self._constant_node(key, box, value)
                elif last_block and last_block[0] == key:
                    node = last_block[1]
                else:  # a block of weights as Python numbers: held while it is being read
                    last_block[:] = [key, None]
                    node = last_block[1] = self._constant_node(key, box, value)
            return node

        def argument(spec):
            if spec[0] == _NAME:
                return name_argument(spec)
            _, ranges, box, key, rng = spec
            node = node_value(key)
            if node is not None:  # the node itself is the input
                (held, array), = node.values.values()
            else:  # the engine's range assembler: the box's cells, EMPTY where none
                if key in open_boxes:
                    boxes[key] = box
                sheet, r0, r1, c0, c1 = box
                held, array = rng, grids[sheet].get(r0, r1, c0, c1)
            argument = Ranges(ranges, {key: (held, array)})
            # its `.value`, which the engine cuts from `values` on first use: the whole
            # array, the one range and its value covering the same cells
            argument._value = array
            return argument

        def name_argument(spec):
            _, ranges, name = spec
            if name not in names:
                loop, target = self._names[name]
                names[name] = value = replace_empty(loop(argument(target)))
                if value is sh.NONE:
                    raise CalculationRefused("a defined name gave no value")
            value = names[name]
            if not hasattr(ranges, "ranges") or not hasattr(value, "values"):
                return value  # as Cell._args: the name's value itself
            return Ranges(ranges.ranges, dict(value.values))

        formulas = self._formulas
        none = sh.NONE
        for index in self._order:
            loop, specs, (sheet, r0, r1, c0, c1), rng, key = formulas[index]
            try:
                result = loop(*[argument(spec) for spec in specs])
            except CalculationRefused:
                raise
            except Exception as error:  # the engine would skip this cell (or raise)
                raise CalculationRefused(f"{type(error).__name__} in {key}") from error
            result = _replace_empty(result, replace_empty)
            if result is none:
                raise CalculationRefused("a formula gave no value")
            nodes[key] = node = Ranges().set_value(rng, result)
            array = node._value = node.values[rng["name"]][1]  # its `.value`, as above
            if array.dtype == object and r1 - r0 == c1 - c0 == 1:
                grids[sheet].set(r0, r1, c0, c1, array[0, 0])
            else:  # numbers of another dtype become Python numbers, as in the engine
                grids[sheet].set(r0, r1, c0, c1, array)
        solution: dict[str, Any] = {}
        for key, box in boxes.items():
            solution[key] = _Value(grids[box[0]], box)
        for key, (box, _) in constants.items():
            solution[key] = _Value(grids[box[0]], box)
        solution.update(nodes)
        return solution
