"""Why attention divides by √d_k: for each width d_k, scores of unit-variance q and k with and
without the scale, their softmax, and the softmax's Jacobian.

Glossary: Q_Dw, K_Dw (n×w) with N(0, 1) entries; S = Q·Kᵀ; S/√w; var = population variance
of the n² entries (divide by n²); a = softmax of a row; J = diag(a) − a·aᵀ (∂a_j/∂s_k);
‖J‖_F its Frobenius norm. Suffix _RAW: the softmax of S itself; no suffix: of S/√w.
"""

import numpy as np

from reference.softmax import masked_softmax_steps


def widths_of(params) -> list[int]:
    return [int(w) for w in str(params.widths).split(",")]


def jacobian(a: np.ndarray) -> np.ndarray:
    """J = diag(a) − a·aᵀ for one softmax row a: J_jk = ∂a_j/∂s_k = a_j(δ_jk − a_k)."""
    return np.diag(a) - np.outer(a, a)


def softmax_gradient(scores: np.ndarray, suffix: str) -> dict[str, np.ndarray]:
    """The row softmax of `scores`, each row's largest weight, row 1's Jacobian with its
    largest |entry| and Frobenius norm, and every row's Frobenius norm."""
    n = scores.shape[0]
    steps = masked_softmax_steps(scores, np.ones(scores.shape, dtype=bool))
    a = steps["WEIGHTS"]
    j1 = jacobian(a[0])
    return {f"{name}{suffix}": value for name, value in {
        **steps,
        "MAX_WEIGHT": a.max(axis=1, keepdims=True),
        "JAC": j1,
        "JAC_MAX": np.array([[np.abs(j1).max()]]),
        "JAC_NORM": np.array([[np.linalg.norm(j1)]]),
        "ROW_JAC_NORM": np.array([[np.linalg.norm(jacobian(a[i]))] for i in range(n)]),
    }.items()}


def scaling_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    n = params.seq_len
    steps = {"EYE": np.eye(n), "OFF_DIAG": 1 - np.eye(n)}
    summary = []
    for w in widths_of(params):
        d = f"_D{w}"
        scores = inputs[f"Q{d}"] @ inputs[f"K{d}"].T   # S = Q·Kᵀ
        scaled = scores / np.sqrt(w)                   # S / √d_k
        steps |= {f"SCORES{d}": scores, f"SCALED{d}": scaled,
                  f"VAR_SCORES{d}": np.array([[scores.var()]]),
                  f"VAR_SCALED{d}": np.array([[scaled.var()]])}
        steps |= softmax_gradient(scores, f"_RAW{d}")
        steps |= softmax_gradient(scaled, d)
        raw_norms, norms = steps[f"ROW_JAC_NORM_RAW{d}"], steps[f"ROW_JAC_NORM{d}"]
        summary.append([scores.var(), scaled.var(),
                        steps[f"MAX_WEIGHT_RAW{d}"].mean(), steps[f"MAX_WEIGHT{d}"].mean(),
                        raw_norms.mean(), norms.mean(),
                        np.median(raw_norms), np.median(norms)])
    steps["SUMMARY"] = np.array(summary)
    return steps
