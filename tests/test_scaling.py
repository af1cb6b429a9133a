"""`scaling`: the reference's softmax and Jacobian against PyTorch autograd; the issue's claims
read from the evaluated cells of the default workbook; the chart's series pointing at live
cells; MEDIAN alike in both engines; one-line errors for bad widths."""

import json
import math

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, block_values, build, write_book
from helpers.cli import cli, one_line_error
from helpers.requires import requires_libreoffice, requires_torch
from helpers.runs import once_per_run
from helpers.sheets import chart_series, parse_ref

from reference.scaling import scaling_ref
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet import Chart, Input, Series, section
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.layout import SheetWriter
from workbook_builder.sheet.names import find_name

KIND = KINDS["scaling"]
DEFAULT_WIDTHS = [4, 16, 64, 256, 512]


# -- the reference against PyTorch -----------------------------------------------------------

@requires_torch
def test_reference_softmax_and_jacobian_equal_torch_autograd():
    """Same rows, two formulations: the reference's diag(a) − a·aᵀ and torch's autograd
    Jacobian of torch.softmax, for every row, raw and scaled, from d_k = 4 to 512."""
    import torch

    params = make_params(KIND, {"widths": "4,64,512", "seq_len": 12})
    inputs = complete_inputs(KIND, params, {}, 3)
    ref = scaling_ref(inputs, params)
    for w in (4, 64, 512):
        q, k = (torch.tensor(inputs[f"{side}_D{w}"], dtype=torch.float64) for side in "QK")
        scores = q @ k.T
        assert ref[f"VAR_SCORES_D{w}"][0, 0] == pytest.approx(
            torch.var(scores, unbiased=False).item(), rel=1e-12)
        for sfx, s in ((f"_RAW_D{w}", scores), (f"_D{w}", scores / math.sqrt(w))):
            np.testing.assert_allclose(ref[f"WEIGHTS{sfx}"], torch.softmax(s, -1).numpy(),
                                       rtol=1e-12, atol=1e-300)
            jacobians = [torch.autograd.functional.jacobian(lambda r: torch.softmax(r, -1),
                                                            s[i]) for i in range(len(s))]
            np.testing.assert_allclose(ref[f"JAC{sfx}"], jacobians[0].numpy(), rtol=1e-12,
                                       atol=1e-15)
            assert ref[f"JAC_MAX{sfx}"][0, 0] == pytest.approx(
                jacobians[0].abs().max().item(), rel=1e-12)
            norms = [torch.linalg.matrix_norm(j).item() for j in jacobians]
            assert ref[f"JAC_NORM{sfx}"][0, 0] == pytest.approx(norms[0], rel=1e-12)
            np.testing.assert_allclose(ref[f"ROW_JAC_NORM{sfx}"][:, 0], norms, rtol=1e-9,
                                       atol=1e-16)


# -- the claims, from the default workbook's evaluated cells -------------------------

@pytest.fixture(scope="session")
def default_book(tmp_path_factory):
    """The default workbook (widths 4,16,64,256,512, n = 32, seed 0) in the blocks layout,
    built once per run; its cells hold the values the `formulas` engine computed when it
    was built, and `check.txt` the check of those values against the reference."""
    def make(folder):
        built = write_book(KIND, make_params(KIND, {}), folder / "default.xlsx",
                               layout="blocks")
        report = check_workbook(built.path, values=built.values, workbook=built.workbook)
        (folder / "check.txt").write_text(f"{report.passed}\n{format_report(report)}",
                                          encoding="utf-8")

    return once_per_run(tmp_path_factory, "scaling_default", make) / "default.xlsx"


def evaluated(path):
    """name -> the named block's values as the file stores them (data_only)."""
    wb = openpyxl.load_workbook(path, data_only=True)

    def values(name):
        where = find_name(wb, name, path)
        ws = wb[where.sheet]
        return np.array([[ws.cell(where.top + i, where.left + j).value
                          for j in range(where.shape[1])] for i in range(where.shape[0])],
                        dtype=float)

    return wb, values


def test_default_workbook_checks(default_book):
    passed, report = (default_book.parent / "check.txt").read_text(
        encoding="utf-8").split("\n", 1)
    assert passed == "True", report


def test_default_widths_variance_softmax_and_gradient(default_book):
    """At the default widths: var(S) within 20% of d_k and var(S/√d_k) within 20% of 1;
    without the scale the largest weight goes to 1 and the typical row's gradient vanishes
    at d_k = 512, while with it both stay where they were at d_k = 4."""
    wb, values = evaluated(default_book)
    where = find_name(wb, "SUMMARY", default_book)
    ws = wb[where.sheet]
    widths = [ws.cell(where.top + i, where.left - 1).value for i in range(where.shape[0])]
    assert widths == DEFAULT_WIDTHS
    summary = values("SUMMARY")
    print("\n d_k    var S  var S/√d  max a raw  max a scl  ‖J‖ raw  ‖J‖ scl  med raw  med scl")
    for w, row in zip(widths, summary, strict=True):
        print(f"{w:4d} " + " ".join(f"{x:9.5f}" for x in row))
    var_raw, var_scaled, max_raw, max_scaled, mean_raw, mean_scaled, med_raw, med_scaled = \
        summary.T
    np.testing.assert_array_less(np.abs(var_raw / np.array(DEFAULT_WIDTHS) - 1), 0.2)
    np.testing.assert_array_less(np.abs(var_scaled - 1), 0.2)
    assert max_raw[-1] > 0.9 and max_scaled[-1] < 0.3
    assert med_raw[-1] < 0.1 * med_scaled[-1]
    assert abs(med_scaled[-1] / med_scaled[0] - 1) < 0.2
    assert mean_raw[-1] < mean_raw[0]  # the mean falls too, though less: see the README
    print(f"d_k = 512, raw/scaled: mean ‖J‖ {mean_raw[-1] / mean_scaled[-1]:.3f}, "
          f"median ‖J‖ {med_raw[-1] / med_scaled[-1]:.4f}")


def test_summary_reads_the_width_blocks_and_row_norms_equal_the_written_jacobian(
        default_book):
    """Evaluated cells agree with each other: the table with the blocks it reads, and each
    row-1 norm from the closed form with the norm of the written-out J."""
    _, values = evaluated(default_book)
    summary = values("SUMMARY")
    for i, w in enumerate(DEFAULT_WIDTHS):
        assert summary[i, 0] == values(f"VAR_SCORES_D{w}")[0, 0]
        assert summary[i, 1] == values(f"VAR_SCALED_D{w}")[0, 0]
        assert summary[i, 2] == pytest.approx(values(f"MAX_WEIGHT_RAW_D{w}").mean(), rel=1e-12)
        assert summary[i, 7] == pytest.approx(np.median(values(f"ROW_JAC_NORM_D{w}")),
                                              rel=1e-12)
        for variant in ("_RAW", ""):
            jac, norm = values(f"JAC{variant}_D{w}"), values(f"JAC_NORM{variant}_D{w}")[0, 0]
            assert values(f"ROW_JAC_NORM{variant}_D{w}")[0, 0] == pytest.approx(
                norm, rel=1e-9, abs=1e-15)
            assert norm == pytest.approx(np.sqrt((jac ** 2).sum()), rel=1e-12, abs=1e-300)


# -- charts ----------------------------------------------------------------------------------

def test_chart_series_read_the_live_summary_cells(default_book):
    series = chart_series(default_book)
    wb = openpyxl.load_workbook(default_book)
    where = find_name(wb, "SUMMARY", default_book)
    ws = wb[where.sheet]
    assert [parse_ref(s["y"]) for s in series] == [
        (where.sheet, (where.top, where.left + j, where.bottom, where.left + j))
        for j in range(4, 8)]
    labels = (where.sheet, (where.top, where.left - 1, where.bottom, where.left - 1))
    assert all(parse_ref(s["x"]) == labels for s in series)
    assert [parse_ref(s["tx"]) for s in series] == [
        (where.sheet, (where.top - 1, where.left + j) * 2) for j in range(4, 8)]
    for s in series:  # every plotted value is a formula of the sheet
        _, (top, left, bottom, _) = parse_ref(s["y"])
        assert all(str(ws.cell(r, left).value).startswith("=") for r in range(top, bottom + 1))
    expected = KIND.reference(complete_inputs(KIND, make_params(KIND, {}), {}, 0),
                              make_params(KIND, {}))["SUMMARY"]
    shown = evaluated(default_book)[1]("SUMMARY")
    np.testing.assert_allclose(shown[:, 4:], expected[:, 4:], rtol=1e-9)


def test_chart_series_names_are_translated_cells(tmp_path):
    path = build(tmp_path, "scaling", {"widths": "4,16", "seq_len": 3}, lang="zh")
    wb = openpyxl.load_workbook(path)
    names = []
    for s in chart_series(path):
        sheet, (row, col, _, _) = parse_ref(s["tx"])
        names.append(wb[sheet].cell(row, col).value)
    assert names == ["原始 ‖J‖", "缩放后 ‖J‖", "原始 ‖J‖ 中位数", "缩放后 ‖J‖ 中位数"]


def test_a_line_chart_reads_one_row_of_a_block_over_its_column_labels(tmp_path):
    """The general form, as an attention map would use it: row 2 of a block over the keys."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Maps"
    sheet = SheetWriter(ws, "cells", label_sets={"tokens": ["我", "爱", "AI"]})
    weights = Input("A", 3, 3, "weights", "tokens", "tokens")
    sheet.write([section("map", [weights, Chart("row 爱", (Series("A", 1, along="row"),),
                                                kind="line")])],
                {"A": np.eye(3)})
    wb.save(tmp_path / "map.xlsx")
    (series,) = chart_series(tmp_path / "map.xlsx")
    block = sheet.blocks["A"]
    assert parse_ref(series["y"]) == ("Maps", (block.top + 1, block.left, block.top + 1,
                                               block.right))
    assert parse_ref(series["x"]) == ("Maps", (block.top - 1, block.left, block.top - 1,
                                               block.right))
    assert parse_ref(series["tx"]) == ("Maps", (block.top + 1, block.left - 1) * 2)
    assert ws.cell(block.top + 1, block.left - 1).value == "爱"
    with pytest.raises(ValueError):
        Chart("x", (Series("A", 0),), kind="pie")
    with pytest.raises(ValueError):
        Chart("x", (Series("A", 0, along="diagonal"),))
    with pytest.raises(ValueError):
        Chart("x", (Series("A", 0),), kind="line", log_x=2)


# -- MEDIAN, the one function this kind adds to the portable set -----------------------------

@requires_libreoffice
def test_median_is_the_same_in_both_engines(tmp_path):
    columns = [[-3, 1, 2, -10], [-3.5, 0, 7], [-1, -2, -3, -4, -5, -6], [2.5]]
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "M"
    for c, values in enumerate(columns, start=1):
        for r, v in enumerate(values, start=1):
            ws.cell(r, c, v)
        ws.cell(10, c, f"=MEDIAN({ws.cell(1, c).coordinate}:{ws.cell(len(values), c).coordinate})")
    ws.cell(11, 1, "=MEDIAN(A1:A4,B1:B3)")
    path = tmp_path / "median.xlsx"
    wb.save(path)
    expected = [np.median(v) for v in columns] + [np.median(columns[0] + columns[1])]
    cells = [("M", 10, c) for c in range(1, 5)] + [("M", 11, 1)]
    for values in (evaluate_with_formulas(path), evaluate_with_libreoffice(path)):
        assert [values[cell] for cell in cells] == expected


# -- user errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("widths,message", [
    ("4,x", "--widths must be comma-separated whole numbers"),
    ("", "--widths must be comma-separated whole numbers"),
    ("4,-16", "--widths must be comma-separated whole numbers"),
    ("0,4", "each width must be from 1 to 1024, got 0"),
    ("4,2048", "each width must be from 1 to 1024, got 2048"),
    ("16,4", "--widths must increase"),
    ("4,4", "--widths must increase"),
])
def test_bad_widths_exit_2_with_one_line(tmp_path, widths, message):
    result = cli("build", "scaling", "-o", tmp_path / "x.xlsx", "--widths", widths)
    assert message in one_line_error(result)
    assert not (tmp_path / "x.xlsx").exists()


def test_bad_seq_len_and_unlisted_input_exit_2_with_one_line(tmp_path):
    result = cli("build", "scaling", "-o", tmp_path / "x.xlsx", "--seq-len", "0")
    assert "--seq-len must be a positive" in one_line_error(result)
    given = tmp_path / "in.json"
    given.write_text(json.dumps({"Q_D8": [[0.5] * 8] * 2}))
    result = cli("build", "scaling", "-o", tmp_path / "x.xlsx", "--widths", "4",
                 "--seq-len", "2", "--inputs", given)
    assert "has no input 'Q_D8'" in one_line_error(result)
    given.write_text(json.dumps({"Q_D4": [[0.5] * 3] * 2}))
    result = cli("build", "scaling", "-o", tmp_path / "x.xlsx", "--widths", "4",
                 "--seq-len", "2", "--inputs", given)
    assert "input Q_D4 is 2×3 but these parameters need 2×4" in one_line_error(result)


def test_inputs_given_by_hand_are_used_and_set_n(tmp_path):
    q = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
    given = tmp_path / "in.json"
    given.write_text(json.dumps({"Q_D2": q}))
    path = tmp_path / "given.xlsx"
    built = cli("build", "scaling", "-o", path, "--widths", "2,8", "--inputs", given)
    assert built.returncode == 0, built.stderr
    assert cli("check", path).returncode == 0
    k = np.array(block_values(path, "K_D2"), dtype=float)
    assert k.shape == (3, 2)  # n = 3, from Q_D2
    np.testing.assert_allclose(np.array(block_values(path, "SCORES_D2"), dtype=float),
                               np.array(q) @ k.T, rtol=1e-12)
