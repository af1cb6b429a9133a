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


def encoder_block_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    heads = params.heads
    steps: dict[str, np.ndarray] = {}

    def mha(h: np.ndarray) -> np.ndarray:
        q = h @ inputs["W_Q"] + inputs["B_Q"]
        k = h @ inputs["W_K"] + inputs["B_K"]
        v = h @ inputs["W_V"] + inputs["B_V"]
        steps.update({"Q": q, "K": k, "V": v})
        outputs = []
        for i in range(heads):
            cols = slice(i * d_k, (i + 1) * d_k)    # head i: contiguous column slice
            sfx = f"_H{i + 1}"
            scores = q[:, cols] @ k[:, cols].T
            scaled = scores / np.sqrt(d_k)
            steps["SCORES" + sfx], steps["SCALED" + sfx] = scores, scaled
            for name, block in masked_softmax_steps(scaled, np.ones((n, n), bool)).items():
                steps[name + sfx] = block
            outputs.append(steps["WEIGHTS" + sfx] @ v[:, cols])
            steps["HEAD" + sfx] = outputs[-1]
        steps["CONCAT"] = np.concatenate(outputs, axis=1)
        steps["ATTN"] = steps["CONCAT"] @ inputs["W_O"] + inputs["B_O"]
        return steps["ATTN"]

    def ffn(h: np.ndarray) -> np.ndarray:
        hidden = h @ inputs["W_1"] + inputs["B_1"]
        if params.activation == "gelu":
            act = gelu_exact(hidden) if params.gelu == "exact" else gelu_tanh(hidden)
        else:
            act = np.maximum(hidden, 0.0)
        steps.update({"FFN_HIDDEN": hidden, "FFN_ACT": act})
        steps["FFN_OUT"] = act @ inputs["W_2"] + inputs["B_2"]
        return steps["FFN_OUT"]

    def norm(r: np.ndarray, which: str, out_name: str) -> np.ndarray:
        steps.update(layer_norm_steps(r, inputs[f"{which}_GAMMA"], inputs[f"{which}_BETA"],
                                      which, out_name, params.ln_eps))
        return steps[out_name]

    if params.embeddings:  # X = LN_EMB(WORD_EMB + POS_EMB + TYPE_EMB)
        steps["EMB_SUM"] = inputs["WORD_EMB"] + inputs["POS_EMB"] + inputs["TYPE_EMB"]
        x = norm(steps["EMB_SUM"], "EMB", "X")
    else:
        x = inputs["X"]
    n, d = x.shape
    d_k = d // heads

    if params.pre_ln:
        steps["RESID_1"] = x + mha(norm(x, "LN1", "LN1_OUT"))
        steps["OUTPUT"] = steps["RESID_1"] + ffn(norm(steps["RESID_1"], "LN2", "LN2_OUT"))
    else:
        steps["RESID_1"] = x + mha(x)
        h1 = norm(steps["RESID_1"], "LN1", "LN1_OUT")
        steps["RESID_2"] = h1 + ffn(h1)
        norm(steps["RESID_2"], "LN2", "OUTPUT")
    return steps
