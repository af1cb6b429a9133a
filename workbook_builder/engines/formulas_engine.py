"""Evaluates a workbook's formulas with the `formulas` engine, quietly and fast.

The engine's own loader (`ExcelModel.loads`) turns every constant cell into a graph node,
~0.3 ms each, and then intersects the index set of every range on a sheet with every range
it must assemble, O(cells²) on sheets with large blocks: a 512×512 weight matrix takes
minutes. So the model is built with the engine's documented `from_dict` instead, from the
openpyxl workbook: formulas (single-cell and array) as the file holds them, each input block
(a defined name that holds only numbers) as one range node, other constants as cells. The
engine parses and evaluates the same formulas either way; tests/test_evaluate.py checks that
both loaders give identical values.
"""

import contextlib
import gc
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from openpyxl.utils import column_index_from_string
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.engines.internals import CalculationRefused
from workbook_builder.engines.internals.direct_calc import ArrayRows, DirectCalculation
from workbook_builder.engines.internals.of_formulas import (
    compiled_formulas,
    formula_shortcuts,
    formulas_changes,
    is_formula_error,
    model_from_dict,
    readable_formula,
)
from workbook_builder.engines.internals.of_schedula import OrderedCalculation
from workbook_builder.errors import UserError
from workbook_builder.sheet.cells import is_formula_cell
from workbook_builder.sheet.constants import (
    constant_block_at,
    constant_blocks,
    positions_inside,
)
from workbook_builder.sheet.limits import (
    EXCEL_COLS,
    EXCEL_ROWS,
    MAX_FORMULA_CHARS,
    extent_of,
    named_cells,
    named_extent,
)
from workbook_builder.sheet.refs import cell_ref, name_destinations, parse_range, range_ref
from workbook_builder.xlsx.of_openpyxl import load_workbook, stored_cells

# "'[book.xlsx]SHEET'!C5:F9" -> sheet, range
# (defined names appear as "'[book.xlsx]'!NAME": no sheet, and skipped)
_KEY = re.compile(r"^'?\[[^\]]*\](?P<sheet>.+?)'?!"
                  r"(?P<range>[A-Z]{1,3}\d+(?::[A-Z]{1,3}\d+)?)$")

CellValues = dict[tuple[str, int, int], Any]  # (SHEET upper-cased, row, col) -> value


_frozen_depth = 0


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """The objects already made (the loaded workbook, the engine's model) left out of the
    cyclic garbage collector's passes while the engine allocates: every full pass would
    walk them all again (a check ~10–30% faster). Unfrozen afterwards, so a long-running
    process still collects them once they are garbage."""
    global _frozen_depth
    gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if not _frozen_depth:
            gc.unfreeze()


@contextlib.contextmanager
def _quiet_numpy() -> Iterator[None]:
    """NumPy warns on EXP overflow inside the engine; the CLI decides what the user sees."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# a string literal, or a quoted sheet name before its "!"
_QUOTED_SHEET = re.compile(r'"(?:[^"]|"")*"|\'((?:[^\']|\'\')+)\'!')


def engine_sheet_names(titles: list[str]) -> dict[str, str]:
    """Each sheet title -> the name the engine knows the sheet by (upper case, as the
    engine keeps names). The `formulas` engine cannot parse a sheet name holding an
    apostrophe (its own loader fails on one too), so such a sheet gets a name of its own
    that no other sheet has."""
    taken = {title.upper() for title in titles}
    names = {}
    for title in titles:
        name = title.upper()
        if "'" in name:
            base = candidate = name.replace("'", "_")
            number = 1
            while candidate in taken:
                number += 1
                candidate = f"{base}_{number}"
            taken.add(candidate)
            name = candidate
        names[title] = name
    return names


def _with_sheets_renamed(formula: str, renamed: dict[str, str]) -> str:
    """The formula with each quoted reference to a renamed sheet (upper-cased title ->
    engine name) written with the engine's name; string literals left as they are."""
    def swap(match: re.Match) -> str:
        quoted = match.group(1)
        name = renamed.get(quoted.replace("''", "'").upper()) if quoted else None
        return match.group(0) if name is None else f"'{name}'!"

    return _QUOTED_SHEET.sub(swap, formula)


def model_dict(wb: Workbook, book: str, bounded: bool = False) -> dict[str, Any]:
    """The workbook as `ExcelModel.from_dict` takes it: "'[book]SHEET'!REF" -> formula text
    or value; "'[book]'!NAME" -> "=reference" for defined names. `bounded` (a file a user
    gives): only the cells within the defined names' extent, and no formula that reads a
    range larger than that extent."""
    engine_names = engine_sheet_names(wb.sheetnames)
    renamed = {title.upper(): name for title, name in engine_names.items()
               if name != title.upper()}

    def key(sheet: str, ref: str) -> str:
        return f"'[{book}]{engine_names[sheet]}'!{ref}"

    def formula(text: str) -> str:
        return _with_sheets_renamed(text, renamed) if renamed else text

    # openpyxl keeps only the cells a file holds in `_cells`; iter_rows would create every
    # empty cell of the used rectangle (a million of them beside a 512×512 matrix)
    sheets = {ws.title: {(c.row, c.column): c for c in stored_cells(ws)}
              for ws in wb.worksheets}
    if bounded:
        sheets = _within_names(wb, sheets, book)
    entries: dict[str, Any] = {}
    array_members: set[tuple[str, int, int]] = set()  # filled by an array formula
    formula_cells: set[tuple[str, int, int]] = set()
    for title, cells in sheets.items():
        for (r, c), cell in cells.items():
            if isinstance(cell.value, ArrayFormula):
                top, left, bottom, right = parse_range(cell.value.ref)
                array_members.update((title, i, j) for i in range(top, bottom + 1)
                                     for j in range(left, right + 1))
            elif is_formula_cell(cell):
                formula_cells.add((title, r, c))
    grouped: set[tuple[str, int, int]] = set()
    for ws in wb.worksheets:  # blocks kept as arrays, not cells: one range node each
        arrays = constant_blocks(ws) if ws.title in sheets else []
        inside = positions_inside(arrays, list(sheets[ws.title])) if arrays else []
        for array, held in zip(arrays, inside, strict=True):
            if not held:  # its numbers made Python numbers only where they are read
                entries[key(ws.title, range_ref(array.top, array.left, array.bottom,
                                                array.right))] = \
                    ArrayRows(array.values, array.integers)
                continue
            for i, row in enumerate(array.rows()):  # a cell put there since: it wins
                for j, value in enumerate(row):
                    if (array.top + i, array.left + j) not in held:
                        entries[key(ws.title, cell_ref(array.top + i, array.left + j))] = value
    for name, defined in wb.defined_names.items():
        destinations = name_destinations(defined)
        if len(destinations) != 1 or destinations[0][0] not in sheets:
            continue
        sheet, ref = destinations[0]
        try:
            top, left, bottom, right = parse_range(ref.replace("$", ""))
        except ValueError:  # a whole column or row: no block of ours, left out as above
            continue
        entries[f"'[{book}]'!{name}"] = f"={key(sheet, ref.replace('$', ''))}"
        if constant_block_at(wb[sheet], top, left, bottom, right) is not None:
            continue  # a range node already
        if (bottom - top + 1) * (right - left + 1) > len(sheets[sheet]):
            continue  # more cells than the sheet stores: not a block of numbers
        block = [(sheet, r, c) for r in range(top, bottom + 1) for c in range(left, right + 1)]
        if len(block) < 2 or any(c in array_members or c in formula_cells or c in grouped
                                 for c in block):
            continue
        cells = sheets[sheet]
        values = [[getattr(cells.get((r, c)), "value", None) for c in range(left, right + 1)]
                  for r in range(top, bottom + 1)]
        if all(_is_number(v) for row in values for v in row):
            entries[key(sheet, range_ref(top, left, bottom, right))] = values
            grouped.update(block)
    for title, cells in sheets.items():
        for (r, c), cell in cells.items():
            value = cell.value
            if value is None or (title, r, c) in grouped:
                continue
            if isinstance(value, ArrayFormula):
                entries[key(title, value.ref)] = formula(value.text)
            elif (title, r, c) not in array_members:  # an application's cached array values
                # a text cell as a 1×1 range: the engine would parse "=…" as a formula and
                # "#N/A" as an error value
                entries[key(title, cell.coordinate)] = [[value]] if cell.data_type == "s" \
                    else formula(value) if isinstance(value, str) else value
    return entries


# a range in a formula: C5:F9, $C$5:$F$9, a whole column A:B or a whole row 3:7
_RANGE = re.compile(r"(?<![\w.$])\$?([A-Z]{1,3})\$?(\d+):\$?([A-Z]{1,3})\$?(\d+)(?![\w(])"
                    r"|(?<![\w.$])\$?([A-Z]{1,3}):\$?([A-Z]{1,3})(?![\w(])"
                    r"|(?<![\w.$:])\$?(\d+):\$?(\d+)(?![\w(:])")


def _range_cells(match: re.Match) -> int:
    """Cells a range reference of `_RANGE` covers."""
    left, top, right, bottom, first_col, last_col, first_row, last_row = match.groups()
    if top is not None:
        return (abs(int(bottom) - int(top)) + 1) * \
            (abs(column_index_from_string(right) - column_index_from_string(left)) + 1)
    if first_col is not None:
        return EXCEL_ROWS * (abs(column_index_from_string(last_col) -
                                 column_index_from_string(first_col)) + 1)
    return EXCEL_COLS * (abs(int(last_row) - int(first_row)) + 1)


def _within_names(wb: Workbook, sheets: dict, book: str) -> dict:
    """The stored cells of each sheet within the defined names' extent, their formulas
    bounded (`check_formulas`)."""
    extent = named_extent(wb)
    if extent is None:  # no named block: not a workbook of ours, nothing to bound it by
        for title, cells in sheets.items():
            check_formulas(cells.values(), title, book, None)
        return sheets
    rows, cols = extent
    bounded = {}
    most = named_cells(wb)
    for title, cells in sheets.items():
        bounded[title] = kept = {rc: cell for rc, cell in cells.items()
                                 if rc[0] <= rows and rc[1] <= cols}
        check_formulas(kept.values(), title, book, most)
    return bounded


def check_formulas(cells, title: str, book: str, most: int | None) -> None:
    """Refuse in one line, before any engine is handed them, a formula longer than
    MAX_FORMULA_CHARS or one that reads a range of more than `most` cells (the cells the
    workbook's names cover: a whole column, a million rows)."""
    for cell in cells:
        value = cell.value
        text = value.text if isinstance(value, ArrayFormula) else value
        if not is_formula_cell(cell) or not isinstance(text, str):
            continue
        if len(text) > MAX_FORMULA_CHARS:
            raise UserError(f"{book}: {title}!{cell.coordinate} holds a formula of "
                            f"{len(text):,} characters; attnsheets evaluates formulas of "
                            f"at most {MAX_FORMULA_CHARS:,} (its own are far shorter)")
        if most is None:
            continue
        refs = [value.ref] if isinstance(value, ArrayFormula) and value.ref else []
        sizes = [(m.group(0), _range_cells(m)) for m in _RANGE.finditer(text.upper())]
        sizes += [(ref, _range_cells(_RANGE.match(ref))) for ref in refs
                  if _RANGE.match(ref)]
        for ref, size in sizes:
            if size > most:
                raise UserError(f"{book}: {title}!{cell.coordinate} reads {ref} "
                                f"({size:,} cells), more than the {most:,} cells the "
                                f"workbook's named blocks hold")


def check_application_input(wb: Workbook, book: str) -> None:
    """`check_formulas` for a spreadsheet application (LibreOffice, Gnumeric), before it
    starts: every formula in the rows its trimmed copy keeps (the rows down to the last a
    defined name covers, sheet-level names included), all columns."""
    refs = [dest[1] for defined in wb.defined_names.values()
            for dest in _destinations(defined)]
    refs += [dest[1] for ws in wb.worksheets for defined in ws.defined_names.values()
             for dest in _destinations(defined)]
    rows = (extent_of(refs) or (EXCEL_ROWS,))[0]
    most = named_cells(wb) if named_extent(wb) is not None else None
    for ws in wb.worksheets:
        check_formulas((cell for cell in stored_cells(ws) if cell.row <= rows), ws.title,
                       book, most)


def _destinations(defined) -> list[tuple[str, str]]:
    try:
        return list(name_destinations(defined))
    except Exception:  # empty, or a formula: not a range
        return []


def evaluate_with_formulas(path: Path, wb: Workbook | None = None,
                           input_blocks: bool = True) -> CellValues:
    """Every formula cell's value and the constants the engine read (the input blocks'
    cells only with `input_blocks`). `wb` is the workbook already loaded from `path`, if the
    caller has it. Only the part of each sheet the defined names cover is read
    (`model_dict`, bounded)."""
    return FormulasModel(path if wb is None else wb, Path(path).name,
                         bounded=True).evaluate(input_blocks=input_blocks)


class FormulasModel:
    """A workbook parsed once by the `formulas` engine and evaluated for any number of input
    sets. Parsing costs ~1–2 ms per formula cell, a calculation a small fraction of that, so
    workbooks that share one formula structure (a class of students, a re-check with new
    inputs) are parsed once."""

    def __init__(self, source: Path | Workbook, book: str | None = None,
                 bounded: bool = False, share_compiled: bool | None = None,
                 ordered_calc: bool | None = None, direct: bool | None = None):
        """`direct`: calculate straight from the cells, without the engine's graph
        (`direct_calc.DirectCalculation`; None: unless one of the two below is False);
        otherwise, or where it refuses, the engine's model: `share_compiled`: compile each
        formula form once (`model_from_dict`); `ordered_calc`: calculate with a plain loop
        over the compiled functions (`of_schedula.OrderedCalculation`). None: within the
        library releases they were written for (`internals.versions`); False: the engine's
        own path. `path` says which way was taken."""
        if isinstance(source, Workbook):
            wb, self._book = source, book or "book.xlsx"
        else:
            wb, self._book = load_workbook(source), Path(source).name
        # the engine's keys hold the name in brackets ('[book.xlsx]SHEET'!A1): a bracket
        # or a control character in a file's name would break them
        self._book = "".join("_" if c in "[]" or not c.isprintable() else c
                             for c in self._book)
        entries = model_dict(wb, self._book, bounded)
        # upper-cased title <-> the engine's name, for sheets the engine knows by another
        self._engine_names = {title.upper(): name for title, name in
                              engine_sheet_names(wb.sheetnames).items()
                              if name != title.upper()}
        self._sheet_titles = {name: title for title, name in self._engine_names.items()}
        self._sheetnames = wb.sheetnames
        # input blocks: one range node each; read back from the file, not from the engine
        self._blocks = {k: v for k, v in entries.items() if isinstance(v, list | ArrayRows)}
        self._entries, self._share_compiled = entries, share_compiled
        self._model = self._ordered_calc = self._direct = None
        self._use_ordered_calc = formula_shortcuts() if ordered_calc is None else ordered_calc
        if direct is None:
            direct = share_compiled is not False and ordered_calc is not False and \
                formula_shortcuts()
        with _quiet_numpy(), _heap_frozen(), formulas_changes():
            if direct:
                with contextlib.suppress(CalculationRefused):
                    self._direct = DirectCalculation(entries, self._book)
            if self._direct is None:
                self._build_model()
        self._path = "direct" if self._direct is not None else \
            "ordered" if self._use_ordered_calc else "engine"

    @property
    def path(self) -> str:
        """How the workbook is calculated: "direct" (straight from its cells, without the
        engine's graph), "ordered" (the engine's graph, its compiled functions called in a
        planned order) or "engine" (the engine's own calculation). The way the last
        `evaluate` took; before the first, the way planned (a shortcut that finds it cannot
        reproduce the engine's result gives way to the next, down to "engine")."""
        return self._path

    @property
    def engine_model(self):
        """The engine's own model (a `formulas.ExcelModel`) when the calculation takes the
        engine's graph ("ordered" or "engine"); None on the direct path."""
        return self._model

    @property
    def compiled_formulas(self) -> int:
        """How many compiled formulas the calculation holds (each formula form is compiled
        once, whatever the number of cells filled with it)."""
        if self._direct is not None:
            return self._direct.compiled_formulas
        return compiled_formulas(self._model)

    def _build_model(self) -> None:
        """The engine's model of the workbook, for what the direct calculation refuses; a
        formula the engine cannot parse (`=1+`, a DDE link `=cmd|' /C calc'!A0`) is one
        line naming its cell."""
        # the engine's own model takes every block as rows of Python numbers
        self._entries = {k: v.rows() if isinstance(v, ArrayRows) else v
                         for k, v in self._entries.items()}
        self._blocks = {k: v.rows() if isinstance(v, ArrayRows) else v
                        for k, v in self._blocks.items()}
        try:
            self._model = model_from_dict(self._entries, self._book, self._share_compiled)
        except Exception as error:
            if not is_formula_error(error):
                raise
            for key, text in self._entries.items():  # which one: the error does not say
                if isinstance(text, str) and text.startswith("=") and \
                        not readable_formula(text):
                    sheet, _, ref = key[len(self._book) + 3:].rpartition("'!")
                    title = next((t for t in self._sheetnames if t.upper() == sheet),
                                 self._sheet_titles.get(sheet, sheet))
                    raise UserError(f"{self._book}: {title}!{ref} holds {text!r}, not a "
                                    f"formula the engine can read") from None
            raise

    def evaluate(self, inputs: dict[tuple[str, int, int], float] | None = None,
                 input_blocks: bool = True) -> CellValues:
        """Cell values, with constant cells (sheet, row, col) replaced by `inputs`. Without
        `input_blocks`, the cells of the input blocks (each a range node, read back from
        the file as it is) are left out: a model's millions of weights, which no formula's
        value and no comparison needs from here."""
        overrides: dict[str, Any] = {}
        blocks: dict[str, list[list]] = {}
        for (sheet, row, col), value in (inputs or {}).items():
            key = f"'[{self._book}]{self._engine_sheet(sheet)}'!{cell_ref(row, col)}"
            block = self._block_of(sheet, row, col)
            if block is None:
                overrides[key] = value
                continue
            name, top, left = block
            if name not in blocks:
                held = self._blocks[name]
                blocks[name] = held.rows() if isinstance(held, ArrayRows) else \
                    [list(r) for r in held]
            blocks[name][row - top][col - left] = value
        overrides.update(blocks)
        with _quiet_numpy(), _heap_frozen(), formulas_changes():
            solution = self._calculate(overrides)
        values = _solution_values(solution, set(self._blocks), self._sheet_titles)
        for name, rows in self._blocks.items() if input_blocks else ():  # as given
            sheet, _, ref = name[len(self._book) + 3:].rpartition("'!")
            sheet = self._sheet_titles.get(sheet, sheet)
            top, left, _, _ = parse_range(ref)
            given = blocks.get(name, rows)
            for i, row in enumerate(given.rows() if isinstance(given, ArrayRows) else given):
                for j, value in enumerate(row):
                    values[(sheet, top + i, left + j)] = value
        return values

    def _calculate(self, overrides: dict[str, Any]):
        """Every node's value: by the plain loop when it can reproduce the engine's own
        calculation of this model exactly, else by the engine."""
        if self._direct is not None:
            try:
                self._path = "direct"
                return self._direct.calculate(overrides)
            except CalculationRefused:
                self._direct = None
                self._build_model()
        if self._use_ordered_calc:
            try:
                if self._ordered_calc is None:
                    self._ordered_calc = OrderedCalculation(self._model)
                self._path = "ordered"
                return self._ordered_calc.calculate(overrides)
            except CalculationRefused:
                if self._ordered_calc is None:  # this model's graph: never
                    self._use_ordered_calc = False
        self._path = "engine"
        return self._model.calculate(inputs=overrides) if overrides else \
            self._model.calculate()

    def _engine_sheet(self, sheet: str) -> str:
        return self._engine_names.get(sheet.upper(), sheet.upper())

    def _block_of(self, sheet: str, row: int, col: int) -> tuple[str, int, int] | None:
        """The input block node holding a cell, with the block's top-left corner."""
        prefix = f"'[{self._book}]{self._engine_sheet(sheet)}'!"
        for name in self._blocks:
            if name.startswith(prefix):
                top, left, bottom, right = parse_range(name[len(prefix):])
                if top <= row <= bottom and left <= col <= right:
                    return name, top, left
        return None


_NO_VALUE = object()


def _solution_values(solution, skip: set[str] = frozenset(),
                     titles: dict[str, str] | None = None) -> CellValues:
    """Each cell's value, keyed by its sheet's upper-cased title (`titles`: engine name ->
    that title, for the sheets the engine knows by another name)."""
    values: CellValues = {}
    for key, ranges in solution.items():
        if key in skip:
            continue
        match = _KEY.match(str(key))
        if not match:
            continue
        held = getattr(ranges, "value", _NO_VALUE)  # the engine assembles it at each ask
        if held is _NO_VALUE:
            continue
        sheet = match.group("sheet").upper()
        sheet = (titles or {}).get(sheet, sheet)
        top, left, bottom, right = parse_range(match.group("range"))
        array = np.asarray(held, dtype=object)
        rows, cols = bottom - top + 1, right - left + 1
        if array.shape == (rows, cols):  # every cell has its value: the rows as lists
            for i, row in enumerate(array.tolist(), start=top):
                for j, value in enumerate(row, start=left):
                    values[(sheet, i, j)] = _scalar(value)
            continue
        for i in range(rows):  # a value of another shape: the cells it covers, else None
            for j in range(cols):
                value = array[i, j] if array.ndim == 2 and i < array.shape[0] and \
                    j < array.shape[1] else None
                values[(sheet, top + i, left + j)] = _scalar(value)
    return values


def _scalar(value: Any) -> Any:
    """NumPy scalars to Python numbers; engine errors (XlError) and text stay as they are."""
    if isinstance(value, np.generic):
        return value.item()
    return value
