"""Kind `mamba-block`: a whole Mamba block as transformers' `MambaBlock`, every step a formula.

    ms_t     = Σ_j x_tj² / d                 NORMED = x/√(ms + eps)·γ   (RMSNorm, eps inside)
    [x_in | z] = NORMED·W_in                 in_proj, split into E columns each
    conv_t   = b + Σ_j w_j ⊙ x_in[t−k+1+j]   causal depthwise conv1d (x_in before row 1 is 0)
    u_t      = silu(conv_t)                  silu(x) = x·σ(x), written with EXP(−|x|)
    [δ | B | C] = u·W_x                      x_proj: R, N, N columns
    Δ_pre    = δ·W_Δ + b_Δ                   dt_proj;  Δ = softplus(Δ_pre)
    then the `ssm` kind's scan: Ā = exp(Δ·A), B̄u = Δ·B·u, h_t = Ā⊙h_{t−1} + B̄u, y = C·h + D⊙u
    gated    = y ⊙ silu(z);   MIXER = gated·W_out;   OUTPUT = X + MIXER

Weights are in X·W orientation (each nn.Linear weight transposed); CONV_W is k×E, tap j in
row j (conv1d.weight[:, 0, :]ᵀ), so the last row multiplies the current token.
"""

import dataclasses
from dataclasses import dataclass, field

from reference.mamba_block import mamba_block_ref
from sheets._blocks.attention import X
from sheets._blocks.ffn import silu
from sheets._blocks.layers import gamma_near_one, residual
from sheets._blocks.norms import rms_norm
from sheets._blocks.recurrence import (
    A_STEP,
    SOFTPLUS,
    discretised,
    read_out,
    scan_input,
    scan_step,
)
from workbook_builder.errors import UserError
from workbook_builder.sheet import BROADCAST, ByRow, Input, Kind, Map, MatMul, Step, section
from workbook_builder.sheet.declare import dims


@dataclass(frozen=True)
class MambaBlockParams:
    seq_len: int = field(default=5, metadata={"help": "tokens L (rows of X)"})
    d_model: int = field(default=2, metadata={"help": "hidden size d (columns of X)"})
    d_inner: int = field(default=4, metadata={
        "help": "channels E of the mixer (transformers' intermediate_size, 2·d in Mamba)"})
    d_state: int = field(default=3, metadata={"help": "state size N per channel"})
    dt_rank: int = field(default=1, metadata={
        "help": "rank R of Δ's projection (time_step_rank, ⌈d/16⌉ in Mamba)"})
    conv_kernel: int = field(default=4, metadata={"help": "taps k of the causal conv1d"})
    ln_eps: float = field(default=1e-5, metadata={
        "help": "RMSNorm's eps (config layer_norm_epsilon; Mamba's default 1e-05)"})


def _in_cols(p) -> list[str]:
    """in_proj's columns: the x branch, then the gate z."""
    return dims("x", p.d_inner) + dims("z", p.d_inner)


def _taps(p) -> list[str]:
    """Conv taps, oldest first: the last multiplies the current token."""
    return [f"t−{p.conv_kernel - 1 - j}" if j < p.conv_kernel - 1 else "t"
            for j in range(p.conv_kernel)]


def _x_proj_cols(p) -> list[str]:
    return dims("δ", p.dt_rank) + dims("B", p.d_state) + dims("C", p.d_state)


X_IN_BLOCK = dataclasses.replace(X, title="hidden states x", note="One row per token.")
NORM_W = Input("NORM_W", BROADCAST, "d_model", "RMSNorm weight γ", ["γ"], "d")
W_IN = Input("W_IN", "d_model", lambda p: 2 * p.d_inner, "in_proj weights", "d", _in_cols,
             note="One nn.Linear, transposed: the first E columns make the x branch, the "
                  "last E the gate z.")
CONV_W = Input("CONV_W", "conv_kernel", "d_inner", "conv1d weights (one column per channel)",
               _taps, "d", note="Depthwise: each channel has its own k taps over time.")
CONV_B = Input("CONV_B", 1, "d_inner", "conv1d bias", ["b"], "d")
W_X = Input("W_X", "d_inner", lambda p: p.dt_rank + 2 * p.d_state, "x_proj weights", "d",
            _x_proj_cols, note="Columns δ (R of them), B (N), C (N): Δ, B and C depend on u.")
W_DELTA = Input("W_DELTA", "dt_rank", "d_inner", "dt_proj weights W_Δ", "δ", "d")
DELTA_BIAS = Input("DELTA_BIAS", 1, "d_inner", "dt_proj bias b_Δ", ["b_Δ"], "d")
A_LOG = Input("A_LOG", "d_inner", "d_state", "log of −A", "d", "n",
              note="A = −exp(A_LOG) stays negative: the state decays.")
D = Input("D", 1, "d_inner", "skip weight D", ["D"], "d")
W_OUT = Input("W_OUT", "d_inner", "d_model", "out_proj weights", "d", "d")


def conv_terms(t: int, k: int, tap, x_in) -> list[str]:
    """tap(j)·x_in(row) for the taps that reach a row at or after the first token."""
    return [f"{tap(j)}*{x_in(t - (k - 1) + j)}" for j in range(k) if t - (k - 1) + j >= 0]


def conv(t: int, c: int | None, env) -> str:
    """conv[t, c] = Σ_j CONV_W[j, c]·X_IN[t−k+1+j, c] + CONV_B[c]; the whole row t (c
    None) as one array formula: whole rows of taps times whole rows of X_IN."""
    w, x_in, b = env["CONV_W"], env["X_IN"], env["CONV_B"]
    if c is None:
        terms = conv_terms(t, env.params.conv_kernel, w.row, x_in.row)
        return "=" + "+".join(terms) + f"+{b.whole()}"
    terms = conv_terms(t, env.params.conv_kernel, lambda j: w.fixed(j, c),
                       lambda row: x_in.cell(row, c))
    return "=" + "+".join(terms) + f"+{b.col(c)}"


class MambaBlock(Kind):
    name = "mamba-block"
    summary = "a whole Mamba block (transformers' MambaBlock): RMSNorm, conv, selective scan"
    sheet_title = "MambaBlock"
    Params = MambaBlockParams
    reference = staticmethod(mamba_block_ref)
    inputs = [X_IN_BLOCK, NORM_W, W_IN, CONV_W, CONV_B, W_X, W_DELTA, DELTA_BIAS, A_LOG, D, W_OUT]
    test_cases = [
        {"seq_len": 5, "d_model": 2, "d_inner": 4, "d_state": 3, "dt_rank": 1},
        {"seq_len": 2, "d_model": 3, "d_inner": 2, "d_state": 2, "dt_rank": 2,
         "conv_kernel": 3, "ln_eps": 0.25},
        {"seq_len": 6, "d_model": 2, "d_inner": 3, "d_state": 1, "dt_rank": 1,
         "conv_kernel": 1},
    ]
    demo_cases = [("mamba_block", {"seq_len": 5, "d_model": 2, "d_inner": 4, "d_state": 3,
                                   "dt_rank": 1})]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if not 0 < p.ln_eps < 1:
            raise UserError(f"--ln-eps must be a small positive number, got {p.ln_eps}")

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if name == "NORM_W":  # RMSNorm scales near 1, as after training
            return gamma_near_one(shape, rng)
        drawn = scan_input(name, shape, rng)  # A_LOG, DELTA_BIAS and D as `ssm`
        return super().random_input(name, shape, params, rng) if drawn is None else drawn

    @classmethod
    def sections(cls, p):
        e, r, n = p.d_inner, p.dt_rank, p.d_state
        return [
            section("Step 1 — inputs: X, the hidden states entering the block (one row per "
                    "token), and the RMSNorm weight", [X_IN_BLOCK, NORM_W]),
            # ms = Σ x² / d;  NORMED = x/√(ms + eps)·γ
            section("Step 2 — RMSNorm, as transformers' MambaRMSNorm: eps inside the root, "
                    "no mean subtracted, no bias",
                    rms_norm("X", "RMS_MS", "NORMED", "NORM_W", p.ln_eps, ("x", "γ"),
                             ("Mean of the squares of each row.",
                              "Each row scaled to root mean square 1, then by γ."))),
            # [X_IN | Z] = NORMED·W_IN
            section("Step 3 — in_proj: one weight, split into the x branch and the gate z",
                    W_IN, [Step("X_IN", "x = NORMED·W_in[:, 1…E]",
                                MatMul("NORMED", "W_IN", b_cols=(0, e - 1)),
                                "The branch that goes through the conv and the scan.",
                                col_labels="d"),
                           Step("Z", "z = NORMED·W_in[:, E+1…2E]",
                                MatMul("NORMED", "W_IN", b_cols=(e, 2 * e - 1)),
                                "The gate branch: it multiplies the scan's output at the end.",
                                col_labels="d")]),
            # CONV[t] = Σ_j CONV_W[j]⊙X_IN[t−k+1+j] + CONV_B;  U = silu(CONV)
            section("Step 4 — causal conv1d down the rows (k = {conv_kernel}), then SiLU. "
                    "transformers pads k−1 zeros on both sides and keeps the first L "
                    "outputs: the same as zeros before the first token",
                    [CONV_W, CONV_B],
                    [Step("CONV", "c_t = Σ_j w_j ⊙ x_{t−k+1+j} + b",
                          ByRow("seq_len", "d_inner", conv),
                          "Each channel mixes its last k values; rows before the first token "
                          "count as 0, so early rows have fewer terms.", row_labels="tokens",
                          col_labels="d"),
                     silu("U", "CONV", "c", "abs")]),
            # [DT_LOW | B_SEL | C_SEL] = U·W_X
            section("Step 5 — x_proj: the selective δ (rank R), B and C from u", W_X,
                    [Step("DT_LOW", "δ = u·W_x[:, δ]", MatMul("U", "W_X", b_cols=(0, r - 1)),
                          "Δ's low-rank input."),
                     Step("B_SEL", "B_t = u_t·W_x[:, B]",
                          MatMul("U", "W_X", b_cols=(r, r + n - 1)),
                          "Input matrix B for each token."),
                     Step("C_SEL", "C_t = u_t·W_x[:, C]",
                          MatMul("U", "W_X", b_cols=(r + n, r + 2 * n - 1)),
                          "Read-out matrix C for each token.")]),
            # DELTA_PRE = DT_LOW·W_Δ + b_Δ;  DELTA = softplus;  A = −exp(A_LOG)
            section("Step 6 — dt_proj and softplus: Δ per channel; A from its log",
                    [W_DELTA, DELTA_BIAS, A_LOG],
                    [Step("DELTA_PRE", "δ·W_Δ + b_Δ",
                          MatMul("DT_LOW", "W_DELTA", plus="DELTA_BIAS"),
                          "The step size before softplus."), SOFTPLUS, A_STEP]),
            section("Step 7 — discretise each channel (the ssm sheet's steps): Ā = exp(Δ·A), "
                    "B̄u = Δ·B·u (Euler), as transformers' mamba_selective_scan",
                    discretised(n, "d_inner")),
            section("Step 8 — the scan: each row reads the row above it (h_0 = 0)",
                    scan_step("d_inner")),
            section("Step 9 — read out with the skip D", D, read_out("d_inner")),
            # GATED = Y ⊙ silu(Z);  MIXER = GATED·W_out;  OUTPUT = X + MIXER
            section("Step 10 — gate with silu(z), out_proj, and the residual", W_OUT,
                    [silu("SILU_Z", "Z", "z", "abs"),
                     Step("GATED", "g = y ⊙ silu(z)", Map("={Y}*{S}", S="SILU_Z"),
                          "The mixer's gated output, before out_proj."),
                     Step("MIXER", "g·W_out", MatMul("GATED", "W_OUT"),
                          "out_proj: back to the hidden size d."),
                     residual("OUTPUT", "X", "MIXER",
                              "The block's output. transformers keeps this residual, A and "
                              "RMSNorm in float32 even in a float64 model; the sheet computes "
                              "all in double precision (they differ by about 1e-7).")]),
        ]
