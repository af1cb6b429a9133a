"""The teacher edition: Chinese sheets, exercises with live self-checks, per-student classes
and grading. Right answers always come from the NumPy reference, never from the workbook."""

import csv
import zipfile
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from helpers.books import (
    ATTENTION,
    KINDS,
    book_in_memory,
    exercise_book,
    fill,
    self_check,
    student_answers,
    write_book,
)
from helpers.cli import BUILD_ATTENTION, cli, one_line_error, refused_writing_nothing
from helpers.requires import requires_libreoffice
from helpers.sheets import CJK, english_prose, formulas_of, portability_problems

from workbook_builder.book.workbook import read_spec
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import convert, evaluate_with_libreoffice
from workbook_builder.language.i18n import Catalog
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name

# -- Chinese sheets --------------------------------------------------------------------------





DEMO_CASES = [(name, stem, values) for name, kind in sorted(KINDS.items())
              for stem, values in kind.demo_cases]


@pytest.mark.parametrize("kind_name,stem,values", DEMO_CASES,
                         ids=[stem for _, stem, _ in DEMO_CASES])
def test_chinese_sheets_leave_no_english_prose(kind_name, stem, values):
    kind = KINDS[kind_name]
    params = make_params(kind, values)
    inputs = complete_inputs(kind, params, {}, 0)
    tokens = kind.labels(params, None)
    english = book_in_memory(kind, params, inputs, tokens, "cells")
    wb = book_in_memory(kind, params, inputs, tokens, "cells", lang="zh")
    ws = wb[kind.sheet_title]
    leftovers, notes = [], 0
    for row in ws.iter_rows():
        for cell in row:
            texts = [cell.value] if isinstance(cell.value, str) else []
            if cell.comment is not None:
                texts.append(cell.comment.text)
                notes += 1
                assert CJK.search(cell.comment.text), cell.comment.text
            leftovers += [(cell.coordinate, t, english_prose(t)) for t in texts
                          if not t.startswith("=") and english_prose(t)]
    assert not leftovers, leftovers
    assert notes == sum(c.comment is not None for r in english[kind.sheet_title].iter_rows()
                        for c in r)  # every explanation survives translation
    about = wb["About"]
    assert CJK.search(about["A1"].value) and CJK.search(about["A2"].value)
    assert {about.cell(r, 1).value: about.cell(r, 2).value for r in range(4, 12)}["lang"] == "zh"


def test_chinese_attention_uses_the_tutorials_step_names(tmp_path):
    path = tmp_path / "zh.xlsx"
    write_book(KINDS["attention"], make_params(KINDS["attention"], {"seq_len": 3,
                   "d_model": 2, "d_k": 2}), path, tokens=["我", "爱", "AI"], lang="zh")
    ws = openpyxl.load_workbook(path)["Attention"]
    text = "\n".join(c.value for r in ws.iter_rows() for c in r if isinstance(c.value, str))
    for name in ("Step 2a：生成 Q、K、V", "Softmax 归一化", "加权求和", "词嵌入"):
        assert name in text
    assert {"我", "爱", "AI"} <= set(text.splitlines())  # token labels untouched
    report = check_workbook(path)  # the About keys stay readable
    assert report.passed, format_report(report)


def test_catalog_fills_template_slots_and_translates_what_they_captured():
    tr = Catalog("zh", {"Head {h} of {what}": "{what}的第 {h} 个头", "the keys": "键"},
                 keep=["max"])
    assert tr("Head 3 of the keys") == "键的第 3 个头"
    assert tr("Head 3 of lions") == "lions的第 3 个头"
    assert tr("max") == "max"  # a token label equal to a catalog entry stays
    assert tr("no entry here") == "no entry here"
    assert Catalog("en")("Head 3 of the keys") == "Head 3 of the keys"


# -- exercises -------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["cells", "blocks", "hand"])
@pytest.mark.parametrize("kind_name,values,steps", [
    ("attention", ATTENTION, ["WEIGHTS", "OUTPUT"]),
    ("multihead", {"seq_len": 3, "d_model": 4, "heads": 2, "causal": True},
     ["SCORES_H2", "CONCAT"]),
    ("ssm", {"seq_len": 3, "d_model": 2, "d_state": 2}, ["H"]),
])
def test_right_answers_score_full_and_one_wrong_cell_loses_exactly_one(
        tmp_path, kind_name, values, steps, layout):
    path, answers = exercise_book(tmp_path, kind_name, values, steps, layout)
    blank = self_check(path, evaluate_with_formulas(path), steps)
    assert all(count == 0 and set(marks) == {"✗"} for count, marks in blank.values())

    right = fill(path, answers, steps, tmp_path / "right.xlsx")
    values_right = evaluate_with_formulas(right)
    got = self_check(right, values_right, steps)
    for step in steps:
        assert got[step] == (answers[step].size, ["✓"] * answers[step].shape[0])
    # later steps work from the student's entries: the whole sheet equals the reference
    assert check_workbook(path).passed

    last = steps[-1]
    wrong_row = answers[last].shape[0] - 1
    wrong = fill(path, answers, steps, tmp_path / "wrong.xlsx",
                 lambda s, i, j, v: v + 0.01 if (s, i, j) == (last, wrong_row, 0) else v)
    got = self_check(wrong, evaluate_with_formulas(wrong), steps)
    count, marks = got[last]
    assert count == answers[last].size - 1
    assert marks == ["✓"] * wrong_row + ["✗"]
    for step in steps[:-1]:
        assert got[step][0] == answers[step].size


def test_self_check_counts_formulas_and_tolerance_but_not_text_blanks_or_errors(tmp_path):
    path, answers = exercise_book(tmp_path, "attention", ATTENTION, ["OUTPUT"],
                                  tolerance=0.01)
    edits = {(0, 0): lambda v: f"={v / 2!r}*2",        # a formula: right
             (0, 1): lambda v: v + 0.009,              # inside the tolerance: right
             (1, 0): lambda v: v + 0.011,              # outside: wrong
             (1, 1): lambda v: "about 0.5",            # text: wrong
             (2, 0): lambda v: None,                   # blank: wrong
             (2, 1): lambda v: "=1/0"}                 # an error value: wrong
    filled = fill(path, answers, ["OUTPUT"], tmp_path / "mixed.xlsx",
                  lambda s, i, j, v: edits[(i, j)](v))
    count, marks = self_check(filled, evaluate_with_formulas(filled), ["OUTPUT"])["OUTPUT"]
    assert count == 2 and marks == ["✓", "✗", "✗"]


@requires_libreoffice
def test_self_checks_work_in_libreoffice(tmp_path):
    steps = ["WEIGHTS", "OUTPUT"]
    path, answers = exercise_book(tmp_path, "attention", {**ATTENTION, "causal": True}, steps)
    right = fill(path, answers, steps, tmp_path / "right.xlsx")
    wrong = fill(path, answers, steps, tmp_path / "wrong.xlsx",
                 lambda s, i, j, v: v - 0.5 if (s, i, j) == ("WEIGHTS", 1, 0) else v)
    got = self_check(right, evaluate_with_libreoffice(right), steps)
    assert got == {"WEIGHTS": (9, ["✓"] * 3), "OUTPUT": (6, ["✓"] * 3)}
    got = self_check(wrong, evaluate_with_libreoffice(wrong), steps)
    assert got["WEIGHTS"] == (8, ["✓", "✗", "✓"])
    assert got["OUTPUT"][0] == 6  # answers come from the inputs, not carried forward


def test_exercise_cells_are_styled_inputs_holding_na_and_the_key_is_very_hidden(tmp_path):
    path, _ = exercise_book(tmp_path, "attention", ATTENTION, ["SCALED"])
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "SCALED", path)
    ws = wb[where.sheet]
    for i in range(where.shape[0]):
        for j in range(where.shape[1]):
            cell = ws.cell(where.top + i, where.left + j)
            assert (cell.value, cell.data_type) == ("#N/A", "e")  # an error value, not text
            assert cell.fill.fgColor.rgb.endswith("E2EFDA")  # the answer colour
            color = cell.font.color.rgb if cell.font.color is not None else None
            assert not (isinstance(color, str) and color.endswith("FFFFFF"))  # no white font
    assert wb["Key"].sheet_state == "veryHidden"
    names = {name: list(d.destinations) for name, d in wb.defined_names.items()}
    assert "CHECK_SCALED" in names and "SCALED" in names
    assert all(sheet != "Key" for dests in names.values() for sheet, _ in dests)


@pytest.mark.parametrize("layout", ["cells", "blocks", "hand"])
def test_exercise_formulas_are_portable(tmp_path, layout):
    path, _ = exercise_book(tmp_path, "flash", {"seq_len": 5, "d_model": 2, "d_k": 2,
                                                "block_size": 2, "causal": True},
                            ["M_B2", "OUTPUT", "MAX_ABS_DIFF"], layout)
    problems = [(where, text, p) for where, text, array in formulas_of(path)
                for p in portability_problems(text, array)]
    assert not problems, problems


def test_no_self_check_puts_no_answer_in_the_file(tmp_path):
    path, answers = exercise_book(tmp_path, "attention", ATTENTION, ["WEIGHTS"],
                                  self_check=False)
    wb = openpyxl.load_workbook(path, data_only=True)
    assert "Key" not in wb.sheetnames
    assert not [n for n in wb.defined_names if n.startswith("CHECK_")]
    numbers = [c.value for ws in wb.worksheets for r in ws.iter_rows() for c in r
               if isinstance(c.value, int | float)]
    hidden = [a for a in answers["WEIGHTS"].ravel()
              if any(abs(a - x) < 1e-9 for x in numbers)]
    assert not hidden


def test_tolerance_and_the_key_follow_an_edited_input(tmp_path):
    path, answers = exercise_book(tmp_path, "attention", ATTENTION, ["Q"])
    wb = openpyxl.load_workbook(path)
    x = find_name(wb, "X", path)
    wb[x.sheet].cell(x.top, x.left).value = 2.5
    wb.save(path)
    kind = KINDS["attention"]
    params = make_params(kind, ATTENTION)
    inputs = complete_inputs(kind, params, {}, 5)
    inputs["X"][0, 0] = 2.5
    right = fill(path, kind.reference(inputs, params), ["Q"], tmp_path / "edited.xlsx")
    assert self_check(right, evaluate_with_formulas(right), ["Q"])["Q"][0] == 6
    stale = fill(path, answers, ["Q"], tmp_path / "stale.xlsx")  # answers of the old X
    assert self_check(stale, evaluate_with_formulas(stale), ["Q"])["Q"][0] == 4


# -- class and grade ------------------------------------------------------------------------

def roster(tmp_path, ids=("s01", "s02", "李雷")) -> Path:
    path = tmp_path / "roster.csv"
    path.write_text("Name,Student ID\n" + "".join(f"N{i},{s}\n" for i, s in enumerate(ids)),
                    encoding="utf-8")
    return path


# a roster as Excel and LibreOffice save it: UTF-8 (with its BOM or without), GBK (“CSV”
# on a Chinese Windows), UTF-16 with its BOM and tabs (Excel's “Unicode text”)
ROSTER_ROWS = [["Name", "Student ID"], ["张伟", "s01"], ["李娜", "s02"], ["Wang Fang", "王芳"]]
SAVED_AS = {"utf-8": ("utf-8", ","), "utf-8-bom": ("utf-8-sig", ","), "gbk": ("gbk", ","),
            "unicode-text": ("utf-16", "\t")}


def saved_roster(tmp_path, how: str) -> Path:
    encoding, delimiter = SAVED_AS[how]
    path = tmp_path / f"roster-{how}.csv"
    text = "".join(delimiter.join(row) + "\r\n" for row in ROSTER_ROWS)
    path.write_bytes(text.encode(encoding))
    return path


@pytest.mark.parametrize("how", list(SAVED_AS))
def test_a_roster_in_any_encoding_spreadsheets_save_gives_the_same_class(tmp_path, how):
    from workbook_builder.teaching.classroom import read_roster

    want = read_roster(saved_roster(tmp_path, "utf-8"))
    assert [(s.id, s.name) for s in want] == [(r[1], r[0]) for r in ROSTER_ROWS[1:]]
    assert read_roster(saved_roster(tmp_path, how)) == want
    out = tmp_path / "class"
    done = cli("class", "attention", "--roster", saved_roster(tmp_path, how), "--out", out,
               "--seq-len", "2", "--d-model", "2", "--d-k", "2", "--exercise", "OUTPUT")
    assert done.returncode == 0, done.stderr
    manifest = list(csv.DictReader((out / "manifest.csv").open(encoding="utf-8")))
    assert [row["name"] for row in manifest] == [r[0] for r in ROSTER_ROWS[1:]]


def test_a_roster_in_another_code_page_says_how_to_save_one_that_reads(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_bytes("Name,Student ID\r\nZoë,s01\r\n".encode("cp1252"))
    line = one_line_error(cli("class", "attention", "--roster", path, "--out",
                              tmp_path / "class", "--exercise", "OUTPUT"))
    assert line.endswith(f"{path}: not a roster in UTF-8, UTF-16 or GBK text; save it from "
                         f"the spreadsheet as CSV UTF-8 (Excel: “CSV UTF-8 (Comma delimited)”; "
                         f"LibreOffice: Text CSV, character set Unicode (UTF-8))"), line
    assert not (tmp_path / "class").exists()


def input_blocks(path):
    wb = openpyxl.load_workbook(path)
    out = {}
    for name in ("X", "W_Q", "W_K", "W_V"):
        where = find_name(wb, name, path)
        ws = wb[where.sheet]
        out[name] = [[ws.cell(where.top + i, where.left + j).value
                      for j in range(where.shape[1])] for i in range(where.shape[0])]
    return out


def class_of(tmp_path, out, *extra):
    return cli("class", "attention", "--roster", roster(tmp_path), "--out", out,
                   "--id-column", "student id", "--seq-len", "3", "--d-model", "2", "--d-k",
                   "2", "--exercise", "weights,OUTPUT", *extra)


def test_class_is_deterministic_per_student_and_refuses_to_overwrite(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    done = class_of(tmp_path, first)
    assert done.returncode == 0, done.stdout + done.stderr
    assert class_of(tmp_path, second).returncode == 0
    manifest = list(csv.DictReader((first / "manifest.csv").open(encoding="utf-8")))
    assert [row["student"] for row in manifest] == ["s01", "s02", "李雷"]
    assert manifest == list(csv.DictReader((second / "manifest.csv").open(encoding="utf-8")))
    books = [input_blocks(first / row["file"]) for row in manifest]
    for row, book in zip(manifest, books, strict=True):
        assert book == input_blocks(second / row["file"])       # same inputs again
        assert book == input_blocks(first / row["key_file"])    # the key matches
        path = first / row["file"]
        assert read_spec(openpyxl.load_workbook(path), path).student == row["student"]
    assert books[0] != books[1] != books[2]                      # students differ
    kind = KINDS["attention"]
    seeded = complete_inputs(kind, make_params(kind, ATTENTION), {}, int(manifest[0]["seed"]))
    assert np.allclose(np.array(books[0]["X"], float), seeded["X"])
    for name in (manifest[2]["file"], manifest[2]["key_file"]):
        assert check_workbook(first / name).passed
    before = (first / manifest[0]["file"]).read_bytes()
    refused = class_of(tmp_path, first)
    assert "already exists" in one_line_error(refused)
    assert (first / manifest[0]["file"]).read_bytes() == before
    assert class_of(tmp_path, first, "--force").returncode == 0


def test_grade_a_class_with_a_broken_file(tmp_path):
    out = tmp_path / "class"
    assert class_of(tmp_path, out).returncode == 0
    manifest = list(csv.DictReader((out / "manifest.csv").open(encoding="utf-8")))
    kind = KINDS["attention"]
    params = make_params(kind, ATTENTION)
    returned = tmp_path / "returned"
    returned.mkdir()
    steps = ["WEIGHTS", "OUTPUT"]
    for n, row in enumerate(manifest):
        answers = kind.reference(complete_inputs(kind, params, {}, int(row["seed"])), params)
        source = out / row["file"]
        if n == 0:    # all right, one cell as a formula
            fill(source, answers, steps, returned / row["file"],
                 lambda s, i, j, v: f"={v!r}+0" if (s, i, j) == ("OUTPUT", 0, 0) else v)
        elif n == 1:  # one wrong, one text, one error; OUTPUT left blank
            def change(s, i, j, v):
                if s == "OUTPUT":
                    return None
                return {(0, 0): v + 0.5, (0, 1): "0.3?", (2, 2): "=1/0"}.get((i, j), v)
            fill(source, answers, steps, returned / row["file"], change)
        else:         # returned untouched
            (returned / row["file"]).write_bytes(source.read_bytes())
    (returned / "broken.xlsx").write_bytes(b"PK\x03\x04 not really a workbook")
    openpyxl.Workbook().save(returned / "foreign.xlsx")
    (returned / manifest[0]["key_file"]).write_bytes((out / manifest[0]["key_file"])
                                                    .read_bytes())  # keys are skipped
    grades = tmp_path / "grades.csv"
    result = cli("grade", returned, "--out", grades)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "broken.xlsx" in result.stderr and "foreign.xlsx" in result.stderr
    rows = {r["file"].split("/")[-1]: r for r in csv.DictReader(grades.open(encoding="utf-8"))}
    assert len(rows) == 5
    full = rows[manifest[0]["file"]]
    assert (full["student"], full["WEIGHTS"], full["OUTPUT"], full["score"]) == \
        ("s01", "9/9", "6/6", "100.0")
    partial = rows[manifest[1]["file"]]
    assert (partial["WEIGHTS"], partial["OUTPUT"], partial["correct"], partial["total"]) == \
        ("6/9", "0/6", "6", "15")
    assert rows[manifest[2]["file"]]["correct"] == "0"
    assert rows["broken.xlsx"]["problem"] and rows["foreign.xlsx"]["problem"]
    assert "graded 3 of 5 files" in result.stdout


def test_grading_one_file_says_what_it_read_and_the_score_grades_csv_holds(tmp_path):
    filled = student_answers(tmp_path)
    out = tmp_path / "grades.csv"
    result = cli("grade", filled, "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"found 1 workbook(s) to grade in {filled}\n" in result.stdout
    score = next(csv.DictReader(out.open(encoding="utf-8")))["score"]
    assert f"({score}%)" in result.stdout, (score, result.stdout)


@requires_libreoffice
def test_grade_reads_a_file_saved_by_libreoffice(tmp_path):
    filled = student_answers(tmp_path)
    saved_dir = tmp_path / "saved"
    saved_dir.mkdir()
    saved = convert(filled, "xlsx", saved_dir)
    assert zipfile.is_zipfile(saved)
    result = cli("grade", saved)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "15/15 (100.0%)" in result.stdout


@pytest.mark.parametrize("args,needle", [
    ([*BUILD_ATTENTION, "--exercise", "NOPE"],
     "has no step 'NOPE'"),
    ([*BUILD_ATTENTION, "--exercise", "X"], "has no step 'X'"),
    ([*BUILD_ATTENTION, "--exercise", "Q,,K"], "empty step name"),
    ([*BUILD_ATTENTION, "--exercise", "Q", "--tolerance", "0"],
     "--tolerance must be a positive number"),
    ([*BUILD_ATTENTION, "--exercise", "Q", "--tolerance", "-1"],
     "--tolerance must be a positive number"),
    ([*BUILD_ATTENTION, "--tolerance", "0.1"], "need --exercise"),
    ([*BUILD_ATTENTION, "--lang", "fr"], "invalid choice: 'fr'"),
    (["class", "attention", "--roster", "{tmp}/missing.csv", "--out", "{tmp}/c",
      "--exercise", "Q"], "no such roster file"),
    (["class", "attention", "--roster", "{tmp}/noid.csv", "--out", "{tmp}/c",
      "--exercise", "Q"], "no student id column"),
    (["class", "attention", "--roster", "{tmp}/dup.csv", "--out", "{tmp}/c",
      "--exercise", "Q"], "line 3: student id 's1' already on line 2"),
    (["class", "attention", "--roster", "{tmp}/emptyid.csv", "--out", "{tmp}/c",
      "--exercise", "Q"], "line 2: the student id is empty"),
    (["class", "attention", "--roster", "{tmp}/header.csv", "--out", "{tmp}/c",
      "--exercise", "Q"], "lists no students"),
    (["class", "attention", "--roster", "{tmp}/dup.csv", "--out", "{tmp}/c",
      "--exercise", "Q", "--id-column", "sid"], "no column 'sid'"),
    (["class", "attention", "--roster", "{tmp}/header.csv", "--out", "{tmp}/c"],
     "--exercise"),
    (["class", "attention", "--roster", "{tmp}/ok.csv", "--out", "{tmp}/c",
      "--exercise", "WEIGHT"], "has no step 'WEIGHT'"),
    (["grade", "{tmp}/missing.xlsx"], "no such file or folder"),
    (["grade", "{tmp}/empty"], "no .xlsx workbooks to grade"),
])
def test_teaching_input_errors_are_one_line_exit_2_and_write_nothing(tmp_path, args, needle):
    (tmp_path / "noid.csv").write_text("name,email\nAnn,a@x\n")
    (tmp_path / "dup.csv").write_text("id,name\ns1,A\ns1,B\n")
    (tmp_path / "emptyid.csv").write_text("id,name\n,A\n")
    (tmp_path / "header.csv").write_text("id,name\n")
    (tmp_path / "ok.csv").write_text("id\ns1\n")
    (tmp_path / "empty").mkdir()
    assert needle in refused_writing_nothing(tmp_path, args)
