"""One Transformer encoder layer, as PyTorch's `nn.TransformerEncoderLayer` (dropout 0,
batch_first=True, eval), with the `X @ W` orientation (W = torch weight transposed).

Glossary: d = d_model, H heads of width d_k = d/H (contiguous column slices), d_ff the
feed-forward width; LN(r) = (r − μ)/√(σ² + eps)·γ + β per row, σ² the biased variance,
eps = params.ln_eps (PyTorch 1e-5, BERT 1e-12); act = ReLU or GELU, in its tanh form
0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) or exact, 0.5·x·(1 + erf(x/√2)).
  embeddings (BERT): X = LN_EMB(WORD_EMB + POS_EMB + TYPE_EMB), the rows looked up per token
  MHA(h):  Q = h·W_Q + B_Q (also K, V);  head_i = softmax(Q_i·K_iᵀ/√d_k)·V_i;
           ATTN = [head_1 … head_H]·W_O + B_O
  FFN(h):  FFN_OUT = act(h·W_1 + B_1)·W_2 + B_2
  post-LN (default): H1 = LN1(X + MHA(X));        OUTPUT = LN2(H1 + FFN(H1))
  pre-LN (norm_first): R1 = X + MHA(LN1(X));     OUTPUT = R1 + FFN(LN2(R1))
"""

import math
from collections.abc import Callable

import numpy as np

from reference.softmax import masked_softmax_steps

_erf = np.vectorize(math.erf, otypes=[float])


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (torch `approximate='tanh'`)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_exact(x: np.ndarray) -> np.ndarray:
    """GELU, 0.5·x·(1 + erf(x/√2)) (torch's default, BERT's "gelu")."""
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def layer_norm_steps(r: np.ndarray, gamma: np.ndarray, beta: np.ndarray, prefix: str,
                     out_name: str, eps: float) -> dict[str, np.ndarray]:
    """μ = mean_j r_j;  c = r − μ;  σ² = mean_j c_j²;  out = c/√(σ² + eps)·γ + β."""
    mean = r.mean(axis=1, keepdims=True)
    centered = r - mean
    var = (centered * centered).mean(axis=1, keepdims=True)
    out = centered / np.sqrt(var + eps) * gamma + beta
    return {f"{prefix}_MEAN": mean, f"{prefix}_CENTERED": centered, f"{prefix}_VAR": var,
            out_name: out}


def attention_steps(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int,
                    allowed: np.ndarray, prefix: str = "") -> dict[str, np.ndarray]:
    """Heads of softmax(Q_h·K_hᵀ/√d_k)·V_h over the `allowed` entries: the steps prefix +
    SCORES_Hh … HEAD_Hh and prefix + CONCAT."""
    d_k = q.shape[1] // heads
    steps, outputs = {}, []
    for i in range(heads):
        cols, sfx = slice(i * d_k, (i + 1) * d_k), f"_H{i + 1}"  # head i: contiguous columns
        scores = q[:, cols] @ k[:, cols].T
        steps[f"{prefix}SCORES{sfx}"] = scores
        steps[f"{prefix}SCALED{sfx}"] = scores / np.sqrt(d_k)
        for name, block in masked_softmax_steps(steps[f"{prefix}SCALED{sfx}"],
                                                allowed).items():
            steps[f"{prefix}{name}{sfx}"] = block
        outputs.append(steps[f"{prefix}WEIGHTS{sfx}"] @ v[:, cols])
        steps[f"{prefix}HEAD{sfx}"] = outputs[-1]
    steps[f"{prefix}CONCAT"] = np.concatenate(outputs, axis=1)
    return steps


def norm_into(steps: dict, r: np.ndarray, w: dict[str, np.ndarray], ln: str, out: str,
              eps: float) -> np.ndarray:
    """LayerNorm `ln` of r (weights w[ln_GAMMA], w[ln_BETA]), its steps added to `steps`."""
    steps.update(layer_norm_steps(r, w[f"{ln}_GAMMA"], w[f"{ln}_BETA"], ln, out, eps))
    return steps[out]


def self_attention_into(steps: dict, h: np.ndarray, w: dict[str, np.ndarray], heads: int,
                        allowed: np.ndarray) -> np.ndarray:
    """MHA(h) over the `allowed` entries, its steps Q, K, V … ATTN added to `steps`."""
    q, k, v = (h @ w[f"W_{m}"] + w[f"B_{m}"] for m in "QKV")
    steps.update({"Q": q, "K": k, "V": v})
    steps.update(attention_steps(q, k, v, heads, allowed))
    steps["ATTN"] = steps["CONCAT"] @ w["W_O"] + w["B_O"]
    return steps["ATTN"]


def feed_forward_into(steps: dict, h: np.ndarray, w: dict[str, np.ndarray],
                      act: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """FFN(h) = act(h·W_1 + B_1)·W_2 + B_2, its steps added to `steps`."""
    steps["FFN_HIDDEN"] = h @ w["W_1"] + w["B_1"]
    steps["FFN_ACT"] = act(steps["FFN_HIDDEN"])
    steps["FFN_OUT"] = steps["FFN_ACT"] @ w["W_2"] + w["B_2"]
    return steps["FFN_OUT"]


def encoder_layer_steps(x: np.ndarray, w: dict[str, np.ndarray], heads: int,
                        act: Callable[[np.ndarray], np.ndarray], eps: float,
                        pre_ln: bool) -> dict[str, np.ndarray]:
    """Every step of one encoder layer on x, weights `w` by their plain names."""
    steps: dict[str, np.ndarray] = {}
    everywhere = np.ones((len(x), len(x)), bool)
    if pre_ln:
        steps["RESID_1"] = x + self_attention_into(
            steps, norm_into(steps, x, w, "LN1", "LN1_OUT", eps), w, heads, everywhere)
        steps["OUTPUT"] = steps["RESID_1"] + feed_forward_into(
            steps, norm_into(steps, steps["RESID_1"], w, "LN2", "LN2_OUT", eps), w, act)
    else:
        steps["RESID_1"] = x + self_attention_into(steps, x, w, heads, everywhere)
        h1 = norm_into(steps, steps["RESID_1"], w, "LN1", "LN1_OUT", eps)
        steps["RESID_2"] = h1 + feed_forward_into(steps, h1, w, act)
        norm_into(steps, steps["RESID_2"], w, "LN2", "OUTPUT", eps)
    return steps


def encoder_block_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    steps: dict[str, np.ndarray] = {}
    if params.embeddings:  # X = LN_EMB(WORD_EMB + POS_EMB + TYPE_EMB)
        steps["EMB_SUM"] = inputs["WORD_EMB"] + inputs["POS_EMB"] + inputs["TYPE_EMB"]
        x = norm_into(steps, steps["EMB_SUM"], inputs, "EMB", "X", params.ln_eps)
    else:
        x = inputs["X"]
    if params.activation == "gelu":
        act = gelu_exact if params.gelu == "exact" else gelu_tanh
    else:
        def act(hidden):
            return np.maximum(hidden, 0.0)
    steps.update(encoder_layer_steps(x, inputs, params.heads, act, params.ln_eps,
                                     params.pre_ln))
    return steps
