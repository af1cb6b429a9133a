"""Gnumeric (`ssconvert --recalc`) as the third engine: with the `formulas` engine and
LibreOffice it recalculates every demo workbook to the reference; the behaviours it does not
share with them (stale cached values without --recalc, blanks and text as 0 in MMULT, the key
sheet saved visible) are shown, and exercises and grading are robust to them."""

import os
import subprocess
import tempfile
from pathlib import Path

import openpyxl
import pytest
from helpers.books import (
    ATTENTION,
    build,
    exercise_book,
    fill,
    planted_copy,
    self_check,
    student_answers,
)
from helpers.cli import cli, one_line_error
from helpers.requires import requires_gnumeric, requires_libreoffice
from helpers.runs import once_per_run

from workbook_builder.book.files import open_workbook
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report, format_side_by_side
from workbook_builder.engines.cached_values import store_values
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.gnumeric import recalculate, recalculate_many
from workbook_builder.engines.libreoffice import convert_many, read_values
from workbook_builder.errors import UserError
from workbook_builder.sheet.names import find_name

ENGINES = ("formulas", "libreoffice", "gnumeric")


def block_of(values, wb, name):
    where = find_name(wb, name, None)
    return [values.get((where.sheet.upper(), where.top + i, where.left + j))
            for i in range(where.shape[0]) for j in range(where.shape[1])]


# -- the demo, three engines side by side ----------------------------------------------------

@requires_gnumeric
def test_gnumeric_recalculates_every_demo_workbook_with_no_error_cell(gnumeric_demo):
    failures, errors = [], []
    for book, recalculated in gnumeric_demo:
        values = read_values(recalculated)
        report = check_workbook(book, "gnumeric", values=values)
        if not report.passed:
            failures.append(format_report(report))
        errors += [f"{recalculated.name} {key}: {value}" for key, value in values.items()
                   if isinstance(value, str) and value.startswith("#")]
    assert not failures, "\n".join(failures)
    assert not errors, "\n".join(errors[:20])


@requires_libreoffice
@requires_gnumeric
def test_check_engine_all_shows_three_engines_agreeing_on_every_demo_workbook(
        demo, recalculated_demo, gnumeric_demo):
    """What `check --engine all` prints for each demo workbook, from the values each engine
    computed (the build's `formulas` values stored in the file, one LibreOffice run, one
    ssconvert per book): every step passes in every engine, and every engine is within
    1e-14 of the reference relative to the block's size (1e-13 for a training sheet; the
    pass bound is 1e-9)."""
    libreoffice, gnumeric = dict(recalculated_demo), dict(gnumeric_demo)
    worst = dict.fromkeys(ENGINES, 0.0)
    problems = []
    for book in demo.books:
        wb = open_workbook(book)
        reports = [check_workbook(book, engine, values=read_values(saved), workbook=wb)
                   for engine, saved in zip(ENGINES, (book, libreoffice[book], gnumeric[book]),
                                            strict=True)]
        table = format_side_by_side(reports)
        assert "engines formulas + libreoffice + gnumeric" in table.splitlines()[0]
        assert "gnumeric max|err|" in table.splitlines()[1]
        if not all(report.passed for report in reports):
            problems.append(table)
        # a training sheet carries each step's rounding into the next step's weights, and
        # its unscaled run differentiates a saturated softmax: measured 1.9e-14 relative
        # after 8 steps (train_compare_scale), so its bound is 1e-13
        share = 1e-4 if book.name.startswith("train") else 1e-5
        for report in reports:
            for step in report.steps:
                worst[report.engine] = max(worst[report.engine], step.max_abs_error or 0.0)
                if (step.max_abs_error or 0.0) > share * step.tolerance:  # 1e-14 relative
                    problems.append(f"{book.name} {report.engine} {step.name}: "
                                    f"{step.max_abs_error:.2e}")
    assert not problems, "\n".join(problems)
    assert 0 < worst["gnumeric"] < 1e-13, worst  # measured: 6.2e-15 (encoder_block)


# -- cached values ---------------------------------------------------------------------------

@requires_gnumeric
def test_gnumeric_keeps_stale_cached_values_without_recalc_and_the_engine_recalculates(
        tmp_path):
    """ssconvert ignores fullCalcOnLoad: a plain conversion keeps a planted wrong value.
    The engine runs it with --recalc, so its check still passes."""
    path, planted, _ = planted_copy(tmp_path)
    wb = openpyxl.load_workbook(path)
    plain = tmp_path / "plain.xlsx"
    subprocess.run(["ssconvert", str(planted), str(plain)], capture_output=True, check=True,
                   env={**os.environ, "HOME": str(tmp_path), "GSETTINGS_BACKEND": "memory"})
    stale = block_of(read_values(plain), wb, "OUTPUT")
    assert stale == [123.0] * len(stale)
    report = check_workbook(planted, "gnumeric")
    assert report.passed, format_report(report)


@requires_gnumeric
def test_gnumeric_runs_in_private_folders_and_refuses_a_file_it_cannot_read(
        tmp_path, monkeypatch):
    home, temp = tmp_path / "home", tmp_path / "temp"
    home.mkdir()
    temp.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    path = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2})
    assert check_workbook(path, "gnumeric").passed
    assert list(home.iterdir()) == [] and list(temp.iterdir()) == []
    broken = tmp_path / "broken.xlsx"
    broken.write_bytes(b"PK\x03\x04 not really a workbook")
    with pytest.raises(UserError, match="Gnumeric could not convert"):
        recalculate(broken, tmp_path / "out.xlsx")
    assert not (tmp_path / "out.xlsx").exists()


@requires_gnumeric
def test_a_workbook_saved_by_gnumeric_is_checked_by_every_engine(tmp_path, recwarn):
    path = build(tmp_path, "multihead", {"seq_len": 3, "d_model": 4, "heads": 2,
                                         "causal": True}, layout="blocks")
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "W_V", path)
    wb[where.sheet].cell(where.top, where.left).value = -3.25
    wb.save(path)
    saved = recalculate(path, tmp_path / "saved.xlsx")
    assert openpyxl.load_workbook(saved)[where.sheet].cell(where.top, where.left).value == -3.25
    recwarn.clear()  # openpyxl itself warns on Gnumeric's file; the command must not
    result = cli("check", saved, "--engine", "all")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not [w for w in recwarn if "default style" in str(w.message)]


# -- exercises: unfilled cells in every engine -----------------------------------------------

# (kind, parameters, exercise step, layout, the steps computed from it: all their cells)
UNFILLED = [
    ("attention", ATTENTION, "Q", "cells",
     ["SCORES", "SCALED", "ROW_MAX", "EXP", "ROW_SUM", "WEIGHTS", "OUTPUT"]),
    ("attention", ATTENTION, "Q", "blocks",
     ["SCORES", "SCALED", "ROW_MAX", "EXP", "ROW_SUM", "WEIGHTS", "OUTPUT"]),
    ("attention", ATTENTION, "WEIGHTS", "cells", ["OUTPUT"]),
    ("ssm", {"seq_len": 3, "d_model": 2, "d_state": 2}, "DELTA", "blocks",
     ["A_BAR", "DELTA_B_U", "H", "Y"]),
]
# an attention WEIGHTS exercise (blocks) with its cells cleared, or holding a text dash
CLEARED = {"blank": None, "dash": "—"}


@pytest.fixture(scope="session")
def unfilled(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """The UNFILLED exercises and the CLEARED ones, each with its copies saved by one
    LibreOffice run and by Gnumeric: {book name: {engine: file holding its values}} (the
    `formulas` values of a new build are those it stored; the cleared ones have none)."""
    def make(folder: Path) -> None:
        books = [exercise_book(folder, kind, params, [step], layout,
                               name=f"{kind}_{step}_{layout}.xlsx")[0]
                 for kind, params, step, layout, _ in UNFILLED]
        path, answers = exercise_book(folder, "attention", ATTENTION, ["WEIGHTS"], "blocks",
                                      name="weights.xlsx")
        books += [fill(path, answers, ["WEIGHTS"], folder / f"{name}.xlsx",
                       lambda s, i, j, v, typed=typed: typed)
                  for name, typed in CLEARED.items()]
        for engine in ("libreoffice", "gnumeric"):
            (folder / engine).mkdir()
        convert_many(books, "xlsx", folder / "libreoffice")
        recalculate_many(books, folder / "gnumeric")

    folder = once_per_run(tmp_path_factory, "unfilled", make)
    names = [f"{kind}_{step}_{layout}.xlsx" for kind, _, step, layout, _ in UNFILLED] + \
        [f"{name}.xlsx" for name in CLEARED]
    return {name: {"formulas": folder / name, "libreoffice": folder / "libreoffice" / name,
                   "gnumeric": folder / "gnumeric" / name} for name in names}


@requires_libreoffice
@requires_gnumeric
def test_an_unfilled_exercise_shows_na_in_every_later_step_in_all_three_engines(unfilled):
    """Until filled, the exercise cells hold #N/A and every cell of the steps computed from
    them is #N/A in all three engines (never a number); the self-check counts 0."""
    problems = []
    for kind, _, step, layout, later in UNFILLED:
        files = unfilled[f"{kind}_{step}_{layout}.xlsx"]
        book = files["formulas"]
        wb = openpyxl.load_workbook(book)
        for engine in ENGINES:
            values = read_values(files[engine])
            shown = {str(v) for name in [step, *later] for v in block_of(values, wb, name)}
            if shown != {"#N/A"}:
                problems.append(f"{book.name} {engine}: {sorted(shown)[:5]}")
            count, marks = self_check(book, values, [step])[step]
            if count != 0 or set(marks) != {"✗"}:
                problems.append(f"{book.name} {engine}: self-check {count}, {marks}")
    assert not problems, "\n".join(problems)


@requires_libreoffice
@requires_gnumeric
@pytest.mark.parametrize("cleared", sorted(CLEARED))
def test_gnumeric_counts_blank_and_text_as_0_in_mmult(unfilled, cleared):
    """Why the exercise cells hold #N/A: a cleared cell, or a text placeholder, makes
    Gnumeric's MMULT show numbers where LibreOffice and `formulas` show #VALUE!."""
    files = unfilled[f"{cleared}.xlsx"]
    wb = openpyxl.load_workbook(files["formulas"])
    values = {engine: read_values(files[engine]) for engine in ("libreoffice", "gnumeric")}
    values["formulas"] = evaluate_with_formulas(files["formulas"])
    shown = {engine: block_of(values[engine], wb, "OUTPUT") for engine in ENGINES}
    assert {str(v) for v in shown["formulas"]} == {"#VALUE!"}
    assert {str(v) for v in shown["libreoffice"]} == {"#VALUE!"}
    assert shown["gnumeric"] == [0] * 6
    for engine in ENGINES:  # the self-check still counts the cleared cells as wrong
        assert self_check(files["formulas"], values[engine], ["WEIGHTS"]) == \
            {"WEIGHTS": (0, ["✗"] * 3)}, engine


# -- grading ---------------------------------------------------------------------------------

@requires_gnumeric
def test_grade_with_an_engine_recalculates_the_students_formulas(tmp_path):
    """The file's saved values are stale (planted); the default reads them, --engine
    recalculates the student's formulas."""
    filled = student_answers(tmp_path)
    wb = openpyxl.load_workbook(filled)
    output = find_name(wb, "OUTPUT", filled)
    stale = {(output.sheet.upper(), output.top + i, output.left + j): 9.0
             for i in range(output.shape[0]) for j in range(output.shape[1])}
    store_values(filled, tmp_path / "stale.xlsx", stale)
    saved = cli("grade", tmp_path / "stale.xlsx")
    assert "9/15 (60.0%)" in saved.stdout, saved.stdout + saved.stderr
    for engine in ("gnumeric", "formulas"):
        result = cli("grade", tmp_path / "stale.xlsx", "--engine", engine)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "15/15 (100.0%)" in result.stdout


@requires_gnumeric
def test_grade_and_check_a_file_saved_by_gnumeric_whose_key_became_visible(tmp_path):
    filled = student_answers(tmp_path)
    saved = recalculate(filled, tmp_path / "saved.xlsx")
    assert open_workbook(saved)["Key"].sheet_state == "visible"
    assert self_check(saved, read_values(saved), ["WEIGHTS", "OUTPUT"]) == \
        {"WEIGHTS": (9, ["✓"] * 3), "OUTPUT": (6, ["✓"] * 3)}
    for extra in ([], ["--engine", "gnumeric"], ["--engine", "formulas"]):
        result = cli("grade", saved, *extra)
        assert result.returncode == 0 and not result.stderr, result.stdout + result.stderr
        assert "15/15 (100.0%)" in result.stdout
    report = check_workbook(saved, "gnumeric")  # still a correct exercise
    assert report.passed, format_report(report)


# -- not installed ---------------------------------------------------------------------------

def test_without_gnumeric_the_engine_says_so_in_one_line(tmp_path, monkeypatch):
    path, _ = exercise_book(tmp_path, "attention", ATTENTION, ["OUTPUT"])
    monkeypatch.setenv("PATH", str(tmp_path / "nothing here"))
    hint = ("attnsheets: error: Gnumeric is not installed (apt-get install gnumeric); "
            "use --engine formulas instead")
    assert one_line_error(cli("check", path, "--engine", "gnumeric")) == hint
    assert one_line_error(cli("grade", path, "--engine", "gnumeric")) == hint
    every = cli("check", path, "--engine", "all")
    assert every.returncode == 0, every.stdout + every.stderr
    assert every.stderr.strip().splitlines() == [
        "attnsheets: not installed, so not compared: libreoffice (apt-get install "
        "libreoffice-calc-nogui), gnumeric (apt-get install gnumeric)"]
    assert "engines formulas" in every.stdout and "all steps pass in every engine" in \
        every.stdout
