"""Multi-head attention with optional grouped K/V heads (GQA; G=1 is multi-query).

Glossary: H query heads, G key/value heads (G divides H), d_k = d_model / H per head.
Q = X·W_Q (n×H·d_k), K = X·W_K, V = X·W_V (n×G·d_k). Head h takes Q columns
[h·d_k, (h+1)·d_k) and K/V head g = ⌊h·G/H⌋ (PyTorch `enable_gqa`).
head_h = softmax(Q_h·K_gᵀ/√d_k)·V_g;  CONCAT = [head_1 … head_H];  OUTPUT = CONCAT·W_O.
With bias rows (nn.Linear's bias): Q = X·W_Q + B_Q, likewise K and V; OUTPUT + B_O.
"""

import numpy as np

from reference.cost import cost_blocks, lengths
from reference.softmax import causal_allowed, masked_softmax_steps


def multihead_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    heads = params.heads
    kv_heads = params.kv_heads or heads               # default: one K/V head per query head
    d_k = params.d_model // heads
    q, k, v = (x @ inputs[f"W_{n}"] + inputs.get(f"B_{n}", 0.0) for n in "QKV")
    n = x.shape[0]
    allowed = causal_allowed(n, n) if params.causal else np.ones((n, n), dtype=bool)
    steps = {"Q": q, "K": k, "V": v}
    if params.causal:
        steps["MASK"] = allowed.astype(float)
    outputs = []
    for h in range(heads):
        g = h * kv_heads // heads
        q_h = q[:, h * d_k:(h + 1) * d_k]             # (n×d_k) contiguous column slice
        k_g, v_g = k[:, g * d_k:(g + 1) * d_k], v[:, g * d_k:(g + 1) * d_k]
        suffix = f"_H{h + 1}"
        scores = q_h @ k_g.T
        scaled = scores / np.sqrt(d_k)
        steps["SCORES" + suffix] = scores
        steps["SCALED" + suffix] = scaled
        for name, block in masked_softmax_steps(scaled, allowed).items():
            steps[name + suffix] = block
        outputs.append(steps["WEIGHTS" + suffix] @ v_g)
        steps["HEAD" + suffix] = outputs[-1]
    steps["CONCAT"] = np.concatenate(outputs, axis=1)  # (n×H·d_k)
    steps["OUTPUT"] = steps["CONCAT"] @ inputs["W_O"] + inputs.get("B_O", 0.0)
    steps.update(multihead_cost(n, heads, kv_heads, d_k))
    return steps


def multihead_cost(n: int, heads: int, kv_heads: int, d_k: int) -> dict[str, np.ndarray]:
    """Per length n: the H score matrices (n×n each), the K and V blocks (n×G·d_k each),
    and per head Q_h·K_gᵀ (n² dot products of d_k) plus A_h·V_g (n·d_k sums of n terms)."""
    ns = lengths(n)
    held = sum(ns * ns for _ in range(heads))
    macs = sum(ns * ns * d_k + ns * d_k * ns for _ in range(heads))
    return cost_blocks([n, heads, kv_heads, d_k], ns, COST_HELD=held,
                       COST_KV=2 * ns * kv_heads * d_k, COST_MACS=macs)
