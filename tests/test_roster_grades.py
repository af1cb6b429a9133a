"""`grade --manifest` as a gradebook: a row for every student of the roster, means over the
returned files and over the roster, typed values counted, a copy named on both files, and
a student's two files flagged on both."""

import csv
import json
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, fill
from helpers.cli import cli

from workbook_builder import api
from workbook_builder.sheet.exercise import KEY_SHEET
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name

SIZES = ("--seq-len", "3", "--d-model", "2", "--d-k", "2")
PARAMS = {"seq_len": 3, "d_model": 2, "d_k": 2}
STEPS = ["WEIGHTS", "OUTPUT"]
TOLERANCE = 0.001  # the default of `class --exercise`
ROSTER = {"a1": "Ann Lee", "b2": "Bo Li", "c3": "Cy Ng", "d4": "张三", "e5": "Eve Roe"}


def answers_of(out: Path, student: str) -> dict[str, np.ndarray]:
    """The reference answers for the inputs `class` drew for `student`."""
    seed = next(s["seed"] for s in json.loads((out / "manifest.json").read_text())["students"]
                if s["student"] == student)
    kind = KINDS["attention"]
    params = make_params(kind, PARAMS)
    return kind.reference(complete_inputs(kind, params, {}, seed), params)


def answer_with_formulas(out: Path, student: str, target: Path) -> Path:
    """The exercise answered as a student who computes: each answer cell holds the formula
    the exercise's hidden key has there (the key lays every block where the sheet has it,
    so the formula reads the sheet's earlier steps)."""
    wb = openpyxl.load_workbook(out / f"attention_{student}.xlsx")
    key = wb[KEY_SHEET]
    for step in STEPS:
        where = find_name(wb, step, target)
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                formula = key.cell(where.top + i, where.left + j).value
                assert isinstance(formula, str) and formula.startswith("=")
                wb[where.sheet].cell(where.top + i, where.left + j).value = formula
    wb.save(target)
    return target


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    """A roster of 5: a1 computes with formulas, b2 types the numbers, c3 hands in a1's
    file under its own name, d4 and e5 return nothing."""
    folder = tmp_path_factory.mktemp("five")
    roster = folder / "roster.csv"
    roster.write_text("id,name\n" + "".join(f"{s},{n}\n" for s, n in ROSTER.items()),
                      encoding="utf-8")
    out = folder / "class"
    ran = cli("class", "attention", "--roster", roster, "--out", out,
              "--exercise", ",".join(STEPS), *SIZES)
    assert ran.returncode == 0, ran.stderr
    returned = folder / "returned"
    returned.mkdir()
    answer_with_formulas(out, "a1", returned / "attention_a1.xlsx")
    fill(out / "attention_b2.xlsx", answers_of(out, "b2"), STEPS,
         returned / "attention_b2.xlsx")
    (returned / "attention_c3.xlsx").write_bytes((returned / "attention_a1.xlsx").read_bytes())
    grades = folder / "grades.csv"
    ran = cli("grade", returned, "--manifest", out, "--out", grades)
    return out, ran, list(csv.DictReader(grades.open(encoding="utf-8")))


def test_every_roster_student_has_a_row_in_roster_order(five):
    _, ran, rows = five
    print(ran.stdout, ran.stderr)
    assert [(r["student"], r["name"]) for r in rows] == list(ROSTER.items())
    missing = [r for r in rows if r["problem"] == "not returned"]
    assert [r["student"] for r in missing] == ["d4", "e5"]
    assert all(r["file"] == r["score"] == r["WEIGHTS"] == "" for r in missing)
    lines = ran.stdout.splitlines()[1:6]
    assert [line.split()[0] for line in lines] == list(ROSTER)
    assert lines[3].startswith("d4  张三     not returned")  # names aligned in columns
    assert lines[4].startswith("e5  Eve Roe  not returned")
    assert ran.returncode == 1  # c3's copy differs from the record; the missing do not fail


def test_typed_numbers_are_counted_and_scored_as_the_readme_says(five):
    _, ran, rows = five
    by_student = {r["student"]: r for r in rows}
    cells = sum(int(t) for t in by_student["a1"]["total"].split("/"))
    assert (by_student["a1"]["typed values"], by_student["a1"]["score"]) == ("0", "100.0")
    assert (by_student["b2"]["typed values"], by_student["b2"]["score"]) == \
        (str(cells), "100.0")
    assert by_student["c3"]["typed values"] == "0"
    assert by_student["d4"]["typed values"] == ""
    b2_line = next(line for line in ran.stdout.splitlines() if line.startswith("b2"))
    assert f"typed values {cells}/{cells}" in b2_line
    assert "typed values" not in next(line for line in ran.stdout.splitlines()
                                      if line.startswith("a1"))
    assert "typed values in 1 file(s)" in ran.stdout


def test_a_copy_is_named_on_both_files(five):
    out, ran, rows = five
    by_student = {r["student"]: r for r in rows}
    copy, original = by_student["c3"], by_student["a1"]
    assert "inputs are those of student a1" in copy["problem"]
    assert original["problem"] == f"inputs copied into {copy['file']} (student c3)"
    assert f"inputs copied into {copy['file']}" in ran.stderr
    # the copy's cached values are a1's answers, but its formulas are recalculated on
    # c3's recorded inputs: they give c3's answers (the copy is named on both files)
    a1, c3 = answers_of(out, "a1"), answers_of(out, "c3")
    assert sum(int(np.sum(np.abs(a1[s] - c3[s]) <= TOLERANCE)) for s in STEPS) < 15
    assert (copy["correct"], copy["formula answers"]) == (copy["total"], copy["total"])


def test_the_summary_gives_the_mean_over_returned_files_and_over_the_roster(five):
    _, ran, rows = five
    scores = [float(r["score"]) for r in rows if r["score"]]
    assert len(scores) == 3
    summary = ran.stdout.splitlines()[-1]
    assert f"mean score {sum(scores) / 3:.1f}% over returned files" in summary
    assert f"{sum(scores) / 5:.1f}% over the roster of 5 (2 not returned" in summary
    assert "graded 3 of 3 files" in summary and "full marks 3" in summary


def test_one_students_two_files_are_flagged_on_both_and_counted_once(five, tmp_path):
    out, _, _ = five
    first = answer_with_formulas(out, "a1", tmp_path / "attention_a1.xlsx")
    second = tmp_path / "later" / "attention_a1.xlsx"
    second.parent.mkdir()
    second.write_bytes((out / "attention_a1.xlsx").read_bytes())  # nothing answered
    grades = tmp_path / "grades.csv"
    ran = cli("grade", first, second, "--manifest", out, "--out", grades)
    rows = {r["file"]: r for r in csv.DictReader(grades.open(encoding="utf-8"))}
    assert rows[str(first)]["problem"] == f"student a1 also returned {second}; this file " \
                                          f"is counted"
    assert rows[str(second)]["problem"] == f"same student a1 as {first}; not counted (that " \
                                           f"file is)"
    summary = ran.stdout.splitlines()[-1]
    assert "graded 2 of 2 files (1 students); mean score 100.0% over returned files, " \
           "20.0% over the roster of 5 (4 not returned" in summary


def test_without_a_manifest_one_students_two_files_give_a_warning(five, tmp_path):
    out, _, _ = five
    first = answer_with_formulas(out, "b2", tmp_path / "attention_b2.xlsx")
    second = tmp_path / "copy of my homework.xlsx"
    second.write_bytes(first.read_bytes())
    ran = cli("grade", first, second)
    assert ran.returncode == 0, ran.stderr
    assert f"attnsheets: warning: {second}: same student b2 as {first}" in ran.stderr
    assert f"attnsheets: warning: {first}: student b2 also returned {second}" in ran.stderr
    assert "graded 2 of 2 files (1 students)" in ran.stdout
    assert "over the roster" not in ran.stdout and "NOT VERIFIED" in ran.stdout


def test_a_formula_of_numbers_only_counts_as_typed_a_formula_reading_cells_does_not(five,
                                                                                     tmp_path):
    out, _, _ = five
    answers = answers_of(out, "a1")
    book = answer_with_formulas(out, "a1", tmp_path / "attention_a1.xlsx")
    wb = openpyxl.load_workbook(book)
    weights, output = find_name(wb, "WEIGHTS", book), find_name(wb, "OUTPUT", book)
    for j in range(3):  # "=0.3125": a number in the guise of a formula
        wb[weights.sheet].cell(weights.top, weights.left + j).value = \
            f"={float(answers['WEIGHTS'][0, j])!r}"
    wb[output.sheet].cell(output.top, output.left).value = float(answers["OUTPUT"][0, 0])
    wb.save(book)
    grade = api.grade_file(book, None, api.read_record(out))
    assert (grade.typed, grade.correct, grade.total, grade.problem) == (4, 15, 15, "")
