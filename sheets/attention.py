"""Kind `attention`: single-head scaled dot-product attention, every step a formula.

    Q = X·W_Q (+ B_Q)   K = X·W_K (+ B_K)   V = X·W_V (+ B_V)   (biases with --bias)
    S = Q·Kᵀ    S/√d_k      (causal: mask keys j > i)
    m = max_j   P = exp(S − m)   ℓ = Σ_j P   A = P/ℓ
    O = A·V
"""

from dataclasses import dataclass, field

from reference.attention import attention_ref
from sheets._bands import (
    CAUSAL_MASK,
    QKV_INPUTS,
    W_K,
    W_Q,
    W_V,
    ValueWidth,
    bias_of,
    projections,
    scaled_scores,
    softmax_steps,
    weighted_values,
)
from sheets._examples import hand_qkv, sentence_qkv, wo_ai_ai
from workbook_builder.sheet import Kind, section


@dataclass(frozen=True)
class AttentionParams(ValueWidth):
    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width (columns of X)"})
    d_k: int = field(default=4, metadata={"help": "query/key width (columns of W_Q, W_K)"})
    d_v: int | None = field(default=None, metadata={
        "help": "value width (columns of W_V); default d_k"})
    causal: bool = field(default=False, metadata={
        "help": "mask future tokens (query i sees keys j ≤ i)"})
    bias: bool = field(default=False, metadata={
        "help": "add bias rows B_Q, B_K, B_V to the projections (nn.Linear's bias)"})


# bias rows, one per projection (with --bias, or when given with --inputs)
QKV_BIASES = [bias_of(W_Q, "query bias"), bias_of(W_K, "key bias"),
              bias_of(W_V, "value bias")]


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
        mask = "MASK" if p.causal else None
        return [
            section("Step 1 — inputs: token rows X and the projection weights", QKV_INPUTS,
                    *([QKV_BIASES] if p.bias else [])),
            section("Step 2a — project every token to a query, a key and a value",
                    projections(bias=p.bias)),
            section("Step 2b/2c — scores Q·Kᵀ, scaled by 1/√d_k",
                    scaled_scores() + ([CAUSAL_MASK] if mask else [])),
            section("Step 2d — row softmax: max, exp, sum, divide",
                    softmax_steps(mask=mask, chart=True)),
            section("Step 2e — weighted sum of the values", weighted_values()),
        ]
