"""Scaled dot-product attention (Vaswani et al. 2017), single head.

Glossary: X (n×d_model) token rows; W_Q, W_K (d_model×d_k), W_V (d_model×d_v);
Q = X·W_Q (+ B_Q), K = X·W_K (+ B_K), V = X·W_V (+ B_V), the bias rows when given;
S = Q·Kᵀ; S/√d_k; A = softmax_rows(S/√d_k) (causal: only keys j ≤ i); O = A·V.
"""

import numpy as np

from reference.softmax import causal_allowed, masked_softmax_steps


def attention_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    q, k, v = (x @ inputs[f"W_{n}"] + inputs.get(f"B_{n}", 0.0) for n in "QKV")
    scores = q @ k.T                                  # S = Q·Kᵀ  (n×n)
    scaled = scores / np.sqrt(q.shape[1])             # S / √d_k
    n = x.shape[0]
    allowed = causal_allowed(n, n) if params.causal else np.ones((n, n), dtype=bool)
    steps = {"Q": q, "K": k, "V": v, "SCORES": scores, "SCALED": scaled}
    if params.causal:
        steps["MASK"] = allowed.astype(float)
    steps.update(masked_softmax_steps(scaled, allowed))
    steps["OUTPUT"] = steps["WEIGHTS"] @ v            # O = A·V
    return steps
