"""The selective scan (Mamba's S6), written once for `ssm` and `mamba-block`:

    Δ_t  = softplus(Δ_pre)                   (ln, not base-10 LOG; x itself above 20)
    A    = −exp(A_LOG)
    Ā_t  = exp(Δ_t·A)                        zero-order hold for A
    B̄_t u_t = Δ_t·B_t·u_t                    Euler for B, as mamba's reference code
    h_t  = Ā_t ⊙ h_{t−1} + B̄_t u_t,  h_0 = 0  the state, channel-major: channel d owns
                                             columns d·N … d·N+N−1
    y_t  = C_t·h_t + D ⊙ u_t
The steps read U, DELTA, A, B_SEL, C_SEL and D; `channels` names the parameter holding the
channel count (ssm: d_model, mamba-block: d_inner).
"""

from functools import partial

import numpy as np

from workbook_builder.sheet import Custom, Map, Scan, Step, row_or_cell

# Δ = softplus(Δ_pre) exactly as PyTorch: x above 20, else ln(1 + eˣ)
SOFTPLUS = Step("DELTA", "Δ = softplus(·) = IF(x>20, x, LN(1+EXP(x)))",
                Map("=IF({X}>20,{X},LN(1+EXP({X})))", X="DELTA_PRE"),
                "Softplus keeps Δ positive. It is the natural log LN: base-10 LOG here (a bug "
                "in a circulating Mamba sheet) makes every later block wrong. Above 20 "
                "PyTorch returns x itself.")
A_STEP = Step("A", "A = −exp(A_LOG)", Map("=-EXP({A_LOG})"),
              "Diagonal state matrix, one row of N decay rates per channel; it does not "
              "depend on the input.")


def state_count(p, channels: str = "d_model") -> int:
    """D·N state columns; `channels` names the parameter holding D (mamba-block: d_inner)."""
    return getattr(p, channels) * p.d_state


def state_cols(p, channels: str = "d_model") -> list[str]:
    """Channel-major state columns d1.n1, d1.n2, …, d2.n1, …"""
    return [f"d{d + 1}.n{n + 1}" for d in range(getattr(p, channels))
            for n in range(p.d_state)]


def a_bar_cell(t: int, k: int, env) -> str:
    d, n = divmod(k, env.params.d_state)
    return f"=EXP({env['DELTA'].row(t, d, d)}*{env['A'].fixed(d, n)})"


def a_bar_channel(d: int, env) -> str:  # an L×1 column of Δ times a 1×N row of A
    return f"=EXP({env['DELTA'].col(d)}*{env['A'].row(d)})"


def delta_b_u_cell(t: int, k: int, env) -> str:
    d, n = divmod(k, env.params.d_state)
    return f"={env['DELTA'].row(t, d, d)}*{env['B_SEL'].cell(t, n)}*{env['U'].row(t, d, d)}"


def delta_b_u_channel(d: int, env) -> str:
    return f"={env['DELTA'].col(d)}*{env['U'].col(d)}*{env['B_SEL'].whole()}"


def scan(t: int, k: int | None, env) -> str:
    """Row t of H (its column k, or the whole row); row 1 is B̄_1 u_1 because h_0 = 0."""
    bu = row_or_cell(env["DELTA_B_U"], t, k)
    if t == 0:
        return f"={bu}"
    return f"={row_or_cell(env['A_BAR'], t, k)}*{row_or_cell(env.me, t - 1, k)}+{bu}"


def y_cell(t: int, d: int, env) -> str:
    first, last = d * env.params.d_state, (d + 1) * env.params.d_state - 1
    return (f"=SUMPRODUCT({env['H'].row(t, first, last)},{env['C_SEL'].row(t)})"
            f"+{env['D'].col(d)}*{env['U'].cell(t, d)}")


def discretised(n: int, channels: str = "d_model") -> list[Step]:
    """Ā and B̄u, channel-major; in `blocks` one array formula per channel (n columns)."""
    count, cols = partial(state_count, channels=channels), partial(state_cols, channels=channels)
    return [
        # Ā[t, d·N+n] = exp(Δ[t,d]·A[d,n])   (zero-order hold)
        Step("A_BAR", "Ā_t = exp(Δ_t·A)   (zero-order hold)",
             Custom("seq_len", count, a_bar_cell, per_slice=(n, a_bar_channel)),
             "How much of the state survives one step: in (0, 1) because Δ > 0 and A < 0. "
             "Columns d.n: channel d, state n.", row_labels="tokens", col_labels=cols),
        # B̄u[t, d·N+n] = Δ[t,d]·B[t,n]·u[t,d]   (Euler)
        Step("DELTA_B_U", "B̄_t u_t = Δ_t·B_t·u_t   (Euler)",
             Custom("seq_len", count, delta_b_u_cell, per_slice=(n, delta_b_u_channel)),
             "What the input writes into the state this step. Euler B̄ = Δ·B, not ZOH's "
             "(ΔA)⁻¹(exp(ΔA) − I)·ΔB: Mamba's code does this.", row_labels="tokens",
             col_labels=cols),
    ]


def scan_step(channels: str = "d_model") -> Step:
    """h_t = Ā_t ⊙ h_{t−1} + B̄_t u_t: one formula per row in `blocks`, reading the row
    above."""
    return Step("H", "h_t = Ā_t ⊙ h_{t−1} + B̄_t u_t,   h_0 = 0",
                Scan("seq_len", partial(state_count, channels=channels), scan),
                "The hidden state: N numbers per channel, updated once per row. Work and "
                "cells grow linearly with the sequence length.", row_labels="tokens",
                col_labels=partial(state_cols, channels=channels))


def read_out(channels: str = "d_model") -> Step:
    """y[t,d] = Σ_n h[t, d·N+n]·C[t,n] + D[d]·u[t,d]"""
    return Step("Y", "y_t = C_t·h_t + D ⊙ u_t", Custom("seq_len", channels, y_cell),
                "Each channel reads its N states through C_t and adds the skip term. One "
                "formula per cell in both layouts: a whole-block formula would need a reshape "
                "Excel lacks.", row_labels="tokens", col_labels="d")


def scan_input(name: str, shape: tuple[int, int], rng) -> np.ndarray | None:
    """The scan's own initial values of A_LOG, DELTA_BIAS and D (None for any other input):
    A_LOG as S4D-real, A[d,n] = −(n+1) jittered so channels differ (Ā stays in (0, 1));
    DELTA_BIAS so that Δ is of order 0.3–1 (the state both remembers and moves); D near
    Mamba's 1."""
    if name == "A_LOG":
        base = np.broadcast_to(np.log(np.arange(1, shape[1] + 1)), shape)
        return (base + rng.uniform(-0.1, 0.1, size=shape)).round(2)
    if name == "DELTA_BIAS":
        return rng.uniform(-1.0, 0.5, size=shape).round(2)
    if name == "D":
        return rng.uniform(0.5, 1.5, size=shape).round(2)
    return None
