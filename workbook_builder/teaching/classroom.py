"""`class`: one exercise workbook and one answer key per student of a roster.

Every student's inputs come from a seed derived from their id (and an optional class
seed), so re-running gives the same files. All students share one formula structure, so
the exercise and the key are each parsed once by the `formulas` engine and evaluated per
student (for the values stored beside the formulas and for the verification) instead of
re-parsing 2 × N files.
"""

import csv
import hashlib
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbook_builder.book.workbook import build_workbook
from workbook_builder.checking.check import compare_block, expected_steps
from workbook_builder.checking.names import NamedRange
from workbook_builder.engines.cached_values import store_values
from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.engines.thirdparty import save_workbook
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind, complete_inputs
from workbook_builder.sheet.refs import parse_cell, parse_range
from workbook_builder.teaching.exercise import KEY_SHEET, ExerciseSpec, validate_steps

ID_COLUMNS = ("id", "student_id", "student id", "student", "学号")
NAME_COLUMNS = ("name", "姓名")
MANIFEST = "manifest.csv"


@dataclass(frozen=True)
class Student:
    id: str
    name: str
    stem: str  # file-name-safe id

    def seed(self, class_seed: int) -> int:
        """Stable across runs and machines (not Python's salted hash)."""
        digest = hashlib.sha256(f"{class_seed}:{self.id}".encode()).digest()
        return int.from_bytes(digest[:4], "big")


def read_roster(path: Path, id_column: str | None = None) -> list[Student]:
    """Students from a CSV with a header row; one line per error, naming the line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(f"{path}: no such roster file") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a folder, not a roster CSV") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a readable UTF-8 CSV file ({exc})") from None
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise UserError(f"{path}: not a readable CSV file ({exc})") from None
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise UserError(f"{path}: the roster is empty (it needs a header row, e.g. id,name)")
    header = [cell.strip() for cell in rows[0]]
    lowered = [cell.lower() for cell in header]
    if id_column is not None:
        if id_column.lower() not in lowered:
            raise UserError(f"{path}: no column {id_column!r}; the columns are "
                            f"{', '.join(header)}")
        id_at = lowered.index(id_column.lower())
    else:
        found = [lowered.index(c) for c in ID_COLUMNS if c in lowered]
        if not found:
            raise UserError(f"{path}: no student id column (one of {', '.join(ID_COLUMNS)}); "
                            f"the columns are {', '.join(header)}; name it with --id-column")
        id_at = found[0]
    name_at = next((lowered.index(c) for c in NAME_COLUMNS if c in lowered), None)
    students, seen, stems = [], {}, {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # blank lines are harmless
        student_id = row[id_at].strip() if id_at < len(row) else ""
        if not student_id:
            raise UserError(f"{path}, line {line}: the student id is empty")
        if student_id in seen:
            raise UserError(f"{path}, line {line}: student id {student_id!r} already on "
                            f"line {seen[student_id]}")
        seen[student_id] = line
        stem = re.sub(r"[^\w.-]+", "_", student_id).strip("._") or "student"
        if stem.lower() in stems:
            raise UserError(f"{path}, line {line}: student id {student_id!r} gives the same "
                            f"file name as line {stems[stem.lower()]}")
        stems[stem.lower()] = line
        name = row[name_at].strip() if name_at is not None and name_at < len(row) else ""
        students.append(Student(student_id, name, stem))
    if not students:
        raise UserError(f"{path}: the roster lists no students")
    return students


def _input_blocks(wb, kind, params, inputs) -> list[tuple[str, int, int, np.ndarray]]:
    """(sheet, top, left, values) of every input block of a built workbook."""
    blocks = []
    for name in kind.input_shapes(params):
        [(sheet, ref)] = list(wb.defined_names[name].destinations)
        top, left, _, _ = parse_range(ref.replace("$", ""))
        blocks.append((sheet, top, left, np.asarray(inputs[name], float)))
    return blocks


def _evaluate(model: FormulasModel, blocks) -> dict:
    """The model's values for one student's inputs: parsed once, evaluated per student."""
    return model.evaluate({(sheet, top + i, left + j): float(value)
                           for sheet, top, left, values in blocks
                           for (i, j), value in np.ndenumerate(values)})


class _Edition:
    """One edition (exercise or key) of the class: its formula structure parsed once."""

    def __init__(self, exercise: ExerciseSpec | None):
        self.exercise = exercise
        self.model: FormulasModel | None = None

    def write(self, wb, overrides, path: Path, workdir: Path) -> dict:
        raw = workdir / "raw.xlsx"
        wb.calculation.fullCalcOnLoad = True  # applications recompute on open
        save_workbook(wb, raw)
        if self.model is None:
            self.model = FormulasModel(raw)
        values = _evaluate(self.model, overrides)
        fd, tmp = tempfile.mkstemp(prefix=".attnsheets-", suffix=".xlsx", dir=path.parent)
        os.close(fd)
        try:
            store_values(raw, Path(tmp), values)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return values


def _verify(wb, kind, params, inputs, values, exercise: ExerciseSpec | None) -> list[str]:
    """Steps whose evaluated cells differ from the NumPy reference (none, if all is well).
    The key workbook: every visible step. The exercise: every block of the hidden key, and
    each self-check counting 0 on the blank sheet."""
    problems = []
    expected = expected_steps(kind, params, inputs)
    for name, block in expected.items():
        [(sheet, ref)] = list(wb.defined_names[name].destinations)
        where = NamedRange(name, sheet, *parse_range(ref.replace("$", "")))
        if exercise is not None:
            if not exercise.self_check:
                continue
            where = NamedRange(f"{KEY_SHEET}!{name}", KEY_SHEET, where.top, where.left,
                               where.bottom, where.right)
        result = compare_block(where, block, values)
        if not result.passed:
            problems.append(f"{where.name} ({result.problem or result.worst_cell})")
    if exercise is not None and exercise.self_check:
        for step in exercise.steps:
            [(sheet, ref)] = list(wb.defined_names[f"CHECK_{step}"].destinations)
            row, col = parse_cell(ref)
            if values.get((sheet.upper(), row, col)) != 0:
                problems.append(f"CHECK_{step} is not 0 on the blank exercise")
    return problems


@dataclass(frozen=True)
class ClassResult:
    out: Path
    students: int
    problems: list[str]  # blocks that did not equal the reference (none, if all is well)
    seconds: float


def run_class(kind: type[Kind], params, roster: Path, out: Path, exercise: ExerciseSpec,
              layout: str = "cells", lang: str = "en", tokens: list[str] | None = None,
              class_seed: int = 0, force: bool = False,
              id_column: str | None = None, given: dict | None = None,
              note: str | None = None) -> "ClassResult":
    """Write every student's exercise and key, and the manifest, verifying each. Inputs in
    `given` (a checkpoint's weights) are the same for every student; the others come from
    each student's seed. `note` says on each sheet where the inputs came from."""
    started = time.perf_counter()
    students = read_roster(roster, id_column)
    validate_steps(kind, params, exercise)
    labels = kind.labels(params, tokens)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder")
    plan = [(s, out / f"{kind.name}_{s.stem}.xlsx", out / f"{kind.name}_{s.stem}_key.xlsx")
            for s in students]
    if not force:  # refuse before writing anything
        for path in [out / MANIFEST] + [p for _, *paths in plan for p in paths]:
            if path.exists():
                raise UserError(f"{path} already exists; pass --force to replace the class")
    out.mkdir(parents=True, exist_ok=True)
    editions = {"exercise": _Edition(exercise), "key": _Edition(None)}
    manifest, problems = [], []
    with tempfile.TemporaryDirectory(prefix="attnsheets-class-") as workdir:
        for student, exercise_path, key_path in plan:
            seed = student.seed(class_seed)
            inputs = complete_inputs(kind, params, given or {}, seed)
            for edition, path in ((editions["exercise"], exercise_path),
                                  (editions["key"], key_path)):
                wb = build_workbook(kind, params, inputs, labels, layout, lang=lang,
                                    exercise=edition.exercise, student=student.id, note=note)
                values = edition.write(wb, _input_blocks(wb, kind, params, inputs), path,
                                       Path(workdir))
                problems += [f"{path.name}: {p}" for p in
                             _verify(wb, kind, params, inputs, values, edition.exercise)]
            manifest.append({"student": student.id, "name": student.name,
                             "file": exercise_path.name, "key_file": key_path.name,
                             "seed": seed})
    _write_manifest(out / MANIFEST, manifest)
    return ClassResult(out, len(plan), problems, time.perf_counter() - started)


def _write_manifest(path: Path, rows: list[dict]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".csv", dir=path.parent)
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["student", "name", "file", "key_file", "seed"])
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
