"""`grade --manifest` recalculates every answer: forged answers score 0 and are named.

Each forged file below is what a student who wants full marks without the work can hand
in (cached values under a formula that computes something else, the self-checks' key read
directly or through INDIRECT, another workbook's cells, constants dressed as formulas,
numbers under an array formula that covers their block), made on a `train` and an
`attention` exercise. Honest files (formulas, typed numbers in a class that takes them,
files saved by LibreOffice and by Gnumeric) keep full marks."""

import csv
import json
import zipfile
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS
from helpers.cli import cli
from helpers.requires import requires_gnumeric, requires_libreoffice
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder import api
from workbook_builder.engines.cached_values import store_values
from workbook_builder.sheet.exercise import KEY_SHEET
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.refs import cell_ref

EXERCISES = {
    "attention": (("--seq-len", "3", "--d-model", "2", "--d-k", "2"),
                  {"seq_len": 3, "d_model": 2, "d_k": 2}, ["WEIGHTS", "OUTPUT"]),
    "train": (("--seq-len", "3", "--vocab", "3", "--d-k", "2", "--steps", "1"),
              {"seq_len": 3, "vocab": 3, "d_k": 2, "steps": 1},
              ["WEIGHTS_T1", "D_W_OUT_T1"]),
}
COPIED, READS_KEY, READS_FILE = ("copied or typed value", "reads the answer key",
                                 "reads another file")


def make_class(folder: Path, kind: str, *extra) -> Path:
    roster = folder / "roster.csv"
    roster.write_text("id,name\ns1,Ann\ns2,Bo\n", encoding="utf-8")
    sizes, _, steps = EXERCISES[kind]
    out = folder / f"class-{kind}"
    ran = cli("class", kind, "--roster", roster, "--out", out, "--exercise", ",".join(steps),
              *sizes, *extra)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return out


@pytest.fixture(scope="module", params=sorted(EXERCISES))
def exercise(request, tmp_path_factory):
    """A class of two (self-checks on, typed values taken: the default at this size) of
    each kind, and student s1's exercise with the right answers."""
    kind = request.param
    folder = tmp_path_factory.mktemp(kind)
    out = make_class(folder, kind)
    record = json.loads((out / "manifest.json").read_text())["students"][0]
    assert record["answers"] == "either"
    _, values, steps = EXERCISES[kind]
    params = make_params(KINDS[kind], values)
    answers = KINDS[kind].reference(complete_inputs(KINDS[kind], params, {}, record["seed"]),
                                    params)
    return kind, out, out / record["file"], {s: np.asarray(answers[s], float) for s in steps}


def answer_cells(wb, steps, path):
    """(step, i, j, sheet cell) of every answer cell."""
    for step in steps:
        where = find_name(wb, step, path)
        ws = wb[where.sheet]
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                yield step, i, j, ws.cell(where.top + i, where.left + j)


def forge(exercise, target: Path, formula, cached: bool = False) -> Path:
    """The exercise with `formula(step, i, j, cell, answer)` in every answer cell; with
    `cached`, each answer stored as that formula's saved value."""
    _, _, path, answers = exercise
    wb = openpyxl.load_workbook(path)
    stored = {}
    for step, i, j, cell in answer_cells(wb, answers, path):
        cell.value = formula(step, i, j, cell, float(answers[step][i, j]))
        stored[(cell.parent.title.upper(), cell.row, cell.column)] = float(answers[step][i, j])
    raw = target.with_suffix(".raw.xlsx") if cached else target
    wb.save(raw)
    if cached:
        store_values(raw, target, stored)
        raw.unlink()
    return target


def honest(exercise, target: Path) -> Path:
    """Each answer cell holds the formula the hidden key has there (the key lays every
    block where the sheet has it, so the formula reads the sheet's own earlier steps)."""
    _, _, path, _ = exercise
    key = openpyxl.load_workbook(path)[KEY_SHEET]

    def keys_formula(step, i, j, cell, answer):
        formula = key.cell(cell.row, cell.column).value
        assert isinstance(formula, str) and formula.startswith("=")
        return formula

    return forge(exercise, target, keys_formula)


def typed(exercise, target: Path) -> Path:
    return forge(exercise, target, lambda step, i, j, cell, answer: answer)


def graded(exercise, book: Path, answers: str | None = None):
    _, out, _, _ = exercise
    return api.grade_file(book, None, api.read_record(out), answers)


def cells_of(exercise) -> int:
    return sum(a.size for a in exercise[3].values())


FORGERIES = {
    # a formula that computes 0, saved with the answer as its value
    "cached value": (lambda s, i, j, cell, a: "=ROW()*0", True, COPIED),
    # the self-checks' hidden key, read directly and through INDIRECT
    "key": (lambda s, i, j, cell, a: f"='{KEY_SHEET}'!{cell.coordinate}", False, READS_KEY),
    "key via INDIRECT": (lambda s, i, j, cell, a: f'=INDIRECT("\'{KEY_SHEET}\'!'
                                                  f'{cell.coordinate}")', True, READS_KEY),
    # another workbook whose cells hold the answers (its cached values)
    "external link": (lambda s, i, j, cell, a: f"=[1]Train!{cell.coordinate}", True,
                      READS_FILE),
    # constants dressed as formulas
    "N()": (lambda s, i, j, cell, a: f"=N({a!r})", False, COPIED),
    "--text": (lambda s, i, j, cell, a: f'=--"{a!r}"', False, COPIED),
    "+0*$A$1": (lambda s, i, j, cell, a: f"={a!r}+0*$A$1", False, COPIED),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_each_forged_answer_scores_0_and_is_named(exercise, tmp_path, forgery):
    formula, cached, reason = FORGERIES[forgery]
    kind = exercise[0]
    book = forge(exercise, tmp_path / f"{kind}_s1.xlsx", formula, cached)
    grade = graded(exercise, book, "formulas")
    cells = cells_of(exercise)
    assert grade.problem == ""
    assert (grade.correct, grade.total) == (0, cells), grade.steps
    assert {r: len(c) for r, c in grade.forged.items()} == {reason: cells}
    assert any(finding.startswith(f"{reason}: {cells} cell(s) scored 0")
               for finding in grade.findings)


@pytest.mark.parametrize("forgery", ["cached value", "key", "key via INDIRECT",
                                     "external link"])
def test_a_forged_answer_scores_0_in_a_class_that_takes_typed_values(exercise, tmp_path,
                                                                      forgery):
    formula, cached, reason = FORGERIES[forgery]
    book = forge(exercise, tmp_path / f"{exercise[0]}_s1.xlsx", formula, cached)
    for answers in ("either", "values"):
        grade = graded(exercise, book, answers)
        assert grade.correct == 0 and grade.forged.keys() == {reason}, (answers, grade)


def test_numbers_under_an_array_formula_covering_the_block_count_as_typed(exercise,
                                                                          tmp_path):
    kind, _, path, answers = exercise
    wb = openpyxl.load_workbook(path)
    bottom, right = 1, 1
    for step, i, j, cell in answer_cells(wb, answers, path):
        cell.value = float(answers[step][i, j])
        bottom, right = max(bottom, cell.row), max(right, cell.column)
    ws = wb[find_name(wb, next(iter(answers)), path).sheet]
    ws["A1"] = ArrayFormula(f"A1:{cell_ref(bottom, right)}", "=0")
    book = tmp_path / f"{kind}_s1.xlsx"
    wb.save(book)
    cells = cells_of(exercise)
    grade = graded(exercise, book, "formulas")
    assert (grade.correct, grade.typed, grade.formulas) == (0, cells, 0)
    assert {r: len(c) for r, c in grade.forged.items()} == {COPIED: cells}
    typed_class = graded(exercise, book, "values")  # typed numbers, as typed numbers do
    assert (typed_class.correct, typed_class.typed, typed_class.forged) == (cells, cells, {})


def test_an_honest_file_with_formulas_keeps_full_marks(exercise, tmp_path):
    book = honest(exercise, tmp_path / f"{exercise[0]}_s1.xlsx")
    cells = cells_of(exercise)
    for answers in ("formulas", "either", "values"):
        grade = graded(exercise, book, answers)
        assert (grade.correct, grade.total, grade.formulas, grade.typed, grade.forged,
                grade.changes) == (cells, cells, cells, 0, {}, []), answers


def test_typed_numbers_keep_full_marks_in_a_class_that_takes_values(exercise, tmp_path):
    book = typed(exercise, tmp_path / f"{exercise[0]}_s1.xlsx")
    cells = cells_of(exercise)
    for answers in ("values", "either"):
        grade = graded(exercise, book, answers)
        assert (grade.correct, grade.typed, grade.formulas, grade.forged) == \
            (cells, cells, 0, {}), answers
    strict = graded(exercise, book, "formulas")
    assert strict.correct == 0 and {r: len(c) for r, c in strict.forged.items()} == \
        {COPIED: cells}


def test_a_formula_right_only_for_the_recorded_inputs_is_named(exercise, tmp_path):
    """A formula that reads an input but adds the answer typed on top (`=answer+0*X`)
    gives the answer for the recorded inputs only."""
    kind, _, path, answers = exercise
    wb = openpyxl.load_workbook(path)
    first_input = next(iter(KINDS[kind].input_shapes(
        make_params(KINDS[kind], EXERCISES[kind][1]))))
    where = find_name(wb, first_input, path)
    anchor = cell_ref(where.top, where.left, True, True)
    book = forge(exercise, tmp_path / f"{kind}_s1.xlsx",
                 lambda s, i, j, cell, a: f"={a!r}+0*{anchor}")
    grade = graded(exercise, book, "either")
    assert grade.correct == 0 and {r: len(c) for r, c in grade.forged.items()} == \
        {COPIED: cells_of(exercise)}
    assert graded(exercise, book, "values").correct == cells_of(exercise)


def test_grades_csv_counts_each_kind_of_answer(exercise, tmp_path):
    kind, out, _, _ = exercise
    returned = tmp_path / "returned"
    returned.mkdir()
    honest(exercise, returned / f"{kind}_s1.xlsx")
    formula, cached, _ = FORGERIES["key"]
    forge(exercise, returned / f"{kind}_s2.xlsx", formula, cached)  # s2's name, s1's inputs
    grades = tmp_path / "grades.csv"
    ran = cli("grade", returned, "--manifest", out, "--out", grades, "--answers", "formulas")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    rows = {r["student"]: r for r in csv.DictReader(grades.open(encoding="utf-8"))}
    cells = str(cells_of(exercise))
    assert [rows["s1"][c] for c in ("formula answers", "typed values", COPIED, READS_KEY,
                                    READS_FILE, "answers taken", "score")] == \
        [cells, "0", "0", "0", "0", "formulas", "100.0"]
    assert [rows["s2"][c] for c in ("formula answers", READS_KEY, "score")] == \
        ["0", cells, "0.0"]
    assert f"{READS_KEY}: {cells} cell(s) scored 0" in rows["s2"]["problem"]
    assert f"{READS_KEY}: {cells} cell(s) scored 0" in ran.stderr


def test_class_records_the_answers_it_takes(tmp_path):
    out = make_class(tmp_path, "attention", "--answers", "values", "--no-self-check")
    [entry, _] = json.loads((out / "manifest.json").read_text())["students"]
    assert entry["answers"] == "values"
    ran = cli("class", "attention", "--roster", tmp_path / "roster.csv", "--out",
              tmp_path / "big", "--exercise", "WEIGHTS,OUTPUT", "--seq-len", "8")
    assert ran.returncode == 0, ran.stderr
    big = json.loads((tmp_path / "big" / "manifest.json").read_text())["students"][0]
    assert big["answers"] == "formulas"  # 8×8 + 8×4 answer cells: more than paper takes
    assert "grade takes formulas only" in ran.stdout


def answer_texts(answers: dict[str, np.ndarray]) -> set[str]:
    """Each answer as any application writes it (shortest repr, 15 and 17 significant
    digits), leaving out numbers an input or a label could hold as well."""
    texts = set()
    for block in answers.values():
        for x in block.ravel():
            if abs(x) < 1e-3 or float(x).is_integer() or abs(x - 0.5) < 1e-9:
                continue
            texts |= {repr(float(x)), f"{x:.15g}", f"{x:.17g}"}
    return texts


def zip_parts(path: Path) -> str:
    with zipfile.ZipFile(path) as book:
        return "\n".join(book.read(name).decode("utf-8", "replace")
                         for name in book.namelist())


def test_a_class_written_without_the_key_holds_no_answer_in_any_part(tmp_path):
    """With --no-self-check no part of the student's file (sheets, shared strings, names,
    charts, properties) holds an answer; with self-checks the key's answers are there."""
    out = make_class(tmp_path, "attention", "--answers", "values", "--no-self-check")
    _, values, steps = EXERCISES["attention"]
    kind = KINDS["attention"]
    params = make_params(kind, values)
    for entry in json.loads((out / "manifest.json").read_text())["students"]:
        answers = kind.reference(complete_inputs(kind, params, {}, entry["seed"]), params)
        texts = answer_texts({s: np.asarray(answers[s], float) for s in steps})
        assert len(texts) > 10
        exercise_parts = zip_parts(out / entry["file"])
        assert KEY_SHEET not in openpyxl.load_workbook(out / entry["file"]).sheetnames
        assert [t for t in texts if t in exercise_parts] == []
        assert [t for t in texts if t in zip_parts(out / entry["key_file"])]  # the key has
    (tmp_path / "keyed").mkdir()
    keyed = make_class(tmp_path / "keyed", "attention")
    entry = json.loads((keyed / "manifest.json").read_text())["students"][0]
    answers = kind.reference(complete_inputs(kind, params, {}, entry["seed"]), params)
    texts = answer_texts({s: np.asarray(answers[s], float) for s in steps})
    assert [t for t in texts if t in zip_parts(keyed / entry["file"])]  # the self-checks'


@requires_libreoffice
def test_an_honest_file_saved_by_libreoffice_keeps_full_marks(exercise, tmp_path):
    from workbook_builder.engines.libreoffice import convert

    (tmp_path / "in").mkdir()
    book = honest(exercise, tmp_path / "in" / f"{exercise[0]}_s1.xlsx")
    saved = convert(book, "xlsx", tmp_path / "saved")
    cells = cells_of(exercise)
    grade = graded(exercise, saved, "formulas")
    assert (grade.correct, grade.formulas, grade.forged, grade.problem) == \
        (cells, cells, {}, "")


@requires_gnumeric
def test_an_honest_file_saved_by_gnumeric_keeps_full_marks(exercise, tmp_path):
    from workbook_builder.engines.gnumeric import recalculate

    book = honest(exercise, tmp_path / "in.xlsx")
    saved = recalculate(book, tmp_path / f"{exercise[0]}_s1.xlsx")
    cells = cells_of(exercise)
    grade = graded(exercise, saved, "formulas")
    assert (grade.correct, grade.formulas, grade.forged, grade.problem) == \
        (cells, cells, {}, "")


def test_a_formula_reading_the_key_through_other_cells_or_names_is_named(exercise, tmp_path):
    """The key read through a scratch cell on the sheet, a defined name, or a hidden sheet
    the student added (holding the answers typed): each answer formula reads the key."""
    kind, _, path, answers = exercise
    cells = cells_of(exercise)
    wb = openpyxl.load_workbook(path)
    scratch_col = wb[find_name(wb, next(iter(answers)), path).sheet].max_column + 2
    hidden = wb.create_sheet("Notes")
    hidden.sheet_state = "hidden"
    n = 0
    for step, i, j, cell in answer_cells(wb, answers, path):
        n += 1
        ws = cell.parent
        scratch = ws.cell(n, scratch_col)  # =Key!…, read by the answer
        scratch.value = f"={KEY_SHEET}!{cell.coordinate}*1"
        hidden.cell(n, 1).value = float(answers[step][i, j])
        cell.value = {0: f"={scratch.coordinate}",
                      1: f"=Notes!A{n}",
                      2: f"=KEYCOPY_{n}"}[n % 3]
        wb.defined_names[f"KEYCOPY_{n}"] = openpyxl.workbook.defined_name.DefinedName(
            f"KEYCOPY_{n}", attr_text=f"'{KEY_SHEET}'!${cell.column_letter}${cell.row}")
    book = tmp_path / f"{kind}_s1.xlsx"
    wb.save(book)
    grade = graded(exercise, book, "either")
    assert grade.correct == 0 and {r: len(c) for r, c in grade.forged.items()} == \
        {READS_KEY: cells}
    assert "sheet 'Notes' added" in " ".join(grade.changes)


def test_an_honest_file_of_array_formulas_keeps_full_marks(tmp_path):
    """The blocks layout: one array formula over each answer block, as its key has it."""
    out = make_class(tmp_path, "attention", "--layout", "blocks")
    entry = json.loads((out / "manifest.json").read_text())["students"][0]
    wb = openpyxl.load_workbook(out / entry["file"])
    key = wb[KEY_SHEET]
    for step in EXERCISES["attention"][2]:
        where = find_name(wb, step, out)
        formula = key.cell(where.top, where.left).value
        assert isinstance(formula, ArrayFormula)
        ref = f"{cell_ref(where.top, where.left)}:{cell_ref(where.bottom, where.right)}"
        wb[where.sheet][cell_ref(where.top, where.left)] = ArrayFormula(ref, formula.text)
    book = tmp_path / entry["file"]
    wb.save(book)
    grade = api.grade_file(book, None, api.read_record(out), "formulas")
    assert (grade.correct, grade.total, grade.formulas, grade.forged) == (15, 15, 15, {})


def test_answers_and_engine_flags_that_cannot_apply_are_one_line(exercise, tmp_path):
    _, out, path, _ = exercise
    for args, says in [(("--answers", "formulas"), "--answers needs --manifest"),
                       (("--manifest", out, "--engine", "libreoffice"),
                        "cannot grade with --manifest")]:
        ran = cli("grade", path, *args)
        assert ran.returncode == 2 and says in ran.stderr
        assert len(ran.stderr.strip().splitlines()) == 1


def test_a_formula_the_engine_cannot_read_scores_0_and_the_rest_is_graded(exercise,
                                                                          tmp_path):
    kind = exercise[0]
    book = honest(exercise, tmp_path / f"{kind}_s1.xlsx")
    wb = openpyxl.load_workbook(book)
    *_, (_, _, _, last) = answer_cells(wb, exercise[3], book)  # no answer reads it
    last.value = "=1+"
    wb.save(book)
    grade = graded(exercise, book, "formulas")
    assert (grade.problem, grade.correct, grade.total) == ("", cells_of(exercise) - 1,
                                                           cells_of(exercise))


@pytest.mark.parametrize("order", [("C1", "D1", "E1"), ("E1", "D1", "C1"), ("D1", "E1", "C1")])
def test_a_formula_is_followed_through_every_path_to_the_key(order):
    """Diamonds of references, the key at the far end of one path: whatever the cells'
    places, the answer reads the key, and a cell on a cycle adds nothing."""
    from workbook_builder.sheet.names import NamedRange
    from workbook_builder.teaching.answers import AnswerReader

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet"
    wb.create_sheet(KEY_SHEET).sheet_state = "veryHidden"
    first, second, third = order
    ws["A1"] = 1.0  # the input
    ws["B1"] = f"={first}+{second}"  # the answer
    ws[first] = f"={second}*{third}"
    ws[second] = f"={third}+A1"
    ws[third] = f"='{KEY_SHEET}'!A1"
    ws["F1"] = "=G1+A1"  # a cycle reading the input
    ws["G1"] = "=F1"
    ws["H1"] = "=F1"
    inputs = [NamedRange("X", "Sheet", 1, 1, 1, 1)]
    reader = AnswerReader(wb, KEY_SHEET, inputs, [NamedRange("A", "Sheet", 1, 2, 1, 2)])
    assert reader.follow("Sheet", 1, 2) == (READS_KEY, True)
    assert reader.follow("Sheet", 1, 8) == (None, True)


def test_a_formula_reading_a_deleted_key_is_named(exercise, tmp_path):
    """Answer formulas reading the key (its name in lower case), the key sheet deleted
    since: what they were written to read is still the key."""
    formula, _, _ = FORGERIES["key"]
    book = forge(exercise, tmp_path / "raw.xlsx", lambda s, i, j, cell, a:
                 formula(s, i, j, cell, a).replace(f"'{KEY_SHEET}'", KEY_SHEET.lower()))
    wb = openpyxl.load_workbook(book)
    del wb[KEY_SHEET]
    wb.save(book)
    grade = graded(exercise, book, "either")
    assert grade.correct == 0 and grade.forged.keys() == {READS_KEY}


def test_typed_first_step_and_formulas_after_it_keep_full_marks(exercise, tmp_path):
    """The first step typed (computed on paper), the second as formulas reading it: in the
    fresh sets the typed numbers stand for the right ones, so the formulas are judged on
    their own."""
    kind, _, path, answers = exercise
    key = openpyxl.load_workbook(path)[KEY_SHEET]
    first, second = answers
    book = forge(exercise, tmp_path / f"{kind}_s1.xlsx",
                 lambda s, i, j, cell, a: a if s == first else
                 key.cell(cell.row, cell.column).value)
    grade = graded(exercise, book, "either")
    assert (grade.correct, grade.typed, grade.formulas, grade.forged) == \
        (cells_of(exercise), answers[first].size, answers[second].size, {})
