"""Cross-attention (encoder–decoder attention, Vaswani et al. 2017 §3.2.3): queries from
the target sequence, keys and values from the source sequence.

Glossary: X (n×d_model) source rows (encoder output), Y (m×d_model) target rows (decoder);
Q = Y·W_Q (m×d_k), K = X·W_K (n×d_k), V = X·W_V (n×d_v); S = Q·Kᵀ (m×n); S/√d_k;
A = softmax over the n source positions of each row; O = A·V (m×d_v). No mask: every
target position may look at every source position.
"""

import numpy as np

from reference.softmax import masked_softmax_steps


def cross_attention_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x, y = inputs["X"], inputs["Y"]
    q = y @ inputs["W_Q"]                                 # Q = Y·W_Q   (m×d_k)
    k, v = x @ inputs["W_K"], x @ inputs["W_V"]           # K = X·W_K, V = X·W_V   (n×·)
    scores = q @ k.T                                      # S = Q·Kᵀ   (m×n)
    scaled = scores / np.sqrt(q.shape[1])                 # S / √d_k
    steps = {"Q": q, "K": k, "V": v, "SCORES": scores, "SCALED": scaled}
    steps.update(masked_softmax_steps(scaled, np.ones(scaled.shape, dtype=bool)))
    steps["OUTPUT"] = steps["WEIGHTS"] @ v                # O = A·V   (m×d_v)
    return steps
