"""Kind `positional`: sinusoidal positional encoding added to X, and rotary embeddings
(RoPE) applied to Q and K, with the relative-position property of RoPE as a live cell.

    PE_ANGLE = pos / b^(2i/d_model)   PE = [sin, cos] interleaved   X_PE = X + PE
    Q = X·W_Q   K = X·W_K   ROPE_ANGLE = pos · b^(−2i/d_k)   cos, sin
    pair (a, b) → (a·cos θ − b·sin θ,  b·cos θ + a·sin θ)   (--rope interleaved | half)
    SCORES = Q_ROT·K_ROTᵀ
    REL_SCORES[m,n] = (R_m q₁)·(R_n k₁)   REL_GAP = max |REL[m,n] − REL[m+1,n+1]| ≈ 0

The two encodings are alternatives, shown side by side: RoPE models (LLaMA) add no PE, so
Q and K are projected from the plain X. Positions count from 0: the angle formulas read
them from their row labels (the label set "positions").
"""

from dataclasses import dataclass, field

from reference.positional import positional_ref
from sheets._blocks.attention import QUERY_KEY, W_K, W_Q
from sheets._blocks.labels import position_label_sets
from sheets._blocks.rotary import ANGLES, ROPE_CONVENTIONS, ROTATION, rope_angles, rotated
from workbook_builder.errors import UserError
from workbook_builder.sheet import Custom, Input, Kind, Map, MatMul, Reduce, Step, section
from workbook_builder.sheet.refs import range_ref


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


def pe_cell(i, j, env):  # PE[pos,2i] = sin θ[pos,i], PE[pos,2i+1] = cos θ[pos,i]
    return f"={'COS' if j % 2 else 'SIN'}({env['PE_ANGLE'].cell(i, j // 2)})"


def rel_diff_cell(i, j, env):  # |REL[m,n] − REL[m+1,n+1]|: the same offset m − n
    rel = env["REL_SCORES"]
    return f"=ABS({rel.cell(i, j)}-{rel.cell(i + 1, j + 1)})"


def rel_diff_whole(env):  # the same as REL less its last row/column minus REL less its first
    rel, last = env["REL_SCORES"], env.me.rows - 1
    top, bottom = (range_ref(rel.top + k, rel.left + k, rel.top + k + last,
                             rel.left + k + last, fix_row=True, fix_col=True) for k in (0, 1))
    return f"=ABS({top}-{bottom})"


def _below_last(p):  # REL_DIFF compares positions m and m+1: m = 0 … n−2
    return list(range(p.seq_len - 1))


X = Input("X", "seq_len", "d_model", "token embeddings",
          note="One row per token; row p sits at position p (from 0).")


class Positional(Kind):
    name = "positional"
    summary = "sinusoidal PE added to X; RoPE on Q, K (--rope interleaved|half); offset check"
    sheet_title = "Positional"
    Params = PositionalParams
    reference = staticmethod(positional_ref)
    inputs = [X, W_Q, W_K]
    label_sets = classmethod(position_label_sets)
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
    def sections(cls, p):
        pairs = ("interleaved pairs (x_2i, x_2i+1)" if p.rope == "interleaved"
                 else f"half pairs (x_i, x_i+{p.d_k // 2})")
        return [
            section("Step 1 — inputs: token rows X and the projection weights", [X, W_Q, W_K]),
            section(
                "Part A — sinusoidal encoding (Vaswani et al.): angle pos/{base}^(2i/{d_model}),"
                " sin in even columns, cos in odd, added to X",
                [Step("PE_ANGLE", "θ = pos / {base}^(2i/{d_model})",  # pos, i: the labels
                      Map("={ROW_LABEL}/POWER({base},2*{COL_LABEL}/{d_model})",
                          rows="seq_len", cols=lambda p: p.d_model // 2),
                      "Frequency i turns once every 2π·b^(2i/d) positions: fast in the first "
                      "columns, slow in the last.",
                      col_labels=lambda p: list(range(p.d_model // 2)), **ANGLES),
                 Step("PE", "PE[pos,2i] = sin θ,  PE[pos,2i+1] = cos θ",
                      Custom("seq_len", "d_model", pe_cell),
                      "Each pair of columns is a point on a circle turning at its own speed.",
                      row_labels="positions", corner="pos", col_labels=lambda p: [
                          f"{'cos' if j % 2 else 'sin'}{j // 2}" for j in range(p.d_model)]),
                 Step("X_PE", "X + PE", Map("={X}+{PE}"),
                      "The embeddings with their positions mixed in (the paper also scales X "
                      "by √d_model first; here X is used as given).")]),
            section(
                f"Part B — RoPE: rotate {pairs} of q and k by pos·{{base}}^(−2i/{{d_k}})",
                [Step("Q", "Q = X·W_Q", MatMul("X", "W_Q"),
                      "Queries from the plain X: RoPE replaces the added encoding."),
                 Step("K", "K = X·W_K", MatMul("X", "W_K"), "Keys from the plain X.")],
                rope_angles("base"),
                [Step("Q_ROT", f"R_pos·q: {ROTATION}", rotated("Q"),  # row pos by position pos
                      f"Each query rotated by its own position; {pairs}.",
                      row_labels="tokens", col_labels="k"),
                 Step("K_ROT", f"R_pos·k: {ROTATION}", rotated("K"),
                      f"Each key rotated by its own position; {pairs}.",
                      row_labels="tokens", col_labels="k"),
                 Step("SCORES", "S = Q_ROT·K_ROTᵀ", MatMul("Q_ROT", "K_ROT", transpose="b"),
                      "Position-aware scores (scale and softmax as in the attention kind).",
                      corner=QUERY_KEY)]),
            section(
                lambda labels: f"Part C — the score of q₁ (token {labels['tokens'][0]}'s "
                               f"query) at position m with k₁ at position n depends only on "
                               f"m − n",
                [Step("REL_Q_ROT", "R_m·q₁ (row m: q₁ placed at position m)",
                      rotated("Q", first_row_only=True),
                      "The same query content at every position.",
                      row_labels="positions", col_labels="k", corner="m"),
                 Step("REL_K_ROT", "R_n·k₁ (row n: k₁ placed at position n)",
                      rotated("K", first_row_only=True),
                      "The same key content at every position.",
                      row_labels="positions", col_labels="k", corner="n")],
                [Step("REL_SCORES", "(R_m q₁)·(R_n k₁)",
                      MatMul("REL_Q_ROT", "REL_K_ROT", transpose="b"),
                      "Constant along every diagonal: only m − n matters."),
                 Step("REL_DIFF", "|REL[m,n] − REL[m+1,n+1]|",
                      Custom(lambda p: p.seq_len - 1, lambda p: p.seq_len - 1,
                             rel_diff_cell, whole=rel_diff_whole),
                      "Zero up to rounding: moving both tokens by one position leaves their "
                      "score unchanged.",
                      row_labels=_below_last, col_labels=_below_last, corner="m\\n"),
                 Step("REL_GAP", "max |difference|", Reduce("=MAX({REL_DIFF})"),
                      "The largest change of any score when both positions shift by one: "
                      "about 1e-16, i.e. exactly relative. Edit X or W_Q/W_K and it stays ≈ 0.",
                      row_labels=["max"], col_labels=["gap"])]),
        ]
