"""One LLaMA decoder layer, as transformers' `LlamaDecoderLayer` (eval), with the `X @ W`
orientation (W = the nn.Linear weight transposed); optional bias rows as Qwen2 (B_Q, B_K,
B_V: qkv_bias) and LLaMA's attention_bias (also B_O) and mlp_bias (B_GATE, B_UP, B_DOWN).

Glossary: d = d_model, H query heads and G key/value heads (G divides H) of width
d_k = d/H, head h reads K/V head g = ⌊h·G/H⌋ (repeat_kv); f = d_ff; eps = rms_eps;
b = rope_theta; positions p = 0 … n−1.
  RMS(r):   ms = Σ_j r_j²/d;   RMS(r) = r/√(ms + eps)·w          (LlamaRMSNorm)
  RoPE:     θ[p,i] = p·b^(−2i/d_k), i = 0 … d_k/2−1; in each head the pairs are
            (x_i, x_i+d_k/2) ("rotate_half"): (a, b) → (a·cos θ − b·sin θ, b·cos θ + a·sin θ)
  ATTN:     Q = h·W_Q, K = h·W_K, V = h·W_V; Q_ROT, K_ROT rotated;
            head_h = softmax(causal(Q_ROT_h·K_ROT_gᵀ/√d_k))·V_g;  ATTN = [head_1 … head_H]·W_O
  MLP:      SiLU(h·W_GATE) ⊙ (h·W_UP) · W_DOWN,   SiLU(x) = x/(1 + e^−x)
  layer:    RESID_1 = X + ATTN(RMS1(X));   OUTPUT = RESID_1 + MLP(RMS2(RESID_1))
"""

import numpy as np

from reference.softmax import causal_allowed, masked_softmax_steps
from reference.ssm import silu


def rms_norm_steps(r: np.ndarray, weight: np.ndarray, name: str,
                   eps: float) -> dict[str, np.ndarray]:
    """ms = mean_j r_j²;  out = r/√(ms + eps)·w."""
    ms = (r * r).mean(axis=1, keepdims=True)
    return {f"{name}_MS": ms, f"{name}_OUT": r / np.sqrt(ms + eps) * weight}


def rope_tables(n: int, d_k: int, theta: float) -> dict[str, np.ndarray]:
    """θ[p,i] = p·b^(−2i/d_k) and its cos and sin (n × d_k/2)."""
    angle = np.arange(n)[:, None] * np.power(float(theta), -2 * np.arange(d_k // 2) / d_k)
    return {"ROPE_ANGLE": angle, "ROPE_COS": np.cos(angle), "ROPE_SIN": np.sin(angle)}


def rotate_heads(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, d_k: int) -> np.ndarray:
    """Each head's columns (d_k wide) rotated in half pairs (x_i, x_i+d_k/2)."""
    out = np.empty_like(x)
    half = d_k // 2
    for start in range(0, x.shape[1], d_k):
        a, b = x[:, start:start + half], x[:, start + half:start + d_k]
        out[:, start:start + half] = a * cos - b * sin
        out[:, start + half:start + d_k] = b * cos + a * sin
    return out


def grouped_heads(x: np.ndarray, params) -> tuple[int, int, int]:
    """H query heads, G key/value heads (kv_heads; none given: H) and their width d/H."""
    return params.heads, params.kv_heads or params.heads, x.shape[1] // params.heads


def _bias(inputs: dict[str, np.ndarray], name: str, present: bool):
    """The bias row `name` when the layer has it, else nothing added (0.0)."""
    return inputs[name] if present else 0.0


def llama_block_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    n = len(x)
    heads, groups, d_k = grouped_heads(x, params)
    steps = rms_norm_steps(x, inputs["RMS1_WEIGHT"], "RMS1", params.rms_eps)
    h = steps["RMS1_OUT"]
    q, k, v = (h @ inputs[f"W_{m}"] + _bias(inputs, f"B_{m}", params.qkv_bias) for m in "QKV")
    steps.update(Q=q, K=k, V=v)
    steps.update(rope_tables(n, d_k, params.rope_theta))
    cos, sin = steps["ROPE_COS"], steps["ROPE_SIN"]
    steps["Q_ROT"] = q_rot = rotate_heads(q, cos, sin, d_k)
    steps["K_ROT"] = k_rot = rotate_heads(k, cos, sin, d_k)
    allowed = causal_allowed(n, n)
    steps["MASK"] = allowed.astype(float)
    outputs = []
    for head in range(heads):
        g = head * groups // heads
        qs, ks = slice(head * d_k, (head + 1) * d_k), slice(g * d_k, (g + 1) * d_k)
        sfx = f"_H{head + 1}"
        steps["SCORES" + sfx] = q_rot[:, qs] @ k_rot[:, ks].T
        steps["SCALED" + sfx] = steps["SCORES" + sfx] / np.sqrt(d_k)
        for name, block in masked_softmax_steps(steps["SCALED" + sfx], allowed).items():
            steps[name + sfx] = block
        outputs.append(steps["WEIGHTS" + sfx] @ v[:, ks])
        steps["HEAD" + sfx] = outputs[-1]
    steps["CONCAT"] = np.concatenate(outputs, axis=1)
    steps["ATTN"] = steps["CONCAT"] @ inputs["W_O"] + _bias(inputs, "B_O", params.o_bias)
    steps["RESID_1"] = x + steps["ATTN"]
    steps.update(rms_norm_steps(steps["RESID_1"], inputs["RMS2_WEIGHT"], "RMS2", params.rms_eps))
    h2 = steps["RMS2_OUT"]
    steps["GATE"] = h2 @ inputs["W_GATE"] + _bias(inputs, "B_GATE", params.mlp_bias)
    steps["UP"] = h2 @ inputs["W_UP"] + _bias(inputs, "B_UP", params.mlp_bias)
    steps["GATE_ACT"] = silu(steps["GATE"])
    steps["GATED"] = steps["GATE_ACT"] * steps["UP"]
    steps["MLP_OUT"] = steps["GATED"] @ inputs["W_DOWN"] + _bias(inputs, "B_DOWN",
                                                                 params.mlp_bias)
    steps["OUTPUT"] = steps["RESID_1"] + steps["MLP_OUT"]
    return steps
