"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"), as in
idiap/fast-transformers `LinearAttention` / `CausalLinearAttention`.

Glossary: φ(x) = elu(x) + 1 (x + 1 for x > 0, exp(x) otherwise), elementwise; no 1/√d_k
scale, no softmax; eps = 1e-6 in the denominator.
Non-causal:  KV = φ(K)ᵀ·V (d_k×d_v),  z = Σ_j φ(K_j) (1×d_k),
             O_i = φ(Q_i)·KV / (φ(Q_i)·z + eps).
Causal (prefix sums inclusive of i, the RNN view):
             S_i = S_{i−1} + φ(K_i)ᵀ·V_i (d_k×d_v),  z_i = z_{i−1} + φ(K_i),
             O_i = φ(Q_i)·S_i / (φ(Q_i)·z_i + eps).
STATE stacks S_1 … S_n vertically: rows i·d_k … (i+1)·d_k − 1 hold S_{i+1}.
"""

import numpy as np

from reference.cost import cost_blocks, lengths

EPS = 1e-6


def elu_plus_one(x: np.ndarray) -> np.ndarray:
    """φ(x) = elu(x) + 1 with α = 1."""
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def linear_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    q, k, v = x @ inputs["W_Q"], x @ inputs["W_K"], x @ inputs["W_V"]
    phi_q, phi_k = elu_plus_one(q), elu_plus_one(k)
    steps = {"Q": q, "K": k, "V": v, "PHI_Q": phi_q, "PHI_K": phi_k}
    if params.causal:
        # S_i = Σ_{j≤i} φ(K_j)ᵀ V_j, stacked: (n·d_k × d_v)
        outer = phi_k[:, :, None] * v[:, None, :]          # (n, d_k, d_v)
        state = np.cumsum(outer, axis=0)
        z = np.cumsum(phi_k, axis=0)                       # z_i (n×d_k)
        numer = np.einsum("ik,ikv->iv", phi_q, state)      # φ(Q_i)·S_i
        denom = np.sum(phi_q * z, axis=1, keepdims=True) + EPS
        steps.update({"STATE": state.reshape(-1, v.shape[1]), "Z": z})
    else:
        kv = phi_k.T @ v                                   # φ(K)ᵀ·V  (d_k×d_v)
        z = phi_k.sum(axis=0, keepdims=True)               # Σ_j φ(K_j)  (1×d_k)
        numer = phi_q @ kv
        denom = phi_q @ z.T + EPS
        steps.update({"KV": kv, "Z": z})
    steps.update({"NUMER": numer, "DENOM": denom, "OUTPUT": numer / denom})
    steps.update(linear_cost(x.shape[0], q.shape[1], v.shape[1]))
    return steps


def linear_cost(n: int, d_k: int, d_v: int) -> dict[str, np.ndarray]:
    """Per length n: the state S (d_k×d_v) and z (d_k), the same at every n; multiply-adds
    token by token: φ(K_i)ᵀV_i (d_k·d_v), φ(Q_i)·S (d_k·d_v), φ(Q_i)·z (d_k). Softmax
    attention of the same sizes beside it: n×n scores, n²·d_k + n²·d_v."""
    ns = lengths(n)
    per_token = d_k * d_v + d_k * d_v + d_k
    return cost_blocks([n, d_k, d_v], ns, COST_HELD=np.full_like(ns, d_k * d_v + d_k),
                       COST_MACS=ns * per_token, COST_STD_HELD=ns * ns,
                       COST_STD_MACS=ns * ns * d_k + ns * ns * d_v)
