"""The hand layout: every matrix product set out as it is worked by hand — the left operand
to the left of the result, the right operand (Kᵀ for Q·Kᵀ) above it, each result cell
MMULT(the row on its left, the column above it) — with the defined names of the other
layouts, so `check`, exercises and grading work unchanged; refused beyond teaching sizes."""

import csv
import re

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, build, fill, placement_of, write_book
from helpers.cli import cli, one_line_error
from helpers.requires import requires_libreoffice

from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.sheet.declare import MatMul
from workbook_builder.sheet.hand_layout import HAND_MAX_SIDE
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.refs import parse_range
from workbook_builder.sheet.request import ExerciseSpec

# teaching sizes: the kinds' demo sizes, with biases and grouped heads where they exist
TEACHING = {
    "attention": {"seq_len": 4, "d_model": 4, "d_k": 3, "d_v": 2, "bias": True},
    "multihead": {"seq_len": 5, "d_model": 8, "heads": 4, "kv_heads": 2, "causal": True},
    "flash": {"seq_len": 6, "d_model": 4, "d_k": 4, "block_size": 3},
}


def products(kind, params):
    """(step name, its product formula) for every matrix product A·B or A·Bᵀ the kind
    declares (the hand layout writes Aᵀ·B as `cells` does)."""
    return [(s.name, s.formula) for s in kind.steps(params)
            if isinstance(s.formula, MatMul) and s.formula.transpose != "a"]


def operands(formula, blocks: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The left operand, the right operand (transposed for A·Bᵀ) and the bias row of a
    product, as the reference and the inputs give them."""
    a, b = blocks[formula.a], blocks[formula.b]
    if formula.a_cols:
        a = a[:, formula.a_cols[0]:formula.a_cols[1] + 1]
    if formula.b_cols:
        b = b[:, formula.b_cols[0]:formula.b_cols[1] + 1]
    bias = None if formula.plus is None else blocks[formula.plus]
    return a, b.T if formula.transpose == "b" else b, bias


def values_at(values, sheet: str, top: int, left: int, rows: int, cols: int) -> np.ndarray:
    return np.array([[values[(sheet.upper(), top + i, left + j)] for j in range(cols)]
                     for i in range(rows)], dtype=float)


def mmult_ranges(text: str) -> list[tuple[int, int, int, int]]:
    """The rectangles the MMULT of a result cell reads, and the cell it adds (if any)."""
    match = re.fullmatch(r"=MMULT\(([$A-Z0-9:]+),([$A-Z0-9:]+)\)(?:\+([$A-Z0-9]+))?", text)
    assert match, text
    return [parse_range(ref.replace("$", "")) for ref in match.groups() if ref]


@pytest.mark.parametrize("kind_name", sorted(TEACHING))
def test_every_product_sits_where_its_left_and_right_operands_meet(tmp_path, kind_name):
    kind = KINDS[kind_name]
    params = make_params(kind, TEACHING[kind_name])
    path = build(tmp_path, kind_name, TEACHING[kind_name], layout="hand", seed=3)
    inputs = complete_inputs(kind, params, {}, 3)
    blocks = {**inputs, **kind.reference(inputs, params)}
    values = evaluate_with_formulas(path)
    wb = openpyxl.load_workbook(path)
    checked = products(kind, params)
    assert checked
    for name, formula in checked:
        c = find_name(wb, name, path)
        ws = wb[c.sheet]
        left, above, bias = operands(formula, blocks)
        k = left.shape[1]
        # the left operand ends one column (the row labels) before the result
        left_at = (c.top, c.left - 1 - k, c.bottom, c.left - 2)
        assert np.allclose(values_at(values, c.sheet, c.top, c.left - 1 - k, *left.shape),
                           left, rtol=1e-12, atol=1e-12), name
        # the right operand ends one row (the column labels) above, or two with a bias row
        # between them
        gap = 1 if bias is None else 2
        above_top = c.top - gap - k
        assert np.allclose(values_at(values, c.sheet, above_top, c.left, *above.shape), above,
                           rtol=1e-12, atol=1e-12), name
        if bias is not None:
            assert np.allclose(values_at(values, c.sheet, c.top - 2, c.left, *bias.shape),
                               bias), name
        for i in range(c.shape[0]):
            for j in range(c.shape[1]):
                reads = mmult_ranges(ws.cell(c.top + i, c.left + j).value)
                assert reads[0] == (c.top + i, left_at[1], c.top + i, left_at[3]), name
                assert reads[1] == (above_top, c.left + j, c.top - gap - 1, c.left + j), name
                if bias is not None:
                    assert reads[2] == (c.top - 2, c.left + j) * 2, name
        # the copies are live: a formula in every cell, no typed number
        for top, lft, rows, cols in ((c.top, c.left - 1 - k, *left.shape),
                                     (above_top, c.left, *above.shape)):
            assert all(ws.cell(top + i, lft + j).data_type == "f"
                       for i in range(rows) for j in range(cols)), name


@pytest.mark.parametrize("kind_name", sorted(TEACHING))
def test_hand_workbooks_pass_check_from_the_command_line(tmp_path, kind_name):
    path = tmp_path / f"{kind_name}.xlsx"
    flags = [f"--{key.replace('_', '-')}" if value is True else
             f"--{key.replace('_', '-')}={value}" for key, value in TEACHING[kind_name].items()]
    built = cli("build", kind_name, "-o", path, "--layout", "hand", *flags)
    assert built.returncode == 0, built.stderr
    assert "layout hand" in built.stdout
    checked = cli("check", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "layout hand" in checked.stdout


@requires_libreoffice
def test_hand_workbooks_pass_check_in_libreoffice(tmp_path):
    for kind_name, values in TEACHING.items():
        path = build(tmp_path, kind_name, values, layout="hand", name=f"{kind_name}.xlsx")
        report = check_workbook(path, engine="libreoffice")
        assert report.passed, format_report(report)


def test_an_edited_input_flows_through_the_copies(tmp_path):
    """`check` re-derives every step from the inputs the file holds now: an edited X is
    right only if the copies beside Q, K and V read it."""
    kind = KINDS["attention"]
    params = make_params(kind, TEACHING["attention"])
    path = build(tmp_path, "attention", TEACHING["attention"], layout="hand")
    wb = openpyxl.load_workbook(path)
    x = find_name(wb, "X", path)
    wb[x.sheet].cell(x.top + 1, x.left + 2).value = 7.5
    wb.save(tmp_path / "edited.xlsx")
    report = check_workbook(tmp_path / "edited.xlsx")
    assert report.passed, format_report(report)
    inputs = complete_inputs(kind, params, {}, 0)
    edited = {**inputs, "X": inputs["X"].copy()}
    edited["X"][1, 2] = 7.5
    before, after = kind.reference(inputs, params), kind.reference(edited, params)
    for step in ("Q", "K", "V", "OUTPUT"):  # the edit changes what each product must hold
        assert not np.allclose(before[step][1], after[step][1]), step


@pytest.mark.parametrize("kind_name,values", [
    ("attention", TEACHING["attention"]),
    ("multihead", TEACHING["multihead"]),
    ("encoder-block", {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 5,
                       "activation": "gelu", "embeddings": True}),
])
def test_the_plan_places_every_block_and_copy_as_the_writer_does(tmp_path, kind_name, values):
    """The limits are checked on the plan, so it must be the sheet: the same place for
    every named block, and as many cells (inputs, results and copies) as the file."""
    kind = KINDS[kind_name]
    params = make_params(kind, values)
    plan = placement_of(kind, params, "hand")
    built = write_book(kind, params, tmp_path / "book.xlsx", layout="hand")
    wb = built.workbook
    for name, block in plan.blocks.items():
        where = find_name(wb, name, built.path)
        assert (where.top, where.left, where.bottom, where.right) == \
            (block.top, block.left, block.bottom, block.right), name
    input_cells = sum(r * c for r, c in kind.input_shapes(params).values())
    assert plan.cells == input_cells + built.formula_cells


def test_beyond_teaching_sizes_is_one_line_naming_the_limit_and_the_other_layouts(tmp_path):
    target = tmp_path / "big.xlsx"
    line = one_line_error(cli("build", "attention", "-o", target, "--layout", "hand",
                              "--seq-len", HAND_MAX_SIDE + 1))
    assert f"at most {HAND_MAX_SIDE} rows and {HAND_MAX_SIDE} columns per block" in line
    assert f"block X is {HAND_MAX_SIDE + 1}×4" in line
    assert "lower --seq-len" in line and "--layout cells or --layout blocks" in line
    line = one_line_error(cli("build", "attention", "-o", target, "--layout", "hand",
                              "--d-model", 3, "--d-k", HAND_MAX_SIDE + 4))
    assert f"×{HAND_MAX_SIDE + 4}; lower --d-k," in line  # not --d-model: that one fits
    roster = tmp_path / "roster.csv"
    roster.write_text("id\ns1\n")
    line = one_line_error(cli("class", "attention", "--roster", roster, "--out",
                              tmp_path / "class", "--layout", "hand", "--seq-len",
                              HAND_MAX_SIDE + 1, "--exercise", "Q"))
    assert "--layout cells or --layout blocks" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roster.csv"]
    # the copies are formula cells: a --max-cells that the cells layout fits is too few
    params = {"seq_len": 3, "d_model": 2, "d_k": 2}
    kind = KINDS["attention"]
    cells = write_book(kind, make_params(kind, params), tmp_path / "c.xlsx")
    fits = sum(r * c for r, c in kind.input_shapes(make_params(kind, params)).values()) + \
        cells.formula_cells
    flags = ["--seq-len", 3, "--d-model", 2, "--d-k", 2, "--max-cells", fits]
    assert cli("build", "attention", "-o", tmp_path / "c2.xlsx", *flags).returncode == 0
    line = one_line_error(cli("build", "attention", "-o", target, "--layout", "hand", *flags))
    assert f"more than --max-cells {fits}" in line
    for made in ("c.xlsx", "c2.xlsx"):
        (tmp_path / made).unlink()
    # the limit itself still builds
    done = cli("build", "attention", "-o", target, "--layout", "hand", "--seq-len",
               HAND_MAX_SIDE, "--d-model", 2, "--d-k", 1)
    assert done.returncode == 0, done.stderr


def _grades_of_a_class(tmp_path, layout: str) -> dict[str, tuple]:
    """A three-student class in `layout` with two product steps to fill: one student right
    (SCORES typed, OUTPUT as formulas), one with a wrong SCORES cell, one who returns it
    untouched; their grades against the manifest."""
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name\ns1,Ann\ns2,Bo\ns3,Cy\n")
    out, returned = tmp_path / f"class_{layout}", tmp_path / f"returned_{layout}"
    done = cli("class", "attention", "--roster", roster, "--out", out, "--layout", layout,
               "--seq-len", 3, "--d-model", 2, "--d-k", 2, "--exercise", "SCORES,OUTPUT")
    assert done.returncode == 0, done.stdout + done.stderr
    kind = KINDS["attention"]
    params = make_params(kind, {"seq_len": 3, "d_model": 2, "d_k": 2})
    returned.mkdir()
    steps = ["SCORES", "OUTPUT"]
    for n, row in enumerate(csv.DictReader((out / "manifest.csv").open(encoding="utf-8"))):
        answers = kind.reference(complete_inputs(kind, params, {}, int(row["seed"])), params)
        source, target = out / row["file"], returned / row["file"]
        if n == 0:
            fill(source, answers, steps, target,
                 lambda s, i, j, v: f"={v!r}*1" if s == "OUTPUT" else v)
        elif n == 1:
            fill(source, answers, steps, target,
                 lambda s, i, j, v: v + 0.5 if (s, i, j) == ("SCORES", 2, 1) else v)
        else:
            target.write_bytes(source.read_bytes())
    grades = tmp_path / f"grades_{layout}.csv"
    result = cli("grade", returned, "--manifest", out / "manifest.json", "--out", grades)
    assert result.returncode == 0, result.stdout + result.stderr
    return {r["student"]: (r["SCORES"], r["OUTPUT"], r["score"], r["problem"], r["verified"])
            for r in csv.DictReader(grades.open(encoding="utf-8"))}


def test_a_hand_class_grades_like_the_other_layouts(tmp_path):
    hand = _grades_of_a_class(tmp_path, "hand")
    assert hand["s1"][:3] == ("9/9", "6/6", "100.0")
    assert hand["s2"][:2] == ("8/9", "6/6")  # answers come from the inputs, not carried
    assert hand["s3"][:3] == ("0/9", "0/6", "0.0")
    assert all(problem == "" for _, _, _, problem, _ in hand.values())
    assert hand == _grades_of_a_class(tmp_path, "cells")


def test_chinese_hand_sheets_translate_their_legend(tmp_path):
    small = {"seq_len": 3, "d_model": 2, "d_k": 2}
    path = build(tmp_path, "attention", small, layout="hand", lang="zh")
    legend = openpyxl.load_workbook(path)["Attention"]["A3"].value
    assert "紫色" in legend and "purple" not in legend
    path = build(tmp_path, "attention", small, layout="hand", lang="zh", name="ex.xlsx",
                 exercise=ExerciseSpec(("SCORES",)))
    legend = openpyxl.load_workbook(path)["Attention"]["A3"].value
    assert "紫色" in legend and "绿色" in legend and not re.search("[a-z]{3}", legend)
