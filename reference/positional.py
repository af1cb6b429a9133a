"""Sinusoidal positional encoding (Vaswani et al. 2017 §3.5) and rotary embeddings (RoPE,
Su et al. 2021), with the relative-position property of RoPE made visible.

Glossary: X (n×d_model) token rows, positions p = 0..n−1; b = base (10000).
  PE_ANGLE[p,i] = p / b^(2i/d_model)                 i = 0..d_model/2−1
  PE[p,2i] = sin(PE_ANGLE[p,i]),  PE[p,2i+1] = cos(PE_ANGLE[p,i])   (interleaved, as the paper)
  X_PE = X + PE
  Q = X·W_Q, K = X·W_K (n×d_k);  ROPE_ANGLE[p,i] = p · b^(−2i/d_k),  i = 0..d_k/2−1
  interleaved pairs (x_2i, x_2i+1)   (RoFormer, Meta LLaMA, GPT-J)
  half pairs        (x_i, x_i+d_k/2) (GPT-NeoX, HF LLaMA "rotate_half")
  each pair (a, b) → (a·cos θ − b·sin θ, b·cos θ + a·sin θ)
  SCORES = Q_ROT·K_ROTᵀ
  REL_*: the query of token 1 and the key of token 1 placed at every position; their score
  (R_m q)·(R_n k) depends only on m − n, so REL_GAP = max |REL[m,n] − REL[m+1,n+1]| ≈ 0.
"""

import numpy as np


def sinusoidal_angles(n: int, d: int, base: float) -> np.ndarray:
    """θ[p,i] = p / base^(2i/d)  (n × d/2)."""
    pos, i = np.arange(n)[:, None], np.arange(d // 2)[None, :]
    return pos / np.power(float(base), 2 * i / d)


def sinusoidal_pe(angles: np.ndarray) -> np.ndarray:
    """sin in even columns, cos in odd columns (n × d)."""
    pe = np.empty((angles.shape[0], 2 * angles.shape[1]))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
    return pe


def rope_angles(n: int, d_k: int, base: float) -> np.ndarray:
    """θ[p,i] = p · base^(−2i/d_k)  (n × d_k/2), the inverse-frequency form of HF/Meta."""
    pos, i = np.arange(n)[:, None], np.arange(d_k // 2)[None, :]
    return pos * np.power(float(base), -2 * i / d_k)


def pair_columns(d: int, convention: str) -> tuple[np.ndarray, np.ndarray]:
    """Column indices (a, b) of the pairs rotated together, pair i at position i."""
    if convention == "interleaved":
        return np.arange(0, d, 2), np.arange(1, d, 2)
    return np.arange(d // 2), np.arange(d // 2, d)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, convention: str) -> np.ndarray:
    """Rotate each pair (a, b) of row p by θ[p,i]: (a cos − b sin, b cos + a sin)."""
    a, b = pair_columns(x.shape[1], convention)
    out = np.empty_like(x)
    out[:, a] = x[:, a] * cos - x[:, b] * sin
    out[:, b] = x[:, b] * cos + x[:, a] * sin
    return out


def positional_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    n, d = x.shape
    steps: dict[str, np.ndarray] = {}
    steps["PE_ANGLE"] = sinusoidal_angles(n, d, params.base)
    steps["PE"] = sinusoidal_pe(steps["PE_ANGLE"])
    steps["X_PE"] = x + steps["PE"]                              # X + PE
    q, k = x @ inputs["W_Q"], x @ inputs["W_K"]                  # RoPE models add no PE
    steps["Q"], steps["K"] = q, k
    angle = rope_angles(n, q.shape[1], params.base)
    cos, sin = np.cos(angle), np.sin(angle)
    steps.update(ROPE_ANGLE=angle, ROPE_COS=cos, ROPE_SIN=sin)
    steps["Q_ROT"] = rope(q, cos, sin, params.rope)
    steps["K_ROT"] = rope(k, cos, sin, params.rope)
    steps["SCORES"] = steps["Q_ROT"] @ steps["K_ROT"].T          # S = R_p q_p · R_j k_j
    # one fixed content (token 1's q and k) at every position m
    rel_q = rope(np.repeat(q[:1], n, axis=0), cos, sin, params.rope)
    rel_k = rope(np.repeat(k[:1], n, axis=0), cos, sin, params.rope)
    rel = rel_q @ rel_k.T
    diff = np.abs(rel[:-1, :-1] - rel[1:, 1:])                   # same offset m − n
    steps.update(REL_Q_ROT=rel_q, REL_K_ROT=rel_k, REL_SCORES=rel, REL_DIFF=diff,
                 REL_GAP=np.array([[diff.max()]]))
    return steps
