"""Workbooks on disk: open one a user named, refuse to overwrite, save atomically with every
formula's value stored beside it, and build-and-save in one call."""

import dataclasses
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book.workbook import BookSpec, build_workbook
from workbook_builder.engines.cached_values import store_values
from workbook_builder.engines.formulas_engine import CellValues, FormulasModel
from workbook_builder.engines.thirdparty import load_workbook, save_workbook, stored_cells
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind, complete_inputs, make_params
from workbook_builder.sheet.refs import parse_range


@dataclass
class BuiltBook:
    """A workbook just written: the file, the workbook in memory, what it records, and the
    values the `formulas` engine computed for it (stored in the file beside each formula)."""

    path: Path
    workbook: Workbook
    spec: BookSpec
    values: CellValues | None
    formula_cells: int


def parse_tokens(text: str | None) -> list[str] | None:
    """"我,爱,AI" -> labels (None when not given)."""
    if text is None:
        return None
    tokens = [t.strip() for t in text.split(",")]
    if not all(tokens):
        raise UserError("--tokens has an empty label")
    return tokens


def resolve_params(kind: type[Kind], explicit: dict[str, Any],
                   given: dict[str, np.ndarray], tokens: list[str] | None):
    """Defaults, then sizes implied by given inputs and tokens, then explicit values."""
    values: dict[str, Any] = {}
    if tokens is not None:
        values.update(kind.params_from_tokens(tokens))
    values.update(kind.infer_params(given))
    values.update(explicit)
    return make_params(kind, values)


def write_workbook(kind: type[Kind], params, path: Path, *, seed: int = 0,
                   given: dict[str, np.ndarray] | None = None, tokens: list[str] | None = None,
                   layout: str = "cells", force: bool = False, lang: str = "en",
                   exercise=None, note: str | None = None) -> BuiltBook:
    """Build and save atomically; the evaluation that stores the cached values is the only
    one, and its values come back for whoever checks the file next. `note` says on the
    sheet where the inputs came from."""
    check_writable(path, force)
    inputs = complete_inputs(kind, params, given or {}, seed)
    labels = kind.labels(params, tokens)
    wb = build_workbook(kind, params, inputs, labels, layout, lang=lang, exercise=exercise,
                        note=note)
    values = save_atomic(wb, path)
    spec = BookSpec(kind.name, dataclasses.asdict(params), layout, labels, lang, exercise)
    return BuiltBook(path, wb, spec, values, count_formula_cells(wb))


def count_formula_cells(wb: Workbook) -> int:
    """Cells computed by a formula (an array formula counts every cell it fills)."""
    count = 0
    for ws in wb.worksheets:
        for cell in stored_cells(ws):
            if isinstance(cell.value, ArrayFormula):
                top, left, bottom, right = parse_range(cell.value.ref)
                count += (bottom - top + 1) * (right - left + 1)
            elif isinstance(cell.value, str) and cell.value.startswith("="):
                count += 1
    return count


def open_workbook(path: Path, data_only: bool = False) -> Workbook:
    """Open a workbook the user named, or fail with one line saying why."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a workbook")
    if not zipfile.is_zipfile(path):
        raise UserError(f"{path} is not an .xlsx workbook")
    try:
        return load_workbook(path, data_only=data_only)
    except Exception as exc:  # openpyxl raises many types on damaged files
        raise UserError(f"{path} is not a readable .xlsx workbook ({exc})") from None


def check_writable(path: Path, force: bool, suffix: str = ".xlsx") -> None:
    """Refuse to replace a file unless asked, and name a missing folder or a wrong ending."""
    if path.suffix.lower() != suffix:
        raise UserError(f"{path}: the output name must end in {suffix}")
    if not path.parent.exists():
        raise UserError(f"{path.parent}: no such folder (create it first)")
    if path.exists() and not force:
        raise UserError(f"{path} already exists; pass --force to replace it")


def save_atomic(wb: Workbook, path: Path, with_values: bool = True) -> CellValues | None:
    """Write beside the target and rename, so a failure never leaves a partial file.
    With `with_values`, every formula cell also carries the value the `formulas` engine
    computes from the workbook's own formulas, for previews and `data_only` readers; those
    values are returned."""
    wb.calculation.fullCalcOnLoad = True  # spreadsheet applications recompute on open
    temps = []
    try:
        for _ in range(2):
            fd, tmp = tempfile.mkstemp(prefix=".attnsheets-", suffix=".xlsx", dir=path.parent)
            os.close(fd)
            temps.append(Path(tmp))
        save_workbook(wb, temps[0])
        if with_values:
            # the workbook in memory is what was just saved: no need to read it back
            values = FormulasModel(wb, path.name).evaluate()
            store_values(temps[0], temps[1], values)
            os.replace(temps[1], path)
            return values
        os.replace(temps[0], path)
        return None
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
