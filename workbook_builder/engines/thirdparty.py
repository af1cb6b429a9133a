"""Every use of a third-party library's internals, in one place.

Each shortcut is written for a known version range of its library and checked against the
installed version; outside that range the library's public path is taken instead, so a new
release can make us slower but never wrong. tests/test_thirdparty.py shows that both paths
give the same results.
"""

import contextlib
import functools
import importlib.util
import math
import os
import sys
import types
import warnings
from collections.abc import Iterator
from copy import copy
from types import SimpleNamespace

import openpyxl
from openpyxl.cell.cell import Cell

# the `formulas` engine draws a tqdm bar; tqdm reads TQDM_DISABLE when it is first imported
os.environ.setdefault("TQDM_DISABLE", "1")


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
# formulas 1.3: `RangesAssembler.push` and the module-level `tqdm` of formulas.excel (the
# engine is imported on first use: it costs about a second)
FORMULAS_VERSIONS = ("1.3.4", "1.4")


def load_workbook(path, **options):
    """openpyxl.load_workbook, without its warning about a missing default cell style:
    files saved by Gnumeric have none, and it says nothing about their contents."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Workbook contains no default style")
        return openpyxl.load_workbook(path, **options)


def _exact_number_text(value, original) -> str:
    """A float as the shortest text that reads back as the same double (repr); anything
    else as openpyxl writes it."""
    if isinstance(value, float) and math.isfinite(value):
        return float.__repr__(value)  # not repr(): numpy 2 prints np.float64(…)
    return original(value)


def save_workbook(wb, path, shortcuts: bool | None = None) -> None:
    """wb.save(path), every float written exactly. openpyxl 3.1 writes numbers with
    "%.16g" (its cell writer's `safe_string`), 16 significant digits, which can move a
    double by one unit in the last place; repr's up to 17 read back bit for bit."""
    if not (OPENPYXL_SHORTCUTS if shortcuts is None else shortcuts):
        wb.save(path)
        return
    import openpyxl.cell._writer as writer

    original = writer.safe_string
    writer.safe_string = functools.partial(_exact_number_text, original=original)
    try:
        wb.save(path)
    finally:
        writer.safe_string = original


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


@contextlib.contextmanager
def _scipy_on_first_use() -> Iterator[None]:
    """formulas' statistics module imports scipy.stats, scipy.linalg and scipy's interp1d at
    module level (~0.7 s, a third of a small command) but uses them only inside the
    statistical functions: give it scipy.stats and scipy.linalg as modules that load on
    first attribute access (the standard library's LazyLoader), and interp1d as a function
    that imports the real one when called."""
    import scipy

    for name in ("stats", "linalg"):
        if f"scipy.{name}" not in sys.modules:
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

        return real(*args, **kwargs)

    stub.interp1d = interp1d
    placed = sys.modules.setdefault("scipy.interpolate", stub) is stub
    try:
        yield
    finally:
        if placed:
            del sys.modules["scipy.interpolate"]


def _erf(lower: float, upper: float | None = None) -> float:
    """Excel's ERF(lower[, upper]) of two numbers."""
    return math.erf(lower) if upper is None else math.erf(upper) - math.erf(lower)


def _register_array_erf(formulas) -> None:
    """ERF element by element over arrays, as Excel, LibreOffice and Gnumeric evaluate it
    inside an array formula (formulas 1.3's own ERF reads one number and gives #VALUE! for
    a range), so the exact GELU is one array formula in the `blocks` layout. Through the
    library's public function registry (`get_functions`), as its documentation adds custom
    functions, and as it registers EXP and TANH (`wrap_ufunc`)."""
    from formulas.functions import wrap_ufunc

    functions = formulas.get_functions()
    if not getattr(functions["ERF"], "attnsheets_array", False):
        array_erf = wrap_ufunc(_erf)
        array_erf.attnsheets_array = True
        functions["ERF"] = functions["_XLFN.ERF"] = array_erf


def formulas_engine(shortcuts: bool | None = None):
    """The `formulas` module, quiet (no progress bar) and, within the known versions, with
    the fast range assembly in place."""
    import formulas
    import formulas.excel
    from formulas.cell import RangesAssembler

    known = within(formulas.__version__, *FORMULAS_VERSIONS)
    if known and "formulas.functions.stat" not in sys.modules:
        with _scipy_on_first_use():
            import formulas.functions.stat  # noqa: F401  (imported here, scipy deferred)
    use = known if shortcuts is None else shortcuts
    if known and not isinstance(formulas.excel.tqdm, SimpleNamespace):
        # tqdm may have been imported before TQDM_DISABLE was set (by another library):
        # quieten the engine's own reference only, never the global tqdm
        formulas.excel.tqdm = SimpleNamespace(
            tqdm=functools.partial(formulas.excel.tqdm.tqdm, disable=True))
    if not hasattr(RangesAssembler, "_original_push"):
        RangesAssembler._original_push = RangesAssembler.push
    RangesAssembler.push = _push_smaller_side if use else RangesAssembler._original_push
    _register_array_erf(formulas)
    return formulas
