"""Row softmax over the allowed entries, as its four visible steps."""

import numpy as np


def masked_softmax_steps(scaled: np.ndarray, allowed: np.ndarray) -> dict[str, np.ndarray]:
    """m_i = max_{j allowed} s_ij;  p_ij = exp(s_ij − m_i) if allowed else 0;
    ℓ_i = Σ_j p_ij;  a_ij = p_ij / ℓ_i.  Every row must allow at least one entry."""
    assert allowed.any(axis=1).all(), "a fully masked row has no softmax"
    row_max = np.where(allowed, scaled, -np.inf).max(axis=1, keepdims=True)
    exp = np.where(allowed, np.exp(np.where(allowed, scaled - row_max, 0.0)), 0.0)
    row_sum = exp.sum(axis=1, keepdims=True)
    return {"ROW_MAX": row_max, "EXP": exp, "ROW_SUM": row_sum, "WEIGHTS": exp / row_sum}


def causal_allowed(n_queries: int, n_keys: int) -> np.ndarray:
    """Top-left aligned, as PyTorch's `is_causal`: query i may see keys j ≤ i."""
    return np.tril(np.ones((n_queries, n_keys), dtype=bool))
