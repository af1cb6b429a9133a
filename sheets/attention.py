"""Kind `attention`: single-head scaled dot-product attention, every step a formula.

    Q = X·W_Q (+ B_Q)   K = X·W_K (+ B_K)   V = X·W_V (+ B_V)   (biases with --bias)
    S = Q·Kᵀ    S/√d_k      (causal: mask keys j > i)
    m = max_j   P = exp(S − m)   ℓ = Σ_j P   A = P/ℓ
    O = A·V

This is the kind to read first: every step is declared here, in the vocabulary of
workbook_builder/sheet/declare.py. The kinds that vary attention (heads, blocks, masks,
suffixes) share the general form of these steps from sheets/_blocks/.
"""

from reference.attention import attention_ref
from sheets._blocks.attention import (
    QKV_INPUTS,
    QUERY_KEY,
    W_K,
    W_Q,
    W_V,
    AttentionParams,
    bias_of,
    weights_chart,
)
from sheets._blocks.labels import positions_from_1
from sheets._examples import hand_qkv, sentence_qkv, wo_ai_ai
from workbook_builder.sheet import Kind, Map, MatMul, Rows, Step, section

# bias rows, one per projection (with --bias, or when given with --inputs)
QKV_BIASES = [bias_of(W_Q, "query bias"), bias_of(W_K, "key bias"),
              bias_of(W_V, "value bias")]


def projection(name: str, bias: bool, explanation: str) -> Step:
    """Q = X·W_Q (+ B_Q): every token's row of X times the weights (K and V alike)."""
    plus = f"B_{name}" if bias else None
    return Step(name, f"{name} = X·W_{name}" + (f" + {plus}" if bias else ""),
                MatMul("X", f"W_{name}", plus=plus), explanation)


# M_ij = 1 where key j ≤ query i (PyTorch `is_causal`): the labels are the positions the
# formula compares
MASK = Step("MASK", "1 if key j ≤ query i else 0",
            Map("=IF({COL_LABEL}<={ROW_LABEL},1,0)", rows="seq_len", cols="seq_len"),
            "Causal mask: a token may attend only to itself and earlier tokens. Masked "
            "entries are left out of the row max and sum below, so no −∞ is needed.",
            row_labels=positions_from_1, col_labels=positions_from_1, corner=QUERY_KEY)


def softmax(causal: bool) -> list:
    """The row softmax of S/√d_k in its four steps, and the weights' chart."""
    of, mask = "(S/√d_k)", {"masked_by": "MASK"} if causal else {}
    # P = exp(S/√d_k − m), 0 where the mask is 0
    exp = Map("=IF({K}=1,EXP({S}-{M}),0)", labels_from="SCALED", K="MASK", S="SCALED",
              M="ROW_MAX") if causal else \
        Map("=EXP({S}-{M})", labels_from="SCALED", S="SCALED", M="ROW_MAX")
    return [
        # m_i = max_j of row i (causal: j ≤ i, the row ends at the diagonal)
        Step("ROW_MAX", f"m_i = max_{{j ≤ i}} {of}_ij" if causal else f"m_i = max_j {of}_ij",
             Rows("=MAX({S})", upto=(lambda i: i) if causal else None, S="SCALED"),
             "Largest allowed score of each row; subtracting it before EXP is the stable "
             "softmax and changes no weight.", col_labels=["max"]),
        Step("EXP", f"P_ij = exp({of}_ij − m_i)" + (" · M_ij" if causal else ""), exp,
             "Exponential of each shifted score; masked entries are 0.", corner=QUERY_KEY,
             **mask),
        # ℓ_i = Σ_j P_ij
        Step("ROW_SUM", "ℓ_i = Σ_j P_ij", Rows("=SUM({P})", P="EXP"),
             "Row sums of the exponentials: the softmax denominator.", col_labels=["sum"]),
        # A_ij = P_ij / ℓ_i
        Step("WEIGHTS", "A_ij = P_ij / ℓ_i", Map("={P}/{L}", P="EXP", L="ROW_SUM"),
             "Attention weights: each row is a probability distribution over the keys (sums "
             "to 1).", heatmap=True, corner=QUERY_KEY, **mask),
        weights_chart("WEIGHTS"),
    ]


class Attention(Kind):
    name = "attention"
    summary = "single-head scaled dot-product attention, softmax in visible steps"
    sheet_title = "Attention"
    Params = AttentionParams
    reference = staticmethod(attention_ref)
    inputs = [*QKV_INPUTS, *QKV_BIASES]
    test_cases = [
        {"seq_len": 3, "d_model": 2, "d_k": 2},
        {"seq_len": 5, "d_model": 4, "d_k": 3, "d_v": 2, "causal": True},
        {"seq_len": 1, "d_model": 2, "d_k": 1, "causal": True},
        {"seq_len": 3, "d_model": 4, "d_k": 2, "d_v": 3, "bias": True},
    ]
    demo_cases = [
        ("attention", {"seq_len": 4, "d_model": 4, "d_k": 4}),
        ("attention_causal", {"seq_len": 5, "d_model": 4, "d_k": 3, "causal": True}),
    ]
    examples = {"hand": hand_qkv(), "sentence": sentence_qkv(bias=True),
                "wo-ai-ai": wo_ai_ai("attention")}
    demo_examples = ("hand", "sentence", "wo-ai-ai")

    @classmethod
    def sections(cls, p):
        return [
            section("Step 1 — inputs: token rows X and the projection weights", QKV_INPUTS,
                    *([QKV_BIASES] if p.bias else [])),
            section("Step 2a — project every token to a query, a key and a value", [
                projection("Q", p.bias, "Queries: what each token is looking for."),
                projection("K", p.bias, "Keys: what each token offers to be found by."),
                projection("V", p.bias, "Values: the content each token passes on.")]),
            section("Step 2b/2c — scores Q·Kᵀ, scaled by 1/√d_k", [
                # S = Q·Kᵀ: SUMPRODUCT of two rows per cell, MMULT(Q, TRANSPOSE(K)) in blocks
                Step("SCORES", "S = Q·Kᵀ", MatMul("Q", "K", transpose="b"),
                     "Dot product of query i with key j.", corner=QUERY_KEY),
                # S/√d_k, with d_k written into the formula as the tutorial writes it
                Step("SCALED", "S / √d_k   (d_k = {d_k})", Map("={S}/SQRT({d_k})", S="SCORES"),
                     "Dividing by √d_k keeps the scores from growing with the width.",
                     corner=QUERY_KEY),
                *([MASK] if p.causal else [])]),
            section("Step 2d — row softmax: max, exp, sum, divide", softmax(p.causal)),
            section("Step 2e — weighted sum of the values", [
                # O = A·V
                Step("OUTPUT", "O = A·V", MatMul("WEIGHTS", "V"),
                     "Each output row mixes the value rows by that row's weights.")]),
        ]
