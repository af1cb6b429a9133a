"""Kind `flash`: FlashAttention-2's blockwise online softmax, one key block at a time.

    Q = X·W_Q   K = X·W_K   V = X·W_V                     (as in `attention`)
    for each key block j (B keys; the last block may be shorter):
      S_j = Q·K_jᵀ/√d_k    m_j = max(m_{j−1}, rowmax S_j)   α_j = exp(m_{j−1} − m_j)
      P_j = exp(S_j − m_j)  ℓ_j = α_j·ℓ_{j−1} + rowsum P_j   Õ_j = α_j·Õ_{j−1} + P_j·V_j
    O = Õ_T / ℓ_T     LSE = m_T + ln ℓ_T
Block 1 starts the state (m_1 = rowmax S_1, ℓ_1 = rowsum P_1, Õ_1 = P_1·V_1), so no −∞ is
needed. Causal: query rows are blocked like the keys; a key block wholly above a query
block's diagonal is skipped (its S and P cells hold 0, shown grey as "skip"; m, ℓ and Õ
pass through, α = 1); the diagonal block keeps every score in S and masks P with IF and
the max with its range, as `attention` does. Beside it, plain softmax attention from the
same Q, K, V and a live max |flash − standard|.
"""

from dataclasses import dataclass, field

from openpyxl.styles import PatternFill
from openpyxl.worksheet.formula import ArrayFormula

from reference.flash import block_bounds, flash_ref
from sheets._steps import causal_mask, dims, matmul, matmul_transposed, scale, softmax_steps
from sheets.attention import Attention, AttentionParams
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind
from workbook_builder.sheet.layout import Block
from workbook_builder.sheet.refs import range_ref

SKIP_FILL = PatternFill("solid", fgColor="D9D9D9")
SKIP_FORMAT = '"skip";"skip";"skip"'  # the cell still holds a number (0)


@dataclass(frozen=True)
class FlashParams(AttentionParams):
    block_size: int = field(default=2, metadata={
        "help": "keys per block B (1..n; query rows are blocked the same way)"})


def _rows(block: Block, first: int, last: int) -> str:
    """Rows first..last (inclusive, 0-based) of every column, e.g. one key block of K."""
    return range_ref(block.top + first, block.left, block.top + last, block.right,
                     fix_row=True, fix_col=True)


class Flash(Kind):
    name = "flash"
    summary = "FlashAttention: blockwise online softmax (running max and sum), exact"
    sheet_title = "Flash"
    Params = FlashParams
    reference = staticmethod(flash_ref)
    test_cases = [
        {"seq_len": 4, "d_model": 3, "d_k": 2, "block_size": 2},
        {"seq_len": 3, "d_model": 2, "d_k": 2, "block_size": 1, "causal": True},
        {"seq_len": 5, "d_model": 3, "d_k": 2, "d_v": 3, "block_size": 2, "causal": True},
    ]
    demo_cases = [
        ("flash", {"seq_len": 6, "d_model": 4, "d_k": 4, "block_size": 3}),
        ("flash_causal", {"seq_len": 5, "d_model": 4, "d_k": 3, "block_size": 2,
                          "causal": True}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.block_size > p.seq_len:
            raise UserError(f"--block-size {p.block_size} is larger than --seq-len "
                            f"{p.seq_len}; use 1 to {p.seq_len}")

    @classmethod
    def input_shapes(cls, p):
        return Attention.input_shapes(p)  # the same X, W_Q, W_K, W_V

    @classmethod
    def infer_params(cls, given):
        return Attention.infer_params(given)

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        model_dims, key_dims = dims("d", p.d_model), dims("k", p.d_k)
        value_dims = dims("v", p.value_width)
        bounds = block_bounds(p.seq_len, p.block_size)
        sheet.text("Step 1 — inputs: token rows X and the projection weights", bold=True)
        with sheet.band():
            x = sheet.input_block("X", inputs["X"], "token embeddings", tokens, model_dims,
                                  "One row per token.")
            wq = sheet.input_block("W_Q", inputs["W_Q"], "query weights", model_dims,
                                   key_dims)
            wk = sheet.input_block("W_K", inputs["W_K"], "key weights", model_dims, key_dims)
            wv = sheet.input_block("W_V", inputs["W_V"], "value weights", model_dims,
                                   value_dims)
        sheet.text("Step 2 — project every token to a query, a key and a value", bold=True)
        with sheet.band():
            q = matmul(sheet, "Q", "Q = X·W_Q", x, wq, tokens, key_dims)
            k = matmul(sheet, "K", "K = X·W_K", x, wk, tokens, key_dims)
            v = matmul(sheet, "V", "V = X·W_V", x, wv, tokens, value_dims)
        sheet.text(f"Step 3 — FlashAttention: {len(bounds)} key block(s) of B = "
                   f"{p.block_size}, one at a time, keeping only a running max m, a running "
                   f"sum ℓ and an unnormalised output Õ per query row", bold=True)
        state = None
        for j, (c0, c1) in enumerate(bounds, start=1):
            keys = tokens[c0] if c1 - c0 == 1 else f"{tokens[c0]}…{tokens[c1 - 1]}"
            note = ""
            if p.causal and j > 1:
                rows = "query row 1" if c0 == 1 else f"query rows 1–{c0}"
                note = (f"; {rows} skip it (grey: wholly above their diagonal, the state "
                        f"passes through unchanged)")
            sheet.text(f"Key block {j}: keys {keys}{note}")
            with sheet.band():
                state = _key_block(sheet, p, j, c0, c1, q, k, v, state, tokens,
                                   value_dims)
        m, ell, acc = state
        sheet.text("Step 4 — normalise once at the end; keep the log-sum-exp", bold=True)
        with sheet.band():
            out = sheet.step_block(
                "OUTPUT", f"O = Õ{len(bounds)} / ℓ{len(bounds)}", p.seq_len, acc.cols,
                tokens, value_dims, cells=lambda i, c: f"={acc.cell(i, c)}/{ell.row(i)}",
                array=lambda me: f"={acc.whole()}/{ell.whole()}",
                explanation="Divide the accumulated output by the running sum once, at the "
                            "end (FlashAttention-2).")
            sheet.step_block(
                "LSE", f"L = m{len(bounds)} + ln ℓ{len(bounds)}", p.seq_len, 1, tokens,
                ["lse"], cells=lambda i, c: f"={m.row(i)}+LN({ell.row(i)})",
                array=lambda me: f"={m.whole()}+LN({ell.whole()})",
                explanation="log Σ_j exp(s_ij): what the kernel saves for the backward pass.")
        _standard(sheet, p, q, k, v, out, tokens, value_dims)

    @classmethod
    def describe(cls, p):
        return super().describe(p) + f" ({len(block_bounds(p.seq_len, p.block_size))} blocks)"


def _key_block(sheet, p, j, c0, c1, q, k, v, state, tokens, value_dims):
    """The blocks of key block j (keys c0..c1−1); returns the new state (m, ℓ, Õ)."""
    n, width, first = p.seq_len, c1 - c0, state is None
    m_prev, l_prev, acc_prev = state or (None, None, None)
    if p.causal:  # positions, so the mask's IF can compare key with query
        row_labels, col_labels = list(range(1, n + 1)), list(range(c0 + 1, c1 + 1))
    else:
        row_labels, col_labels = tokens, tokens[c0:c1]
    # causal: query rows before this key block belong to query blocks that skip it
    skipped = [p.causal and r < c0 for r in range(n)]

    def last_allowed(r):  # causal: keys c0..r of this block take part
        return min(r, c1 - 1) - c0 if p.causal else width - 1

    # S_j = Q·K_jᵀ/√d_k   (skipped tiles are not computed: 0, shown as "skip")
    def score_row(r, me):
        if skipped[r]:
            return "=0"
        return f"=MMULT({q.row(r)},TRANSPOSE({_rows(k, c0, c1 - 1)}))/SQRT({p.d_k})"

    s = sheet.step_block(
        f"S_B{j}", f"S{j} = Q·K{j}ᵀ/√d_k", n, width, row_labels, col_labels,
        cells=lambda r, c: "=0" if skipped[r] else
        f"=SUMPRODUCT({q.row(r)},{k.row(c0 + c)})/SQRT({p.d_k})",
        array=None if any(skipped) else
        lambda me: f"=MMULT({q.whole()},TRANSPOSE({_rows(k, c0, c1 - 1)}))/SQRT({p.d_k})",
        row_array=score_row, corner="query\\key" if p.causal else "",
        explanation=f"Scaled scores of every query against keys {c0 + 1}–{c1} only: n×B "
                    f"cells, never the whole n×n matrix. Grey 'skip' cells (causal) belong "
                    f"to query blocks that never visit this key block.")
    _grey(sheet, s, skipped)

    # m_j = max(m_{j−1}, rowmax S_j) over the keys that take part
    def max_cell(r, c):
        if skipped[r]:
            return f"={m_prev.row(r)}"
        row = s.row(r, 0, last_allowed(r))
        return f"=MAX({row})" if first else f"=MAX({m_prev.row(r)},{row})"

    m = sheet.step_block(
        f"M_B{j}", f"m{j} = rowmax S{j}" if first else f"m{j} = max(m{j - 1}, rowmax S{j})",
        n, 1, tokens, ["max"], cells=max_cell,
        explanation="Running row max over the keys seen so far (skipped rows keep theirs).")

    # α_j = exp(m_{j−1} − m_j): rescales what was summed under the old max
    alpha = None if first else sheet.step_block(
        f"ALPHA_B{j}", f"α{j} = exp(m{j - 1} − m{j})", n, 1, tokens, ["α"],
        cells=lambda r, c: f"=EXP({m_prev.row(r)}-{m.row(r)})",
        array=lambda me: f"=EXP({m_prev.whole()}-{m.whole()})",
        explanation="1 when the max did not move; below 1 when this block raised it.")

    # P_j = exp(S_j − m_j), 0 where the key comes after the query (IF)
    def prob_cell(r, c):
        shifted = f"EXP({s.cell(r, c)}-{m.row(r)})"
        if not p.causal:
            return f"={shifted}"
        me = sheet.current
        return f"=IF({me.col_label(c)}<={me.row_label(r)},{shifted},0)"

    def prob_array(me):
        shifted = f"EXP({s.whole()}-{m.whole()})"
        return f"=IF({me.col_labels()}<={me.row_labels()},{shifted},0)" if p.causal \
            else f"={shifted}"

    prob = sheet.step_block(
        f"P_B{j}", f"P{j} = exp(S{j} − m{j})" + (" if key ≤ query" if p.causal else ""),
        n, width, row_labels, col_labels, cells=prob_cell, array=prob_array,
        corner="query\\key" if p.causal else "",
        explanation="Unnormalised weights under the running max; masked keys give 0.")
    _grey(sheet, prob, skipped)

    # ℓ_j = α_j·ℓ_{j−1} + rowsum P_j
    def sum_cell(r, c):
        if first:
            return f"=SUM({prob.row(r)})"
        if skipped[r]:
            return f"={l_prev.row(r)}"
        return f"={alpha.row(r)}*{l_prev.row(r)}+SUM({prob.row(r)})"

    ell = sheet.step_block(
        f"L_B{j}", f"ℓ{j} = rowsum P{j}" if first else f"ℓ{j} = α{j}·ℓ{j - 1} + rowsum P{j}",
        n, 1, tokens, ["ℓ"], cells=sum_cell,
        explanation="Running softmax denominator, rescaled to the current max.")

    # Õ_j = α_j·Õ_{j−1} + P_j·V_j   (unnormalised: FlashAttention-2)
    def acc_cell(r, c):
        if skipped[r]:
            return f"={acc_prev.cell(r, c)}"
        dot = f"MMULT({prob.row(r)},{v.col(c, c0, c1 - 1)})"
        return f"={dot}" if first else f"={alpha.row(r)}*{acc_prev.cell(r, c)}+{dot}"

    def acc_array(me):
        dot = f"MMULT({prob.whole()},{_rows(v, c0, c1 - 1)})"
        return f"={dot}" if first else f"={alpha.whole()}*{acc_prev.whole()}+{dot}"

    acc = sheet.step_block(
        f"ACC_B{j}", f"Õ{j} = P{j}·V{j}" if first else f"Õ{j} = α{j}·Õ{j - 1} + P{j}·V{j}",
        n, v.cols, tokens, value_dims, cells=acc_cell, array=acc_array,
        explanation="Running weighted sum of value rows, not yet divided by ℓ.")
    return m, ell, acc


def _grey(sheet, block, skipped):
    """Mark the rows of a skipped tile: grey, shown as 'skip' (the cell holds 0)."""
    for r in (r for r in range(block.rows) if skipped[r]):
        for c in range(block.cols):
            cell = sheet.ws.cell(block.top + r, block.left + c)
            cell.number_format, cell.fill = SKIP_FORMAT, SKIP_FILL


def _standard(sheet, p, q, k, v, out, tokens, value_dims):
    """Plain softmax attention from the same Q, K, V, and the live max |difference|."""
    n = p.seq_len
    sheet.text("Step 5 — for comparison: standard attention holds the whole n×n score "
               "matrix at once", bold=True)
    with sheet.band():
        scores = matmul_transposed(sheet, "SCORES", "S = Q·Kᵀ", q, k, tokens, tokens)
        scaled = scale(sheet, "SCALED", scores, p.d_k, tokens,
                       "The same scores FlashAttention computed block by block.")
        mask = causal_mask(sheet, n) if p.causal else None
    with sheet.band():
        weights = softmax_steps(sheet, scaled, mask, tokens)
    with sheet.band():
        std = matmul(sheet, "OUTPUT_STD", "O_std = A·V", weights, v, tokens, value_dims)
        diff_formula = f"=MAX(ABS({out.whole()}-{std.whole()}))"
        diff = sheet.step_block(
            "MAX_ABS_DIFF", "max |O − O_std|", 1, 1, ["flash vs std"], ["max |Δ|"],
            cells=lambda r, c: diff_formula, array=lambda me: diff_formula,
            explanation="Largest difference between the two outputs: rounding only "
                        "(about 1e-16), because the online softmax is exact.")
        # an array formula in both layouts: ABS over a range needs array evaluation
        sheet.ws.cell(diff.top, diff.left).value = ArrayFormula(
            diff.whole().replace("$", ""), diff_formula)
        diff_cell = sheet.ws.cell(diff.top, diff.left)
        diff_cell.number_format = "0.0E+00"
        _size_table(sheet, diff.top - 3, diff.right + 2, p)


def _size_table(sheet, top, left, p):
    """Score cells each approach holds at once (sizes only, no computed values)."""
    n, b = p.seq_len, p.block_size
    rows = [("score cells held at once", ""),
            ("standard: n²", f"{n}² = {n * n}"),
            ("flash: n·B", f"{n}·{b} = {n * b}")]
    for i, (label, value) in enumerate(rows):
        sheet.ws.cell(top + i, left, label)
        sheet.ws.cell(top + i, left + 3, value)


# sheet text in Chinese (workbook_builder/i18n.py); the longer "Key block" entries first
Flash.translations = {"zh": {
    "FlashAttention: blockwise online softmax (running max and sum), exact":
        "FlashAttention：分块在线 Softmax（运行最大值与运行和），结果精确",
    "Step 3 — FlashAttention: {t} key block(s) of B = {b}, one at a time, keeping only a "
    "running max m, a running sum ℓ and an unnormalised output Õ per query row":
        "Step 3：FlashAttention — {t} 个键块（B = {b}），逐块处理，每个查询行只保留运行最大值 m、"
        "运行和 ℓ 与未归一化输出 Õ",
    "Key block {j}: keys {keys}; query row {rows} skip it (grey: wholly above their "
    "diagonal, the state passes through unchanged)":
        "键块 {j}：键 {keys}；查询行 {rows} 跳过它（灰色：整块位于对角线上方，状态原样传递）",
    "Key block {j}: keys {keys}; query rows {rows} skip it (grey: wholly above their "
    "diagonal, the state passes through unchanged)":
        "键块 {j}：键 {keys}；查询行 {rows} 跳过它（灰色：整块位于对角线上方，状态原样传递）",
    "Key block {j}: keys {keys}": "键块 {j}：键 {keys}",
    "Scaled scores of every query against keys {a}–{b} only: n×B cells, never the whole n×n "
    "matrix. Grey 'skip' cells (causal) belong to query blocks that never visit this key "
    "block.": "每个查询只与键 {a}–{b} 的缩放分数：n×B 个单元格，从不需要整个 n×n 矩阵。"
              "灰色 skip 单元格（因果）属于从不访问该键块的查询块。",
    "Running row max over the keys seen so far (skipped rows keep theirs).":
        "到目前为止见过的键上的运行行最大值（跳过的行保持不变）。",
    "Unnormalised weights under the running max; masked keys give 0.":
        "以运行最大值为基准的未归一化权重；被掩码的键为 0。",
    "Running softmax denominator, rescaled to the current max.":
        "运行中的 Softmax 分母，按当前最大值重新缩放。",
    "Running weighted sum of value rows, not yet divided by ℓ.": "值行的运行加权和，尚未除以 ℓ。",
    "1 when the max did not move; below 1 when this block raised it.":
        "最大值未变时为 1；本块抬高了最大值时小于 1。",
    "Step 4 — normalise once at the end; keep the log-sum-exp":
        "Step 4：最后统一归一化一次；保留 log-sum-exp",
    "Divide the accumulated output by the running sum once, at the end (FlashAttention-2).":
        "最后一次性把累积输出除以运行和（FlashAttention-2）。",
    "log Σ_j exp(s_ij): what the kernel saves for the backward pass.":
        "log Σ_j exp(s_ij)：内核为反向传播保存的量。",
    "Step 5 — for comparison: standard attention holds the whole n×n score matrix at once":
        "Step 5：对照 — 标准注意力一次保存整个 n×n 分数矩阵",
    "The same scores FlashAttention computed block by block.":
        "与 FlashAttention 逐块计算的分数相同。",
    "Largest difference between the two outputs: rounding only (about 1e-16), because the "
    "online softmax is exact.": "两种输出的最大差异：只有舍入误差（约 1e-16），因为在线 Softmax "
                               "是精确的。",
    "score cells held at once": "同时保存的分数单元格数", "standard: n²": "标准：n²",
    "flash: n·B": "flash：n·B", "flash vs std": "flash 对比标准",
    "P{a} = exp(S{b} − m{c}) if key ≤ query": "P{a} = exp(S{b} − m{c})（键 ≤ 查询时）",
    "{sizes} ({n} blocks); layout={layout}": "{sizes}（{n} 个块）; layout={layout}",
}}
