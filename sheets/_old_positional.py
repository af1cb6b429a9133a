"""Kind `positional`: sinusoidal positional encoding added to X, and rotary embeddings
(RoPE) applied to Q and K, with the relative-position property of RoPE as a live cell.

    PE_ANGLE = pos / b^(2i/d_model)   PE = [sin, cos] interleaved   X_PE = X + PE
    Q = X·W_Q   K = X·W_K   ROPE_ANGLE = pos · b^(−2i/d_k)   cos, sin
    pair (a, b) → (a·cos θ − b·sin θ,  b·cos θ + a·sin θ)   (--rope interleaved | half)
    SCORES = Q_ROT·K_ROTᵀ
    REL_SCORES[m,n] = (R_m q₁)·(R_n k₁)   REL_GAP = max |REL[m,n] − REL[m+1,n+1]| ≈ 0

The two encodings are alternatives, shown side by side: RoPE models (LLaMA) add no PE, so
Q and K are projected from the plain X. Positions count from 0.
"""

from dataclasses import dataclass, field

from reference.positional import positional_ref
from sheets._steps import dims, matmul, matmul_transposed
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind
from workbook_builder.sheet.layout import Block
from workbook_builder.sheet.refs import range_ref

ROPE_CONVENTIONS = ["interleaved", "half"]


@dataclass(frozen=True)
class PositionalParams:
    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X), at least 2"})
    d_model: int = field(default=4, metadata={"help": "embedding width, even"})
    d_k: int = field(default=4, metadata={"help": "query/key width, even (RoPE rotates pairs)"})
    rope: str = field(default="interleaved", metadata={
        "choices": ROPE_CONVENTIONS,
        "help": "RoPE pairs: interleaved (x_2i, x_2i+1) as RoFormer/Meta LLaMA, or half "
                "(x_i, x_i+d_k/2) as GPT-NeoX/HF LLaMA"})
    base: int = field(default=10000, metadata={
        "help": "frequency base b of both encodings (10000 in the paper; rope_theta)"})


def pair_of(j: int, d: int, convention: str) -> tuple[int, int, int, bool]:
    """(pair index i, column a, column b, is j the second member) of column j."""
    if convention == "interleaved":
        i = j // 2
        return i, 2 * i, 2 * i + 1, j % 2 == 1
    half = d // 2
    i = j % half
    return i, i, i + half, j >= half


def rotated(src: Block, src_row: int, cos: Block, sin: Block, pos: int, j: int,
            convention: str, fixed: bool = False) -> str:
    """Column j of src row src_row rotated by the angles of position pos:
    a' = a·cos − b·sin,  b' = b·cos + a·sin."""
    i, a, b, second = pair_of(j, src.cols, convention)
    ref = src.fixed if fixed else src.cell
    x_a, x_b = ref(src_row, a), ref(src_row, b)
    c, s = cos.cell(pos, i), sin.cell(pos, i)
    return f"={x_b}*{c}+{x_a}*{s}" if second else f"={x_a}*{c}-{x_b}*{s}"


class Positional(Kind):
    name = "positional"
    summary = "sinusoidal PE added to X; RoPE on Q, K (--rope interleaved|half); offset check"
    sheet_title = "Positional"
    Params = PositionalParams
    reference = staticmethod(positional_ref)
    test_cases = [
        {"seq_len": 3, "d_model": 2, "d_k": 2},
        {"seq_len": 5, "d_model": 6, "d_k": 4, "rope": "half", "base": 100},
        {"seq_len": 2, "d_model": 4, "d_k": 6, "rope": "interleaved", "base": 10},
    ]
    demo_cases = [
        ("positional", {"seq_len": 4, "d_model": 4, "d_k": 4}),
        ("positional_rope_half", {"seq_len": 6, "d_model": 6, "d_k": 4, "rope": "half",
                                  "base": 100}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.seq_len < 2:
            raise UserError("--seq-len must be at least 2 (the relative-position check "
                            "compares neighbouring positions)")
        for flag, value in (("--d-model", p.d_model), ("--d-k", p.d_k)):
            if value % 2:
                raise UserError(f"{flag} must be even (sin/cos and RoPE work on pairs), "
                                f"got {value}")
        if p.rope not in ROPE_CONVENTIONS:
            raise UserError(f"--rope must be one of {', '.join(ROPE_CONVENTIONS)}, "
                            f"got {p.rope!r}")

    @classmethod
    def input_shapes(cls, p):
        return {"X": (p.seq_len, p.d_model), "W_Q": (p.d_model, p.d_k),
                "W_K": (p.d_model, p.d_k)}

    input_dims = {"X": ("seq_len", "d_model"), "W_Q": ("d_model", "d_k"),
                  "W_K": ("d_model", "d_k")}

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        n, d, d_k, b = p.seq_len, p.d_model, p.d_k, p.base
        positions = list(range(n))                 # label cells the angle formulas read
        model_dims, key_dims = dims("d", d), dims("k", d_k)
        sheet.text("Step 1 — inputs: token rows X and the projection weights", bold=True)
        with sheet.band():
            x = sheet.input_block("X", inputs["X"], "token embeddings", tokens, model_dims,
                                  "One row per token; row p sits at position p (from 0).")
            wq = sheet.input_block("W_Q", inputs["W_Q"], "query weights", model_dims,
                                   key_dims)
            wk = sheet.input_block("W_K", inputs["W_K"], "key weights", model_dims, key_dims)

        sheet.text(f"Part A — sinusoidal encoding (Vaswani et al.): angle pos/{b}^(2i/"
                   f"{d}), sin in even columns, cos in odd, added to X", bold=True)
        with sheet.band():
            # θ[pos,i] = pos / b^(2i/d_model); reads its position and i from the labels
            pe_angle = sheet.step_block(
                "PE_ANGLE", f"θ = pos / {b}^(2i/{d})", n, d // 2, positions,
                list(range(d // 2)),
                cells=lambda i, j: f"={sheet.current.row_label(i)}/POWER({b},2*"
                                   f"{sheet.current.col_label(j)}/{d})",
                array=lambda me: f"={me.row_labels()}/POWER({b},2*{me.col_labels()}/{d})",
                corner="pos\\i",
                explanation="Frequency i turns once every 2π·b^(2i/d) positions: fast in "
                            "the first columns, slow in the last.")
            # PE[pos,2i] = sin θ, PE[pos,2i+1] = cos θ (interleaving: one formula per cell)
            pe = sheet.step_block(
                "PE", "PE[pos,2i] = sin θ,  PE[pos,2i+1] = cos θ", n, d, positions,
                [f"{'cos' if j % 2 else 'sin'}{j // 2}" for j in range(d)],
                cells=lambda i, j: f"={'COS' if j % 2 else 'SIN'}({pe_angle.cell(i, j // 2)})",
                corner="pos",
                explanation="Each pair of columns is a point on a circle turning at its own "
                            "speed.")
            sheet.step_block(
                "X_PE", "X + PE", n, d, tokens, model_dims,
                cells=lambda i, j: f"={x.cell(i, j)}+{pe.cell(i, j)}",
                array=lambda me: f"={x.whole()}+{pe.whole()}",
                explanation="The embeddings with their positions mixed in (the paper also "
                            "scales X by √d_model first; here X is used as given).")

        pairs = ("interleaved pairs (x_2i, x_2i+1)" if p.rope == "interleaved"
                 else f"half pairs (x_i, x_i+{d_k // 2})")
        sheet.text(f"Part B — RoPE: rotate {pairs} of q and k by pos·{b}^(−2i/{d_k})",
                   bold=True)
        with sheet.band():
            q = matmul(sheet, "Q", "Q = X·W_Q", x, wq, tokens, key_dims,
                       "Queries from the plain X: RoPE replaces the added encoding.")
            k = matmul(sheet, "K", "K = X·W_K", x, wk, tokens, key_dims,
                       "Keys from the plain X.")
        with sheet.band():
            # θ[pos,i] = pos · b^(−2i/d_k)
            angle = sheet.step_block(
                "ROPE_ANGLE", f"θ = pos · {b}^(−2i/{d_k})", n, d_k // 2, positions,
                list(range(d_k // 2)),
                cells=lambda i, j: f"={sheet.current.row_label(i)}*POWER({b},-2*"
                                   f"{sheet.current.col_label(j)}/{d_k})",
                array=lambda me: f"={me.row_labels()}*POWER({b},-2*{me.col_labels()}/{d_k})",
                corner="pos\\i", explanation="Rotation angle of pair i at each position.")
            cos = sheet.step_block(
                "ROPE_COS", "cos θ", n, d_k // 2, positions, list(range(d_k // 2)),
                cells=lambda i, j: f"=COS({angle.cell(i, j)})",
                array=lambda me: f"=COS({angle.whole()})", corner="pos\\i")
            sin = sheet.step_block(
                "ROPE_SIN", "sin θ", n, d_k // 2, positions, list(range(d_k // 2)),
                cells=lambda i, j: f"=SIN({angle.cell(i, j)})",
                array=lambda me: f"=SIN({angle.whole()})", corner="pos\\i")
        rotation = "(a, b) → (a·cos θ − b·sin θ, b·cos θ + a·sin θ)"
        with sheet.band():
            # row p of Q and K rotated by the angles of position p
            q_rot = sheet.step_block(
                "Q_ROT", f"R_pos·q: {rotation}", n, d_k, tokens, key_dims,
                cells=lambda i, j: rotated(q, i, cos, sin, i, j, p.rope),
                explanation=f"Each query rotated by its own position; {pairs}.")
            k_rot = sheet.step_block(
                "K_ROT", f"R_pos·k: {rotation}", n, d_k, tokens, key_dims,
                cells=lambda i, j: rotated(k, i, cos, sin, i, j, p.rope),
                explanation=f"Each key rotated by its own position; {pairs}.")
            matmul_transposed(sheet, "SCORES", "S = Q_ROT·K_ROTᵀ", q_rot, k_rot, tokens,
                              tokens, "Position-aware scores (scale and softmax as in the "
                                      "attention kind).")

        sheet.text(f"Part C — the score of q₁ (token {tokens[0]}'s query) at position m with "
                   f"k₁ at position n depends only on m − n", bold=True)
        with sheet.band():
            rel_q = sheet.step_block(
                "REL_Q_ROT", "R_m·q₁ (row m: q₁ placed at position m)", n, d_k, positions,
                key_dims, cells=lambda i, j: rotated(q, 0, cos, sin, i, j, p.rope, True),
                corner="m", explanation="The same query content at every position.")
            rel_k = sheet.step_block(
                "REL_K_ROT", "R_n·k₁ (row n: k₁ placed at position n)", n, d_k, positions,
                key_dims, cells=lambda i, j: rotated(k, 0, cos, sin, i, j, p.rope, True),
                corner="n", explanation="The same key content at every position.")
        with sheet.band():
            rel = matmul_transposed(sheet, "REL_SCORES", "(R_m q₁)·(R_n k₁)", rel_q, rel_k,
                                    positions, positions,
                                    "Constant along every diagonal: only m − n matters.")

            def shifted(first: int) -> str:
                return range_ref(rel.top + first, rel.left + first,
                                 rel.top + first + n - 2, rel.left + first + n - 2,
                                 fix_row=True, fix_col=True)

            # |REL[m,n] − REL[m+1,n+1]|: two entries with the same offset m − n
            diff = sheet.step_block(
                "REL_DIFF", "|REL[m,n] − REL[m+1,n+1]|", n - 1, n - 1, positions[:-1],
                positions[:-1],
                cells=lambda i, j: f"=ABS({rel.cell(i, j)}-{rel.cell(i + 1, j + 1)})",
                array=lambda me: f"=ABS({shifted(0)}-{shifted(1)})", corner="m\\n",
                explanation="Zero up to rounding: moving both tokens by one position leaves "
                            "their score unchanged.")
            sheet.step_block(
                "REL_GAP", "max |difference|", 1, 1, ["max"], ["gap"],
                cells=lambda i, j: f"=MAX({diff.whole()})",
                explanation="The largest change of any score when both positions shift by "
                            "one: about 1e-16, i.e. exactly relative. Edit X or W_Q/W_K and "
                            "it stays ≈ 0.")


# sheet text in Chinese (workbook_builder/i18n.py)
Positional.translations = {"zh": {
    "sinusoidal PE added to X; RoPE on Q, K (--rope interleaved|half); offset check":
        "正弦位置编码加到 X 上；对 Q、K 做 RoPE（--rope interleaved|half）；平移不变性检查",
    "One row per token; row p sits at position p (from 0).":
        "每行一个词；第 p 行位于位置 p（从 0 开始）。",
    "Part A — sinusoidal encoding (Vaswani et al.): angle pos/{b}^(2i/{d}), sin in even "
    "columns, cos in odd, added to X": "A 部分：正弦位置编码（Vaswani 等）：角度 pos/{b}^(2i/{d})，"
                                       "偶数列取 sin，奇数列取 cos，加到 X 上",
    "Frequency i turns once every 2π·b^(2i/d) positions: fast in the first columns, slow in "
    "the last.": "频率 i 每 2π·b^(2i/d) 个位置转一圈：前面的列转得快，后面的列转得慢。",
    "Each pair of columns is a point on a circle turning at its own speed.":
        "每一对列是圆上的一个点，以各自的速度转动。",
    "The embeddings with their positions mixed in (the paper also scales X by √d_model "
    "first; here X is used as given).": "混入位置信息后的嵌入（论文还会先把 X 乘以 √d_model；"
                                       "这里直接使用给定的 X）。",
    "Part B — RoPE: rotate interleaved pairs ({pair}) of q and k by pos·{b}^(−2i/{d})":
        "B 部分：RoPE — 把 q 和 k 的交错配对 ({pair}) 旋转 pos·{b}^(−2i/{d})",
    "Part B — RoPE: rotate half pairs ({pair}) of q and k by pos·{b}^(−2i/{d})":
        "B 部分：RoPE — 把 q 和 k 的前后半配对 ({pair}) 旋转 pos·{b}^(−2i/{d})",
    "Queries from the plain X: RoPE replaces the added encoding.":
        "由原始 X 得到的查询：RoPE 取代了加性位置编码。",
    "Keys from the plain X.": "由原始 X 得到的键。",
    "Rotation angle of pair i at each position.": "每个位置上第 i 对的旋转角度。",
    "Each query rotated by its own position; interleaved pairs ({pair}).":
        "每个查询按自己的位置旋转；交错配对 ({pair})。",
    "Each query rotated by its own position; half pairs ({pair}).":
        "每个查询按自己的位置旋转；前后半配对 ({pair})。",
    "Each key rotated by its own position; interleaved pairs ({pair}).":
        "每个键按自己的位置旋转；交错配对 ({pair})。",
    "Each key rotated by its own position; half pairs ({pair}).":
        "每个键按自己的位置旋转；前后半配对 ({pair})。",
    "Position-aware scores (scale and softmax as in the attention kind).":
        "带位置信息的分数（缩放和 Softmax 与 attention 类型相同）。",
    "Part C — the score of q₁ (token {tok}'s query) at position m with k₁ at position n "
    "depends only on m − n":
        "C 部分：q₁（词 {tok} 的查询）在位置 m、k₁ 在位置 n 时的分数只取决于 m − n",
    "The same query content at every position.": "每个位置上都是同一个查询内容。",
    "The same key content at every position.": "每个位置上都是同一个键内容。",
    "R_m·q₁ (row m: q₁ placed at position m)": "R_m·q₁（第 m 行：q₁ 放在位置 m）",
    "R_n·k₁ (row n: k₁ placed at position n)": "R_n·k₁（第 n 行：k₁ 放在位置 n）",
    "Constant along every diagonal: only m − n matters.": "沿每条对角线不变：只有 m − n 起作用。",
    "Zero up to rounding: moving both tokens by one position leaves their score unchanged.":
        "除舍入误差外为零：两个词同时移动一个位置，分数不变。",
    "The largest change of any score when both positions shift by one: about 1e-16, i.e. "
    "exactly relative. Edit X or W_Q/W_K and it stays ≈ 0.":
        "两个位置同时平移一位时，任一分数的最大变化：约 1e-16，即严格只依赖相对位置。"
        "修改 X 或 W_Q/W_K，它仍 ≈ 0。",
    "max |difference|": "最大 |差值|", "gap": "差距", "pos": "位置", "pos\\i": "位置\\i",
}}
