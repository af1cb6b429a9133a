"""Every use of a third-party library's internals, in one place.

Each shortcut is written for a known version range of its library and checked against the
installed version; outside that range the library's public path is taken instead, so a new
release can make us slower but never wrong. tests/test_thirdparty.py shows that both paths
give the same results. Our changes to the `formulas` engine are in place only inside
`formulas_changes`, which our calculations enter: outside it the engine is as released
(tests/test_formulas_changes.py, tests/test_formulas_conformance.py).
"""

import collections
import contextlib
import functools
import importlib.util
import math
import os
import re
import sys
import threading
import types
import warnings
from collections.abc import Iterator
from copy import copy
from types import SimpleNamespace
from typing import Any

import openpyxl
from openpyxl.cell.cell import Cell

from workbook_builder.engines import fast_functions


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def within(installed: str, low: str, high: str) -> bool:
    """low <= installed < high, comparing release numbers."""
    return _version_tuple(low) <= _version_tuple(installed) < _version_tuple(high)


# openpyxl 3.1: `Worksheet._cells` holds only the cells the sheet has (iter_rows creates every
# empty cell of the used rectangle), `Cell._style` is the cell's style record
OPENPYXL_SHORTCUTS = within(openpyxl.__version__, "3.1", "3.2")
# formulas 1.3: `RangesAssembler.push`, the functions' and operators' registries (the
# engine is imported on first use: it costs about a second)
FORMULAS_VERSIONS = ("1.3.4", "1.4")


def _number_a_double_holds(cast):
    """openpyxl's reading of a number cell's text, except that a whole number too large for
    a double (400 digits: no application writes one) reads as ±inf, as its text with a
    decimal point would, instead of a Python int that every later float() refuses."""
    @functools.wraps(cast)
    def read(text: str):
        number = cast(text)
        if isinstance(number, int) and len(text) > 300:
            return float(text)  # a double, as a spreadsheet reads it: float("9" * 400) is inf
        return number
    read.wraps_cast = True
    return read


def _cast_numbers_as_doubles() -> None:
    from openpyxl.worksheet import _reader

    cast = getattr(_reader, "_cast_number", None)
    if cast is not None and not getattr(cast, "wraps_cast", False):
        _reader._cast_number = _number_a_double_holds(cast)


def load_workbook(path, **options):
    """openpyxl.load_workbook, without its warning about a missing default cell style
    (files saved by Gnumeric have none, and it says nothing about their contents), and with
    every number read as the number it is: openpyxl turns a number in a cell formatted as a
    date or a time into a `datetime` (rounded to the millisecond), while every formula,
    and an exercise's self-check, sees the number; a whole number beyond a double's range
    reads as ±inf."""
    _cast_numbers_as_doubles()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Workbook contains no default style")
        if not OPENPYXL_SHORTCUTS:
            return _dates_as_numbers(openpyxl.load_workbook(path, **options))
        from openpyxl.reader.excel import ExcelReader

        class NumbersReader(ExcelReader):
            def read_worksheets(self):
                # openpyxl 3.1: the cell reader converts the numbers of the styles in
                # these sets; with none, a number stays the float the file holds
                self.wb._date_formats, self.wb._timedelta_formats = set(), set()
                super().read_worksheets()

        reader = NumbersReader(path, **options)
        reader.read()
        return reader.wb


def _dates_as_numbers(wb):
    """The public path: each date a cell holds converted back with the workbook's epoch
    (to the millisecond openpyxl kept; a read-only workbook's cells are left as read)."""
    if getattr(wb, "read_only", False):
        return wb
    from openpyxl.utils.datetime import to_excel

    for ws in wb.worksheets:
        for cell in stored_cells(ws, shortcuts=False):
            if cell.data_type == "d" and cell.value is not None:
                cell.value = to_excel(cell.value, wb.epoch)
    return wb


def _exact_number_text(value, original) -> str:
    """A float as the shortest text that reads back as the same double (repr); anything
    else as openpyxl writes it."""
    if isinstance(value, float) and math.isfinite(value):
        return float.__repr__(value)  # not repr(): numpy 2 prints np.float64(…)
    return original(value)


# A font's children in the order of Excel's schema (CT_Font, as Microsoft's Open XML SDK
# validates it); openpyxl 3.1 writes name, charset and family first and sz after color
FONT_CHILDREN = ("b", "i", "strike", "condense", "extend", "outline", "shadow", "u",
                 "vertAlign", "sz", "color", "name", "family", "charset", "scheme")
FONT_ORDER_VERSIONS = ("3.1", "3.2")


def _in_schema_order(tree):
    """A <font> element with its children sorted into FONT_CHILDREN's order (stable:
    anything else after them)."""
    rank = {tag: i for i, tag in enumerate(FONT_CHILDREN)}
    children = sorted(tree, key=lambda child: rank.get(child.tag.rpartition("}")[2], len(rank)))
    for child in children:
        tree.remove(child)
        tree.append(child)
    return tree


def fonts_in_schema_order(save):
    """`save` with openpyxl writing every <font> of styles.xml (cell fonts, the default
    font, a conditional format's) with its children in the schema's order, the one
    Microsoft's Open XML validator accepts (it rejects openpyxl's). Within
    FONT_ORDER_VERSIONS of openpyxl only; elsewhere `save` as it is. The font's serialiser
    is wrapped, not its list of children, which its hash and equality read; a subclass (a
    rich-text run's font, another schema type) keeps its own order."""
    @functools.wraps(save)
    def saving(*args, **kwargs):
        from openpyxl.styles.fonts import Font

        if not within(openpyxl.__version__, *FONT_ORDER_VERSIONS) or \
                set(Font.__elements__) != set(FONT_CHILDREN) or \
                getattr(Font.to_tree, "in_schema_order", False):  # already, further out
            return save(*args, **kwargs)
        released = Font.to_tree

        def to_tree(font, *tree_args, **tree_kwargs):
            tree = released(font, *tree_args, **tree_kwargs)
            return _in_schema_order(tree) if type(font) is Font else tree

        to_tree.in_schema_order = True
        own = Font.__dict__.get("to_tree")
        Font.to_tree = to_tree
        try:
            return save(*args, **kwargs)
        finally:
            if own is None:
                del Font.to_tree
            else:
                Font.to_tree = own

    return saving


@fonts_in_schema_order
def save_workbook(wb, path, shortcuts: bool | None = None) -> None:
    """wb.save(path), every float written exactly. openpyxl 3.1 writes numbers with
    "%.16g" (its cell writer's `safe_string`), 16 significant digits, which can move a
    double by one unit in the last place; repr's up to 17 read back bit for bit."""
    if not (OPENPYXL_SHORTCUTS if shortcuts is None else shortcuts):
        _closing_on_failure(wb.save, path)
        return
    import openpyxl.cell._writer as writer

    original = writer.safe_string
    writer.safe_string = functools.partial(_exact_number_text, original=original)
    try:
        _closing_on_failure(wb.save, path)
    finally:
        writer.safe_string = original


def _closing_on_failure(save, path) -> None:
    """`save(path)`; if it fails (a full disk), what openpyxl left open, its zip and the
    sheet writer's stream, is closed now, quietly, rather than by the garbage collector,
    which prints "Exception ignored in ZipFile.__del__" and a traceback under the one-line
    error. lxml's error for a failed write becomes the OSError it stands for."""
    import errno
    import types
    import zipfile

    try:
        from lxml.etree import SerialisationError
    except ImportError:  # openpyxl writes with the standard library then
        SerialisationError = OSError  # noqa: N806 (a stand-in for the class)

    def close_quietly(value) -> None:
        if isinstance(value, zipfile.ZipFile | types.GeneratorType):
            with contextlib.suppress(Exception):
                value.close()  # fails again on a full disk, but marks it closed

    try:
        save(path)
    except BaseException as exc:
        frame = exc.__traceback__
        while frame is not None:
            for value in list(frame.tb_frame.f_locals.values()):
                close_quietly(value)
                for attribute in list(getattr(value, "__dict__", {}).values()):
                    close_quietly(attribute)  # a writer's open stream (WorksheetWriter.xf)
            frame = frame.tb_next
        if isinstance(exc, SerialisationError):  # "IO_ENOSPC", "IO_EFBIG", …
            code = getattr(errno, str(exc).removeprefix("IO_"), errno.EIO)
            raise OSError(code, os.strerror(code)) from None  # callers name the file
        raise


def stored_cells(ws, shortcuts: bool | None = None) -> Iterator[Cell]:
    """The cells a worksheet holds (not the empty ones inside its used range)."""
    if OPENPYXL_SHORTCUTS if shortcuts is None else shortcuts:
        yield from list(ws._cells.values())
        return
    for row in ws.iter_rows():
        for cell in row:
            if cell.value is not None or cell.has_style:
                yield cell


def copy_style(source: Cell, target: Cell, shortcuts: bool | None = None) -> None:
    """Give `target` the style of `source`. Setting style attributes hashes the whole style
    each time (~10 µs a cell); copying the style record, as openpyxl's own copy_worksheet
    does, keeps a 512×512 block to a fraction of a second."""
    if OPENPYXL_SHORTCUTS if shortcuts is None else shortcuts:
        target._style = source._style.__copy__()
        return
    target.font, target.fill = copy(source.font), copy(source.fill)
    target.border, target.alignment = copy(source.border), copy(source.alignment)
    target.number_format, target.protection = source.number_format, copy(source.protection)


def cell_with_style_id(ws, style_id: int) -> Cell:
    """A cell of `ws`, in no place on it, styled as the workbook's cell style number
    `style_id` (a file's `s` attribute), as openpyxl's reader styles a cell it loads."""
    cell = Cell(ws)
    cell._style = copy(ws.parent._cell_styles[style_id])
    return cell


def _push_smaller_side(self, indices, output=None):
    """formulas' RangesAssembler.push, with the intersection taken by iterating the smaller
    side: the original copies `indices` (a whole range's index set) on every call, O(cells²)
    beside large blocks. Same result, same bookkeeping."""
    missing = self.missing
    if len(missing) < len(indices):
        found = {i for i in missing if i in indices}
    else:
        found = set(indices) & missing
    if found:
        missing.difference_update(found)
        found = {indices[i]: i for i in found} if output is None else {output: indices}
        self.inputs.update(dict.fromkeys(found, None))
        if output is None or indices.issubset(self.indices):
            self.outputs.update(found)
    return missing


class _ModuleOnFirstUse(types.ModuleType):
    """Stands for a module imported under it: the real module is imported when any of its
    attributes is first read, and from then on is the importer's own (the `owner` module's
    `attribute`)."""

    def __init__(self, name: str, owner: str, attribute: str):
        super().__init__(name)
        self._owner, self._attribute = owner, attribute

    def __getattr__(self, attribute: str):  # only what the stand-in itself lacks
        real = importlib.import_module(self.__name__)  # not this: it left sys.modules
        owner = sys.modules.get(self._owner)
        if getattr(owner, self._attribute, None) is self:
            setattr(owner, self._attribute, real)  # the module as released from now on
        return getattr(real, attribute)


@contextlib.contextmanager
def _scipy_on_first_use() -> Iterator[None]:
    """formulas' statistics module imports scipy.stats, scipy.linalg and scipy's interp1d at
    module level (~0.7 s, a third of a small command) but uses them only inside the
    statistical functions: give it scipy.stats and scipy.linalg as modules that load on
    first attribute access, and interp1d as a function that imports the real one when
    first called and puts it in its own place. scipy itself, when nothing imported it yet
    (~15 ms), is a stand-in while the module is imported, holding stand-ins for the two
    (`_ModuleOnFirstUse`); else they are the standard library's LazyLoader modules."""
    stand_in = None
    if "scipy" not in sys.modules:
        stand_in = types.ModuleType("scipy")
        for name in ("stats", "linalg"):
            setattr(stand_in, name, _ModuleOnFirstUse(f"scipy.{name}",
                                                      "formulas.functions.stat", name))
        sys.modules["scipy"] = stand_in
    import scipy

    for name in ("stats", "linalg"):
        if stand_in is None and f"scipy.{name}" not in sys.modules:
            spec = importlib.util.find_spec(f"scipy.{name}")
            spec.loader = importlib.util.LazyLoader(spec.loader)
            module = importlib.util.module_from_spec(spec)
            sys.modules[f"scipy.{name}"] = module
            spec.loader.exec_module(module)
            # `from scipy import stats` reads the attribute; scipy's own __getattr__ would
            # import (and so load) the module at once
            setattr(scipy, name, module)
    stub = types.ModuleType("scipy.interpolate")

    def interp1d(*args, **kwargs):
        from scipy.interpolate import interp1d as real  # the stub is gone by the first call

        statistics = sys.modules.get("formulas.functions.stat")
        if getattr(statistics, "interp1d", None) is interp1d:
            statistics.interp1d = real  # the module as released from now on
        return real(*args, **kwargs)

    stub.interp1d = interp1d
    placed = sys.modules.setdefault("scipy.interpolate", stub) is stub
    try:
        yield
    finally:
        if placed:
            del sys.modules["scipy.interpolate"]
        if stand_in is not None and sys.modules.get("scipy") is stand_in:
            del sys.modules["scipy"]  # the first statistical function imports scipy


def _array_erf(released):
    """formulas' ERF (one or two arguments), and element by element over an array a
    formula computes, as the exact GELU of the `blocks` layout needs: ERF(x/SQRT(2)) over a
    whole block, which LibreOffice and Gnumeric evaluate element by element
    (tests/test_encoder_block.py) and formulas 1.3 answers with one #VALUE!. Each element
    goes through the released ERF, so it gives exactly what ERF of that one value gives
    (#VALUE! for a truth value, an error passed on). Every other call — numbers, truth
    values, text, one-element arrays, and references, ranges included (for {=ERF(C21:I21)}
    formulas' own test workbook holds Excel's #VALUE!) — is the released ERF's."""
    import numpy as np
    from formulas.functions import Array
    from formulas.ranges import Ranges

    def erf(*args, **kwargs):
        if kwargs or any(isinstance(a, Ranges) for a in args) or \
                not any(isinstance(a, np.ndarray) and a.size > 1 for a in args):
            return released(*args, **kwargs)
        try:
            arrays = np.broadcast_arrays(*(np.asarray(a, object) for a in args))
        except ValueError:  # shapes that do not match: the released ERF's answer
            return released(*args)
        results = np.empty(arrays[0].size, object)
        results[:] = [one(*elements)
                      for elements in zip(*(a.ravel().tolist() for a in arrays), strict=True)]
        return results.reshape(arrays[0].shape).view(Array)

    def one(*elements):
        if all(type(e) in (float, np.float64) for e in elements):
            # what the released ERF computes of floats: erf(x), erf(upper) − erf(lower)
            return math.erf(elements[0]) if len(elements) == 1 else \
                math.erf(elements[1]) - math.erf(elements[0])
        return _one_value(released(*elements))

    return functools.update_wrapper(erf, released)


def _one_value(result):
    """A function's result for one value: a number, or its error (a 1×1 array)."""
    import numpy as np

    return result.item() if isinstance(result, np.ndarray) and result.size == 1 else result


class _CellReferences:
    """What formulas 1.3's INDEX (`look.xindex`) builds of a range before picking from it:
    an array of one-cell references (a `Ranges` each, with a copy of the range's values),
    thousands per lookup into a column of embeddings. Here each is made when read, the
    same object every time; indexed any other way than by two ints within the shape, the
    whole array is made, as the original makes it, and indexed as numpy indexes it."""

    def __init__(self, make, shape: tuple[int, int]):
        self._make, self.shape = make, shape
        self._made: dict[tuple[int, int], Any] = {}
        self._whole = None

    def _cell(self, row: int, col: int):
        if (row, col) not in self._made:
            self._made[row, col] = self._make(row, col)
        return self._made[row, col]

    def __getitem__(self, key):
        if type(key) is tuple and len(key) == 2 and all(type(i) is int for i in key) and \
                0 <= key[0] < self.shape[0] and 0 <= key[1] < self.shape[1]:
            return self._cell(*key)
        if self._whole is None:
            import numpy as np

            self._whole = np.asarray([[self._cell(i, j) for j in range(self.shape[1])]
                                      for i in range(self.shape[0])], object)
        return self._whole[key]


def _index_by_cell(array, row_num, col_num=None, area_num=1):
    """formulas 1.3's `look.xindex` (INDEX), its one-cell references made only when picked
    (`_CellReferences`); everything else as the original."""
    import numpy as np
    from formulas.functions import Array, look, parse_ranges
    from formulas.ranges import Ranges
    from formulas.tokens.operand import _index2col

    if not isinstance(array, Ranges) or array.is_set:
        return look.xindex(array, row_num, col_num, area_num)
    base = array.ranges[0]
    sheet_id = base["sheet_id"]
    name = f"{sheet_id}!%s" if sheet_id else "%s"
    value = Ranges((base,), array.values).value
    top, left = int(base["r1"]), base["n1"]

    def make(i: int, j: int):
        row, col = top + i, left + j
        letters = _index2col(col)
        ref = f"{letters}{row}"
        return Ranges(values=dict(array.values)).set_value({
            "r1": row, "r2": row, "c1": letters, "c2": letters, "n1": col, "n2": col,
            "ref": ref, "name": name % ref, "sheet_id": sheet_id}, value[i, j])

    arrays = [_CellReferences(make, (int(base["r2"]) - top + 1, base["n2"] - left + 1))]
    row_num, col_num, area_num = parse_ranges(row_num, col_num, area_num)[0]
    result = np.vectorize(look._index, excluded={0}, otypes=[object])(
        arrays, row_num, col_num, area_num, True, isinstance(row_num, np.ndarray))
    if not result.shape or result.shape == (1, 1):
        result = result.reshape(1, 1)
        if isinstance(result[0, 0], np.ndarray):
            result = result[0, 0]
        elif isinstance(result[0, 0], Ranges):
            return result[0, 0]
    return result.view(Array)


def _index_entry() -> dict:
    """INDEX as `_index_by_cell`, registered as the library registers its own INDEX."""
    from formulas.functions import COMPILING, wrap_func, wrap_impure_func

    return {"extra_inputs": collections.OrderedDict([(COMPILING, False)]),
            "function": wrap_impure_func(wrap_func(_index_by_cell, ranges=True))}


def formulas_engine():
    """The `formulas` module, as released (its statistics module imported with scipy
    deferred, `_scipy_on_first_use`). Our changes are in place only inside
    `formulas_changes`."""
    import formulas

    if within(formulas.__version__, *FORMULAS_VERSIONS) and \
            "formulas.functions.stat" not in sys.modules:
        with _scipy_on_first_use():
            import formulas.functions.stat  # noqa: F401  (imported here, scipy deferred)
    return formulas


@contextlib.contextmanager
def _tqdm_on_first_use() -> Iterator[None]:
    """formulas' model module imports tqdm (~30 ms: tqdm reads its own installed version
    through importlib.metadata) for the progress bar of the engine's own model, which is
    kept quiet and which the direct calculation never makes: imported inside, it gets a
    stand-in that imports tqdm when first used (`_ModuleOnFirstUse`); nobody else does."""
    stand_in = _ModuleOnFirstUse("tqdm", "formulas.excel", "tqdm")
    placed = sys.modules.setdefault("tqdm", stand_in) is stand_in
    try:
        yield
    finally:
        if placed and sys.modules.get("tqdm") is stand_in:
            del sys.modules["tqdm"]


# A place we change: (a dict, key) or (an object, attribute name)
_Place = tuple[Any, str]
_ABSENT = object()


def _read(place: _Place):
    target, key = place
    if isinstance(target, dict):
        return target.get(key, _ABSENT)  # .get: a defaultdict makes no entry
    return vars(target).get(key, _ABSENT)


def _write(place: _Place, value) -> None:
    target, key = place
    if isinstance(target, dict):
        if value is _ABSENT:
            target.pop(key, None)
        else:
            target[key] = value
    elif value is _ABSENT:
        with contextlib.suppress(AttributeError):
            delattr(target, key)
    else:
        setattr(target, key, value)


@functools.cache
def _places() -> list[tuple[_Place, Any, Any, bool]]:
    """Every place we change: (place, the library's own value there, ours, whether it is
    one of the shortcuts). Read once, by the first `formulas_changes`, before any change."""
    formulas = formulas_engine()
    from formulas.cell import RangesAssembler
    from formulas.functions.operators import OPERATORS

    with _tqdm_on_first_use():
        excel = importlib.import_module("formulas.excel")  # the module, not its ExcelModel
    functions = formulas.get_functions()
    ours: list[tuple[_Place, Any, bool]] = []
    erf = _array_erf(functions["ERF"])
    ours += [((functions, "ERF"), erf, False), ((functions, "_XLFN.ERF"), erf, False)]
    bar = getattr(excel, "tqdm", None)
    if isinstance(bar, types.ModuleType):  # its `tqdm` read when a bar is made, not before
        # the engine's own reference to tqdm only, never the global tqdm
        def quiet_bar(*args, **kwargs):
            return bar.tqdm(*args, **{"disable": True, **kwargs})

        ours.append(((excel, "tqdm"), SimpleNamespace(tqdm=quiet_bar), False))
    ours.append(((RangesAssembler, "push"), _push_smaller_side, True))
    if within(formulas.__version__, *FORMULAS_VERSIONS):
        ours.append(((functions, "INDEX"), _index_entry(), True))
        ours += [((registry, name), fast, True) for registry, name, fast in
                 fast_functions.replacements(functions, OPERATORS)]
    return [(place, _read(place), value, shortcut) for place, value, shortcut in ours]


# our changes are made and undone by one thread at a time; inside a block, a block that
# asks for no particular shortcuts (our own nested calls) keeps the enclosing block's
_changes_lock = threading.RLock()
_modes: list[bool] = []  # each open block's shortcuts, innermost last


@contextlib.contextmanager
def formulas_changes(shortcuts: bool | None = None) -> Iterator[Any]:
    """The `formulas` module with our changes in place for the block: its progress bar
    quiet, ERF over computed arrays (`_array_erf`), and, with `shortcuts` (None: within the
    engine versions they were written for, or as the enclosing block), the fast range
    assembly, INDEX by the picked cell and the fast functions on plain numbers
    (fast_functions). Afterwards, an exception included, every place holds again what it
    held before: the library exactly as released outside our own calculations, so a user's
    own `formulas` models in the same process calculate as the released library does.
    Formulas compiled inside keep the functions they were compiled with."""
    formulas = formulas_engine()
    known = within(formulas.__version__, *FORMULAS_VERSIONS)
    with _changes_lock:
        before = []
        try:
            if shortcuts is None and _modes:
                use = _modes[-1]  # in place already
            else:
                use = known if shortcuts is None else shortcuts
                for place, own, ours, shortcut in _places():
                    before.append((place, _read(place)))
                    _write(place, ours if use or not shortcut else own)
            _modes.append(use)
            try:
                yield formulas
            finally:
                _modes.pop()
        finally:
            for place, value in reversed(before):
                _write(place, value)


# A formula's references, for its relative (R1C1) form: an optional sheet ('quoted name'! or
# NAME!) and a cell or cell range; string literals are matched first and kept as they are
_FORMULA_PART = re.compile(
    r'(?P<string>"(?:[^"]|"")*")'
    r"|(?<![\w.$'!\]])(?P<sheet>'(?:[^']|'')+'!|[A-Za-z_][\w.]*!)?"
    r"(?P<ref>\$?[A-Za-z]{1,3}\$?\d+(?::\$?[A-Za-z]{1,3}\$?\d+)?)(?![\w(!:.$])")
_CELL_PART = re.compile(r"(\$?)([A-Za-z]{1,3})(\$?)(\d+)")
# what a formula's value may take from its own position (ROW() is folded into a constant
# when compiled), or from references it builds (OFFSET, INDIRECT), an external book, whole
# rows or columns, implicit intersection (the lookahead, the names' first letters, only
# spares the regex trying every name at every word)
_POSITIONAL = re.compile(r"\b(?=[ACFGIORS])(ROW|COLUMN|OFFSET|INDIRECT|CELL|ADDRESS|INFO|"
                         r"FORMULATEXT|ISFORMULA|SHEET|SHEETS|GETPIVOTDATA)\s*\(|[@\[{#]|"
                         r"\$?\b[A-Za-z]{1,3}:\$?[A-Za-z]{1,3}\b|\$?\b\d+:\$?\d+\b", re.I)


def _column_number(letters: str) -> int:
    number = 0
    for ch in letters.upper():
        number = number * 26 + ord(ch) - 64
    return number


def _column_letters(number: int) -> str:
    letters = ""
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def formula_form(formula: str, row: int, col: int, relative: bool = True):
    """A formula's relative (R1C1) form, the same for every cell its text was filled down or
    across to, and its references in order: [(sheet text or "", ((row, col), …)), …].
    None when the formula may depend on its own position or is not understood. Without
    `relative`, the form leaves out where its references are (they are all "")."""
    outside_strings = re.sub(r'"(?:[^"]|"")*"', '""', formula) if '"' in formula else formula
    if _POSITIONAL.search(outside_strings) or outside_strings.count('"') % 2:
        return None
    pieces, refs, last = [], [], 0
    for match in _FORMULA_PART.finditer(formula):
        if match.group("string") is not None:
            continue
        corners, places = [], []
        for dollar_col, letters, dollar_row, digits in _CELL_PART.findall(match.group("ref")):
            r, c = int(digits), _column_number(letters)
            corners.append((r, c))
            if relative:
                places.append((f"R{r}" if dollar_row else f"R[{r - row}]") +
                              (f"C{c}" if dollar_col else f"C[{c - col}]"))
        sheet = match.group("sheet") or ""
        pieces += [formula[last:match.start()], sheet.upper(), ":".join(places)]
        refs.append((sheet, tuple(corners)))
        last = match.end()
    pieces.append(formula[last:])
    return "\0".join(pieces), refs


def _sheet_name(sheet_text: str) -> str:
    """'my sheet'! or SHEET! -> the sheet's name."""
    name = sheet_text[:-1]
    if name.startswith("'"):
        name = name[1:-1].replace("''", "'")
    return name


def _engine_key(book: str, own_sheet: str, ref) -> str | None:
    """The name the engine gives a reference in a formula on `own_sheet`: "'[book]SHEET'!A1"
    (None for a range whose corners are not top-left, bottom-right)."""
    sheet_text, corners = ref
    sheet = (_sheet_name(sheet_text) if sheet_text else own_sheet).upper()
    if len(corners) == 2 and (corners[0][0] > corners[1][0] or corners[0][1] > corners[1][1]):
        return None
    cells = ":".join(f"{_column_letters(c)}{r}" for r, c in corners)
    return f"'[{book}]{sheet}'!{cells}"


def _template_keys(func, book: str, own_sheet: str, refs) -> list[str] | None:
    """The engine's input name of each of the template's references, in order, when they
    are the compiled function's inputs one-to-one (besides defined names); else None."""
    keys = [_engine_key(book, own_sheet, ref) for ref in refs]
    if None in keys:
        return None
    forms: dict[str, set] = {}
    for key, ref in zip(keys, refs, strict=True):  # $A$1 and A1 in one cell: one input, two forms
        forms.setdefault(key, set()).add(ref)
    if any(len(found) > 1 for found in forms.values()):
        return None
    names = set(func.inputs) - set(keys)
    if not set(keys) <= set(func.inputs) or \
            not all(re.fullmatch(rf"'\[{re.escape(book)}\]'!\w+", n) for n in names):
        return None
    return keys


class _SharedForm:
    """The first cell of a formula form, compiled, and what each other cell needs of it."""

    def __init__(self, template, keys: list[str]):
        self.template, self.keys = template, keys


@functools.lru_cache(maxsize=65536)
def _parsed_range(key: str):
    """The engine's range of a reference name, parsed once: the cells of a form share
    their references down a column or along a row, and the engine only reads an input's
    range (a cell's arguments are copies)."""
    from formulas.ranges import Ranges

    return Ranges().push(key)


def _shared_cell(form: _SharedForm, reference: str, formula: str, own_sheet: str, refs,
                 book: str, references: dict):
    """A cell of `form`'s formula shape: the template's compiled function, fed the cell's
    own references (mapped to the template's by their place in the formula, never by the
    sorted order of the names). None when a reference cannot be mapped."""
    from formulas.cell import Cell, wrap_cell_func

    template_func = form.template.func.func  # the engine's compiled function (a pipe)
    own = {}
    for template_key, ref in zip(form.keys, refs, strict=True):
        key = _engine_key(book, own_sheet, ref)
        if key is None or own.setdefault(template_key, key) != key:
            return None
    if len(set(own.values())) != len(own):  # two template inputs onto one cell
        return None
    cell = Cell(reference, None, check_formula=False)
    inputs = collections.OrderedDict()
    for template_key, template_range in template_func.inputs.items():
        key = own.get(template_key)
        inputs[template_key] = template_range if key is None else _parsed_range(key)
    cell.func = wrap_cell_func(template_func, cell._args)
    cell.func.inputs = inputs  # the cell's own ranges under the template's input names
    # its own name in the graph: one shared name would make finding an unused one O(cells²)
    cell.func.__name__ = formula
    cell.update_inputs(references=references)
    return cell


# "'[book.xlsx]SHEET'!C5:F9" -> SHEET, C5:F9
_KEY_PARTS = re.compile(r"^'\[[^\]]*\](?P<sheet>[^']+)'!"
                        r"(?P<range>[A-Z]{1,3}\d+(?::[A-Z]{1,3}\d+)?)$")


def _independent_of_position(func) -> bool:
    """The compiled function reads nothing of the cell it was compiled for."""
    from formulas.cell import CELL

    return CELL not in func.dsp.nodes


@formulas_changes()
def model_from_dict(adict: dict, book: str, shortcuts: bool | None = None):
    """`ExcelModel().from_dict(adict)`, every formula form parsed and compiled once: the
    first cell of a relative (R1C1) form is compiled by the engine, every other cell of the
    form gets that compiled function with its own references. A form that may depend on
    its own position, or whose references do not map one-to-one, takes the engine's own
    per-cell path; so do all formulas outside the versions this was written for."""
    formulas = formulas_engine()
    known = within(formulas.__version__, *FORMULAS_VERSIONS)
    model = formulas.ExcelModel()
    if not (known if shortcuts is None else shortcuts):
        return model.from_dict(adict)
    import schedula as sh
    from formulas.cell import Cell, Ref
    from formulas.ranges import Ranges

    refs, cells, nodes, shaped = {}, {}, set(), {}
    for k, v in adict.items():
        if isinstance(v, str) and v.upper() == "#EMPTY":
            v = [[sh.EMPTY]]
        position = _KEY_PARTS.match(k) if isinstance(v, str) and v.startswith("=") else None
        if position:
            sheet, ref = position.group("sheet"), position.group("range")
            top_left = _CELL_PART.match(ref)
            found = formula_form(v, int(top_left.group(4)), _column_number(top_left.group(2)))
            if found is not None:
                form, formula_refs = found
                shape = Ranges().push(k).ranges[0]
                size = (int(shape["r2"]) - int(shape["r1"]), shape["n2"] - shape["n1"])
                shaped[k] = ((sheet, size, form), sheet, formula_refs, v)
                cells[k] = None  # made below, kept in this order
                continue
        try:
            cell = Cell(k, v, replace_missing_ref=True)
        except ValueError:
            cell = Ref(k, v).compile()
            refs[cell.output] = None
            nodes.update(cell.add(model.dsp))
        cells[cell.output] = cell
    model._update_refs(nodes, refs)
    forms: dict[tuple, _SharedForm | None] = {}
    for k, (form_key, sheet, formula_refs, v) in shaped.items():
        cell = None
        form = forms.get(form_key)
        if form is not None:
            cell = _shared_cell(form, k, v, sheet, formula_refs, book, refs)
        if cell is None:
            cell = Cell(k, v, replace_missing_ref=True).compile(references=refs)
            if form_key not in forms:
                keys = _template_keys(cell.func.func, book, sheet, formula_refs) \
                    if cell.func and _independent_of_position(cell.func.func) else None
                forms[form_key] = None if keys is None else _SharedForm(cell, keys)
        cells[k] = cell
    cells = {cell.output: cell for cell in cells.values()}
    for k, cell in cells.items():
        if k not in refs:
            nodes.update(cell.compile(references=refs).add(model.dsp))
    model.cells.update(cells)
    model.assemble()
    model.inverse_references()
    return model


# The engine's calculation as a plain loop over its compiled functions.
#
# The engine evaluates a workbook with schedula, a general dispatcher that, for every cell,
# walks a graph solution, tracks distances and records a workflow, and then does the same
# again inside the cell's own compiled formula (itself a small dispatcher). On a workbook
# without cycles, where every value has one source, all that comes down to calling each
# function once its inputs are known. `OrderedCalculation` orders the engine's own
# functions once per model (and once per compiled formula, which the cells of one formula
# form share) and calls them in that order: the same functions, on the same arguments,
# through the same filters, so the same values, without the bookkeeping. Anything the loop
# does not reproduce exactly raises CalculationRefused and the caller uses the engine's own
# calculation: a cycle, a value with two sources, a node option the loop does not know, a
# function that raises or returns nothing, an input the model has no node for. Written for
# the versions of FORMULAS_VERSIONS; tests/test_fast_calc.py shows both calculations give
# identical values.

# node options the loop reproduces (others, e.g. input domains, callbacks, waiting data
# nodes, are refused); `inv-data` and `solve_cycle` matter to the engine only for cycles,
# `extra_inputs` records inputs the node also lists among its `inputs`
_DATA_OPTIONS = frozenset({"type", "index", "wait_inputs", "filters", "inv-data",
                           "description"})
_FUNCTION_OPTIONS = frozenset({"type", "index", "wait_inputs", "function", "inputs",
                               "outputs", "filters", "solve_cycle", "extra_inputs"})


class CalculationRefused(Exception):
    """The loop cannot reproduce the engine's calculation of this model."""


def _apply(filters, value):
    for apply in filters:
        value = apply(value)
    return value


class _Plan:
    """A dispatcher's function nodes in dependency order, for a given set of known nodes.

    steps: (function, input nodes, output nodes, function filters, each output's filters),
    only the functions whose inputs all become known, as schedula would run them."""

    def __init__(self, dsp, known: set, wrap_function):
        import schedula as sh

        nodes = dsp.nodes
        producers: dict[Any, Any] = {}
        functions, inverse = [], []
        for node_id, attr in nodes.items():
            if attr["type"] == "data":
                if not attr.keys() <= _DATA_OPTIONS or attr.get("wait_inputs"):
                    raise CalculationRefused(f"data node option of {node_id!r}")
            elif attr["type"] == "function" and attr.keys() <= _FUNCTION_OPTIONS and \
                    attr.get("wait_inputs", True) and attr.get("inputs") and \
                    attr.get("outputs") and \
                    set(attr.get("extra_inputs", ())) <= set(attr["inputs"]):
                (inverse if _is_inverse(attr, nodes) else functions).append(node_id)
            else:
                raise CalculationRefused(f"node {node_id!r}")
        for f in functions:
            for output in nodes[f]["outputs"]:
                if output in producers or output in known:
                    raise CalculationRefused(f"{output!r} has two sources")
                producers[output] = f
        # an inverse edge (a range's value back to the cells it was assembled from, a
        # defined name's to its range) reaches a node after the node's own source, which
        # therefore gives the value; it gives the value only to nodes with no other source
        kept_outputs = {}
        for f in inverse:
            kept = tuple(i for i, output in enumerate(nodes[f]["outputs"])
                         if output not in producers and output not in known)
            if kept:
                kept_outputs[f] = kept
                functions.append(f)
        for f, kept in kept_outputs.items():
            for i in kept:
                output = nodes[f]["outputs"][i]
                if output in producers:
                    raise CalculationRefused(f"{output!r} has two sources")
                producers[output] = f
        waiting = {f: set(nodes[f]["inputs"]) - known for f in functions}
        users: dict[Any, list] = {}
        for f, missing in waiting.items():
            for name in missing:
                users.setdefault(name, []).append(f)
        ready = [f for f, missing in waiting.items() if not missing]
        order = []
        while ready:
            f = ready.pop()
            order.append(f)
            outputs = nodes[f]["outputs"]
            for output in (outputs[i] for i in kept_outputs[f]) if f in kept_outputs \
                    else outputs:
                for user in users.get(output, ()):
                    waiting[user].discard(output)
                    if not waiting[user]:
                        ready.append(user)
        available = known | producers.keys()
        for f in set(functions) - set(order):
            if set(nodes[f]["inputs"]) <= available:  # blocked only by one another: a cycle
                raise CalculationRefused("circular references")
        self.steps = []
        for f in order:
            attr = nodes[f]
            if sh.SELF in attr["inputs"]:
                _check_reads_only_unknown(attr["function"], available)
            # the engine gives START (no value) to functions without inputs, and calls
            # every function without its inputs that have no value
            inputs = tuple(name for name in attr["inputs"] if name is not sh.START)
            self.steps.append((wrap_function(attr["function"]), inputs,
                               tuple(attr["outputs"]), tuple(attr.get("filters", ())),
                               tuple(tuple(nodes[o].get("filters", ())) for o in
                                     attr["outputs"]), kept_outputs.get(f)))

    def run(self, values: dict) -> dict:
        """`values` (the known nodes, filtered) completed by every step."""
        import schedula as sh

        none = sh.NONE
        for function, inputs, outputs, function_filters, output_filters, kept in self.steps:
            args = [values[name] for name in inputs]
            try:
                result = _apply(function_filters, function(*args))
            except CalculationRefused:
                raise
            except Exception as error:  # the engine would skip this node (or raise)
                raise CalculationRefused(f"{type(error).__name__} in a formula") from error
            results = (result,) if len(outputs) == 1 else tuple(result)
            if len(results) != len(outputs):
                raise CalculationRefused("outputs")
            for index, (name, value, filters) in enumerate(zip(outputs, results,
                                                                output_filters, strict=True)):
                if kept is not None and index not in kept:
                    continue
                if value is none:
                    raise CalculationRefused("a function gave no value")
                values[name] = _apply(filters, value)
        return values


def _is_inverse(attr: dict, nodes: dict) -> bool:
    """A function the engine adds to carry a value backwards (it marks them `inv-data`)."""
    inputs = list(attr["inputs"])
    return len(inputs) == 1 and \
        set(attr["outputs"]) <= set(nodes[inputs[0]].get("inv-data", ()))


def _check_reads_only_unknown(function, available: set) -> None:
    """The engine gives a range assembler the dispatcher itself (SELF) to read the range's
    cells that have no node; only then may the loop give it the values so far instead."""
    import schedula as sh
    from formulas.cell import RangesAssembler

    cells = function.inputs.get(sh.SELF) if isinstance(function, RangesAssembler) else None
    if not isinstance(cells, dict) or any(name in available for name in cells):
        raise CalculationRefused("a function reads the dispatcher")


class _FormulaLoop:
    """One compiled formula (the engine's DispatchPipe) as a plain loop; the cells of one
    formula form share it."""

    def __init__(self, pipe):
        import schedula as sh

        dsp = pipe.dsp
        self.inputs = tuple(pipe.inputs or ())
        if len(pipe.outputs or ()) != 1 or pipe.output_type not in ("values", "list"):
            raise CalculationRefused("formula outputs")
        self.output = pipe.outputs[0]
        defaults = {k: v["value"] for k, v in dsp.default_values.items()}
        known = set(self.inputs) | set(defaults)
        self.plan = _Plan(dsp, known, _plain_function)
        self.list_output = pipe.output_type == "list"
        nodes = dsp.nodes
        self.input_filters = tuple(tuple(nodes[k].get("filters", ())) for k in self.inputs)
        # constants without filters are passed as they are, like the engine does
        self.constants = {k: v for k, v in defaults.items()
                          if k not in self.inputs and not nodes[k].get("filters")}
        self.filtered_constants = {k: (v, tuple(nodes[k]["filters"]))
                                   for k, v in defaults.items()
                                   if k not in self.inputs and nodes[k].get("filters")}
        if any(v is sh.NONE for v in defaults.values()):
            raise CalculationRefused("an empty constant")

    def __call__(self, *args):
        import schedula as sh

        if len(args) != len(self.inputs):
            raise CalculationRefused("formula arguments")
        values = dict(self.constants)
        for name, (value, filters) in self.filtered_constants.items():
            values[name] = _apply(filters, value)
        for name, value, filters in zip(self.inputs, args, self.input_filters, strict=True):
            if value is sh.NONE:
                raise CalculationRefused("an empty argument")
            values[name] = _apply(filters, value)
        values = self.plan.run(values)
        if self.output not in values:
            raise CalculationRefused("formula output not reached")
        return [values[self.output]] if self.list_output else values[self.output]


def _plain_function(function):
    """Inside a compiled formula: the function itself, unless it is a dispatcher."""
    import schedula as sh

    if isinstance(sh.parent_func(function), (sh.Dispatcher, sh.SubDispatch)):
        raise CalculationRefused("a dispatcher inside a formula")
    return function


class OrderedCalculation:
    """A model's calculation as a plain loop, planned once; `calculate` gives what
    `model.calculate(inputs=…)` gives (every node's value), or raises CalculationRefused."""

    @formulas_changes()
    def __init__(self, model):
        import schedula as sh
        from formulas.cell import CellWrapper

        dsp = model.dsp
        self._defaults = {k: v["value"] for k, v in dsp.default_values.items()}
        self._filters = {k: tuple(attr.get("filters", ()))
                         for k, attr in dsp.nodes.items() if attr["type"] == "data"}
        loops: dict[int, _FormulaLoop] = {}  # one per compiled formula, shared by its cells

        def outer_function(function):
            if isinstance(function, CellWrapper) and isinstance(function.func,
                                                                 sh.DispatchPipe):
                pipe = function.func
                if id(pipe) not in loops:
                    loops[id(pipe)] = _FormulaLoop(pipe)
                loop, parse_args, parse_kwargs = loops[id(pipe)], function.parse_args, \
                    function.parse_kwargs
                if parse_kwargs() != {}:
                    raise CalculationRefused("keyword arguments")
                return lambda *args: loop(*parse_args(*args))
            if isinstance(sh.parent_func(function), (sh.Dispatcher, sh.SubDispatch)):
                raise CalculationRefused("a dispatcher as a cell's function")
            return function

        self._plan = _Plan(dsp, set(self._defaults), outer_function)
        self.formulas = len(loops)

    @formulas_changes()
    def calculate(self, inputs: dict | None = None) -> dict:
        import schedula as sh

        values = dict(self._defaults)
        for name, value in (inputs or {}).items():
            if name not in self._defaults:
                raise CalculationRefused(f"no constant node {name!r}")
            values[name] = value
        # the engine's dispatcher gives itself as SELF; the range assemblers read the
        # current solution from it
        values[sh.SELF] = SimpleNamespace(solution=values)
        for name, value in values.items():
            if value is sh.NONE and name is not sh.START:
                raise CalculationRefused("an empty input")
            filters = self._filters.get(name)
            if filters:
                values[name] = _apply(filters, value)
        values = self._plan.run(values)
        values.pop(sh.SELF)
        values.pop(sh.START, None)  # not a value, as in the engine's solution
        return values

def set_default_font(wb, font) -> None:
    """Make `font` the workbook's default (style record 0 and the Normal style), which
    every cell without a font of its own, empty cells and column widths are measured in.
    Call on a new workbook, before any cell is styled."""
    from openpyxl.utils.indexed_list import IndexedList
    wb._fonts = IndexedList([font])
    wb._named_styles["Normal"].font = font
