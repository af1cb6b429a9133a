"""Hostile files that once cost data or a fair grade: `class --force` onto a folder, defined
names re-pointed at hidden sheets, numbers typed into date cells, and one student's work
handed in more than once. Each file is made here, from a tiny class or workbook."""

import csv
import json
import re
import zipfile
from pathlib import Path

import openpyxl
import pytest
from helpers.books import KINDS, book_in_memory, fill
from helpers.cli import cli, one_line_error
from helpers.requires import requires_gnumeric, requires_libreoffice

from workbook_builder import api
from workbook_builder.book.workbook import read_spec, spec_request
from workbook_builder.sheet.block import Block
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.request import ExerciseSpec

SIZES = ("--seq-len", "3", "--d-model", "2", "--d-k", "2")
PARAMS = {"seq_len": 3, "d_model": 2, "d_k": 2}
STEPS = ["WEIGHTS", "OUTPUT"]
ENGINES = [pytest.param(None, id="saved-values"),
           pytest.param("formulas", id="formulas"),
           pytest.param("libreoffice", id="libreoffice", marks=requires_libreoffice),
           pytest.param("gnumeric", id="gnumeric", marks=requires_gnumeric)]


def write_roster(folder: Path, ids) -> Path:
    path = folder / "roster.csv"
    path.write_text("id,name\n" + "".join(f"{s},Name {s}\n" for s in ids), encoding="utf-8")
    return path


def make_class(tmp_path: Path, ids, *extra):
    out = tmp_path / "class"
    ran = cli("class", "attention", "--roster", write_roster(tmp_path, ids), "--out", out,
              "--exercise", ",".join(STEPS), *SIZES, *extra)
    return ran, out


def answers_of(out: Path, student: str) -> dict:
    seed = next(s["seed"] for s in json.loads((out / "manifest.json").read_text())["students"]
                if s["student"] == student)
    kind = KINDS["attention"]
    params = make_params(kind, PARAMS)
    return kind.reference(complete_inputs(kind, params, {}, seed), params)


def rows_of(path: Path) -> dict[str, dict]:
    return {Path(r["file"]).name: r for r in csv.DictReader(path.open(encoding="utf-8"))}


def edit_part(path: Path, part: str, edit) -> Path:
    """Rewrite one part of the .xlsx zip in place (`edit`: text -> text)."""
    with zipfile.ZipFile(path) as book:
        items = [(info, book.read(info)) for info in book.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as book:
        for info, data in items:
            if info.filename == part:
                data = edit(data.decode("utf-8")).encode("utf-8")
            book.writestr(info, data)
    return path


def repoint(xml: str, name: str, sheet: str) -> str:
    """The defined name `name` pointed at the same cells of `sheet`."""
    return re.sub(rf'(<definedName name="{name}">)\'[^\']+\'!', rf"\1'{sheet}'!", xml)


# -- data loss ---------------------------------------------------------------------------------

def test_class_force_never_deletes_a_folder_named_like_its_files(tmp_path):
    ran, out = make_class(tmp_path, ["s01"])
    assert ran.returncode == 0, ran.stderr
    (out / "attention_s01.xlsx").unlink()
    (out / "attention_s01.xlsx").mkdir()
    notes = out / "attention_s01.xlsx" / "notes.txt"
    notes.write_text("mine")
    ran, _ = make_class(tmp_path, ["s01"], "--force")
    assert "is a folder" in one_line_error(ran) and "never" in ran.stderr
    assert notes.read_text() == "mine"
    assert (out / "attention_s01_key.xlsx").is_file()  # nothing else touched either


def test_class_force_never_replaces_a_link_or_a_fifo(tmp_path):
    ran, out = make_class(tmp_path, ["s01"])
    assert ran.returncode == 0, ran.stderr
    precious = tmp_path / "precious.csv"
    precious.write_text("mine")
    (out / "manifest.csv").unlink()
    (out / "manifest.csv").symlink_to(precious)
    assert "not a regular file" in one_line_error(make_class(tmp_path, ["s01"], "--force")[0])
    assert (out / "manifest.csv").is_symlink() and precious.read_text() == "mine"


# -- a grade that matches the cells on screen --------------------------------------------------

@pytest.fixture(scope="module")
def one_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    ran, out = make_class(folder, ["a1", "b2"])
    assert ran.returncode == 0, ran.stderr
    return out


@pytest.mark.parametrize("engine", ENGINES[:2])  # with --manifest: the formulas engine
def test_names_repointed_at_the_hidden_key_score_zero(one_class, tmp_path, engine):
    """The exercise returned untouched (#N/A on screen), WEIGHTS and OUTPUT pointed at the
    same cells of the hidden Key sheet, which holds the right answers."""
    returned = tmp_path / "attention_a1.xlsx"
    returned.write_bytes((one_class / "attention_a1.xlsx").read_bytes())
    edit_part(returned, "xl/workbook.xml",
              lambda xml: repoint(repoint(xml, "WEIGHTS", "Key"), "OUTPUT", "Key"))
    grades = tmp_path / "grades.csv"
    ran = cli("grade", returned, "--manifest", one_class, "--out", grades,
              *(["--engine", engine] if engine else []))
    assert ran.returncode == 1, ran.stdout + ran.stderr
    row = rows_of(grades)["attention_a1.xlsx"]
    print(row)
    assert (row["WEIGHTS"], row["OUTPUT"], row["score"]) == ("0/9", "0/6", "0.0")
    assert "WEIGHTS" in row["problem"] and "'Key'" in row["problem"]
    assert "1 file(s) differ" in ran.stdout


@pytest.mark.parametrize("engine", ENGINES[1:])
def test_a_very_hidden_copy_behind_the_names_fails_the_check(tmp_path, engine):
    """A very-hidden copy of the sheet computes the right numbers; the step names point at
    it while the visible OUTPUT is multiplied by 100."""
    book = tmp_path / "book.xlsx"
    api.build("attention", book, **PARAMS)
    wb = openpyxl.load_workbook(book)
    visible = wb["Attention"]
    copy = wb.copy_worksheet(visible)
    copy.title, copy.sheet_state = "Shadow", "veryHidden"
    for name in KINDS["attention"].step_names(make_params(KINDS["attention"], PARAMS)):
        wb.defined_names[name].attr_text = wb.defined_names[name].attr_text.replace(
            "'Attention'!", "'Shadow'!")
    output = find_name(wb, "OUTPUT", book)
    for i in range(output.shape[0]):
        for j in range(output.shape[1]):
            cell = visible.cell(output.top + i, output.left + j)
            cell.value = f"=100*({cell.value[1:]})"
    wb.save(book)
    ran = cli("check", book, "--engine", engine)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "Shadow" in ran.stdout and "all 10 steps pass" not in ran.stdout
    report = api.check(book, engine=engine)
    failed = {s.name: s.problem for s in report.steps if not s.passed}
    print(failed)
    assert "OUTPUT" in failed and "'Shadow'" in failed["OUTPUT"]
    assert any("sheet 'Shadow' added" in p for p in failed.values())


def test_a_sheet_added_or_made_hidden_fails_the_check(tmp_path):
    book = tmp_path / "book.xlsx"
    api.build("attention", book, **PARAMS)
    wb = openpyxl.load_workbook(book)
    wb.create_sheet("Notes")
    wb["About"].sheet_state = "hidden"
    wb.save(book)
    report = api.check(book)
    problems = " ".join(s.problem for s in report.steps if not s.passed)
    assert not report.passed
    assert "sheet 'Notes' added" in problems and "sheet 'About' is hidden" in problems


def test_a_step_named_anywhere_else_fails_the_check_and_scores_zero(one_class, tmp_path):
    """SCORES named one row lower on the visible sheet (check); WEIGHTS named one column
    right in an exercise (grade)."""
    book = tmp_path / "book.xlsx"
    api.build("attention", book, **PARAMS)
    wb = openpyxl.load_workbook(book)
    where = find_name(wb, "SCORES", book)
    moved = Block("SCORES", where.sheet, where.top + 1, where.left, *where.shape)
    wb.defined_names["SCORES"].attr_text = moved.address()
    wb.save(book)
    report = api.check(book)
    failed = {s.name: s.problem for s in report.steps if not s.passed}
    assert list(failed) == ["SCORES"] and "the layout puts it at" in failed["SCORES"]

    answered = fill(one_class / "attention_a1.xlsx", answers_of(one_class, "a1"), STEPS,
                    tmp_path / "attention_a1.xlsx")
    wb = openpyxl.load_workbook(answered)
    where = find_name(wb, "WEIGHTS", answered)
    moved = Block("WEIGHTS", where.sheet, where.top, where.left + 1, *where.shape)
    wb.defined_names["WEIGHTS"].attr_text = moved.address()
    wb.save(answered)
    grade = api.grade_file(answered, None, api.read_record(one_class))
    assert grade.steps == {"WEIGHTS": (0, 9), "OUTPUT": (6, 6)}
    assert any("WEIGHTS" in change for change in grade.changes)


@pytest.mark.slow  # every kind and layout; the tests above catch misplaced names in small
@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_the_planned_places_are_where_the_writer_puts_every_name(tmp_path, kind_name):
    """The placement `check` and `grade` trust, against what the writer names, for a
    kind's first two test cases (compact sheets and not) in every layout, as an exercise
    (its CHECK_ cells too) with long row labels."""
    from workbook_builder.sheet.limits import planned_places

    kind = KINDS[kind_name]
    for case in kind.test_cases[:2]:
        params = make_params(kind, case)
        inputs = complete_inputs(kind, params, {}, 0)
        labels = [f"{label}, a long token" for label in kind.labels(params, None)]
        exercise = ExerciseSpec(tuple(kind.step_names(params)[-1:]))
        for layout in ("cells", "blocks", "hand"):
            try:
                wb = book_in_memory(kind, params, inputs, labels, layout, exercise=exercise)
            except Exception as exc:  # the hand layout refuses sizes beyond teaching
                assert layout == "hand", exc
                continue
            planned = planned_places(spec_request(read_spec(wb, tmp_path)))
            named = {n: find_name(wb, n, tmp_path) for n in wb.defined_names}
            assert {n: (p.sheet, p.top, p.left, p.bottom, p.right)
                    for n, p in named.items()} == \
                {n: (p.sheet, p.top, p.left, p.bottom, p.right)
                 for n, p in planned.items()}, (case, layout)


# -- numbers in date cells -----------------------------------------------------------------------

def test_answers_typed_into_date_cells_are_numbers(one_class, tmp_path):
    answered = fill(one_class / "attention_a1.xlsx", answers_of(one_class, "a1"), STEPS,
                    tmp_path / "attention_a1.xlsx")
    wb = openpyxl.load_workbook(answered)
    for step, style in zip(STEPS, ("yyyy-mm-dd", "h:mm:ss"), strict=True):
        where = find_name(wb, step, answered)
        for row in wb[where.sheet].iter_rows(where.top, where.bottom, where.left,
                                             where.right):
            for cell in row:
                cell.number_format = style
    wb.save(answered)
    grades = tmp_path / "grades.csv"
    ran = cli("grade", answered, "--manifest", one_class, "--out", grades)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    row = rows_of(grades)["attention_a1.xlsx"]
    assert (row["WEIGHTS"], row["OUTPUT"], row["score"]) == ("9/9", "6/6", "100.0")


def test_inputs_in_date_cells_are_numbers_for_check(tmp_path):
    book = tmp_path / "book.xlsx"
    api.build("attention", book, **PARAMS)
    wb = openpyxl.load_workbook(book)
    where = find_name(wb, "X", book)
    for row in wb[where.sheet].iter_rows(where.top, where.bottom, where.left, where.right):
        for cell in row:
            cell.number_format = "dd/mm/yyyy hh:mm"
    wb.save(book)
    ran = cli("check", book)
    assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.mark.parametrize("shortcuts", [True, False])
def test_both_readers_give_date_cells_as_numbers(tmp_path, monkeypatch, shortcuts):
    """openpyxl 3.1's reader told not to convert, and the public path converting back."""
    from workbook_builder.xlsx import of_openpyxl

    numbers = [0.25, -1.5, 43000.123456789, 2.0, 59.5, 61.0]
    wb = openpyxl.Workbook()
    for row, (value, style) in enumerate(zip(numbers, ["h:mm", "yyyy-mm-dd", "dd/mm/yy hh:mm",
                                                      "[h]:mm:ss", "d-mmm", "m/d/yy"],
                                             strict=True), start=1):
        wb.active.cell(row, 1, value).number_format = style
    wb.save(tmp_path / "dates.xlsx")
    monkeypatch.setattr(of_openpyxl, "openpyxl_shortcuts", lambda given=None: shortcuts)
    ws = of_openpyxl.load_workbook(tmp_path / "dates.xlsx").active
    got = [ws.cell(row, 1).value for row in range(1, len(numbers) + 1)]
    assert all(isinstance(x, float | int) for x in got), got
    # exact from the file; to openpyxl's millisecond on the public path
    assert got == pytest.approx(numbers, rel=0, abs=0 if shortcuts else 1e-8)


# -- one student, several files -------------------------------------------------------------------

def test_one_file_given_three_times_is_one_row_counted_once(one_class, tmp_path):
    answered = fill(one_class / "attention_a1.xlsx", answers_of(one_class, "a1"), STEPS,
                    tmp_path / "attention_a1.xlsx")
    other = tmp_path / "b" / "attention_b2.xlsx"
    other.parent.mkdir()
    other.write_bytes((one_class / "attention_b2.xlsx").read_bytes())  # nothing answered
    grades = tmp_path / "grades.csv"
    ran = cli("grade", answered, answered, tmp_path, other, "--manifest", one_class,
              "--out", grades)
    assert list(csv.DictReader(grades.open())).__len__() == 2
    assert "given 3 times" in ran.stderr
    assert "graded 2 of 2 files" in ran.stdout
    assert "mean score 50.0% over returned files" in ran.stdout
    assert "full marks 1" in ran.stdout


def test_the_same_student_in_two_files_is_named_and_counted_once(one_class, tmp_path):
    first = fill(one_class / "attention_a1.xlsx", answers_of(one_class, "a1"), STEPS,
                 tmp_path / "attention_a1.xlsx")
    second = tmp_path / "resubmitted" / "homework (1).xlsx"
    second.parent.mkdir()
    second.write_bytes(first.read_bytes())
    other = tmp_path / "attention_b2.xlsx"
    other.write_bytes((one_class / "attention_b2.xlsx").read_bytes())
    grades = tmp_path / "grades.csv"
    ran = cli("grade", tmp_path, "--manifest", one_class, "--out", grades)
    rows = rows_of(grades)
    assert len(rows) == 3
    assert "same student a1 as" in rows["homework (1).xlsx"]["problem"]
    assert "homework (1).xlsx" in ran.stderr and "same student a1" in ran.stderr
    assert "also returned" in rows["attention_a1.xlsx"]["problem"]  # both files flagged
    assert "graded 3 of 3 files (2 students)" in ran.stdout
    assert "mean score 50.0% over returned files" in ran.stdout
    assert "full marks 1" in ran.stdout
