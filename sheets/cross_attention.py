"""Kind `cross-attention`: queries from a target sequence Y, keys and values from a source
sequence X (encoder–decoder attention), m ≠ n allowed.

    Q = Y·W_Q (m×d_k)   K = X·W_K (n×d_k)   V = X·W_V (n×d_v)
    S = Q·Kᵀ (m×n)   S/√d_k   m = max_j   P = exp(S − m)   ℓ = Σ_j P   A = P/ℓ
    O = A·V (m×d_v)

Tokens: `--tokens "SOURCE|TARGET"`, each side comma-separated, e.g. "我,爱,AI|I,love,AI".
"""

from dataclasses import dataclass, field, replace

from reference.cross_attention import cross_attention_ref
from sheets._blocks.attention import (
    QKV_WEIGHTS,
    ValueWidth,
    projections,
    scaled_scores,
    weighted_values,
)
from sheets._blocks.labels import TwoSequenceKind
from sheets._blocks.softmax import softmax_steps
from workbook_builder.sheet import Input, Step, section


@dataclass(frozen=True)
class CrossAttentionParams(ValueWidth):
    src_len: int = field(default=4, metadata={"help": "source tokens n (rows of X, the keys)"})
    tgt_len: int = field(default=3, metadata={
        "help": "target tokens m (rows of Y, the queries)"})
    d_model: int = field(default=4, metadata={"help": "embedding width (columns of X and Y)"})
    d_k: int = field(default=4, metadata={"help": "query/key width (columns of W_Q, W_K)"})
    d_v: int | None = field(default=None, metadata={
        "help": "value width (columns of W_V); default d_k"})


X = Input("X", "src_len", "d_model", "source (encoder) rows", "src",
          note="One row per source token; keys and values come from here.")
Y = Input("Y", "tgt_len", "d_model", "target (decoder) rows", "tgt",
          note="One row per target token; queries come from here.")


def explained(steps: list[Step], *explanations: str) -> list[Step]:
    """The shared steps with this kind's explanations (queries ≠ keys here)."""
    return [replace(step, explanation=text) for step, text in zip(steps, explanations, strict=True)]


class CrossAttention(TwoSequenceKind):
    name = "cross-attention"
    summary = "cross-attention: target queries Y·W_Q over source keys/values X (m ≠ n)"
    sheet_title = "Cross-attention"
    Params = CrossAttentionParams
    reference = staticmethod(cross_attention_ref)
    inputs = [X, Y, *QKV_WEIGHTS]
    test_cases = [
        {"src_len": 4, "tgt_len": 2, "d_model": 3, "d_k": 2},
        {"src_len": 2, "tgt_len": 5, "d_model": 4, "d_k": 3, "d_v": 2},
        {"src_len": 1, "tgt_len": 1, "d_model": 2, "d_k": 1},
    ]
    demo_cases = [("cross_attention", {"src_len": 4, "tgt_len": 3, "d_model": 4, "d_k": 4})]

    @classmethod
    def sections(cls, p):
        scaled = "Dividing by √d_k keeps the scores from growing with width."
        return [
            section("Step 1 — inputs: source rows X (encoder), target rows Y (decoder), "
                    "weights", cls.inputs),
            # Q = Y·W_Q   K = X·W_K   V = X·W_V
            section("Step 2 — queries from the target, keys and values from the source",
                    explained(projections(source="X", q_source="Y"),
                              "Queries: one per target token.", "Keys: one per source token.",
                              "Values: one per source token.")),
            # S = Q·Kᵀ (m×n), S/√d_k
            section("Step 3 — scores of every target token against every source token "
                    "({tgt_len}×{src_len}), scaled by 1/√d_k",
                    explained(scaled_scores(),
                              "Dot product of target query i with source key j.", scaled)),
            section("Step 4 — softmax over the source positions of each row",
                    softmax_steps(over="source tokens", chart=True)),
            # O = A·V (m×d_v)
            section("Step 5 — each target token's mix of the source values", weighted_values(
                "Row i: the source values weighted by how much target token i attends to "
                "each source token.")),
        ]
