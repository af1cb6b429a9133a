"""Kind `sliding-window`: Longformer-style local attention with optional global tokens.

    Q = X·W_Q   K = X·W_K   V = X·W_V   S = Q·Kᵀ/√d_k
    g_i = 1 if position i is global
    M_ij = 1 if |i − j| ≤ w or g_i = 1 or g_j = 1, else 0        (w one-sided)
    m_i = max_{j: M_ij=1} S_ij   P = M·exp(S − m)   ℓ = Σ_j P   A = P/ℓ   O = A·V
"""

from dataclasses import dataclass, field, replace

from reference.sliding_window import sliding_window_ref
from sheets._bands import (
    COST_ZH,
    QKV_INPUTS,
    Cost,
    ValueWidth,
    cost_section,
    position_label_sets,
    projections,
    scaled_scores,
    softmax_steps,
    weighted_values,
)
from workbook_builder.errors import UserError
from workbook_builder.sheet import Cell, Custom, Kind, Step, section


def parse_global(text: str) -> list[int]:
    """'0,5' -> [0, 5] (sorted, duplicates dropped); '' -> []. Written again here on purpose:
    a sheet imports only its own reference function (reference.sliding_window has the
    same)."""
    return sorted({int(part) for part in text.split(",") if part.strip()})


@dataclass(frozen=True)
class SlidingWindowParams(ValueWidth):
    seq_len: int = field(default=6, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width (columns of X)"})
    d_k: int = field(default=4, metadata={"help": "query/key width (columns of W_Q, W_K)"})
    d_v: int | None = field(default=None, metadata={
        "help": "value width (columns of W_V); default d_k"})
    window: int = field(default=1, metadata={
        "help": "one-sided window w: query i sees keys i−w … i+w (0 = itself only)"})
    global_tokens: str = field(default="", metadata={
        "metavar": "I,J,…", "flag": "--global",  # `global` is a Python keyword
        "help": "0-based positions of global tokens, e.g. 0,5 (they see and are seen by "
                "every token)"})

    @property
    def global_positions(self) -> list[int]:
        return parse_global(self.global_tokens)


# g_i = 1 if position i (the row label) is listed in --global
def global_cell(i, j, env):
    tests = ",".join(f"{env.me.row_label(i)}={g}" for g in env.params.global_positions)
    return f"=IF(OR({tests}),1,0)"


def global_whole(env):  # OR would collapse an array to one value; a sum of tests does not
    # "0+" turns a lone TRUE/FALSE into a number: Excel ranks TRUE and FALSE above 0
    tests = "+".join(f"({env.me.row_labels()}={g})" for g in env.params.global_positions)
    return f"=IF(0+{tests}>0,1,0)"


# M_ij = 1 if |j − i| ≤ w or g_i = 1 or g_j = 1; the labels are the 0-based positions
def mask_cell(i, j, env):
    band = f"ABS({env.me.col_label(j)}-{env.me.row_label(i)})<={env.params.window}"
    if not env.params.global_positions:
        return f"=IF({band},1,0)"
    flags = env["GLOBAL"]
    return f"=IF(OR({band},{flags.fixed(i, 0)}=1,{flags.fixed(j, 0)}=1),1,0)"


def mask_whole(env):
    band = f"(ABS({env.me.col_labels()}-{env.me.row_labels()})<={env.params.window})"
    if not env.params.global_positions:
        return f"=IF({band},1,0)"
    flags = env["GLOBAL"].whole()
    return f"=IF({band}+{flags}+TRANSPOSE({flags})>0,1,0)"


# m_i = max_{j: M_ij=1} S_ij: a single-cell array formula per row (MAX over an IF)
def row_max_cell(i, j, env):
    return Cell(f"=MAX(IF({env['MASK'].row(i)}=1,{env['SCALED'].row(i)},-1E+30))",
                array=True)


def masked_softmax() -> list[Step]:
    """The shared row softmax over entries with M_ij = 1 (any pattern, not only a causal
    prefix): its row max reads the mask instead of ending at the diagonal."""
    row_max, exp, row_sum, weights = softmax_steps(mask="MASK")
    return [
        replace(row_max, equation="m = max_{j: M_ij=1} S_ij",
                formula=Custom("seq_len", 1, row_max_cell), row_labels="tokens",
                explanation="Largest allowed score of each row (an array formula: MAX over "
                            "IF(mask=1, score, -1E+30)); the −1E+30 never wins because every "
                            "row allows its own position."),
        replace(exp, equation="P = exp(S − m) if M = 1 else 0",
                explanation="Exponential of each shifted allowed score; masked entries "
                            "are 0."),
        row_sum,
        replace(weights, explanation="Attention weights: zero outside the band, each row "
                                     "sums to 1."),
    ]


class SlidingWindow(Kind):
    name = "sliding-window"
    summary = "Longformer sliding-window attention (--window w one-sided, --global tokens)"
    sheet_title = "SlidingWindow"
    Params = SlidingWindowParams
    reference = staticmethod(sliding_window_ref)
    inputs = QKV_INPUTS
    label_sets = classmethod(position_label_sets)
    test_cases = [
        {"seq_len": 5, "d_model": 3, "d_k": 2, "window": 1},
        {"seq_len": 6, "d_model": 4, "d_k": 3, "d_v": 2, "window": 1,
         "global_tokens": "0,4"},
        {"seq_len": 4, "d_model": 2, "d_k": 2, "window": 0, "global_tokens": "3"},
    ]
    demo_cases = [
        ("sliding_window", {"seq_len": 8, "d_model": 4, "d_k": 4, "window": 1}),
        ("sliding_window_global", {"seq_len": 8, "d_model": 4, "d_k": 4, "window": 1,
                                   "global_tokens": "0,5"}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(replace(p, window=1))  # sizes positive; a window may be 0
        if p.window < 0:
            raise UserError(f"--window must be 0 or more (keys on each side), got {p.window}")
        try:
            positions = p.global_positions
        except ValueError:
            raise UserError(f"--global must be comma-separated whole numbers, got "
                            f"{p.global_tokens!r}") from None
        outside = [g for g in positions if not 0 <= g < p.seq_len]
        if outside:
            raise UserError(f"--global position {outside[0]} is outside the sequence "
                            f"(positions 0 … {p.seq_len - 1})")

    @classmethod
    def sections(cls, p):
        shown = ", ".join(map(str, p.global_positions)) or "none"
        flags = [Step("GLOBAL", "g_i = 1 if i is a global position",
                      Custom("seq_len", 1, global_cell, whole=global_whole),
                      "Global tokens (e.g. [CLS]) attend to every token and every token "
                      "attends to them.", row_labels="positions", col_labels=["global"],
                      corner="position")] if p.global_positions else []
        mask = Step("MASK", "1 if |j − i| ≤ {window}" + (" or i, j global" if flags else ""),
                    Custom("seq_len", "seq_len", mask_cell, whole=mask_whole),
                    "The band: query i sees keys within w positions on either side, plus "
                    "the global tokens. Masked entries are left out of the softmax, so no "
                    "−∞ is needed.", row_labels="positions", col_labels="positions",
                    corner="query\\key", heatmap=True)
        return [
            section("Step 1 — inputs: token rows X and the projection weights", QKV_INPUTS),
            section("Step 2 — queries, keys, values and scaled scores (as in full "
                    "attention)", projections(), scaled_scores()),
            section(f"Step 3 — the band mask: window w = {{window}} on each side, global "
                    f"positions: {shown}", flags + [mask]),
            section("Step 4 — softmax over the allowed keys only: max, exp, sum, divide",
                    masked_softmax()),
            section("Step 5 — weighted sum of the values", weighted_values(
                "Each output row mixes only the value rows its query may see.")),
            cost_section(COST_TITLE, COST_SIZES, costs(p)),
        ]


# sheet text in Chinese (workbook_builder/teaching/i18n.py)
SlidingWindow.translations = {"zh": {
    "Longformer sliding-window attention (--window w one-sided, --global tokens)":
        "Longformer 滑动窗口注意力（--window w 为单侧窗口，--global 为全局词）",
    "Step 2 — queries, keys, values and scaled scores (as in full attention)":
        "Step 2：生成 Q、K、V 并计算缩放分数（与完整注意力相同）",
    "Step 3 — the band mask: window w = {w} on each side, global positions: {g}":
        "Step 3：带状掩码 — 每侧窗口 w = {w}，全局位置：{g}",
    "The band: query i sees keys within w positions on either side, plus the global tokens. "
    "Masked entries are left out of the softmax, so no −∞ is needed.":
        "带状区域：查询 i 能看到两侧 w 个位置以内的键，以及全局词。被掩码的位置不参与 Softmax，"
        "因此不需要 −∞。",
    "Step 4 — softmax over the allowed keys only: max, exp, sum, divide":
        "Step 4：只在允许的键上做 Softmax 归一化 — 最大值、指数、求和、相除",
    "Largest allowed score of each row (an array formula: MAX over IF(mask=1, score, "
    "-1E+30)); the −1E+30 never wins because every row allows its own position.":
        "每行允许位置中的最大分数（数组公式：对 IF(mask=1, 分数, -1E+30) 取 MAX）；"
        "−1E+30 永远不会胜出，因为每行都允许它自己的位置。",
    "Exponential of each shifted allowed score; masked entries are 0.":
        "每个允许位置平移后分数的指数；被掩码的位置为 0。",
    "Attention weights: zero outside the band, each row sums to 1.":
        "注意力权重：带外为零，每行和为 1。",
    "P = exp(S − m) if M = 1 else 0": "P = exp(S − m)（M = 1 时），否则为 0",
    "Step 5 — weighted sum of the values": "Step 5：加权求和 — Output = 注意力权重 · V",
    "Each output row mixes only the value rows its query may see.":
        "每个输出行只混合其查询可以看到的值行。",
    "Global tokens (e.g. [CLS]) attend to every token and every token attends to them.":
        "全局词（如 [CLS]）关注所有词，所有词也都关注它们。",
    "g_i = 1 if i is a global position": "i 为全局位置时 g_i = 1",
    "1 if |j − i| ≤ {w} or i, j global": "|j − i| ≤ {w} 或 i、j 为全局位置时为 1",
    "position": "位置", "global": "全局",
}}


# -- the cost table: the band's scores and multiply-adds as functions of n ---------------
COST_TITLE = "Cost — the band holds about n·(2w+1) scores: O(n·w), not O(n²); at this " \
             "sheet's n and at n = 1k, 4k, 32k"
COST_SIZES = {"n": "seq_len", "d_k": "d_k", "d_v": "value_width", "w": "window"}
# Σ_i (min(i+w, n−1) − max(i−w, 0) + 1) = n·(2w′+1) − w′·(w′+1), w′ = min(w, n−1)
BAND = "={n}*(2*MIN({w},{n}-1)+1)-MIN({w},{n}-1)*(MIN({w},{n}-1)+1)"
BAND_EQUATION = "n·(2w′+1) − w′·(w′+1)"
BAND_NOTE = "Cells with |i − j| ≤ w: 2w+1 per row, fewer in the first and last w rows " \
            "(w′ = min(w, n−1))."


def global_extra(p) -> str:
    """Cells the global tokens add to the band: row g and column g are whole,
    2·Σ_g (n − band cells of row g), less the cells in both a global row and a global
    column that lie outside the band, #{(a, b) ∈ G²: |a − b| > w}. A term counts only
    while its position lies inside n."""
    rows = "+".join(f"IF({g}<{{n}},{{n}}-(MIN({g}+{{w}},{{n}}-1)-MAX({g}-{{w}},0)+1),0)"
                    for g in p.global_positions)
    pairs = "+".join(f"IF(AND({b}<{{n}},{b - a}>{{w}}),1,0)"
                     for a in p.global_positions for b in p.global_positions if a < b)
    return f"=2*({rows})" + (f"-2*({pairs})" if pairs else "")


# the allowed scores times d_k (Q·Kᵀ) and d_v (A·V), as a kernel that skips masked pairs
MACS = Cost("COST_MACS", "allowed·(d_k + d_v)", "={COST_HELD}*({d_k}+{d_v})",
            "Multiply-adds of a banded kernel: d_k per allowed score, d_v per allowed weight. "
            "This sheet computes all n² scores and masks them afterwards (to show the band): "
            "that is COST_STD_MACS.")
STD = [Cost("COST_STD_HELD", "n²", "={n}^2",
            "Full attention, and the SCORES block of this sheet: n×n.", "scores"),
       Cost("COST_STD_MACS", "n²·(d_k + d_v)", "={n}^2*({d_k}+{d_v})",
            "Multiply-adds of full attention: Q·Kᵀ and A·V over every pair.")]


def costs(p) -> list[Cost]:
    if not p.global_positions:
        return [Cost("COST_HELD", BAND_EQUATION, BAND, BAND_NOTE + " The scores the mask "
                     "allows. O(n·w).", "scores"), MACS, *STD]
    return [Cost("COST_BAND", BAND_EQUATION, BAND, BAND_NOTE, "scores"),
            Cost("COST_GLOBAL", "2·Σ_g (n − band_g) − pairs", global_extra,
                 "What the global tokens add: their rows and columns are whole (n cells), "
                 "less the band_g cells of row g already counted and the pairs of global "
                 "positions farther apart than w, counted twice. O(n·g).", "scores"),
            Cost("COST_HELD", "band + global", "={COST_BAND}+{COST_GLOBAL}",
                 "The scores the mask allows (the ones in MASK).", "scores"),
            MACS, *STD]


SlidingWindow.translations["zh"].update({
    **COST_ZH,
    COST_TITLE: "代价 — 带状区域约保存 n·(2w+1) 个分数：O(n·w)，而不是 O(n²)；取本表的 n 以及 "
                "n = 1k、4k、32k",
    BAND_NOTE: "满足 |i − j| ≤ w 的单元格：每行 2w+1 个，最前和最后 w 行更少（w′ = min(w, n−1)）。",
    BAND_NOTE + " The scores the mask allows. O(n·w).":
        "满足 |i − j| ≤ w 的单元格：每行 2w+1 个，最前和最后 w 行更少（w′ = min(w, n−1)）。"
        "即掩码允许的分数。O(n·w)。",
    "What the global tokens add: their rows and columns are whole (n cells), less the band_g "
    "cells of row g already counted and the pairs of global positions farther apart than w, "
    "counted twice. O(n·g).":
        "全局词增加的单元格：它们的行和列是完整的（n 个），减去第 g 行已计入的 band_g 个"
        "带内单元格，以及相距超过 w 的全局位置对（它们被计入了两次）。O(n·g)。",
    "2·Σ_g (n − band_g) − pairs": "2·Σ_g (n − band_g) − 位置对数",
    "The scores the mask allows (the ones in MASK).": "掩码允许的分数（MASK 中的 1）。",
    "band + global": "带内 + 全局",
    "allowed·(d_k + d_v)": "允许数·(d_k + d_v)",
    "Multiply-adds of a banded kernel: d_k per allowed score, d_v per allowed weight. This "
    "sheet computes all n² scores and masks them afterwards (to show the band): that is "
    "COST_STD_MACS.": "带状内核的乘加次数：每个允许的分数 d_k 次，每个允许的权重 d_v 次。本表"
                      "先计算全部 n² 个分数再做掩码（为了展示带状区域）：那是 COST_STD_MACS。",
    "Full attention, and the SCORES block of this sheet: n×n.":
        "完整注意力，也就是本表的 SCORES 块：n×n。",
    "Multiply-adds of full attention: Q·Kᵀ and A·V over every pair.":
        "完整注意力的乘加次数：对每一对计算 Q·Kᵀ 与 A·V。",
})
