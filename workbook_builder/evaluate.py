"""Evaluates a workbook's formulas with the `formulas` engine, quietly."""

import contextlib
import functools
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.refs import cell_ref, parse_range

# "'[book.xlsx]SHEET'!C5:F9" -> sheet, range
# (defined names appear as "'[book.xlsx]'!NAME": no sheet, and skipped)
_KEY = re.compile(r"^'?\[[^\]]*\](?P<sheet>.+?)'?!"
                  r"(?P<range>[A-Z]{1,3}\d+(?::[A-Z]{1,3}\d+)?)$")

CellValues = dict[tuple[str, int, int], Any]  # (SHEET upper-cased, row, col) -> value


@contextlib.contextmanager
def _quiet_engine() -> Iterator[None]:
    """The engine draws a tqdm progress bar and NumPy warns on EXP overflow; the CLI decides
    what the user sees, so both are silenced here."""
    import tqdm

    original = tqdm.tqdm
    tqdm.tqdm = functools.partial(original, disable=True)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            yield
    finally:
        tqdm.tqdm = original


def evaluate_with_formulas(path: Path) -> CellValues:
    """Every cell value the engine computed (formula cells and the constants they read)."""
    return FormulasModel(path).evaluate()


class FormulasModel:
    """A workbook parsed once by the `formulas` engine and evaluated for any number of input
    sets. Parsing costs ~2 ms per formula cell, a calculation a small fraction of that, so
    workbooks that share one formula structure (a class of students, a re-check with new
    inputs) are parsed once."""

    def __init__(self, path: Path):
        import formulas

        with _quiet_engine():
            self._model = formulas.ExcelModel().loads(str(path)).finish()
        self._book = Path(path).name

    def evaluate(self, inputs: dict[tuple[str, int, int], float] | None = None) -> CellValues:
        """Cell values, with constant cells (sheet, row, col) replaced by `inputs`."""
        overrides = {f"'[{self._book}]{sheet.upper()}'!{cell_ref(row, col)}": value
                     for (sheet, row, col), value in (inputs or {}).items()}
        with _quiet_engine():
            solution = self._model.calculate(inputs=overrides) if overrides else \
                self._model.calculate()
        return _solution_values(solution)


def _solution_values(solution) -> CellValues:
    values: CellValues = {}
    for key, ranges in solution.items():
        match = _KEY.match(str(key))
        if not match or not hasattr(ranges, "value"):
            continue
        sheet = match.group("sheet").upper()
        top, left, bottom, right = parse_range(match.group("range"))
        array = np.asarray(ranges.value, dtype=object)
        for i in range(bottom - top + 1):
            for j in range(right - left + 1):
                value = array[i, j] if array.ndim == 2 and i < array.shape[0] and \
                    j < array.shape[1] else None
                values[(sheet, top + i, left + j)] = _scalar(value)
    return values


def _scalar(value: Any) -> Any:
    """NumPy scalars to Python numbers; engine errors (XlError) and text stay as they are."""
    if isinstance(value, np.generic):
        return value.item()
    return value
