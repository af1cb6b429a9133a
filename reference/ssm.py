"""Mamba's S6 selective scan (Gu & Dao 2023), float64, as mamba's `selective_scan_ref` runs it.

Glossary (code → paper / upstream `selective_scan_ref`; rows are time steps, as on the sheet):
    L, D, N        sequence length, channels (d_inner), state size (d_state)
    u (L×D)        input x_t of the SSM                      upstream u (B, D, L)
    delta_pre      pre-activation U·W_DELTA + DELTA_BIAS    upstream delta before softplus
    delta (L×D)    Δ_t = softplus(delta_pre)                 upstream delta_softplus=True
    A (D×N)        A = −exp(A_log), diagonal per channel     upstream A (D, N)
    B, C (L×N)     input-dependent B_t = u_t·W_B, C_t = u_t·W_C   upstream B, C (B, N, L)
    a_bar          Ā_t = exp(Δ_t·A)          zero-order hold (ZOH) for A
    delta_b_u      B̄_t·u_t = Δ_t·B_t·u_t     Euler for B — not the paper's ZOH B̄ (its Eq. 4),
                   as upstream does ("a mix of ZOH for A and Euler for B", mamba#114)
    h (L×D·N)      state, channel-major: h[t, d·N + n] = x_t[d, n] in upstream
    y (L×D)        y_t = C_t·h_t + D⊙u_t
    z, silu_z      gate z and silu(z) = z·σ(z);  output = y⊙silu(z)
"""

import numpy as np

from reference.cost import cost_blocks, lengths

SOFTPLUS_THRESHOLD = 20.0  # torch F.softplus and the CUDA kernel: x itself above 20


def softplus(x: np.ndarray) -> np.ndarray:
    """ln(1 + eˣ), or x when x > 20, exactly as PyTorch."""
    return np.where(x > SOFTPLUS_THRESHOLD, x,
                    np.log1p(np.exp(np.minimum(x, SOFTPLUS_THRESHOLD))))


def silu(z: np.ndarray) -> np.ndarray:
    """z·σ(z), written so exp never overflows: z/(1 + e⁻ᶻ) for z ≥ 0, z·eᶻ/(1 + eᶻ) below."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, z / (1.0 + e), z * e / (1.0 + e))


def selective_scan_ref(u: np.ndarray, delta: np.ndarray, A: np.ndarray, B: np.ndarray,
                       C: np.ndarray, D: np.ndarray | None = None, z: np.ndarray | None = None,
                       delta_bias: np.ndarray | None = None,
                       delta_softplus: bool = False) -> dict[str, np.ndarray]:
    """Upstream's arguments in row-major shapes: u, delta, z (L×D); A (D×N); B, C (L×N);
    D, delta_bias (D,). Returns every intermediate under its sheet name."""
    u = np.asarray(u, float)
    L, d_channels = u.shape
    N = A.shape[1]
    delta = np.asarray(delta, float)
    if delta_bias is not None:
        delta = delta + np.reshape(delta_bias, (1, d_channels))
    if delta_softplus:
        delta = softplus(delta)
    # Ā[t,d,n] = exp(Δ[t,d]·A[d,n])
    a_bar = np.exp(delta[:, :, None] * A[None, :, :])                 # (L, D, N)
    # B̄u[t,d,n] = Δ[t,d]·B[t,n]·u[t,d]
    delta_b_u = delta[:, :, None] * B[:, None, :] * u[:, :, None]       # (L, D, N)
    h = np.zeros((L, d_channels, N))
    state = np.zeros((d_channels, N))                                   # h_0 = 0
    for t in range(L):                                  # h_t = Ā_t⊙h_{t−1} + B̄_t u_t
        state = a_bar[t] * state + delta_b_u[t]
        h[t] = state
    y = np.einsum("tdn,tn->td", h, C)                                   # y_t = C_t·h_t
    if D is not None:
        y = y + u * np.reshape(D, (1, d_channels))                      # + D⊙u_t
    steps = {"DELTA": delta, "A_BAR": a_bar.reshape(L, -1),
             "DELTA_B_U": delta_b_u.reshape(L, -1), "H": h.reshape(L, -1), "Y": y}
    if z is not None:
        steps["SILU_Z"] = silu(np.asarray(z, float))
        steps["OUTPUT"] = y * steps["SILU_Z"]
    return steps


def ssm_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    """The `ssm` sheet's blocks: the selective projections, then the scan."""
    u = inputs["U"]
    delta_pre = u @ inputs["W_DELTA"] + inputs["DELTA_BIAS"]           # U·W_Δ + b_Δ
    a = -np.exp(inputs["A_LOG"])                                        # A = −exp(A_log)
    b_sel, c_sel = u @ inputs["W_B"], u @ inputs["W_C"]                 # B_t, C_t
    scan = selective_scan_ref(u, u @ inputs["W_DELTA"], a, b_sel, c_sel, D=inputs["D"][0],
                              z=inputs["Z"] if params.gate else None,
                              delta_bias=inputs["DELTA_BIAS"][0], delta_softplus=True)
    return {"DELTA_PRE": delta_pre, "DELTA": scan.pop("DELTA"), "A": a,
            "B_SEL": b_sel, "C_SEL": c_sel, **scan, **ssm_cost(*u.shape, a.shape[1])}


def ssm_cost(length: int, d_channels: int, d_state: int) -> dict[str, np.ndarray]:
    """Per length L: the state h_t (D×N); multiply-adds step by step — Ā_t⊙h_{t−1} + B̄_t u_t
    (D·N, none at t = 1 since h_0 = 0) and y_t = C_t·h_t + D⊙u_t (D·(N+1))."""
    ls = lengths(length)
    update = (ls - 1) * d_channels * d_state           # steps t = 2 … L
    read_out = ls * d_channels * (d_state + 1)
    return cost_blocks([length, d_channels, d_state], ls,
                       COST_HELD=np.full_like(ls, d_channels * d_state),
                       COST_MACS=update + read_out)
