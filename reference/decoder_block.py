"""One GPT-2 decoder block (transformers' `GPT2Block`, eval), in the `X @ W` orientation
(GPT-2's Conv1D weights are stored that way already).

Glossary: d = d_model, H heads of width d_k = d/H (contiguous column slices), d_ff the MLP
width (GPT-2: 4·d); LN(r) = (r − μ)/√(σ² + eps)·γ + β per row, σ² the biased variance,
eps = params.ln_eps (GPT-2 1e-5); GELU in its tanh form (GPT-2's gelu_new), or exact.
  LN1_OUT = LN1(X)
  Q = LN1_OUT·W_Q + B_Q (also K, V: the three thirds of GPT-2's fused c_attn)
  head_i = softmax(mask(Q_i·K_iᵀ/√d_k))·V_i, query i sees keys j ≤ i
  ATTN = [head_1 … head_H]·W_O + B_O;   RESID_1 = X + ATTN
  LN2_OUT = LN2(RESID_1);   FFN_OUT = GELU(LN2_OUT·W_1 + B_1)·W_2 + B_2
  OUTPUT = RESID_1 + FFN_OUT
"""

import numpy as np

from reference.encoder_block import gelu_exact, gelu_tanh, layer_norm_steps
from reference.softmax import causal_allowed, masked_softmax_steps


def decoder_block_steps(x: np.ndarray, w: dict[str, np.ndarray], heads: int, ln_eps: float,
                        gelu: str = "tanh", divisor: int = 1) -> dict[str, np.ndarray]:
    """Every step of one block on the hidden states `x`, weights `w` by their sheet names
    (W_Q, B_Q, …, LN1_GAMMA, …); the scores divided by √d_k and `divisor` (GPT-2's
    scale_attn_by_inverse_layer_idx: the layer's index + 1)."""
    n, d = x.shape
    d_k = d // heads
    steps = layer_norm_steps(x, w["LN1_GAMMA"], w["LN1_BETA"], "LN1", "LN1_OUT", ln_eps)
    h = steps["LN1_OUT"]
    q, k, v = (h @ w[f"W_{m}"] + w[f"B_{m}"] for m in "QKV")
    allowed = causal_allowed(n, n)
    steps.update({"Q": q, "K": k, "V": v, "MASK": allowed.astype(float)})
    outputs = []
    for i in range(heads):
        cols, sfx = slice(i * d_k, (i + 1) * d_k), f"_H{i + 1}"
        scores = q[:, cols] @ k[:, cols].T
        steps["SCORES" + sfx], steps["SCALED" + sfx] = scores, scores / np.sqrt(d_k) / divisor
        for name, block in masked_softmax_steps(steps["SCALED" + sfx], allowed).items():
            steps[name + sfx] = block
        outputs.append(steps["WEIGHTS" + sfx] @ v[:, cols])
        steps["HEAD" + sfx] = outputs[-1]
    steps["CONCAT"] = np.concatenate(outputs, axis=1)
    steps["ATTN"] = steps["CONCAT"] @ w["W_O"] + w["B_O"]
    steps["RESID_1"] = x + steps["ATTN"]
    steps.update(layer_norm_steps(steps["RESID_1"], w["LN2_GAMMA"], w["LN2_BETA"], "LN2",
                                  "LN2_OUT", ln_eps))
    hidden = steps["LN2_OUT"] @ w["W_1"] + w["B_1"]
    act = gelu_exact(hidden) if gelu == "exact" else gelu_tanh(hidden)
    steps.update({"FFN_HIDDEN": hidden, "FFN_ACT": act})
    steps["FFN_OUT"] = act @ w["W_2"] + w["B_2"]
    steps["OUTPUT"] = steps["RESID_1"] + steps["FFN_OUT"]
    return steps


def decoder_block_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    divisor = params.layer_number if params.scale_by_layer else 1
    return decoder_block_steps(inputs["X"], inputs, params.heads, params.ln_eps, params.gelu,
                               divisor)
