"""`reproduce wo-ai-ai`: the tutorial's worked example, with the printed numbers that its
own formula does not give named. Expected values are derived here with math.exp."""

import math
import re

import openpyxl
from helpers.cli import cli

from workbook_builder.teaching.reproduce import TUTORIALS


def softmax(row):
    e = [math.exp(s) for s in row]
    return [x / sum(e) for x in e]


def independent_values():
    """The tutorial's own formula, softmax(QKᵀ/√d)·V with X = [[1,0],[0,1],[1,1]], W = I."""
    x = [[1, 0], [0, 1], [1, 1]]
    dot = [[sum(a * b for a, b in zip(p, q, strict=True)) for q in x] for p in x]
    single_w = [softmax([s / math.sqrt(2) for s in row]) for row in dot]
    single_o = [[sum(w[j] * x[j][c] for j in range(3)) for c in range(2)] for w in single_w]
    values = {("attention", "SCORES"): dot,
              ("attention", "SCALED"): [[s / math.sqrt(2) for s in r] for r in dot],
              ("attention", "WEIGHTS"): single_w, ("attention", "OUTPUT"): single_o}
    concat = [[0.0, 0.0] for _ in range(3)]
    for h in range(2):  # head h sees column h only; d_k = 1 so the scale is 1
        scores = [[x[i][h] * x[j][h] for j in range(3)] for i in range(3)]
        weights = [softmax(r) for r in scores]
        out = [[sum(w[j] * x[j][h] for j in range(3))] for w in weights]
        values[("multihead", f"SCORES_H{h + 1}")] = scores
        values[("multihead", f"WEIGHTS_H{h + 1}")] = weights
        values[("multihead", f"HEAD_H{h + 1}")] = out
        for i in range(3):
            concat[i][h] = out[i][0]
    values[("multihead", "CONCAT")] = concat
    return values


def test_reproduce_names_exactly_the_wrong_printed_numbers(tutorial):
    truth = independent_values()
    expected_wrong = set()
    for example in TUTORIALS["wo-ai-ai"].examples:
        for step, matrix in example.printed.items():
            for i, row in enumerate(matrix):
                for j, printed in enumerate(row):
                    if abs(printed - truth[(example.kind, step)][i][j]) > 0.0005:
                        expected_wrong.add((example.kind, step, i, j))
    # the softmax rows are where the tutorial goes wrong; its scores are right
    assert ("attention", "WEIGHTS", 0, 0) in expected_wrong
    assert not any(step.startswith("SCORES") for _, step, _, _ in expected_wrong)

    result = tutorial
    tokens = TUTORIALS["wo-ai-ai"].tokens
    named = set()
    for kind, step, token, col, _printed, correct in re.findall(
            r"^  (\w+) (\w+) row (\S+) col (\d+): printed ([\d.]+), correct ([\d.]+)$",
            result.stdout, re.M):
        i, j = tokens.index(token), int(col) - 1
        named.add((kind, step, i, j))
        assert abs(float(correct) - truth[(kind, step)][i][j]) < 0.0005
    assert named == expected_wrong
    assert f"{len(expected_wrong)} of 81 printed numbers differ" in result.stdout


def test_reproduce_workbooks_hold_live_agree_formulas(tutorial):
    wb = openpyxl.load_workbook(tutorial.out / "wo-ai-ai_attention.xlsx")
    ws = wb["Tutorial"]
    row = next(r for r in range(6, ws.max_row + 1) if ws.cell(r, 1).value == "WEIGHTS")
    assert ws.cell(row, 4).value == 0.370
    assert ws.cell(row, 5).value.startswith("='Attention'!")
    assert ws.cell(row, 6).value.startswith("=IF(ABS(")
    assert cli("check", tutorial.out / "wo-ai-ai_multihead.xlsx").returncode == 0
    again = cli("reproduce", "wo-ai-ai", "--out", tutorial.out)
    assert again.returncode == 2 and "--force" in again.stderr
