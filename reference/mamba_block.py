"""A whole Mamba block (Gu & Dao 2023) as transformers' `MambaBlock` runs it, in float64.

Glossary (code → transformers' MambaBlock / MambaMixer; rows are tokens, as on the sheet):
    L, d, E        tokens, hidden size, intermediate size (d_inner = expand·d)
    N, R, k        state size, dt rank (time_step_rank), conv kernel
    x (L×d)        hidden states entering the block         hidden_states
    ms, normed     mean of squares, RMSNorm(x)              MambaRMSNorm (eps inside the root)
    x_in, z (L×E)  the two halves of in_proj(normed)        hidden_states_B_C, gate
    conv (L×E)     causal depthwise conv1d over time, with bias:
                   conv[t] = b + Σ_j w_j ⊙ x_in[t−k+1+j]
                   (x_in before the first token is 0: transformers pads k−1 on both sides and keeps
                   the first L outputs, which is the same)
    u (L×E)        silu(conv), the SSM input
    dt_low, B, C   x_proj(u) split into R, N, N columns      time_step, B, C
    delta_pre      dt_low·W_Δ + b_Δ                          dt_proj (its bias enters the scan)
    the scan       reference.ssm.selective_scan_ref, as mamba_selective_scan's recurrent path
    gated          y ⊙ silu(z)                               scan_output
    mixer, output  gated·W_out, x + mixer                     out_proj, the residual
Conv weights are k×E: row j (tap j) multiplies x_in k−1−j rows above (conv1d.weight[:, 0, :]ᵀ).
"""

import numpy as np

from reference.llama_block import rms_norm_steps
from reference.ssm import selective_scan_ref, silu


def causal_conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Depthwise causal convolution down the rows: out[t] = bias + Σ_j weight[j]⊙x[t−k+1+j],
    rows before the first counted as 0."""
    k, length = len(weight), len(x)
    padded = np.vstack([np.zeros((k - 1, x.shape[1])), x])
    return bias + sum(weight[j] * padded[j:j + length] for j in range(k))


def mamba_block_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    """Every block of the `mamba-block` sheet."""
    x = inputs["X"]
    e, r, n = params.d_inner, params.dt_rank, params.d_state
    norm = rms_norm_steps(x, inputs["NORM_W"], "NORM", params.ln_eps)
    ms, normed = norm["NORM_MS"], norm["NORM_OUT"]
    projected = normed @ inputs["W_IN"]                                   # in_proj
    x_in, z = projected[:, :e], projected[:, e:]
    conv = causal_conv(x_in, inputs["CONV_W"], inputs["CONV_B"])
    u = silu(conv)
    selected = u @ inputs["W_X"]                                          # x_proj
    dt_low, b_sel, c_sel = selected[:, :r], selected[:, r:r + n], selected[:, r + n:]
    a = -np.exp(inputs["A_LOG"])                                          # A = −exp(A_log)
    scan = selective_scan_ref(u, dt_low @ inputs["W_DELTA"], a, b_sel, c_sel,
                              D=inputs["D"][0], z=z, delta_bias=inputs["DELTA_BIAS"][0],
                              delta_softplus=True)
    mixer = scan["OUTPUT"] @ inputs["W_OUT"]                              # out_proj
    return {"RMS_MS": ms, "NORMED": normed, "X_IN": x_in, "Z": z, "CONV": conv, "U": u,
            "DT_LOW": dt_low, "B_SEL": b_sel, "C_SEL": c_sel,
            "DELTA_PRE": dt_low @ inputs["W_DELTA"] + inputs["DELTA_BIAS"],
            "DELTA": scan["DELTA"], "A": a, "A_BAR": scan["A_BAR"],
            "DELTA_B_U": scan["DELTA_B_U"], "H": scan["H"], "Y": scan["Y"],
            "SILU_Z": scan["SILU_Z"], "GATED": scan["OUTPUT"], "MIXER": mixer,
            "OUTPUT": x + mixer}
