"""`grade`: score returned exercise workbooks, one CSV row per file (and, with the class's
manifest, one per student who returned none).

With the class's manifest (`manifest.json`, written by `class`), everything but the answers
comes from the teacher's record: the student (matched by file name, else by the inputs),
the inputs (drawn again from the recorded seed), the steps and the tolerance; each way a
file differs from the record (edited inputs, tolerance or step list, another student's id)
is reported, and every answer is recalculated on the recorded inputs and on fresh ones,
never read from the values the file saved (`answers.py`: a copied, cached, disguised,
key-reading or external answer scores 0 and is named). Without it, grading trusts the file: the
right answers are recomputed with the NumPy reference from the inputs each file holds (as
`check` does), never read from the file's hidden key, so a student who edited the key gains
nothing (nor does its state matter: a file saved by Gnumeric has it visible). There a cell
counts as correct when it holds a number within the tolerance of the answer: a typed value,
or a formula's value as Excel or LibreOffice saved it (files never opened in an application
are evaluated with the `formulas` engine) or, when an engine is named, as that engine
recalculates the file. Text, blanks and error values are wrong. Answers are from the inputs
alone: a wrong WEIGHTS is not carried forward into OUTPUT, matching the in-sheet
self-check.
"""

import collections
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.book.files import check_writable, open_workbook, write_csv
from workbook_builder.book.reading import regular_file
from workbook_builder.book.workbook import read_spec, spec_request
from workbook_builder.checking.check import (
    ENGINES,
    array_members,
    holds_formula,
    read_inputs,
    require_engine,
)
from workbook_builder.checking.placement import Placement, hold_to_layout
from workbook_builder.errors import UserError
from workbook_builder.sheet.exercise import KEY_SHEET
from workbook_builder.sheet.kind import complete_inputs
from workbook_builder.sheet.names import NamedRange
from workbook_builder.sheet.request import BuildRequest
from workbook_builder.teaching.answers import (
    ANSWER_MODES,
    FORGED,
    FRESH_SETS,
    AnswerReader,
    AnswerSets,
    fresh_seed,
    score_answers,
)
from workbook_builder.teaching.record import (
    StudentRecord,
    by_digest,
    by_file_name,
    inputs_digest,
    read_record,
)
from workbook_builder.xlsx.of_openpyxl import stored_cells


@dataclass
class Grade:
    file: str
    student: str = ""
    kind: str = ""
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)  # step -> (correct, of)
    problem: str = ""  # why the file could not be graded
    name: str = ""  # from the manifest
    verified: bool = False  # graded against the teacher's manifest
    changes: list[str] = field(default_factory=list)  # how the file differs from it
    given: int = 1  # times the file was named (folders included): graded once
    same_as: str = ""  # an earlier file of the same student, the one counted
    also: list[str] = field(default_factory=list)  # the student's later files (not counted)
    typed: int = 0  # answer cells holding a typed number, not a formula
    formulas: int = 0  # answer cells holding a formula that follows the inputs
    # cells scored 0 as forged, by what they are (answers.FORGED): recalculated grades only
    forged: dict[str, list[str]] = field(default_factory=dict)
    answers: str = ""  # the answers the class takes (answers.ANSWER_MODES); with a manifest
    returned: bool = True  # False: a student of the manifest who returned no file
    on_roster: bool = False  # the file is a student's of the manifest
    inputs_of: str = ""  # the other student whose inputs the file holds (a copy)
    copied_into: list[str] = field(default_factory=list)  # copies of this file's inputs

    @property
    def notes(self) -> list[str]:
        """Duplicates and copies: a file named again, a student's two files, the original
        of a copied file."""
        notes = [f"given {self.given} times; graded once"] if self.given > 1 else []
        if self.same_as:
            notes.append(f"same student {self.student} as {self.same_as}; not counted "
                         f"(that file is)")
        if self.also:
            notes.append(f"student {self.student} also returned {', '.join(self.also)}; "
                         f"this file is counted")
        notes += [f"inputs copied into {copy}" for copy in self.copied_into]
        return notes

    @property
    def findings(self) -> list[str]:
        """Each kind of forged answer, with its cells."""
        found = []
        for reason in FORGED:
            cells = self.forged.get(reason, [])
            if cells:
                shown = ", ".join(cells[:3]) + (", …" if len(cells) > 3 else "")
                found.append(f"{reason}: {len(cells)} cell(s) scored 0 ({shown})")
        return found

    @property
    def correct(self) -> int:
        return sum(c for c, _ in self.steps.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self.steps.values())


def collect_files(paths: list[Path]) -> list[Path]:
    """Files named, and the .xlsx files (any case) in folders named and their subfolders,
    as course platforms hand them out; answer keys `*_key.xlsx`, lock files `~$*`, hidden
    files and folders, and macOS's `__MACOSX` copies are skipped."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if _returned_workbook(p, path))
        elif path.exists():
            regular_file(path, "workbook")  # a pipe named f.xlsx would wait forever
            files.append(path)
        else:
            raise UserError(f"{path}: no such file or folder")
    if not files:
        raise UserError("no .xlsx workbooks to grade in " + ", ".join(map(str, paths)))
    return files


def _returned_workbook(path: Path, top: Path) -> bool:
    name = path.name.lower()
    folders = path.relative_to(top).parts[:-1]
    return (name.endswith(".xlsx") and not name.endswith("_key.xlsx")
            and not name.startswith(("~$", ".")) and path.is_file()
            and not any(f.startswith(".") or f == "__MACOSX" for f in folders))


def grade_file(path: Path, engine: str | None = None,
               students: list[StudentRecord] | None = None,
               answers: str | None = None) -> Grade:
    """Grade one file: formula cells' values as saved (evaluated with `formulas` where the
    file has none) or, with `engine`, as that engine recalculates the file. With the
    class's `students` (its manifest), the student, inputs, steps and tolerance come from
    there, every way the file differs is listed in `changes`, and the answers are
    recalculated on the recorded and fresh inputs (`answers.score_answers`; `answers`: the
    answers taken, instead of the record's)."""
    if answers is not None and answers not in ANSWER_MODES:
        raise UserError(f"--answers must be one of {', '.join(ANSWER_MODES)}; got {answers!r}")
    grade = Grade(str(path), student=path.stem, verified=students is not None)
    try:
        if students is None:
            _grade(_Returned(path, engine), grade)
        else:
            # never the saved values (read only to name a stale one): inputs that hold
            # formulas are evaluated
            _grade_from_record(_Returned(path, "formulas"), grade, students, answers)
    except UserError as exc:
        grade.problem = str(exc)
    except Exception as exc:  # a damaged file must not stop the batch
        grade.problem = f"{path}: could not be graded ({type(exc).__name__}: {exc})"
    return grade


class _Returned:
    """A returned workbook: its cells, and each cell's value as saved (or as an engine
    computes it)."""

    def __init__(self, path: Path, engine: str | None):
        self.path, self.engine = path, engine
        self.wb = open_workbook(path)
        self.saved = open_workbook(path, data_only=True) if engine is None else None
        self._evaluated: list[dict] = []
        self._placements: dict[tuple, Placement] = {}

    def placement(self, request: BuildRequest) -> Placement:
        """The file held to the layout of the request (`hold_to_layout`): the places read,
        and every name or sheet that differs."""
        key = (request.kind.name, repr(request.params), request.layout, request.exercise)
        if key not in self._placements:
            self._placements[key] = hold_to_layout(self.wb, request, self.path,
                                                   key_any_state=True)
        return self._placements[key]

    def evaluated(self) -> dict:
        if not self._evaluated:
            self._evaluated.append(ENGINES[self.engine or "formulas"](self.path, self.wb))
        return self._evaluated[0]

    def value_of(self, sheet: str, row: int, col: int) -> Any:
        value = None if self.saved is None else self.saved[sheet].cell(row, col).value
        if value is None:  # an engine named, or saved without values (e.g. by openpyxl)
            value = self.evaluated().get((sheet.upper(), row, col))
        return value

    def inputs(self, request: BuildRequest) -> dict[str, np.ndarray]:
        """The input blocks where the layout puts them (below an exercise's instructions)."""
        return read_inputs(self.wb, request.kind, request.params, self.path,
                           self.evaluated if self.saved is None else
                           lambda: _saved_or_evaluated(self.saved, self.evaluated),
                           self.placement(request).places)

    def score(self, where: NamedRange, answer: np.ndarray,
              tolerance: float) -> tuple[int, int, int]:
        """(cells within `tolerance` of `answer`, cells, cells holding a typed number) of
        the block at `where`."""
        ws = self.wb[where.sheet]
        in_array = array_members(ws, where)
        correct = typed = 0
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                row, col = where.top + i, where.left + j
                cell = ws.cell(row, col)
                formula = holds_formula(cell, in_array)
                got = self.value_of(where.sheet, row, col) if formula else cell.value
                correct += _is_correct(got, answer[i, j], tolerance)
                typed += _is_number(cell.value) if not formula else \
                    isinstance(cell.value, str) and bool(CONSTANTS.fullmatch(cell.value))
        return correct, answer.size, typed


def _grade(returned: _Returned, grade: Grade) -> None:
    """Everything as the file states it: nothing verified."""
    path = returned.path
    spec = read_spec(returned.wb, path)
    grade.kind = spec.kind
    grade.student = spec.student or path.stem
    if spec.exercise is None:
        raise UserError(f"{path} is an attnsheets workbook but not an exercise (an answer "
                        f"key?)")
    request = spec_request(spec)
    kind, params = request.kind, request.params
    placement = returned.placement(request)
    try:
        inputs = returned.inputs(request)
    except UserError:
        if placement.problems:  # the layout the file states is not the one it has
            raise UserError(f"{path}: {'; '.join(placement.problems[:2])}") from None
        raise
    with np.errstate(all="ignore"):  # edited inputs may overflow: scored, not warned
        expected = kind.reference(inputs, params)
    grade.changes += _placement_changes(placement)
    for step in spec.exercise.steps:
        _score(returned, placement, step, np.asarray(expected[step], float),
               spec.exercise.tolerance, grade)


def _score(returned: _Returned, placement: Placement, step: str, answer: np.ndarray,
           tolerance: float, grade: Grade) -> None:
    """The step's score where the layout puts it, and its typed cells counted; 0 when its
    name points elsewhere or into a hidden sheet (`_placement_changes` says why)."""
    if step in placement.misplaced or step not in placement.places:
        grade.steps[step] = 0, answer.size
        return
    correct, cells, typed = returned.score(placement.places[step], answer, tolerance)
    grade.steps[step] = correct, cells
    grade.typed += typed


def _placement_changes(placement: Placement) -> list[str]:
    """Sheets added or hidden, and names of inputs and steps not where the layout puts
    them (the self-check's counts are not graded)."""
    return placement.sheets + [problem for name, problem in placement.misplaced.items()
                               if not name.startswith("CHECK_")]


def _grade_from_record(returned: _Returned, grade: Grade,
                       students: list[StudentRecord], answers: str | None = None) -> None:
    """The student, inputs, steps and tolerance from the teacher's record; the file gives
    only the answers, each recalculated from the recorded and fresh inputs, and every way
    it differs from the record is noted."""
    path, changes = returned.path, grade.changes
    named = by_file_name(students, path)
    file_inputs, digest = _inputs_as_recorded(returned, named, students)
    holder = by_digest(students, digest) if digest else None
    record = named or holder
    if record is None:
        raise UserError(f"{path} matches no student of the manifest (neither its file name "
                        f"nor its inputs)")
    grade.student, grade.name, grade.kind = record.student, record.name, record.kind
    grade.on_roster = True
    kind, params = record.kind_params()
    recorded = record.inputs()
    if file_inputs is None:
        changes.append("inputs edited (not numbers in the recorded shapes)")
    elif digest != record.inputs_sha256 and not all(
            np.allclose(file_inputs[n], recorded[n], rtol=1e-9, atol=0) for n in recorded):
        changes.append("inputs edited")
    if holder is not None and holder is not record:
        changes.append(f"inputs are those of student {holder.student}")
        grade.inputs_of = holder.student
    changes += _about_changes(returned, record)
    placement = returned.placement(record.request())
    changes += _placement_changes(placement)
    grade.answers = answers or record.answers
    _score_recalculated(returned, placement, record, recorded, grade)


def _score_recalculated(returned: _Returned, placement: Placement, record: StudentRecord,
                        recorded: dict[str, np.ndarray], grade: Grade) -> None:
    """Every step's answer cells recalculated from the recorded inputs and from fresh ones
    (`answers.score_answers`); a step whose name points elsewhere scores 0."""
    kind, params = record.kind_params()
    sets = [recorded] + [complete_inputs(kind, params, {}, fresh_seed(record.seed, k))
                         for k in range(1, FRESH_SETS + 1)]
    with np.errstate(all="ignore"):
        expected = [{name: np.asarray(block, float)
                     for name, block in kind.reference(inputs, params).items()}
                    for inputs in sets]
    places = placement.places
    inputs = [places[name] for name in kind.input_shapes(params)]
    steps = {step: places[step] for step in record.steps
             if step in places and step not in placement.misplaced}
    reader = AnswerReader(returned.wb, KEY_SHEET, inputs, list(steps.values()))

    def saved(sheet: str, row: int, col: int):
        if returned.saved is None:
            returned.saved = open_workbook(returned.path, data_only=True)
        return returned.saved[sheet].cell(row, col).value

    scores, tally = score_answers(
        reader, lambda: reader.calculation(returned.path.name, recorded), inputs, steps,
        AnswerSets(sets, expected), record.tolerance, grade.answers, saved)
    for step in record.steps:
        grade.steps[step] = scores.get(step, (0, expected[0][step].size))
    grade.typed, grade.formulas, grade.forged = tally.typed, tally.formulas, tally.forged


def _inputs_as_recorded(returned: _Returned, named: StudentRecord | None,
                        students: list[StudentRecord]):
    """The file's inputs read with the parameters of the student its name matches (else
    of each recorded kind and parameters in turn), and their digest; (None, "") when they
    cannot be read so."""
    candidates = [named] if named is not None else students
    tried = []
    for record in candidates:
        if (record.kind, record.params) in tried:
            continue
        tried.append((record.kind, record.params))
        try:
            inputs = returned.inputs(record.request())
        except UserError:
            continue
        return inputs, inputs_digest(inputs)
    return None, ""


def _about_changes(returned: _Returned, record: StudentRecord) -> list[str]:
    """How the file's About sheet differs from the record."""
    try:
        spec = read_spec(returned.wb, returned.path)
    except UserError:
        return ["About sheet edited (unreadable)"]
    changes = []
    if spec.student != record.student:
        changes.append(f"claims student {spec.student}" if spec.student is not None
                       else "student removed from the About sheet")
    if (spec.kind, spec.params, spec.layout) != (record.kind, record.params, record.layout):
        changes.append("kind or parameters changed")
    if spec.exercise is None:
        changes.append("exercise removed from the About sheet")
        return changes
    if tuple(spec.exercise.steps) != tuple(record.steps):
        changes.append("step list changed")
    if spec.exercise.tolerance != record.tolerance:
        changes.append("tolerance changed")
    return changes


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


# A formula of numbers only ("=0.25", "=1/4"): a typed value in the guise of a formula
CONSTANTS = re.compile(r"=[\s\d.eE+\-*/^()%]*")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) \
        and math.isfinite(value)  # not blank, text, an error value ('#DIV/0!'), TRUE/FALSE


def _is_correct(got: Any, want: float, tolerance: float) -> bool:
    return _is_number(got) and abs(float(got) - want) <= tolerance


def write_grades(grades: list[Grade], out: Path, force: bool) -> None:
    check_writable(out, force, ".csv")
    steps: list[str] = []
    for grade in grades:
        steps += [s for s in grade.steps if s not in steps]
    rows = []
    for g in grades:
        scored = g.returned and not g.problem
        cells = [f"{g.steps[s][0]}/{g.steps[s][1]}" if s in g.steps else "" for s in steps]
        score = f"{100 * g.correct / g.total:.1f}" if g.total and scored else ""
        problem = (g.problem or "; ".join(g.changes + g.findings + g.notes)) if g.returned \
            else "not returned"
        rows.append([g.student, g.name, g.file, g.kind, *cells,
                     g.correct if scored else "", g.total if scored else "", score,
                     g.typed if scored else "",
                     g.formulas if scored and g.answers else "",
                     *[len(g.forged.get(reason, [])) if scored and g.answers else ""
                       for reason in FORGED],
                     g.answers, problem,
                     "yes" if g.verified else "no (no manifest)"])
    write_csv(out, ["student", "name", "file", "kind", *steps, "correct", "total", "score",
                    "typed values", "formula answers", *FORGED, "answers taken", "problem",
                    "verified"], rows, force)


def grade_all(paths: list[Path], out: Path | None, force: bool,
              engine: str | None = None, manifest: Path | None = None,
              answers: str | None = None) -> list[Grade]:
    """Grade every file (a file that cannot be graded gets a row with its problem), and
    write the CSV when asked. `engine`: recalculate formula cells with it (see grade_file).
    `manifest`: the class's manifest.json (or its folder), against which every file is
    graded and verified; the grades then follow the roster's order, a student who returned
    nothing has one (`returned` False), and the original of a copied file lists the copies
    (`copied_into`). A file named more than once is graded once; of a student's files the
    first is counted in a summary and lists the others (`also`), which are marked
    `same_as` it. `answers`: the answers taken (`answers.ANSWER_MODES`), instead of what
    the manifest records; only with it, whose files are always recalculated (by the
    `formulas` engine: another `engine` is refused)."""
    if answers is not None and answers not in ANSWER_MODES:
        raise UserError(f"--answers must be one of {', '.join(ANSWER_MODES)}; got {answers!r}")
    if answers is not None and manifest is None:
        raise UserError("--answers needs --manifest: the answers are recalculated on the "
                        "inputs the class's record gave each student")
    if manifest is not None and engine not in (None, "formulas"):
        raise UserError(f"--engine {engine} cannot grade with --manifest: every file is "
                        f"recalculated by the formulas engine on the recorded and fresh "
                        f"inputs (--engine is for grading without a manifest)")
    students = read_record(manifest) if manifest is not None else None
    files = collect_files(paths)
    if out is not None and out.exists() and not force:  # refuse before the work
        raise UserError(f"{out} already exists; pass --force to replace it")
    if engine is not None:
        require_engine(engine)
    given = collections.Counter(path.resolve() for path in files)
    unique: dict[Path, Path] = {}
    for path in files:
        unique.setdefault(path.resolve(), path)
    files = list(unique.values())
    grades = [grade_file(path, engine, students, answers) for path in files]
    counted: dict[str, Grade] = {}
    for path, grade in zip(files, grades, strict=True):
        grade.given = given[path.resolve()]
        if grade.problem:
            continue
        first = counted.setdefault(grade.student, grade)
        if first is not grade:
            grade.same_as = first.file
            first.also.append(grade.file)
    if students is not None:
        _name_originals(grades)
        grades = _roster_rows(grades, students)
    if out is not None:
        write_grades(grades, out, force)
    return grades


def _name_originals(grades: list[Grade]) -> None:
    """A copy names the student whose inputs it holds; that student's own file (holding
    them as its own) names the copy in turn."""
    for copy in grades:
        for original in grades:
            if copy.inputs_of and original.student == copy.inputs_of \
                    and not original.problem and not original.inputs_of:
                original.copied_into.append(f"{copy.file} (student {copy.student})")


def _roster_rows(grades: list[Grade], students: list[StudentRecord]) -> list[Grade]:
    """The grades in the roster's order (a student's files in the order given, files of no
    student last), with a row for each student who returned no file."""
    returned = {g.student for g in grades if g.on_roster}
    missing = [Grade("", student=s.student, kind=s.kind, name=s.name, verified=True,
                     returned=False, on_roster=True)
               for s in students if s.student not in returned]
    order = {s.student: n for n, s in enumerate(students)}
    return sorted(grades + missing,
                  key=lambda g: order[g.student] if g.on_roster else len(order))
