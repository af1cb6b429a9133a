"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"), as in
idiap/fast-transformers `LinearAttention` / `CausalLinearAttention`; and Performer's
positive random features (Choromanski et al. 2020, "Rethinking Attention with Performers",
FAVOR+) as a second feature map that estimates softmax attention.

Glossary: φ a positive feature map applied to every row of Q and K; eps = 1e-6 in the
denominator; no softmax.
Non-causal:  KV = φ(K)ᵀ·V (w×d_v),  z = Σ_j φ(K_j) (1×w),
             O_i = φ(Q_i)·KV / (φ(Q_i)·z + eps).
Causal (prefix sums inclusive of i, the RNN view):
             S_i = S_{i−1} + φ(K_i)ᵀ·V_i (w×d_v),  z_i = z_{i−1} + φ(K_i),
             O_i = φ(Q_i)·S_i / (φ(Q_i)·z_i + eps).
STATE stacks S_1 … S_n vertically: rows i·w … (i+1)·w − 1 hold S_{i+1}. w is the width
of φ: d_k for elu, m for favor.

features="elu": φ(x) = elu(x) + 1 (x + 1 for x > 0, exp(x) otherwise), elementwise, no
1/√d_k scale.
features="favor" (code ↔ paper): OMEGA = Ω (d_k×m), columns ω_r ~ N(0, I) (iid, not
orthogonalised); Q_PRIME = q' = q·d_k^(−1/4), K_PRIME likewise, so q'·k' = q·k/√d_k;
Q_OMEGA = q'·Ω; Q_NORM = |q'|²/2;
             φ(x) = exp(x·Ω − |x|²/2) / √m         (PHI_Q = φ(q'), PHI_K = φ(k'))
E_ω[exp(ωᵀq' − |q'|²/2)·exp(ωᵀk' − |k'|²/2)] = exp(q'·k'), so φ(q')·φ(k') is an unbiased
estimate of softmax's kernel exp(q·k/√d_k), and OUTPUT estimates softmax attention.
Beside it: exact softmax attention from the same Q, K, V (SCORES … WEIGHTS as in
`attention`, OUTPUT_SOFTMAX), MAX_ABS_ERR = max |OUTPUT − OUTPUT_SOFTMAX|; and for each
m' = 4, 16, 64, … below m, OUTPUT_Mm' = the same attention from the first m' columns of Ω
only; ERR_BY_M = the max |error| for each m' and for m (when m > 4).
"""

import numpy as np

from reference.cost import cost_blocks, lengths
from reference.softmax import causal_allowed, masked_softmax_steps

EPS = 1e-6


def elu_plus_one(x: np.ndarray) -> np.ndarray:
    """φ(x) = elu(x) + 1 with α = 1."""
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def favor_features(x: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """φ(x) = exp(x·Ω − |x|²/2) / √m for every row of x (already scaled by d_k^(−1/4))."""
    half_norm = 0.5 * np.sum(x * x, axis=1, keepdims=True)      # |x|²/2  (n×1)
    return np.exp(x @ omega - half_norm) / np.sqrt(omega.shape[1])


def prefix_counts(m: int) -> list[int]:
    """m' = 4, 16, 64, … below m: the feature counts the error table compares with m."""
    counts, c = [], 4
    while c < m:
        counts.append(c)
        c *= 4
    return counts


def linear_path(phi_q: np.ndarray, phi_k: np.ndarray, v: np.ndarray,
                causal: bool) -> dict[str, np.ndarray]:
    """KV and z (or the running STATE and z), NUMER, DENOM and OUTPUT from the features."""
    if causal:
        # S_i = Σ_{j≤i} φ(K_j)ᵀ V_j, stacked: (n·w × d_v)
        outer = phi_k[:, :, None] * v[:, None, :]          # (n, w, d_v)
        state = np.cumsum(outer, axis=0)
        z = np.cumsum(phi_k, axis=0)                       # z_i (n×w)
        numer = np.einsum("ik,ikv->iv", phi_q, state)      # φ(Q_i)·S_i
        denom = np.sum(phi_q * z, axis=1, keepdims=True) + EPS
        steps = {"STATE": state.reshape(-1, v.shape[1]), "Z": z}
    else:
        kv = phi_k.T @ v                                   # φ(K)ᵀ·V  (w×d_v)
        z = phi_k.sum(axis=0, keepdims=True)               # Σ_j φ(K_j)  (1×w)
        numer = phi_q @ kv
        denom = phi_q @ z.T + EPS
        steps = {"KV": kv, "Z": z}
    steps.update({"NUMER": numer, "DENOM": denom, "OUTPUT": numer / denom})
    return steps


def favor_steps(q: np.ndarray, k: np.ndarray, omega: np.ndarray) -> dict[str, np.ndarray]:
    """q' = q·d_k^(−1/4), q'·Ω, |q'|²/2 and φ(q'); the same for k."""
    steps = {}
    for name, x in (("Q", q), ("K", k)):
        scaled = x / q.shape[1] ** 0.25                     # x' = x / d_k^¼
        steps.update({f"{name}_PRIME": scaled, f"{name}_OMEGA": scaled @ omega,
                      f"{name}_NORM": 0.5 * np.sum(scaled * scaled, axis=1, keepdims=True),
                      f"PHI_{name}": favor_features(scaled, omega)})
    return steps


def softmax_comparison(q: np.ndarray, k: np.ndarray, v: np.ndarray, omega: np.ndarray,
                       causal: bool, output: np.ndarray) -> dict[str, np.ndarray]:
    """Exact softmax attention from Q, K, V; the error of the estimate for m and for the
    first m' = 4, 16, … columns of Ω."""
    n = q.shape[0]
    scores = q @ k.T
    scaled = scores / np.sqrt(q.shape[1])
    allowed = causal_allowed(n, n) if causal else np.ones((n, n), dtype=bool)
    steps = {"SCORES": scores, "SCALED": scaled}
    if causal:
        steps["MASK"] = allowed.astype(float)
    steps.update(masked_softmax_steps(scaled, allowed))
    exact = steps["WEIGHTS"] @ v
    steps["OUTPUT_SOFTMAX"] = exact
    errors = []
    for count in prefix_counts(omega.shape[1]):
        # the whole estimate again from Ω's first m' columns (features scaled by 1/√m')
        fewer = favor_steps(q, k, omega[:, :count])
        estimate = linear_path(fewer["PHI_Q"], fewer["PHI_K"], v, causal)["OUTPUT"]
        steps[f"OUTPUT_M{count}"] = estimate
        errors.append(np.abs(estimate - exact).max())
    steps["MAX_ABS_ERR"] = np.abs(output - exact).max().reshape(1, 1)
    if errors:  # m > 4: the table of m' = 4, 16, …, m
        steps["ERR_BY_M"] = np.array(errors + [np.abs(output - exact).max()]).reshape(-1, 1)
    return steps


def linear_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    q, k, v = x @ inputs["W_Q"], x @ inputs["W_K"], x @ inputs["W_V"]
    steps = {"Q": q, "K": k, "V": v}
    favor = params.features == "favor"
    if favor:
        steps.update(favor_steps(q, k, inputs["OMEGA"]))
    else:
        steps.update({"PHI_Q": elu_plus_one(q), "PHI_K": elu_plus_one(k)})
    steps.update(linear_path(steps["PHI_Q"], steps["PHI_K"], v, params.causal))
    if favor:
        steps.update(softmax_comparison(q, k, v, inputs["OMEGA"], params.causal,
                                        steps["OUTPUT"]))
    else:
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
