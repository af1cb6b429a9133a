"""Relative position biases added to the attention scores: ALiBi (Press et al. 2022) and T5's
bucketed, learned bias (Raffel et al. 2020), over multi-head attention.

Glossary: n tokens at positions 0…n−1; H heads as contiguous column slices, d_k = d_model/H;
Q = X·W_Q, K = X·W_K, V = X·W_V (n×H·d_k);  REL_POS[i,j] = r = j − i (transformers:
memory_position − context_position).

ALiBi (the paper's `get_slopes`): with P = 2^⌊log2 H⌋, m_h = 2^(−8h/P) for h = 1…P, then the
odd-numbered slopes of 2P heads, 2^(−4(2t−1)/P) for t = 1…H−P (H a power of two: all
2^(−8h/H)).  BIAS_h = −m_h·|j − i|;  S_h = Q_h·K_hᵀ/√d_k + BIAS_h; always causal.

T5 (transformers `T5Attention._relative_position_bucket` and `compute_bias`): B' = buckets/2
(bidirectional, keys after the query add B') or buckets (causal); e = B'/2 (max_exact);
d = |r| (bidirectional) or −min(r, 0) (causal);
bucket = offset + d if d < e, else min(B' − 1, e + ⌊x_d⌋) with, in float32 as transformers,
  a = d/e,  ℓ = ln a,  c = ln(max_distance/e),  q = ℓ/c,  x = q·(B' − e)
(every operation rounded to float32; the float32 log taken as the correctly rounded one,
where transformers' bucket can be one higher at a whole x, depending on the CPU's log).
BIAS_h[i,j] = BIAS_TABLE[bucket_ij, h];  S_h = Q_h·K_hᵀ + BIAS_h (T5 does not scale);
causal mask with --causal.
Then A_h = softmax(S_h) over the allowed keys, head_h = A_h·V_h, O = [head_1 … head_H]·W_O.
"""

import numpy as np

from reference.softmax import causal_allowed, masked_softmax_steps


def alibi_slopes(heads: int) -> np.ndarray:
    """m_h, h = 1…H, from the closed form of get_slopes."""
    p = 1 << (heads.bit_length() - 1)                 # closest power of two ≤ H
    h = np.arange(1, heads + 1)
    return np.where(h <= p, 2.0 ** (-8.0 * h / p), 2.0 ** (-4.0 * (2 * (h - p) - 1) / p))


def t5_log_steps(distances: np.ndarray, max_exact: int, max_distance: int,
                 log_buckets: int) -> dict[str, np.ndarray]:
    """The float32 steps of T5's log buckets for distances ≥ max_exact."""
    f32 = np.float32
    ratio = distances.astype(f32) / f32(max_exact)           # relative_position.float() / e
    # ln in float64 rounded once: the correctly rounded float32 log (torch.log's float32 log,
    # which transformers floors, can be one unit in the last place off, depending on the CPU)
    log_ratio = np.log(ratio.astype(np.float64)).astype(f32)
    log_range = f32(np.log(max_distance / max_exact))       # the Python float, as float32
    fraction = log_ratio / log_range
    log_bin = fraction * f32(log_buckets)
    return {"LOG_RANGE": np.array([[log_range]]), "RATIO": ratio, "LOG_RATIO": log_ratio,
            "LOG_FRACTION": fraction, "LOG_BIN": log_bin}


def t5_buckets(rel_pos: np.ndarray, bidirectional: bool, num_buckets: int,
               max_distance: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """T5's bucket of every relative position, and the log steps of distances e … max."""
    direction = num_buckets // 2 if bidirectional else num_buckets
    offset = np.where(rel_pos > 0, direction, 0) if bidirectional else 0
    distance = np.abs(rel_pos) if bidirectional else -np.minimum(rel_pos, 0)
    max_exact = direction // 2
    largest = int(distance.max(initial=0))
    table = t5_log_steps(np.arange(max_exact, largest + 1), max_exact, max_distance,
                         direction - max_exact)
    log_bin = np.zeros(max(largest + 1, max_exact))
    log_bin[max_exact:] = table["LOG_BIN"]                 # by distance
    large = np.minimum(direction - 1, max_exact + np.floor(log_bin[distance]).astype(int))
    return offset + np.where(distance < max_exact, distance, large), table


def relative_position_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    n, heads = x.shape[0], params.heads
    d_k = params.d_model // heads
    q, k, v = x @ inputs["W_Q"], x @ inputs["W_K"], x @ inputs["W_V"]
    positions = np.arange(n)
    rel_pos = positions[None, :] - positions[:, None]        # r_ij = j − i
    alibi = params.bias == "alibi"
    causal = alibi or params.causal
    allowed = causal_allowed(n, n) if causal else np.ones((n, n), dtype=bool)
    steps = {"Q": q, "K": k, "V": v}
    if causal:
        steps["MASK"] = allowed.astype(float)
    steps["REL_POS"] = rel_pos.astype(float)
    if alibi:
        slopes = alibi_slopes(heads)
        steps["SLOPES"] = slopes[None, :]
        biases = [-m * np.abs(rel_pos) for m in slopes]
    else:
        bucket, table = t5_buckets(rel_pos, not params.causal, params.buckets,
                                   params.max_distance)
        if len(table["RATIO"]):                                # distances ≥ e exist
            steps["LOG_RANGE"] = table["LOG_RANGE"].astype(float)
            steps.update({name: table[name].astype(float)[:, None]
                          for name in ("RATIO", "LOG_RATIO", "LOG_FRACTION", "LOG_BIN")})
        steps["BUCKET"] = bucket.astype(float)
        biases = [inputs["BIAS_TABLE"][bucket, h] for h in range(heads)]  # compute_bias
    outputs = []
    for h in range(heads):
        sfx, cols = f"_H{h + 1}", slice(h * d_k, (h + 1) * d_k)
        scores = q[:, cols] @ k[:, cols].T
        steps["SCORES" + sfx] = scores
        if alibi:
            scores = steps["SCALED" + sfx] = scores / np.sqrt(d_k)
        steps["BIAS" + sfx] = biases[h]
        steps["BIASED" + sfx] = scores + biases[h]
        for name, block in masked_softmax_steps(steps["BIASED" + sfx], allowed).items():
            steps[name + sfx] = block
        outputs.append(steps["WEIGHTS" + sfx] @ v[:, cols])
        steps["HEAD" + sfx] = outputs[-1]
    steps["CONCAT"] = np.concatenate(outputs, axis=1)        # (n×H·d_k)
    steps["OUTPUT"] = steps["CONCAT"] @ inputs["W_O"]
    return steps
