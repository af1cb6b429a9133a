"""`grade`: score returned exercise workbooks, one CSV row per file.

The right answers are recomputed with the NumPy reference from the inputs each file holds
(as `check` does), never read from the file's hidden key, so a student who edited the key
gains nothing (nor does its state matter: a file saved by Gnumeric has it visible). A cell
counts as correct when it holds a number within the workbook's tolerance of the answer: a
typed value, or a formula's value as Excel or LibreOffice saved it (files never opened in an
application are evaluated with the `formulas` engine) or, when an engine is named, as that
engine recalculates the file. Text, blanks and error values are wrong. Answers are from the
inputs alone: a wrong WEIGHTS is not carried forward into OUTPUT, matching the in-sheet
self-check.
"""

import csv
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.book.files import check_writable, open_workbook, writing
from workbook_builder.book.workbook import read_spec, spec_kind_params
from workbook_builder.checking.check import (
    ENGINES,
    array_members,
    holds_formula,
    read_inputs,
    require_engine,
)
from workbook_builder.checking.names import find_block
from workbook_builder.engines.thirdparty import stored_cells
from workbook_builder.errors import UserError


@dataclass
class Grade:
    file: str
    student: str = ""
    kind: str = ""
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)  # step -> (correct, of)
    problem: str = ""

    @property
    def correct(self) -> int:
        return sum(c for c, _ in self.steps.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self.steps.values())


def collect_files(paths: list[Path]) -> list[Path]:
    """Files named, and the .xlsx files of folders named (answer keys `*_key.xlsx`, lock
    files `~$*` and hidden files skipped)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.glob("*.xlsx") if not p.name.endswith("_key.xlsx")
                            and not p.name.startswith(("~$", ".")))
        elif path.exists():
            files.append(path)
        else:
            raise UserError(f"{path}: no such file or folder")
    if not files:
        raise UserError("no .xlsx workbooks to grade in " + ", ".join(map(str, paths)))
    return files


def grade_file(path: Path, engine: str | None = None) -> Grade:
    """Grade one file: formula cells' values as saved (evaluated with `formulas` where the
    file has none) or, with `engine`, as that engine recalculates the file."""
    grade = Grade(str(path), student=path.stem)
    try:
        _grade(path, grade, engine)
    except UserError as exc:
        grade.problem = str(exc)
    except Exception as exc:  # a damaged file must not stop the batch
        grade.problem = f"{path}: could not be graded ({type(exc).__name__}: {exc})"
    return grade


def _grade(path: Path, grade: Grade, engine: str | None) -> None:
    wb = open_workbook(path)
    spec = read_spec(wb, path)
    grade.kind = spec.kind
    grade.student = spec.student or path.stem
    if spec.exercise is None:
        raise UserError(f"{path} is an attnsheets workbook but not an exercise (an answer "
                        f"key?)")
    kind, params = spec_kind_params(spec)
    cache: list[dict] = []

    def evaluated() -> dict:
        if not cache:
            cache.append(ENGINES[engine or "formulas"](path, wb))
        return cache[0]

    saved = open_workbook(path, data_only=True) if engine is None else None

    def value_of(sheet: str, row: int, col: int) -> Any:
        value = None if saved is None else saved[sheet].cell(row, col).value
        if value is None:  # an engine named, or saved without values (e.g. by openpyxl)
            value = evaluated().get((sheet.upper(), row, col))
        return value

    inputs = read_inputs(wb, kind, params, path, evaluated if saved is None else
                         lambda: _saved_or_evaluated(saved, evaluated))
    expected = kind.reference(inputs, params)
    tolerance = spec.exercise.tolerance
    for step in spec.exercise.steps:
        answer = np.asarray(expected[step], float)
        where = find_block(wb, step, path, answer.shape)
        ws = wb[where.sheet]
        in_array = array_members(ws, where)
        correct = 0
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                row, col = where.top + i, where.left + j
                raw = ws.cell(row, col).value
                formula = holds_formula(raw, row, col, in_array)
                got = value_of(where.sheet, row, col) if formula else raw
                correct += _is_correct(got, answer[i, j], tolerance)
        grade.steps[step] = (correct, answer.size)


def _saved_or_evaluated(saved, evaluated) -> dict:
    """Values of formula cells in the inputs: as saved, else as the engine computes them."""
    values = {(ws.title.upper(), cell.row, cell.column): cell.value
              for ws in saved.worksheets for cell in stored_cells(ws) if cell.value is not None}
    return _Fallback(values, evaluated)


class _Fallback(dict):
    def __init__(self, values, evaluated):
        super().__init__(values)
        self._evaluated = evaluated

    def get(self, key, default=None):
        value = super().get(key)
        return self._evaluated().get(key, default) if value is None else value


def _is_correct(got: Any, want: float, tolerance: float) -> bool:
    if isinstance(got, bool) or not isinstance(got, int | float) or not math.isfinite(got):
        return False  # blank, text, an error value ('#DIV/0!'), TRUE/FALSE
    return abs(float(got) - want) <= tolerance


def write_grades(grades: list[Grade], out: Path, force: bool) -> None:
    check_writable(out, force, ".csv")
    steps: list[str] = []
    for grade in grades:
        steps += [s for s in grade.steps if s not in steps]
    with writing(out):
        _write_csv(out, steps, grades)


def _write_csv(out: Path, steps: list[str], grades: list[Grade]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".grades-", suffix=".csv", dir=out.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["student", "file", "kind", *steps, "correct", "total", "score",
                             "problem"])
            for g in grades:
                cells = [f"{g.steps[s][0]}/{g.steps[s][1]}" if s in g.steps else ""
                         for s in steps]
                score = f"{100 * g.correct / g.total:.1f}" if g.total else ""
                writer.writerow([g.student, g.file, g.kind, *cells,
                                 g.correct if not g.problem else "",
                                 g.total if not g.problem else "", score, g.problem])
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)


def grade_all(paths: list[Path], out: Path | None, force: bool,
              engine: str | None = None) -> list[Grade]:
    """Grade every file (a file that cannot be graded gets a row with its problem), and
    write the CSV when asked. `engine`: recalculate formula cells with it (see grade_file)."""
    files = collect_files(paths)
    if out is not None and out.exists() and not force:  # refuse before the work
        raise UserError(f"{out} already exists; pass --force to replace it")
    if engine is not None:
        require_engine(engine)
    grades = [grade_file(path, engine) for path in files]
    if out is not None:
        write_grades(grades, out, force)
    return grades
