"""FlashAttention-2 forward pass (Dao 2023, Algorithm 1): blockwise online softmax.

Glossary (code ↔ paper): block_size B = B_r = B_c; key block j holds keys
[start_j, stop_j); S_Bj = Q·K_jᵀ/√d_k (n×B_j); M_Bj = m⁽ʲ⁾ running row max; ALPHA_Bj =
exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾) rescale factor; P_Bj = P̃⁽ʲ⁾ = exp(S_Bj − m⁽ʲ⁾); L_Bj = ℓ⁽ʲ⁾ running
sum; ACC_Bj = Õ⁽ʲ⁾ unnormalised output; OUTPUT = Õ⁽ᵀ⁾/ℓ⁽ᵀ⁾; LSE = m⁽ᵀ⁾ + ln ℓ⁽ᵀ⁾.

Every _Bj block spans all n query rows, as the workbook lays them out. The loop itself
runs as the kernel does: over query blocks i, then key blocks j. With causal masking a
query block never visits key blocks j > i (they lie wholly above the diagonal): those
rows of S_Bj and P_Bj hold 0 (not computed), ALPHA_Bj holds 1 and the state is carried.
In the diagonal block S_Bj keeps every score and the mask acts in the max and in P, as
in the `attention` kind. The state starts from the first key block (no ALPHA_B1), so no
−∞ and no sentinel is ever needed.
"""

import numpy as np

from reference.cost import cost_blocks, lengths
from reference.softmax import causal_allowed, masked_softmax_steps


def block_bounds(n: int, block_size: int) -> list[tuple[int, int]]:
    """[start, stop) of each block; the last one is shorter when B does not divide n."""
    return [(start, min(start + block_size, n)) for start in range(0, n, block_size)]


def online_softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, block_size: int,
                             causal: bool) -> dict[str, np.ndarray]:
    """Every _Bj block plus OUTPUT and LSE, for Q (n×d_k), K (n×d_k), V (n×d_v)."""
    n, d_v = q.shape[0], v.shape[1]
    bounds = block_bounds(n, block_size)
    blocks: dict[str, np.ndarray] = {}
    for j, (c0, c1) in enumerate(bounds, start=1):
        blocks[f"S_B{j}"] = np.zeros((n, c1 - c0))
        blocks[f"M_B{j}"] = np.empty((n, 1))
        if j > 1:
            blocks[f"ALPHA_B{j}"] = np.empty((n, 1))
        blocks[f"P_B{j}"] = np.zeros((n, c1 - c0))
        blocks[f"L_B{j}"] = np.empty((n, 1))
        blocks[f"ACC_B{j}"] = np.empty((n, d_v))

    for i, (r0, r1) in enumerate(bounds, start=1):            # query block Q_i
        rows = slice(r0, r1)
        m = ell = acc = None
        for j, (c0, c1) in enumerate(bounds, start=1):        # key/value block K_j, V_j
            if causal and j > i:
                # wholly above the diagonal: never computed, the state passes through
                blocks[f"ALPHA_B{j}"][rows] = 1.0
            else:
                # S = Q_i·K_jᵀ / √d_k; causal: only keys ≤ the query take part
                s = q[rows] @ k[c0:c1].T / np.sqrt(q.shape[1])
                allowed = causal_allowed(n, n)[rows, c0:c1] if causal else np.ones_like(s, bool)
                # m⁽ʲ⁾ = max(m⁽ʲ⁻¹⁾, rowmax S);  P̃ = exp(S − m⁽ʲ⁾), 0 where masked
                m_new = np.where(allowed, s, -np.inf).max(axis=1, keepdims=True)
                if m is not None:
                    m_new = np.maximum(m, m_new)
                p = np.where(allowed, np.exp(np.where(allowed, s - m_new, 0.0)), 0.0)
                if m is None:
                    # first block: ℓ = rowsum P̃, Õ = P̃·V_1
                    ell, acc = p.sum(axis=1, keepdims=True), p @ v[c0:c1]
                else:
                    # α = exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾); ℓ = α·ℓ + rowsum P̃; Õ = α·Õ + P̃·V_j
                    alpha = np.exp(m - m_new)
                    ell = alpha * ell + p.sum(axis=1, keepdims=True)
                    acc = alpha * acc + p @ v[c0:c1]
                    blocks[f"ALPHA_B{j}"][rows] = alpha
                m = m_new
                blocks[f"S_B{j}"][rows], blocks[f"P_B{j}"][rows] = s, p
            blocks[f"M_B{j}"][rows], blocks[f"L_B{j}"][rows] = m, ell
            blocks[f"ACC_B{j}"][rows] = acc

    last = len(bounds)
    ell, acc = blocks[f"L_B{last}"], blocks[f"ACC_B{last}"]
    blocks["OUTPUT"] = acc / ell                                # O = Õ⁽ᵀ⁾ / ℓ⁽ᵀ⁾
    blocks["LSE"] = blocks[f"M_B{last}"] + np.log(ell)          # L = m⁽ᵀ⁾ + ln ℓ⁽ᵀ⁾
    return blocks


def flash_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    """The flash sheet's step blocks: projections, every _Bj block, OUTPUT, LSE, and the
    plain softmax attention the sheet computes beside it for comparison."""
    x = inputs["X"]
    q, k, v = x @ inputs["W_Q"], x @ inputs["W_K"], x @ inputs["W_V"]
    steps = {"Q": q, "K": k, "V": v}
    steps.update(online_softmax_attention(q, k, v, params.block_size, params.causal))

    # standard attention: the whole n×n score matrix at once
    n = x.shape[0]
    scores = q @ k.T
    scaled = scores / np.sqrt(q.shape[1])
    allowed = causal_allowed(n, n) if params.causal else np.ones((n, n), dtype=bool)
    steps.update({"SCORES": scores, "SCALED": scaled})
    if params.causal:
        steps["MASK"] = allowed.astype(float)
    steps.update(masked_softmax_steps(scaled, allowed))
    steps["OUTPUT_STD"] = steps["WEIGHTS"] @ v
    steps["MAX_ABS_DIFF"] = np.abs(steps["OUTPUT"] - steps["OUTPUT_STD"]).max().reshape(1, 1)
    steps.update(flash_cost(n, q.shape[1], v.shape[1], params.block_size, params.causal))
    return steps


def tile_counts(n: int, block_size: int, causal: bool) -> tuple[int, int, int]:
    """Walk the key blocks as the sheet lays them out: (T blocks, scores computed, rows
    rescaled). Key block j (keys [start, stop)) meets every query row, or with causal
    skipping only the rows from its own block on; blocks after the first rescale the
    rows they meet."""
    starts = np.arange(0, n, block_size, dtype=np.int64)
    widths = np.minimum(starts + block_size, n) - starts
    rows_met = n - starts if causal else np.full_like(starts, n)
    return len(starts), int(np.sum(rows_met * widths)), int(np.sum(rows_met[1:]))


def flash_cost(n: int, d_k: int, d_v: int, block_size: int, causal: bool) -> dict:
    """Per length n: one n×B score block held (n² for standard attention); a multiply-add
    per computed score per key dimension and per value column, and α·Õ (d_v) and α·ℓ (1)
    per rescaled row."""
    ns = lengths(n)
    counts = np.array([tile_counts(int(m), block_size, causal) for m in ns])
    blocks, scores, rescaled = counts[:, 0], counts[:, 1], counts[:, 2]
    columns = {"COST_BLOCKS": blocks, "COST_HELD": ns * np.minimum(ns, block_size),
               "COST_STD_HELD": ns * ns}
    if causal:
        columns["COST_PAIRS"] = scores
    columns["COST_MACS"] = scores * (d_k + d_v) + rescaled * (d_v + 1)
    columns["COST_STD_MACS"] = ns * ns * (d_k + d_v)
    return cost_blocks([n, d_k, d_v, block_size], ns, **columns)
