"""`check` reads the workbook as it is now: edited inputs are honoured, a changed formula is
caught and its step named, and unreadable inputs are refused with the cell's address."""

import numpy as np
import openpyxl
import pytest
from helpers.books import build, evaluated_blocks

from workbook_builder.checking.check import check_workbook, compare_block
from workbook_builder.errors import UserError
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import NamedRange, find_name


def _cell(wb, name, i, j):
    where = find_name(wb, name, None)
    return wb[where.sheet].cell(where.top + i, where.left + j)


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_edited_inputs_are_checked_from_what_the_file_holds(tmp_path, layout):
    path = build(tmp_path, "multihead", {"seq_len": 3, "d_model": 4, "heads": 2,
                                         "causal": True}, layout=layout)
    wb = openpyxl.load_workbook(path)
    _cell(wb, "X", 0, 0).value = 5.5
    _cell(wb, "W_O", 1, 2).value = "=2*0.75"  # a teacher may type a formula
    wb.save(path)
    report = check_workbook(path)
    assert report.passed
    # the reference really used the edited inputs, the typed formula evaluated
    from workbook_builder.checking.check import read_inputs
    from workbook_builder.engines.formulas_engine import evaluate_with_formulas

    kind = load_kinds()["multihead"]
    params = make_params(kind, report.params)
    inputs = read_inputs(openpyxl.load_workbook(path), kind, params, path,
                         lambda: evaluate_with_formulas(path))
    assert inputs["X"][0, 0] == 5.5 and inputs["W_O"][1, 2] == 1.5


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_a_changed_formula_fails_its_step_and_the_steps_after(tmp_path, layout):
    path = build(tmp_path, "attention", {"seq_len": 4, "d_model": 3, "d_k": 2},
                 layout=layout)
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "SCORES", path)
    cell = wb[where.sheet].cell(where.top + 1, where.left + 2)
    # a uniform shift would leave the softmax unchanged, so scale instead
    if layout == "cells":
        cell.value = cell.value + "*1.5"
    else:
        wb[where.sheet].cell(where.top, where.left).value.text += "*1.5"
    wb.save(path)
    report = check_workbook(path)
    verdicts = {s.name: s.passed for s in report.steps}
    assert verdicts["Q"] and verdicts["K"] and verdicts["V"]
    first_failure = next(s for s in report.steps if not s.passed)
    assert first_failure.name == "SCORES"
    assert not verdicts["WEIGHTS"] and not verdicts["OUTPUT"]
    if layout == "cells":
        assert first_failure.worst_cell == f"Attention!{cell.coordinate}"


def test_a_cell_on_a_reference_cycle_is_a_failure_not_a_silent_pass(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    wb = openpyxl.load_workbook(path)
    cell = _cell(wb, "OUTPUT", 0, 0)
    cell.value = f"={cell.coordinate}*0+{_cell(wb, 'V', 0, 0).coordinate}"
    wb.save(path)
    report = check_workbook(path)
    output = next(s for s in report.steps if s.name == "OUTPUT")
    assert not output.passed and "without a value" in output.problem


@pytest.mark.parametrize("value,message", [("abc", "holds 'abc', not a number"),
                                           (None, "holds nothing"),
                                           ("#N/A", "holds '#N/A'")])
def test_text_blank_or_error_in_an_input_is_refused(tmp_path, value, message):
    path = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2})
    wb = openpyxl.load_workbook(path)
    cell = _cell(wb, "W_K", 1, 0)
    cell.value = value
    wb.save(path)
    with pytest.raises(UserError, match=f"input W_K cell Attention!{cell.coordinate} "):
        check_workbook(path)
    with pytest.raises(UserError, match=message):
        check_workbook(path)


def test_check_values_equal_the_reference_of_the_edited_inputs(tmp_path):
    """Not just 'passes': the evaluated OUTPUT equals NumPy attention of the new X."""
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    wb = openpyxl.load_workbook(path)
    new_x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    for i in range(3):
        for j in range(2):
            _cell(wb, "X", i, j).value = new_x[i, j]
    wb.save(path)
    from workbook_builder.engines.formulas_engine import evaluate_with_formulas

    got = evaluated_blocks(path, evaluate_with_formulas(path), ["OUTPUT"])["OUTPUT"]
    w = {}
    for n in ("W_Q", "W_K", "W_V"):
        place = find_name(wb, n, path)
        w[n] = np.array([[_cell(wb, n, i, j).value for j in range(place.shape[1])]
                         for i in range(place.shape[0])], dtype=float)
    q, k, v = new_x @ w["W_Q"], new_x @ w["W_K"], new_x @ w["W_V"]
    s = q @ k.T / np.sqrt(2)
    a = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, a @ v, rtol=1e-12)
    assert check_workbook(path).passed


def test_extra_defined_names_that_look_like_cells_are_ignored(tmp_path):
    """A teacher's own name such as RESID1 (letters + digits) must not upset the engine's
    result parsing."""
    from openpyxl.workbook.defined_name import DefinedName

    path = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2})
    wb = openpyxl.load_workbook(path)
    wb.defined_names["RESID1"] = DefinedName("RESID1", attr_text="'Attention'!$A$1")
    wb["Attention"]["A2"] = "=SUM(RESID1)"
    wb.save(path)
    assert check_workbook(path).passed


def test_a_step_compared_names_its_worst_cell_first_bad_cell_and_missing_cells():
    where = NamedRange("STEP", "Sheet", top=5, left=2, bottom=6, right=4)  # B5:D6
    got = {("SHEET", 5, 2): 1.0, ("SHEET", 5, 3): True,                 # D5 missing
           ("SHEET", 6, 2): "x", ("SHEET", 6, 3): float("inf"), ("SHEET", 6, 4): 2}
    expected = np.array([[1.5, 0.0, 0.0], [0.0, 0.0, 2.5]])
    result = compare_block(where, expected, got)
    assert (result.max_abs_error, result.worst_cell) == (0.5, "Sheet!B5")  # tie: the first
    assert result.problem == ("1 cell(s) left without a value by the engine (a reference "
                              "cycle?); Sheet!C5 holds True")
    assert not result.passed
    second_row_bad = compare_block(where, expected, {**got, ("SHEET", 5, 3): 0.0,
                                                     ("SHEET", 5, 4): 0.0})
    assert second_row_bad.problem == "Sheet!B6 holds x"  # before C6 (inf): sheet order
    assert second_row_bad.worst_cell == "Sheet!B5"
    nan_reference = compare_block(where, np.full((2, 3), np.nan), got)
    assert (nan_reference.max_abs_error, nan_reference.worst_cell) == (None, "")
    exact = {("SHEET", r, c): 1 for r in (5, 6) for c in (2, 3, 4)}
    close = compare_block(where, np.ones((2, 3)) + 1e-12, exact)
    assert close.passed and close.max_abs_error == abs(1 - (1 + 1e-12))
