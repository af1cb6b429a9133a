"""Kind `scaling`: why attention divides the scores by √d_k.

For each width w = d_k, with Q_Dw and K_Dw (n×w) drawn N(0, 1):
    S = Q·Kᵀ      var(S) ≈ w          S/√w      var(S/√w) ≈ 1
    a = softmax of each row, of S (suffix _RAW) and of S/√w (no suffix)
    max_j a_ij per row
    J = diag(a) − a·aᵀ for row 1 (∂a_j/∂s_k), its largest |entry| and ‖J‖_F
    ‖J_i‖_F of every row i
    SUMMARY: one row per width; a chart of ‖J‖_F against d_k
Variances are population variances over the n² pairs: Σ S²/n² − (Σ S/n²)².
"""

import re
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from reference.scaling import scaling_ref
from sheets._blocks.attention import QUERY_KEY
from sheets._blocks.labels import positions_from_1
from sheets._blocks.softmax import softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    ByRow,
    Cell,
    Chart,
    Custom,
    Input,
    Kind,
    Map,
    MatMul,
    MaxAbsDiff,
    Reduce,
    Rows,
    Series,
    Step,
    row_or_cell,
    section,
)

MAX_WIDTH = 1024  # every width 1 … MAX_WIDTH has its Q and K declared (see `inputs`)
DEFAULT_WIDTHS = "4,16,64,256,512"


def parse_widths(text: str) -> list[int]:
    """"4,16,64" -> [4, 16, 64]: whole numbers from 1 to MAX_WIDTH, increasing."""
    parts = [part.strip() for part in str(text).split(",")]
    if not all(re.fullmatch(r"[0-9]+", part) for part in parts):
        raise UserError(f"--widths must be comma-separated whole numbers, e.g. "
                        f"{DEFAULT_WIDTHS}; got {text!r}")
    widths = [int(part) for part in parts]
    for w in widths:
        if not 1 <= w <= MAX_WIDTH:
            raise UserError(f"--widths: each width must be from 1 to {MAX_WIDTH}, got {w}")
    if any(b <= a for a, b in zip(widths, widths[1:], strict=False)):
        raise UserError(f"--widths must increase, each width once (e.g. {DEFAULT_WIDTHS}); "
                        f"got {text}")
    return widths


@dataclass(frozen=True)
class ScalingParams:
    widths: str = field(default=DEFAULT_WIDTHS, metadata={
        "help": f"the widths d_k to compare, comma-separated and increasing, each 1 … "
                f"{MAX_WIDTH}"})
    seq_len: int = field(default=32, metadata={
        "help": "query and key rows n: n² pairs q·k per width"})

    @cached_property
    def width_list(self) -> list[int]:
        return parse_widths(self.widths)


def listed(w: int):
    return lambda p: w in p.width_list


# Q_Dw, K_Dw for every width a sheet may have; --widths switches them on
INPUTS = {f"{side}_D{w}": Input(f"{side}_D{w}", "seq_len", w, title, side.lower(), "d",
                                when=listed(w))
          for w in range(1, MAX_WIDTH + 1)
          for side, title in (("Q", "queries q ~ N(0, 1)"), ("K", "keys k ~ N(0, 1)"))}

# I_jk = 1 if j = k else 0; the labels are the positions the formula compares
EYE = Step("EYE", "I: 1 if j = k else 0",
           Map("=IF({COL_LABEL}={ROW_LABEL},1,0)", rows="seq_len", cols="seq_len"),
           "The identity matrix: diag(a) = I·a in every Jacobian below.",
           row_labels=positions_from_1, col_labels=positions_from_1)
# 1 − I_jk: picks the pairs j ≠ k, so no norm below subtracts the diagonal (which would
# cancel to noise when one weight is nearly 1)
OFF_DIAG = Step("OFF_DIAG", "1 − I: 1 if j ≠ k else 0", Map("=1-{I}", I="EYE"),
                "Ones off the diagonal: sums over pairs j ≠ k.")


def variance(name: str, equation: str, source: str, explanation: str) -> Step:
    """var = Σ S²/n² − (Σ S/n²)²: the population variance of every entry of `source`."""
    def template(p) -> str:
        count = p.seq_len ** 2
        return f"=SUMPRODUCT({{S}},{{S}})/{count}-(SUM({{S}})/{count})^2"

    return Step(name, equation, Reduce(template, S=source), explanation, row_labels=[""],
                col_labels=["var"])


def scores_band(w: int) -> list[Step]:
    d = f"_D{w}"
    return [
        # S = Q·Kᵀ
        Step(f"SCORES{d}", "S = Q·Kᵀ", MatMul(f"Q{d}", f"K{d}", transpose="b"),
             "Dot product of query i with key j: a sum of d_k products, each of variance 1.",
             corner=QUERY_KEY),
        # S / √d_k
        Step(f"SCALED{d}", f"S / √d_k   (d_k = {w})", Map(f"={{S}}/SQRT({w})", S=f"SCORES{d}"),
             "Dividing by √d_k divides the variance by d_k.", corner=QUERY_KEY),
        # var(S) = Σ S²/n² − (Σ S/n²)²  ≈ d_k
        variance(f"VAR_SCORES{d}", f"var(S) ≈ d_k = {w}", f"SCORES{d}",
                 "Population variance of the n² scores: Σ S²/n² − (Σ S/n²)²."),
        # var(S/√d_k) ≈ 1
        variance(f"VAR_SCALED{d}", "var(S/√d_k) ≈ 1", f"SCALED{d}",
                 "The same for the scaled scores."),
    ]


def weight(env, weights: str, i: int, j: int) -> str:
    return env[weights].fixed(i, j)


def jacobian_steps(sfx: str) -> list[Step]:
    """Each row's largest weight, row 1's Jacobian J = diag(a) − a·aᵀ with its largest
    |entry| and Frobenius norm, and every row's Frobenius norm."""
    weights, jac = f"WEIGHTS{sfx}", f"JAC{sfx}"

    def jac_row(j, k, env):  # J_jk = I_jk·a_j − a_j·a_k; row j (k None): I_j·a_j − a_j·a
        a_j = weight(env, weights, 0, j)
        a_k = env[weights].row(0) if k is None else weight(env, weights, 0, k)
        return f"={row_or_cell(env['EYE'], j, k)}*{a_j}-{a_j}*{a_k}"

    def row_norm(i, _, env):  # ‖J_i‖² = Σ_j (a_j − a_j²)² + Σ_j a_j²·Σ_{k≠j} a_k²
        a = env[weights].row(i)
        return Cell(f"=SQRT(SUMPRODUCT(({a}-{a}*{a})^2)"
                    f"+SUMPRODUCT({a}*{a},MMULT({a}*{a},{env['OFF_DIAG'].whole()})))",
                    array=True)

    return [
        # max_j a_ij
        Step(f"MAX_WEIGHT{sfx}", "max_j a_ij", Rows("=MAX({A})", A=weights),
             "Largest weight of each row: near 1 means the softmax is nearly one-hot.",
             col_labels=["max"]),
        # J = diag(a) − a·aᵀ, a = row 1 of the weights
        Step(jac, "J = diag(a) − a·aᵀ,  a = row 1 of A",
             ByRow("seq_len", "seq_len", jac_row),
             "∂a_j/∂s_k for query 1: how each weight moves when a score moves. This is the "
             "gradient the softmax passes back.", row_labels="a", col_labels="s",
             corner="∂a\\∂s"),
        # max_jk |J_jk|
        Step(f"JAC_MAX{sfx}", "max |J_jk|",
             MaxAbsDiff(jac),
             "Largest entry of J in size (at most 1/4).", row_labels=[""], col_labels=["max"]),
        # ‖J‖_F = √Σ J²
        Step(f"JAC_NORM{sfx}", "‖J‖_F = √Σ J_jk²",
             Reduce("=SQRT(SUMPRODUCT({J},{J}))", J=jac),
             "Frobenius norm of J: the size of the whole gradient.", row_labels=[""],
             col_labels=["‖J‖_F"]),
        # ‖J_i‖_F = √(Σ_j (a_j − a_j²)² + Σ_j a_j²·Σ_{k≠j} a_k²), a = row i
        Step(f"ROW_JAC_NORM{sfx}", "‖J_i‖_F = √(Σ_j (a_j − a_j²)² + Σ_j a_j²·Σ_{k≠j} a_k²)",
             ByRow("seq_len", 1, row_norm, per_cell=True),
             "The Frobenius norm of the Jacobian of every row, without writing it out: "
             "its diagonal plus its off-diagonal part (row 1 equals the norm beside).",
             col_labels=["‖J_i‖_F"]),
    ]


def gradient_band(scores: str, sfx: str) -> list[Step]:
    of = "S" if sfx.startswith("_RAW") else "(S/√d_k)"
    return [*softmax_steps(scores, suffix=sfx, of=of), *jacobian_steps(sfx)]


def width_section(w: int):
    d = f"_D{w}"
    return section(
        f"d_k = {w} — scores with and without the scale; below, the softmax of S, then of "
        f"S/√d_k, each with its largest weight and its Jacobian",
        [INPUTS[f"Q{d}"], INPUTS[f"K{d}"]],
        scores_band(w),
        gradient_band(f"SCORES{d}", f"_RAW{d}"),
        gradient_band(f"SCALED{d}", d))


# one row per width: the block each column reads (its name before _Dw), and how: its one
# cell, the mean or the median of its column
SUMMARY_COLUMNS = [("VAR_SCORES", "cell", "var raw"), ("VAR_SCALED", "cell", "var scaled"),
                   ("MAX_WEIGHT_RAW", "mean", "max a raw"), ("MAX_WEIGHT", "mean", "max a scaled"),
                   ("ROW_JAC_NORM_RAW", "mean", "‖J‖ raw"), ("ROW_JAC_NORM", "mean", "‖J‖ scaled"),
                   ("ROW_JAC_NORM_RAW", "median", "‖J‖ median raw"),
                   ("ROW_JAC_NORM", "median", "‖J‖ median scaled")]


def summary_cell(i, j, env):
    name, how, _ = SUMMARY_COLUMNS[j]
    block = env[f"{name}_D{env.params.width_list[i]}"]
    if how == "cell":
        return f"={block.fixed(0, 0)}"
    if how == "mean":
        return f"=SUM({block.whole()})/{block.rows}"
    return f"=MEDIAN({block.whole()})"


SUMMARY = Step(
    "SUMMARY", "per d_k: var S, var S/√d_k; mean over rows of max_j a_ij; mean and median over "
               "rows of ‖J_i‖_F — raw = softmax of S, scaled = softmax of S/√d_k",
    Custom(lambda p: len(p.width_list), len(SUMMARY_COLUMNS), summary_cell),
    "Each column reads the blocks of its width above: the raw scores' variance grows like "
    "d_k and their softmax's gradient vanishes; the scaled ones stay put.",
    row_labels=lambda p: p.width_list, col_labels=[label for *_, label in SUMMARY_COLUMNS],
    corner="d_k")

CHART = Chart("The softmax's gradient ‖J‖_F against d_k (mean and median over rows)",
              tuple(Series("SUMMARY", j) for j in range(4, 8)), x_title="d_k",
              y_title="‖J‖_F", log_x=2)


class Scaling(Kind):
    name = "scaling"
    summary = "why divide by √d_k: score variance, softmax saturation and its gradient per width"
    sheet_title = "Scaling"
    Params = ScalingParams
    reference = staticmethod(scaling_ref)
    inputs = list(INPUTS.values())
    test_cases = [
        {"widths": "4,16", "seq_len": 6},
        {"widths": "1,3,8", "seq_len": 4},
        {"widths": "64,512", "seq_len": 5},  # nearly one-hot rows: norms of tiny gradients
        {"widths": "2", "seq_len": 1},
    ]
    # the demo is small; the default widths are built and read in tests/test_scaling.py
    demo_cases = [("scaling", {"seq_len": 8, "widths": "4,16,64"})]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        parse_widths(p.widths)

    @classmethod
    def random_input(cls, name, shape, params, rng):
        """N(0, 1) entries (unit variance is the point), rounded to 2 decimals."""
        return np.round(rng.standard_normal(shape), 2)

    @classmethod
    def sections(cls, p):
        return [
            section("Why divide by √d_k? Each q·k adds d_k products of unit variance, so "
                    "var(q·k) = d_k: the scores grow with the width.", bold=False),
            section("Large scores make the softmax nearly one-hot, and its Jacobian "
                    "J = diag(a) − a·aᵀ, the gradient it passes back, goes to 0. Dividing by "
                    "√d_k keeps the variance at 1 for every width.", bold=False),
            section("The table and chart at the bottom (SUMMARY) collect every width.",
                    bold=False),
            section("The identity matrix and its complement, used by every Jacobian",
                    [EYE, OFF_DIAG]),
            *[width_section(w) for w in p.width_list],
            section("Summary — one row per width; the chart reads the table's live cells",
                    [SUMMARY, CHART]),
        ]
