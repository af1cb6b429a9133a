"""Every use of the `formulas` engine's internals: our changes to it (a quiet progress bar,
ERF over computed arrays, the fast range assembly, INDEX by the picked cell, the fast
functions on plain numbers), in place only inside `formulas_changes`, and compiling each
formula form once (`model_from_dict`).

Each shortcut is taken only within the releases `versions.SUPPORTED` names for formulas
(and not when the environment forces the released library). Outside `formulas_changes` the
engine is as released (tests/test_formulas_changes.py, tests/test_users_formulas.py,
tests/test_formulas_conformance.py).
"""

import collections
import contextlib
import functools
import importlib
import importlib.util
import math
import re
import sys
import threading
import types
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from workbook_builder.engines.internals import fast_functions
from workbook_builder.sheet.refs import (
    FORMULA_CELL,
    column_letters,
    column_number,
    formula_form,
    sheet_name,
)
from workbook_builder.xlsx.versions import SUPPORTED, supported, within


def formula_shortcuts(shortcuts: bool | None = None) -> bool:
    """`shortcuts`, or (None) whether the installed formulas and schedula are releases our
    shortcuts were written for (the calculation shortcuts reproduce schedula's dispatch)."""
    if shortcuts is not None:
        return shortcuts
    return supported("formulas") and supported("schedula")


def is_formula_error(error: BaseException) -> bool:
    """Whether `error` is the engine's own "not a formula" error."""
    from formulas.errors import FormulaError

    return isinstance(error, FormulaError)


def readable_formula(text: str) -> bool:
    """Whether the engine's parser reads `text` as a formula."""
    from formulas import Parser
    from formulas.errors import FormulaError

    try:
        Parser().ast(text)
    except FormulaError:
        return False
    return True


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

    if within(formulas.__version__, *SUPPORTED["formulas"]) and \
            "formulas.functions.stat" not in sys.modules:
        with _scipy_on_first_use():
            import formulas.functions.stat  # noqa: F401  (imported here, scipy deferred)
    return formulas


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
    if within(formulas.__version__, *SUPPORTED["formulas"]):  # used as `use` says
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
    known = formula_shortcuts()
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




def _engine_key(book: str, own_sheet: str, ref) -> str | None:
    """The name the engine gives a reference in a formula on `own_sheet`: "'[book]SHEET'!A1"
    (None for a range whose corners are not top-left, bottom-right)."""
    sheet_text, corners = ref
    sheet = (sheet_name(sheet_text) if sheet_text else own_sheet).upper()
    if len(corners) == 2 and (corners[0][0] > corners[1][0] or corners[0][1] > corners[1][1]):
        return None
    cells = ":".join(f"{column_letters(c)}{r}" for r, c in corners)
    return f"'[{book}]{sheet}'!{cells}"


def template_keys(func, book: str, own_sheet: str, refs) -> list[str] | None:
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


def independent_of_position(func) -> bool:
    """The compiled function reads nothing of the cell it was compiled for."""
    from formulas.cell import CELL

    return CELL not in func.dsp.nodes


def compiled_formulas(model) -> int:
    """The distinct compiled functions (pipes) an engine model's cells hold."""
    return len({id(cell.func.func) for cell in model.cells.values()
                if getattr(cell, "func", None) is not None})


@formulas_changes()
def model_from_dict(adict: dict, book: str, shortcuts: bool | None = None):
    """`ExcelModel().from_dict(adict)`, every formula form parsed and compiled once: the
    first cell of a relative (R1C1) form is compiled by the engine, every other cell of the
    form gets that compiled function with its own references. A form that may depend on
    its own position, or whose references do not map one-to-one, takes the engine's own
    per-cell path; so do all formulas outside the versions this was written for."""
    formulas = formulas_engine()
    model = formulas.ExcelModel()
    if not formula_shortcuts(shortcuts):
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
            top_left = FORMULA_CELL.match(ref)
            found = formula_form(v, int(top_left.group(4)), column_number(top_left.group(2)))
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
                keys = template_keys(cell.func.func, book, sheet, formula_refs) \
                    if cell.func and independent_of_position(cell.func.func) else None
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

