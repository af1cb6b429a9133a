"""`class`: one exercise workbook and one answer key per student of a roster.

Every student's inputs come from a seed derived from their id (and an optional class
seed), so re-running gives the same files. All students share one formula structure, so
the exercise and the key are each parsed once by the `formulas` engine and evaluated per
student (for the values stored beside the formulas and for the verification) instead of
re-parsing 2 × N files.
"""

import contextlib
import csv
import dataclasses
import hashlib
import io
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbook_builder.book.files import move_into_place, temp_beside, write_csv
from workbook_builder.book.workbook import build_workbook
from workbook_builder.checking.check import compare_block, expected_steps
from workbook_builder.engines.cached_values import store_values
from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.errors import UserError
from workbook_builder.sheet.cells import check_cell_text
from workbook_builder.sheet.exercise import KEY_SHEET
from workbook_builder.sheet.kind import Kind, complete_inputs
from workbook_builder.sheet.limits import DEFAULT_MAX_CELLS, plan_build, planned_places
from workbook_builder.sheet.names import NamedRange
from workbook_builder.sheet.refs import name_destinations, parse_cell, parse_range
from workbook_builder.sheet.request import BuildRequest, ExerciseSpec, validate_steps
from workbook_builder.teaching.answers import ANSWER_MODES, default_answers
from workbook_builder.teaching.record import RECORD, SHARED, student_record, write_record
from workbook_builder.xlsx.of_openpyxl import save_workbook

NAME_MAX = 255  # bytes of one file name on common file systems
ID_COLUMNS = ("id", "student_id", "student id", "student", "学号")
NAME_COLUMNS = ("name", "姓名")
MANIFEST = "manifest.csv"


@dataclass(frozen=True)
class Student:
    id: str
    name: str
    stem: str  # file-name-safe id
    line: int = 0  # of the roster

    def seed(self, class_seed: int) -> int:
        """Stable across runs and machines (not Python's salted hash)."""
        digest = hashlib.sha256(f"{class_seed}:{self.id}".encode()).digest()
        return int.from_bytes(digest[:4], "big")


# what a teacher's spreadsheet saves a roster as, and how to save one that reads
ROSTER_FIX = ("save it from the spreadsheet as CSV UTF-8 (Excel: “CSV UTF-8 (Comma "
              "delimited)”; LibreOffice: Text CSV, character set Unicode (UTF-8))")


def roster_text(path: Path) -> tuple[str, str]:
    """A roster's text and the delimiter between its columns, in the encodings teachers'
    spreadsheets write: UTF-8 with or without its BOM, UTF-16 with its BOM (Excel's
    “Unicode text”, tab-separated), GBK/GB18030 (“CSV” on a Chinese Windows); anything else
    is one line saying how to save one that reads."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such roster file") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a folder, not a roster CSV") from None
    except OSError as exc:
        raise UserError(f"{path}: not a readable roster ({exc.strerror or exc})") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        encodings = ("utf-16",)
    else:
        encodings = ("utf-8-sig", "gb18030")
    for encoding in encodings:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if encoding == "gb18030" and not re.search(r"[\u3400-\u9fff]", text):
            break  # decodes, but holds no Chinese: another code page read wrongly
        header = text.split("\n", 1)[0]
        delimiter = next((d for d in ("\t", ";") if d in header and "," not in header), ",")
        return text, delimiter
    raise UserError(f"{path}: not a roster in UTF-8, UTF-16 or GBK text; {ROSTER_FIX}")


def read_roster(path: Path, id_column: str | None = None) -> list[Student]:
    """Students from a CSV with a header row; one line per error, naming the line."""
    text, delimiter = roster_text(path)
    try:
        # not str.splitlines: it also splits at \x1c-\x1e, \x85 and U+2028, which CSV keeps
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
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
        _check_id(student_id, f"{path}, line {line}")
        stem = re.sub(r"[^\w.-]+", "_", student_id).strip("._") or "student"
        if stem.lower() in stems:
            raise UserError(f"{path}, line {line}: student id {student_id!r} gives the same "
                            f"file name as line {stems[stem.lower()]}")
        stems[stem.lower()] = line
        name = row[name_at].strip() if name_at is not None and name_at < len(row) else ""
        students.append(Student(student_id, name, stem, line))
    if not students:
        raise UserError(f"{path}: the roster lists no students")
    return students


def _check_id(student_id: str, where: str) -> None:
    """An id becomes part of two file names and a cell of every workbook: refuse what
    cannot be either (file names are `<kind>_<id>.xlsx` with characters other than
    letters, digits, `.`, `-` and `_` replaced by `_`, so Windows' reserved names such as
    CON never stand alone)."""
    check_cell_text(student_id, f"{where}: student id")
    if "/" in student_id or "\\" in student_id:
        raise UserError(f"{where}: student id {student_id!r} holds a path separator (/ or \\)")


def _check_file_names(plan, roster: Path) -> None:
    """Every file name fits the file system (255 bytes), checked before anything is
    written."""
    for student, *names in plan:
        for name in names:
            if len(name.encode()) > NAME_MAX:
                raise UserError(f"{roster}, line {student.line}: student id "
                                f"{student.id[:40]!r}… is too long for a file name "
                                f"({name[:40]}… is {len(name.encode())} bytes; "
                                f"at most {NAME_MAX})")


def _input_blocks(wb, request: BuildRequest,
                  inputs) -> list[tuple[str, int, int, np.ndarray]]:
    """(sheet, top, left, values) of every input block of a built workbook."""
    blocks = []
    for name in request.kind.input_shapes(request.params):
        [(sheet, ref)] = name_destinations(wb.defined_names[name])
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
        store_values(raw, path, values)  # into the staging folder: no one sees it yet
        return values


def _verify(wb, request: BuildRequest, inputs, values) -> list[str]:
    """Steps whose evaluated cells differ from the NumPy reference (none, if all is well).
    The key workbook: every visible step. The exercise: every block of the hidden key, and
    each self-check counting 0 on the blank sheet."""
    problems = []
    exercise = request.exercise
    expected = expected_steps(request.kind, request.params, inputs)
    for name, block in expected.items():
        [(sheet, ref)] = name_destinations(wb.defined_names[name])
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
            [(sheet, ref)] = name_destinations(wb.defined_names[f"CHECK_{step}"])
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
    answers: str = "either"  # what the grade takes (answers.ANSWER_MODES)


def run_class(kind: type[Kind], params, roster: Path, out: Path, exercise: ExerciseSpec,
              layout: str = "cells", lang: str = "en", tokens: list[str] | None = None,
              class_seed: int = 0, force: bool = False,
              id_column: str | None = None,
              max_cells: int = DEFAULT_MAX_CELLS, given: dict | None = None,
              note: str | None = None, answers: str | None = None) -> "ClassResult":
    """Write every student's exercise and key, and the manifests, verifying each. Inputs in
    `given` (a checkpoint's weights) are the same for every student; the others come from
    each student's seed. `note` says on each sheet where the inputs came from. All is
    written into a staging folder beside `out` and moved into place at the end: a class
    that fails or is interrupted leaves nothing behind. `answers`: what the grade takes
    (`answers.ANSWER_MODES`; None: `default_answers` for the exercise's size), recorded."""
    started = time.perf_counter()
    students = read_roster(roster, id_column)
    request = plan_build(kind, params, tokens, max_cells=max_cells, layout=layout, lang=lang,
                         exercise=exercise, note=note)
    labels = request.labels
    validate_steps(kind, params, exercise)
    if answers is None:
        answers = default_answers(answer_cells(request))
    elif answers not in ANSWER_MODES:
        raise UserError(f"--answers must be one of {', '.join(ANSWER_MODES)}; got {answers!r}")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder")
    plan = [(s, f"{kind.name}_{s.stem}.xlsx", f"{kind.name}_{s.stem}_key.xlsx")
            for s in students]
    _check_file_names(plan, roster)
    names = [name for _, *pair in plan for name in pair] + [MANIFEST, RECORD] + \
        ([SHARED] if given else [])
    for name in names:  # refuse before the work (and again when moving in)
        if not force and os.path.lexists(out / name):
            raise UserError(f"{out / name} already exists; pass --force to replace the "
                            f"class")
        _check_replaceable(out / name)
    editions = {"exercise": _Edition(exercise), "key": _Edition(None)}
    manifest, records, problems = [], [], []
    with _staging(out) as staging, \
            tempfile.TemporaryDirectory(prefix="attnsheets-class-") as workdir:
        for student, exercise_name, key_name in plan:
            seed = student.seed(class_seed)
            inputs = complete_inputs(kind, params, given or {}, seed)
            for edition, name in ((editions["exercise"], exercise_name),
                                  (editions["key"], key_name)):
                whose = dataclasses.replace(request, exercise=edition.exercise,
                                            student=student.id, student_name=student.name)
                wb = build_workbook(whose, inputs)
                values = edition.write(wb, _input_blocks(wb, whose, inputs), staging / name,
                                       Path(workdir))
                problems += [f"{name}: {p}" for p in _verify(wb, whose, inputs, values)]
            manifest.append([student.id, student.name, exercise_name, key_name, seed])
            records.append(student_record(student.id, student.name, exercise_name, key_name,
                                          seed, kind.name, dataclasses.asdict(params),
                                          layout, labels, exercise, inputs, answers))
        write_csv(staging / MANIFEST, ["student", "name", "file", "key_file", "seed"],
                  manifest, force=True)
        write_record(staging / RECORD, records, given)
        _move_in(staging, out, names, force)
    return ClassResult(out, len(plan), problems, time.perf_counter() - started, answers)


def answer_cells(request: BuildRequest) -> int:
    """The cells a student fills in the request's exercise."""
    places = planned_places(request)
    return sum(places[step].rows * places[step].cols for step in request.exercise.steps)


def _check_replaceable(path: Path) -> None:
    """`--force` replaces the regular files a class is made of, never a folder, a link, a
    FIFO or a device that has one of their names (it would be deleted with the staging
    folder)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise UserError(f"{path} is a folder; --force replaces only files a class wrote, "
                        f"never a folder: move it away first")
    if not stat.S_ISREG(mode):
        raise UserError(f"{path} is not a regular file (a link, a FIFO or a device); --force "
                        f"replaces only files a class wrote, never anything else: move it "
                        f"away first")


@contextlib.contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A fresh folder beside `out` (same file system, so moving is renaming), removed at
    the end whatever happens, with the folders made for it."""
    made = [p for p in [out.parent, *out.parent.parents] if not p.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with temp_beside(out, f".{out.name}.attnsheets-", folder=True) as staging:
            yield staging
    finally:
        if not out.exists():
            for folder in made:  # nearest first; only if still empty
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _holds(path: Path, identity: tuple[int, int]) -> bool:
    """Whether `path` is the file of this (device, inode)."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == identity


def _move_in(staging: Path, out: Path, names: list[str], force: bool) -> None:
    """Move the staged files into `out`, the manifests last. Without `force` each name is
    claimed exclusively; with it the old files are set aside first. On any failure the
    files moved in are removed and the old ones put back."""
    created = not out.exists()
    if created:
        out.mkdir()
    old = staging / ".replaced"
    old.mkdir()
    moved, set_aside = [], []
    moving = None  # the name being moved and its staged file's identity
    try:
        for name in names:
            if force and os.path.lexists(out / name):
                _check_replaceable(out / name)
                os.replace(out / name, old / name)
                set_aside.append(name)
            staged = os.stat(staging / name)
            moving = (name, staged.st_dev, staged.st_ino)
            move_into_place(staging / name, out / name, force=False)
            moved.append(name)
            moving = None
    except BaseException:
        if moving is not None and _holds(out / moving[0], moving[1:]):
            moved.append(moving[0])  # stopped after its move, before it was counted
        for name in moved:
            (out / name).unlink(missing_ok=True)
        for name in set_aside:
            os.replace(old / name, out / name)
        if created:
            out.rmdir()
        raise
