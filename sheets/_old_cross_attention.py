"""Kind `cross-attention`: queries from a target sequence Y, keys and values from a source
sequence X (encoder–decoder attention), m ≠ n allowed.

    Q = Y·W_Q (m×d_k)   K = X·W_K (n×d_k)   V = X·W_V (n×d_v)
    S = Q·Kᵀ (m×n)   S/√d_k   m = max_j   P = exp(S − m)   ℓ = Σ_j P   A = P/ℓ
    O = A·V (m×d_v)

Tokens: `--tokens "SOURCE|TARGET"`, each side comma-separated, e.g. "我,爱,AI|I,love,AI".
"""

from dataclasses import dataclass, field

from reference.cross_attention import cross_attention_ref
from sheets._steps import ValueWidth, dims, matmul, matmul_transposed, scale, softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind


def two_sequence_labels(tokens: list[str] | None, n_src: int, n_tgt: int,
                        kind: str) -> list[str]:
    """Source labels then target labels. The CLI splits --tokens on commas, so the two
    sequences are told apart by one "|": "x1,x2,x3|y1,y2"."""
    if tokens is None:
        return dims("x", n_src) + dims("y", n_tgt)
    joined = ",".join(tokens)
    if joined.count("|") != 1:
        raise UserError(f'--tokens for {kind} is "SOURCE|TARGET", each side comma-separated, '
                        f'e.g. "我,爱,AI|I,love,AI"')
    src, tgt = ([t.strip() for t in side.split(",")] for side in joined.split("|"))
    if not all(src) or not all(tgt):
        raise UserError("--tokens has an empty label")
    if len(src) != n_src or len(tgt) != n_tgt:
        raise UserError(f"--tokens gives {len(src)} source and {len(tgt)} target labels but "
                        f"--src-len is {n_src} and --tgt-len is {n_tgt}")
    return src + tgt


TWO_SEQUENCE_TOKENS_HELP = ('"SOURCE|TARGET" labels, each side comma-separated, e.g. '
                            '"我,爱,AI|I,love,AI" (also sets --src-len and --tgt-len)')


def two_sequence_sizes(tokens: list[str]) -> dict[str, int]:
    """--src-len/--tgt-len implied by "x1,x2|y1"; a malformed list is reported by
    two_sequence_labels."""
    sides = ",".join(tokens).split("|")
    if len(sides) != 2:
        return {}
    return {"src_len": len(sides[0].split(",")), "tgt_len": len(sides[1].split(","))}


class TwoSequenceKind(Kind):
    """A kind over a source (src_len) and a target (tgt_len) sequence, labelled by
    --tokens "SOURCE|TARGET". Not registered itself: it has no name."""

    tokens_help = TWO_SEQUENCE_TOKENS_HELP

    @classmethod
    def params_from_tokens(cls, tokens):
        return two_sequence_sizes(tokens)

    @classmethod
    def labels(cls, p, tokens):
        return two_sequence_labels(tokens, p.src_len, p.tgt_len, cls.name)


@dataclass(frozen=True)
class CrossAttentionParams(ValueWidth):
    src_len: int = field(default=4, metadata={"help": "source tokens n (rows of X, the keys)"})
    tgt_len: int = field(default=3, metadata={
        "help": "target tokens m (rows of Y, the queries)"})
    d_model: int = field(default=4, metadata={"help": "embedding width (columns of X and Y)"})
    d_k: int = field(default=4, metadata={"help": "query/key width (columns of W_Q, W_K)"})
    d_v: int | None = field(default=None, metadata={
        "help": "value width (columns of W_V); default d_k"})


class CrossAttention(TwoSequenceKind):
    name = "cross-attention"
    summary = "cross-attention: target queries Y·W_Q over source keys/values X (m ≠ n)"
    sheet_title = "Cross-attention"
    Params = CrossAttentionParams
    reference = staticmethod(cross_attention_ref)
    test_cases = [
        {"src_len": 4, "tgt_len": 2, "d_model": 3, "d_k": 2},
        {"src_len": 2, "tgt_len": 5, "d_model": 4, "d_k": 3, "d_v": 2},
        {"src_len": 1, "tgt_len": 1, "d_model": 2, "d_k": 1},
    ]
    demo_cases = [("cross_attention", {"src_len": 4, "tgt_len": 3, "d_model": 4, "d_k": 4})]

    @classmethod
    def input_shapes(cls, p):
        return {"X": (p.src_len, p.d_model), "Y": (p.tgt_len, p.d_model),
                "W_Q": (p.d_model, p.d_k), "W_K": (p.d_model, p.d_k),
                "W_V": (p.d_model, p.value_width)}

    input_dims = {"X": ("src_len", "d_model"), "Y": ("tgt_len", "d_model"),
                  "W_Q": ("d_model", "d_k"), "W_K": ("d_model", "d_k"),
                  "W_V": ("d_model", "d_v")}

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        src, tgt = tokens[:p.src_len], tokens[p.src_len:]
        model_dims, key_dims = dims("d", p.d_model), dims("k", p.d_k)
        value_dims = dims("v", p.value_width)
        sheet.text("Step 1 — inputs: source rows X (encoder), target rows Y (decoder), "
                   "weights", bold=True)
        with sheet.band():
            x = sheet.input_block("X", inputs["X"], "source (encoder) rows", src, model_dims,
                                  "One row per source token; keys and values come from here.")
            y = sheet.input_block("Y", inputs["Y"], "target (decoder) rows", tgt, model_dims,
                                  "One row per target token; queries come from here.")
            wq = sheet.input_block("W_Q", inputs["W_Q"], "query weights", model_dims,
                                   key_dims)
            wk = sheet.input_block("W_K", inputs["W_K"], "key weights", model_dims, key_dims)
            wv = sheet.input_block("W_V", inputs["W_V"], "value weights", model_dims,
                                   value_dims)
        sheet.text("Step 2 — queries from the target, keys and values from the source",
                   bold=True)
        with sheet.band():
            q = matmul(sheet, "Q", "Q = Y·W_Q", y, wq, tgt, key_dims,
                       "Queries: one per target token.")
            k = matmul(sheet, "K", "K = X·W_K", x, wk, src, key_dims,
                       "Keys: one per source token.")
            v = matmul(sheet, "V", "V = X·W_V", x, wv, src, value_dims,
                       "Values: one per source token.")
        sheet.text(f"Step 3 — scores of every target token against every source token "
                   f"({p.tgt_len}×{p.src_len}), scaled by 1/√d_k", bold=True)
        with sheet.band():
            scores = matmul_transposed(sheet, "SCORES", "S = Q·Kᵀ", q, k, tgt, src,
                                       "Dot product of target query i with source key j.")
            scaled = scale(sheet, "SCALED", scores, p.d_k, tgt,
                           "Dividing by √d_k keeps the scores from growing with width.",
                           col_labels=src)
        sheet.text("Step 4 — softmax over the source positions of each row", bold=True)
        with sheet.band():
            weights = softmax_steps(sheet, scaled, None, tgt, col_labels=src,
                                    over="source tokens")
        sheet.text("Step 5 — each target token's mix of the source values", bold=True)
        matmul(sheet, "OUTPUT", "O = A·V", weights, v, tgt, value_dims,
               "Row i: the source values weighted by how much target token i attends to "
               "each source token.")


# sheet text in Chinese (workbook_builder/i18n.py)
CrossAttention.translations = {"zh": {
    "cross-attention: target queries Y·W_Q over source keys/values X (m ≠ n)":
        "交叉注意力：目标序列的查询 Y·W_Q 关注源序列的键/值 X（m ≠ n）",
    "Step 1 — inputs: source rows X (encoder), target rows Y (decoder), weights":
        "Step 1：输入 — 源序列行 X（编码器）、目标序列行 Y（解码器）、权重",
    "One row per source token; keys and values come from here.":
        "每行一个源词；键和值来自这里。",
    "One row per target token; queries come from here.": "每行一个目标词；查询来自这里。",
    "source (encoder) rows": "源（编码器）行", "target (decoder) rows": "目标（解码器）行",
    "Step 2 — queries from the target, keys and values from the source":
        "Step 2：生成 Q、K、V — 查询来自目标序列，键和值来自源序列",
    "Queries: one per target token.": "查询：每个目标词一个。",
    "Keys: one per source token.": "键：每个源词一个。",
    "Values: one per source token.": "值：每个源词一个。",
    "Step 3 — scores of every target token against every source token ({size}), scaled by "
    "1/√d_k": "Step 3：计算每个目标词对每个源词的注意力分数（{size}），并缩放 1/√d_k",
    "Dot product of target query i with source key j.": "目标查询 i 与源键 j 的点积。",
    "Dividing by √d_k keeps the scores from growing with width.":
        "除以 √d_k，防止分数随维度增大而过大。",
    "Step 4 — softmax over the source positions of each row":
        "Step 4：Softmax 归一化 — 在每行的源位置上",
    "Step 5 — each target token's mix of the source values":
        "Step 5：加权求和 — 每个目标词对源值的混合",
    "Row i: the source values weighted by how much target token i attends to each source "
    "token.": "第 i 行：按目标词 i 对每个源词的关注程度加权的源值。",
}}
