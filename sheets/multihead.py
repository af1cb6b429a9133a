"""Kind `multihead`: multi-head attention, heads as contiguous column slices, optional
grouped K/V heads (GQA).

    Q = X·W_Q (n×H·d_k)   K = X·W_K, V = X·W_V (n×G·d_k)   d_k = d_model / H
    head h uses K/V head g = ⌊h·G/H⌋
    head_h = softmax(Q_h·K_gᵀ/√d_k)·V_g   CONCAT = [head_1 … head_H]   O = CONCAT·W_O
    --bias: Q = X·W_Q + B_Q (likewise K, V) and O = CONCAT·W_O + B_O, as nn.Linear
"""

from dataclasses import dataclass, field

from reference.multihead import multihead_ref
from sheets._blocks.attention import CAUSAL_MASK, X, projections
from sheets._blocks.costs import Cost, cost_section
from sheets._blocks.heads import (
    B_K,
    B_O,
    B_Q,
    B_V,
    W_K,
    W_O,
    W_Q,
    W_V,
    GroupedHeads,
    GroupedHeadsKind,
    concat_and_mix,
    head_steps,
)
from sheets._examples import hand_multihead, wo_ai_ai
from workbook_builder.sheet import section


@dataclass(frozen=True)
class MultiheadParams(GroupedHeads):
    causal: bool = field(default=False, metadata={
        "help": "mask future tokens (query i sees keys j ≤ i)"})
    bias: bool = field(default=False, metadata={
        "help": "add bias rows B_Q, B_K, B_V, B_O to the projections (nn.Linear's bias)"})


def _groups(p):
    return p.groups


def _d_k(p):
    return p.d_k


# -- the cost table: what the steps above hold and multiply, as functions of n -----------
COST_SIZES = {"n": "seq_len", "H": "heads", "G": _groups, "d_k": _d_k}
COSTS = [
    # H·n²: SCORES_H1 … SCORES_HH, one n×n matrix per query head
    Cost("COST_HELD", "H·n²", "={H}*{n}^2",
         "Score cells held at once: every query head holds its own n×n scores (the "
         "SCORES_Hh blocks). Quadratic in n.", "scores"),
    # 2·n·G·d_k: the K and V blocks, what a decoder caches (GQA: G < H heads)
    Cost("COST_KV", "2·n·G·d_k", "=2*{n}*{G}*{d_k}",
         "Cells of K and V: the KV cache a decoder keeps. Sharing G < H key/value heads "
         "(GQA) divides it by H/G.", "K, V"),
    # H·(n²·d_k + n²·d_v), d_v = d_k: SCORES_Hh = Q_h·K_gᵀ and HEAD_Hh = A_h·V_g
    Cost("COST_MACS", "H·(n²·d_k + n²·d_v), d_v = d_k", "={H}*({n}^2*{d_k}+{n}^2*{d_k})",
         "Multiply-adds per head: n² dot products of length d_k for the scores, n·d_v "
         "weighted sums of n values for the head's output. O(n²·d)."),
]


class Multihead(GroupedHeadsKind):
    name = "multihead"
    summary = "multi-head attention: split, per-head softmax, concat, W_O (GQA via --kv-heads)"
    sheet_title = "Multihead"
    Params = MultiheadParams
    reference = staticmethod(multihead_ref)
    inputs = [X, W_Q, W_K, W_V, B_Q, B_K, B_V, W_O, B_O]
    test_cases = [
        {"seq_len": 3, "d_model": 6, "heads": 3},
        {"seq_len": 5, "d_model": 4, "heads": 2, "kv_heads": 1, "causal": True},
        {"seq_len": 4, "d_model": 8, "heads": 4, "kv_heads": 2, "causal": True},
        {"seq_len": 3, "d_model": 6, "heads": 3, "kv_heads": 1, "bias": True},
    ]
    demo_cases = [
        ("multihead", {"seq_len": 4, "d_model": 4, "heads": 2}),
        ("multihead_gqa_causal", {"seq_len": 5, "d_model": 8, "heads": 4, "kv_heads": 2,
                                  "causal": True}),
    ]
    examples = {"hand": hand_multihead, "wo-ai-ai": wo_ai_ai("multihead")}
    demo_examples = ("hand", "wo-ai-ai")

    @classmethod
    def sections(cls, p):
        mask = "MASK" if p.causal else None
        q, k, v = projections(bias=p.bias)
        heads = [section(f"Head {h + 1} — query columns q{h + 1}.*, key/value head {g + 1}",
                         head_steps(h, g, p.d_k, mask))
                 for h, g in ((h, h * p.groups // p.heads) for h in range(p.heads))]
        return [
            section("Step 1 — inputs ({heads} query heads, {groups} key/value heads, "
                    "d_k = d_model/H = {d_k})", [X, W_Q, W_K, W_V],
                    *([[B_Q, B_K, B_V]] if p.bias else [])),
            section("Step 2a — projections; head h owns columns h·d_k … (h+1)·d_k − 1",
                    [q, k, v] + ([CAUSAL_MASK] if mask else [])),
            *heads,
            section("Step 2f-4 — concatenate the heads and mix them with W_O",
                    concat_and_mix(p.heads, p.d_k, W_O, B_O if p.bias else None)),
            cost_section("Cost — O(n²) memory and O(n²·d) time: every head holds an n×n "
                         "score matrix; at this sheet's n and at n = 1k, 4k, 32k",
                         COST_SIZES, COSTS),
        ]
