"""From parameters and inputs to a saved workbook."""

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book import build_workbook, check_writable, save_atomic
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind, complete_inputs, make_params
from workbook_builder.sheet.refs import parse_range


def parse_tokens(text: str | None) -> list[str] | None:
    """--tokens "我,爱,AI" -> labels (None when not given)."""
    if text is None:
        return None
    tokens = [t.strip() for t in text.split(",")]
    if not all(tokens):
        raise UserError("--tokens has an empty label")
    return tokens


def explicit_params(kind: type[Kind], namespace) -> dict[str, Any]:
    """The kind's parameters a user set by flag (unset flags are absent from the namespace)."""
    return {f.name: getattr(namespace, f.name) for f in dataclasses.fields(kind.Params)
            if hasattr(namespace, f.name)}


def resolve_params(kind: type[Kind], explicit: dict[str, Any],
                   given: dict[str, np.ndarray], tokens: list[str] | None):
    """Defaults, then sizes implied by given inputs and tokens, then explicit flags."""
    values: dict[str, Any] = {}
    if tokens is not None:
        values.update(kind.params_from_tokens(tokens))
    values.update(kind.infer_params(given))
    values.update(explicit)
    return make_params(kind, values)


def write_workbook(kind: type[Kind], params, path: Path, *, seed: int = 0,
                   given: dict[str, np.ndarray] | None = None, tokens: list[str] | None = None,
                   layout: str = "cells", force: bool = False, lang: str = "en",
                   exercise=None) -> int:
    """Build and save atomically; returns the number of formula cells."""
    check_writable(path, force)
    inputs = complete_inputs(kind, params, given or {}, seed)
    labels = kind.labels(params, tokens)
    wb = build_workbook(kind, params, inputs, labels, layout, lang=lang, exercise=exercise)
    save_atomic(wb, path)
    return count_formula_cells(wb)


def count_formula_cells(wb) -> int:
    """Cells computed by a formula (an array formula counts every cell it fills)."""
    count = 0
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, ArrayFormula):
                    top, left, bottom, right = parse_range(cell.value.ref)
                    count += (bottom - top + 1) * (right - left + 1)
                elif isinstance(cell.value, str) and cell.value.startswith("="):
                    count += 1
    return count
