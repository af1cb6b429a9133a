"""Autoregressive decoding with a KV cache, one token per step, and the causal attention
over the whole sequence it must equal.

Glossary: n steps (tokens), H query heads and G key/value heads of width d_k = d_model/H,
head h reads K/V head g = ⌊h·G/H⌋; optional bias rows (nn.Linear's, GPT-2's c_attn).
  step t (t = 1 … n), from x_t alone:
    q_t = x_t·W_Q + B_Q;  K_CACHE_t = [K_CACHE_{t−1}; x_t·W_K + B_K];  V_CACHE_t likewise
    S_t[h, s] = q_t,h · K_CACHE_t[s, g]ᵀ / √d_k   (s = 1 … t: the cache holds no future)
    A_t = softmax over each row of S_t;  ATTN_t[h] = A_t[h]·V_CACHE_t[:, g]
    OUTPUT[t] = [ATTN_t[1] … ATTN_t[H]]
  whole sequence: head_h = softmax(causal(Q_h·K_gᵀ/√d_k))·V_g;  CONCAT = [head_1 … head_H]
  DIFF = |OUTPUT − CONCAT|, MAX_DIFF its largest entry (0 up to rounding)
  cache per token: 2·L·H·d_k numbers (MHA), 2·L·G·d_k (GQA), 2·L·d_k (MQA), for this sheet
  (L = 1) and the tutorial's example of 96 heads (EXAMPLE_SIZES)
"""

from types import SimpleNamespace

import numpy as np

from reference.llama_block import grouped_heads
from reference.multihead import multihead_ref
from reference.softmax import masked_softmax_steps

# the tutorial's 96 heads, in a model of GPT-3 175B's shape: L = 96 layers, d_k = 128;
# GQA with G = 8 key/value groups (as LLaMA-2 70B)
EXAMPLE_SIZES = (96, 96, 8, 128)


def cache_per_token(layers: int, heads: int, groups: int, d_k: int) -> list[int]:
    """Numbers a decoder caches per token: a key and a value row in every layer."""
    return [2 * layers * heads * d_k, 2 * layers * groups * d_k, 2 * layers * d_k]


def kv_cache_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    n, d = x.shape
    heads, groups, d_k = grouped_heads(x, params)
    w = {m: (inputs[f"W_{m}"], inputs.get(f"B_{m}", 0.0)) for m in "QKV"}
    steps: dict[str, np.ndarray] = {}
    k_cache = np.zeros((0, groups * d_k))
    v_cache = np.zeros((0, groups * d_k))
    rows = []
    for t in range(1, n + 1):
        x_t = x[t - 1:t]
        q_t = x_t @ w["Q"][0] + w["Q"][1]
        k_cache = np.vstack([k_cache, x_t @ w["K"][0] + w["K"][1]])   # append, never recompute
        v_cache = np.vstack([v_cache, x_t @ w["V"][0] + w["V"][1]])
        sfx = f"_T{t}"
        scores = np.empty((heads, t))
        for h in range(heads):
            g = h * groups // heads
            scores[h] = k_cache[:, g * d_k:(g + 1) * d_k] @ q_t[0, h * d_k:(h + 1) * d_k]
        steps.update({"Q" + sfx: q_t, "K_CACHE" + sfx: k_cache, "V_CACHE" + sfx: v_cache,
                      "SCORES" + sfx: scores / np.sqrt(d_k)})
        for name, block in masked_softmax_steps(scores / np.sqrt(d_k),
                                                np.ones((heads, t), bool)).items():
            steps[name + sfx] = block
        attn = np.stack([steps["WEIGHTS" + sfx][h] @ v_cache[:, (h * groups // heads) * d_k:
                                                             (h * groups // heads + 1) * d_k]
                         for h in range(heads)])
        steps["ATTN" + sfx] = attn
        rows.append(attn.reshape(1, -1))
    steps["OUTPUT"] = np.vstack(rows)
    # the whole sequence at once, causal: multi-head attention without its W_O
    whole = multihead_ref({**inputs, "W_O": np.eye(heads * d_k)},
                          SimpleNamespace(heads=heads, kv_heads=groups, d_model=d, causal=True))
    steps.update({name: block for name, block in whole.items()
                  if name != "OUTPUT" and not name.startswith("COST_")})
    steps["DIFF"] = np.abs(steps["OUTPUT"] - steps["CONCAT"])
    steps["MAX_DIFF"] = steps["DIFF"].max(keepdims=True).reshape(1, 1)
    sizes = [[1, heads, groups, d_k], list(EXAMPLE_SIZES)]
    steps["CACHE_SIZES"] = np.array(sizes, dtype=float)
    steps["CACHE_PER_TOKEN"] = np.array([cache_per_token(*s) for s in sizes], dtype=float)
    return steps
