"""Kind `sliding-window`: Longformer-style local attention with optional global tokens.

    Q = X·W_Q   K = X·W_K   V = X·W_V   S = Q·Kᵀ/√d_k
    g_i = 1 if position i is global
    M_ij = 1 if |i − j| ≤ w or g_i = 1 or g_j = 1, else 0        (w one-sided)
    m_i = max_{j: M_ij=1} S_ij   P = M·exp(S − m)   ℓ = Σ_j P   A = P/ℓ   O = A·V
"""

from dataclasses import dataclass, field

from openpyxl.worksheet.formula import ArrayFormula

from reference.sliding_window import parse_global, sliding_window_ref
from sheets._steps import ValueWidth, dims, matmul, matmul_transposed, scale
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind


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


class SlidingWindow(Kind):
    name = "sliding-window"
    summary = "Longformer sliding-window attention (--window w one-sided, --global tokens)"
    sheet_title = "SlidingWindow"
    Params = SlidingWindowParams
    reference = staticmethod(sliding_window_ref)
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
        for name in ("seq_len", "d_model", "d_k", "d_v"):
            value = getattr(p, name)
            if value is not None and value <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be a positive whole "
                                f"number, got {value}")
        if p.window < 0:
            raise UserError(f"--window must be 0 or more (keys on each side), got {p.window}")
        try:
            positions = parse_global(p.global_tokens)
        except ValueError:
            raise UserError(f"--global must be comma-separated whole numbers, got "
                            f"{p.global_tokens!r}") from None
        outside = [g for g in positions if not 0 <= g < p.seq_len]
        if outside:
            raise UserError(f"--global position {outside[0]} is outside the sequence "
                            f"(positions 0 … {p.seq_len - 1})")

    @classmethod
    def input_shapes(cls, p):
        return {"X": (p.seq_len, p.d_model), "W_Q": (p.d_model, p.d_k),
                "W_K": (p.d_model, p.d_k), "W_V": (p.d_model, p.value_width)}

    input_dims = {"X": ("seq_len", "d_model"), "W_Q": ("d_model", "d_k"),
                  "W_K": ("d_model", "d_k"), "W_V": ("d_model", "d_v")}

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        n, w = p.seq_len, p.window
        model_dims, key_dims = dims("d", p.d_model), dims("k", p.d_k)
        value_dims = dims("v", p.value_width)
        global_positions = parse_global(p.global_tokens)
        sheet.text("Step 1 — inputs: token rows X and the projection weights", bold=True)
        with sheet.band():
            x = sheet.input_block("X", inputs["X"], "token embeddings", tokens, model_dims)
            wq = sheet.input_block("W_Q", inputs["W_Q"], "query weights", model_dims, key_dims)
            wk = sheet.input_block("W_K", inputs["W_K"], "key weights", model_dims, key_dims)
            wv = sheet.input_block("W_V", inputs["W_V"], "value weights", model_dims,
                                   value_dims)
        sheet.text("Step 2 — queries, keys, values and scaled scores (as in full attention)",
                   bold=True)
        with sheet.band():
            q = matmul(sheet, "Q", "Q = X·W_Q", x, wq, tokens, key_dims)
            k = matmul(sheet, "K", "K = X·W_K", x, wk, tokens, key_dims)
            v = matmul(sheet, "V", "V = X·W_V", x, wv, tokens, value_dims)
        with sheet.band():
            scores = matmul_transposed(sheet, "SCORES", "S = Q·Kᵀ", q, k, tokens, tokens)
            scaled = scale(sheet, "SCALED", scores, p.d_k, tokens,
                           "Dividing by √d_k keeps the scores from growing with the width.")
        shown = ", ".join(map(str, global_positions)) or "none"
        sheet.text(f"Step 3 — the band mask: window w = {w} on each side, global positions: "
                   f"{shown}", bold=True)
        positions = list(range(n))
        with sheet.band():
            flags = _global_block(sheet, global_positions, positions) if global_positions \
                else None
            mask = _band_mask(sheet, w, flags, positions)
        sheet.text("Step 4 — softmax over the allowed keys only: max, exp, sum, divide",
                   bold=True)
        with sheet.band():
            weights = _masked_softmax(sheet, scaled, mask, tokens)
        sheet.text("Step 5 — weighted sum of the values", bold=True)
        matmul(sheet, "OUTPUT", "O = A·V", weights, v, tokens, value_dims,
               "Each output row mixes only the value rows its query may see.")


def _global_block(sheet, global_positions, positions):
    """g_i = 1 if position i is listed in --global (the row label is i)."""
    def cell(i, j):
        me = sheet.current
        tests = ",".join(f"{me.row_label(i)}={g}" for g in global_positions)
        return f"=IF(OR({tests}),1,0)"

    def array(me):  # OR would collapse an array to one value; a sum of tests does not
        # "0+" turns a lone TRUE/FALSE into a number: Excel ranks TRUE and FALSE above 0
        tests = "+".join(f"({me.row_labels()}={g})" for g in global_positions)
        return f"=IF(0+{tests}>0,1,0)"

    return sheet.step_block(
        "GLOBAL", "g_i = 1 if i is a global position", len(positions), 1, positions,
        ["global"], cells=cell, array=array, corner="position",
        explanation="Global tokens (e.g. [CLS]) attend to every token and every token "
                    "attends to them.")


def _band_mask(sheet, w, flags, positions):
    """M_ij = 1 if |j − i| ≤ w or g_i = 1 or g_j = 1; labels are the 0-based positions."""
    n = len(positions)

    def cell(i, j):
        me = sheet.current
        band = f"ABS({me.col_label(j)}-{me.row_label(i)})<={w}"
        if flags is None:
            return f"=IF({band},1,0)"
        return f"=IF(OR({band},{flags.fixed(i, 0)}=1,{flags.fixed(j, 0)}=1),1,0)"

    def array(me):
        band = f"(ABS({me.col_labels()}-{me.row_labels()})<={w})"
        if flags is None:
            return f"=IF({band},1,0)"
        return f"=IF({band}+{flags.whole()}+TRANSPOSE({flags.whole()})>0,1,0)"

    equation = f"1 if |j − i| ≤ {w}" + (" or i, j global" if flags is not None else "")
    return sheet.step_block(
        "MASK", equation, n, n, positions, positions, cells=cell, array=array,
        corner="query\\key", heatmap=True,
        explanation="The band: query i sees keys within w positions on either side, plus "
                    "the global tokens. Masked entries are left out of the softmax, so no "
                    "−∞ is needed.")


def _masked_softmax(sheet, scaled, mask, labels):
    """The row softmax over entries with M_ij = 1 (any pattern, not only a causal prefix)."""
    n = scaled.rows

    # m_i = max_{j: M_ij=1} S_ij — one single-cell array formula per row (MAX over an IF)
    def max_cell(i, j):
        me = sheet.current
        return ArrayFormula(me.cell(i, 0),
                            f"=MAX(IF({mask.row(i)}=1,{scaled.row(i)},-1E+30))")

    row_max = sheet.step_block(
        "ROW_MAX", "m = max_{j: M_ij=1} S_ij", n, 1, labels, ["max"], cells=max_cell,
        explanation="Largest allowed score of each row (an array formula: MAX over "
                    "IF(mask=1, score, -1E+30)); the −1E+30 never wins because every row "
                    "allows its own position.")
    # p_ij = M_ij · exp(s_ij − m_i)
    exp = sheet.step_block(
        "EXP", "P = exp(S − m) if M = 1 else 0", n, n, labels, labels,
        cells=lambda i, j: f"=IF({mask.cell(i, j)}=1,EXP({scaled.cell(i, j)}-"
                           f"{row_max.row(i)}),0)",
        array=lambda me: f"=IF({mask.whole()}=1,EXP({scaled.whole()}-{row_max.whole()}),0)",
        explanation="Exponential of each shifted allowed score; masked entries are 0.")
    # ℓ_i = Σ_j p_ij
    row_sum = sheet.step_block(
        "ROW_SUM", "ℓ = Σ_j P_ij", n, 1, labels, ["sum"],
        cells=lambda i, j: f"=SUM({exp.row(i)})",
        explanation="Row sums of the exponentials: the softmax denominator.")
    # a_ij = p_ij / ℓ_i
    return sheet.step_block(
        "WEIGHTS", "A = P / ℓ", n, n, labels, labels,
        cells=lambda i, j: f"={exp.cell(i, j)}/{row_sum.row(i)}",
        array=lambda me: f"={exp.whole()}/{row_sum.whole()}", heatmap=True,
        explanation="Attention weights: zero outside the band, each row sums to 1.")


# sheet text in Chinese (workbook_builder/i18n.py)
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
