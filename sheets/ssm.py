"""Kind `ssm`: Mamba's S6 selective scan, the state recurrence running down the rows.

    Δ_t  = softplus(u_t·W_Δ + b_Δ)           (ln, not base-10 LOG; x itself above 20)
    A    = −exp(A_log)                       B_t = u_t·W_B    C_t = u_t·W_C
    Ā_t  = exp(Δ_t·A)                        zero-order hold for A
    B̄_t u_t = Δ_t·B_t·u_t                    Euler for B, as mamba's reference code
    h_t  = Ā_t ⊙ h_{t−1} + B̄_t u_t,  h_0 = 0
    y_t  = C_t·h_t + D ⊙ u_t                 (--gate: out_t = y_t ⊙ silu(z_t))

Glossary, sheet name → paper (upstream code): U = x (u), the SSM input, L×D; DELTA = Δ;
A_LOG = log(−A); A = A; B_SEL, C_SEL = the selective B, C (so named because Excel
refuses the defined name "C");
A_BAR = Ā; DELTA_B_U = B̄·u; H = h (x), channel-major: channel d owns columns d·N … d·N+N−1;
D = the skip parameter D (not the channel count); Z = the gate branch z.
The work grows linearly in L (about 3·L·D·N cells), where attention's scores grow as L².
"""

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from reference.ssm import ssm_ref
from sheets._bands import Cost, cost_section
from sheets.attention import Attention
from workbook_builder.sheet import (
    Chart,
    Custom,
    Example,
    Input,
    Kind,
    Map,
    MatMul,
    Scan,
    Section,
    Series,
    Step,
    row_or_cell,
    section,
)
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.places import place_sheet


@dataclass(frozen=True)
class SsmParams:
    seq_len: int = field(default=6, metadata={"help": "time steps L (rows of U)"})
    d_model: int = field(default=2, metadata={
        "help": "channels D (columns of U; Mamba's d_inner)"})
    d_state: int = field(default=3, metadata={"help": "state size N per channel"})
    gate: bool = field(default=False, metadata={
        "help": "add an input Z and OUTPUT = Y ⊙ silu(Z)"})


# `--example hand`: a pulse on channel 1 at t1 and on channel 2 at t4, nothing between, so
# h_t decays by Ā = exp(Δ·A) from one row to the next where a student can follow it
HAND = {"U": [[1, 0], [0, 0], [0, 0], [0, 1], [0, 0]], "W_DELTA": [[1, 0], [0, 1]],
        "DELTA_BIAS": [[0, 0]], "W_B": [[1, 0], [0, 1]], "W_C": [[1, 1], [1, 1]],
        "A_LOG": [[0, 1], [0, 1]], "D": [[1, 1]]}

U = Input("U", "seq_len", "d_model", "SSM input u_t",
          note="One row per time step, one column per channel.")
Z = Input("Z", "seq_len", "d_model", "gate branch z_t",
          note="Mamba's second branch; it gates the output.", when="gate")
W_DELTA = Input("W_DELTA", "d_model", "d_model", "Δ projection W_Δ", "d", "d")
DELTA_BIAS = Input("DELTA_BIAS", 1, "d_model", "Δ bias b_Δ", ["b_Δ"], "d")
W_B = Input("W_B", "d_model", "d_state", "B projection W_B", "d", "n")
W_C = Input("W_C", "d_model", "d_state", "C projection W_C", "d", "n")
A_LOG = Input("A_LOG", "d_model", "d_state", "log of −A", "d", "n",
              note="A is stored as its log so that A = −exp(A_LOG) stays negative: the state "
                   "decays.")
D = Input("D", 1, "d_model", "skip weight D", ["D"], "d",
          note="The skip connection: y_t gets D ⊙ u_t added.")


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


def scan(t: int, env, k: int | None) -> str:
    """Row t of H (its column k, or the whole row); row 1 is B̄_1 u_1 because h_0 = 0."""
    bu = row_or_cell(env["DELTA_B_U"], t, k)
    if t == 0:
        return f"={bu}"
    return f"={row_or_cell(env['A_BAR'], t, k)}*{row_or_cell(env.me, t - 1, k)}+{bu}"


def y_cell(t: int, d: int, env) -> str:
    first, last = d * env.params.d_state, (d + 1) * env.params.d_state - 1
    return (f"=SUMPRODUCT({env['H'].row(t, first, last)},{env['C_SEL'].row(t)})"
            f"+{env['D'].col(d)}*{env['U'].cell(t, d)}")


# Δ = softplus(Δ_pre) exactly as PyTorch: x above 20, else ln(1 + eˣ)
SOFTPLUS = Step("DELTA", "Δ = softplus(·) = IF(x>20, x, LN(1+EXP(x)))",
                Map("=IF({X}>20,{X},LN(1+EXP({X})))", X="DELTA_PRE"),
                "Softplus keeps Δ positive. It is the natural log LN: base-10 LOG here (a bug "
                "in a circulating Mamba sheet) makes every later block wrong. Above 20 "
                "PyTorch returns x itself.")
A_STEP = Step("A", "A = −exp(A_LOG)", Map("=-EXP({A_LOG})"),
              "Diagonal state matrix, one row of N decay rates per channel; it does not "
              "depend on the input.")
SELECTION = [
    # Δ_pre = U·W_Δ + b_Δ   (the 1×D bias row is added to every row)
    Step("DELTA_PRE", "U·W_Δ + b_Δ", MatMul("U", "W_DELTA", plus="DELTA_BIAS"),
         "The step size before softplus."),
    SOFTPLUS,
    Step("B_SEL", "B_t = u_t·W_B", MatMul("U", "W_B"), "Input matrix B for each time step."),
    Step("C_SEL", "C_t = u_t·W_C", MatMul("U", "W_C"), "Read-out matrix C for each time step."),
    A_STEP,
]


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


H, Y = scan_step(), read_out()
GATE = [
    # silu(z) = z·σ(z) = z·(1 + tanh(z/2))/2, which never overflows
    Step("SILU_Z", "silu(z) = z·0.5·(1 + tanh(z/2))", Map("={Z}*0.5*(1+TANH({Z}/2))"),
         "z·sigmoid(z), written with TANH because z/(1+EXP(−z)) overflows for z below −709."),
    Step("OUTPUT", "out_t = y_t ⊙ silu(z_t)", Map("={Y}*{SILU_Z}"),
         "The gated output of the Mamba mixer (before out_proj)."),
]


# h_t of this many channels (their first state) in the chart beside H
CHART_CHANNELS = 4


def state_chart(p) -> Chart:
    """h_t over t of state n1 of the first channels, read live from H's columns d·N."""
    return Chart("h_t over time: state n1 of the first channels",
                 tuple(Series("H", d * p.d_state)
                       for d in range(min(p.d_model, CHART_CHANNELS))),
                 kind="line", x_title="t", y_title="h", cols=8, rows=12)


class Ssm(Kind):
    name = "ssm"
    summary = "Mamba S6 selective scan: softplus Δ, Ā = exp(ΔA), h_t recurrence down the rows"
    sheet_title = "SSM"
    Params = SsmParams
    reference = staticmethod(ssm_ref)
    inputs = [U, Z, W_DELTA, DELTA_BIAS, W_B, W_C, A_LOG, D]
    test_cases = [
        {"seq_len": 4, "d_model": 2, "d_state": 3},
        {"seq_len": 5, "d_model": 3, "d_state": 2, "gate": True},
        {"seq_len": 1, "d_model": 1, "d_state": 1, "gate": True},
        {"seq_len": 7, "d_model": 1, "d_state": 4},
    ]
    demo_cases = [
        ("ssm", {"seq_len": 6, "d_model": 2, "d_state": 3}),
        ("ssm_gated", {"seq_len": 8, "d_model": 3, "d_state": 4, "gate": True}),
    ]
    examples = {"hand": lambda: Example(
        {"seq_len": 5, "d_model": 2, "d_state": 2}, HAND, None,
        "example hand: small integers; A = −1 and −e, an input pulse at t1 and t4")}
    demo_examples = ("hand",)

    @classmethod
    def demo_note(cls) -> str:
        return "Formula cells grow linearly with length here, quadratically in attention:\n" \
            + growth_table()

    @classmethod
    def random_input(cls, name, shape, p, rng):
        if name == "A_LOG":
            # S4D-real init, A[d,n] = −(n+1), jittered so channels differ; keeps Ā in (0, 1)
            base = np.broadcast_to(np.log(np.arange(1, shape[1] + 1)), shape)
            return (base + rng.uniform(-0.1, 0.1, size=shape)).round(2)
        if name == "DELTA_BIAS":
            # Δ of order 0.3–1: the state both remembers and moves
            return rng.uniform(-1.0, 0.5, size=shape).round(2)
        if name == "D":
            return rng.uniform(0.5, 1.5, size=shape).round(2)   # Mamba's init is 1
        return rng.uniform(-1.0, 1.0, size=shape).round(2)

    @classmethod
    def sections(cls, p):
        gated = " + 2·L·D for the gate" if p.gate else ""
        return [
            section("Step 1 — inputs: the sequence U (one row per time step) and the "
                    "parameters", [i for i in (U, Z, W_DELTA, W_B, W_C, A_LOG) if i.present(p)],
                    [DELTA_BIAS, D]),
            section("Step 2 — selection: Δ, B and C depend on the input at each step (this is "
                    "what makes S6 \"selective\")", SELECTION),
            section("Step 3 — discretise each channel: Ā = exp(Δ·A) is zero-order hold; "
                    "B̄ = Δ·B is Euler (not the paper's ZOH B̄), as mamba's "
                    "selective_scan_ref does", discretised(p.d_state)),
            section("Step 4 — the scan: each row reads the row above it (h_0 = 0)",
                    [H, state_chart(p)]),
            section("Step 5 — read out: y_t = C_t·h_t + D ⊙ u_t", [Y, *GATE] if p.gate else Y),
            Section(f"Formula cells: L·(3·D·N + 3·D + 2·N) + D·N{gated} + 15 in the cost table "
                    f"— linear in the length L; attention's scores, exponentials and weights "
                    f"take 4·L².", bold=False),
            cost_section(COST_TITLE, COST_SIZES, [
                # D·N: one row of H, h_t, replaces h_{t−1}
                Cost("COST_HELD", "D·N", "={D}*{N}",
                     "State held at once: h_t, one row of H (D channels × N states); the sheet "
                     "keeps every row for reading. Does not grow with L.", "state"),
                # H: Ā_t·h_{t−1} + B̄_t u_t for t ≥ 2 (h_0 = 0: row 1 multiplies nothing);
                # Y: C_t·h_t (N per channel) + D·u_t (1 per channel)
                Cost("COST_MACS", "(L−1)·D·N + L·D·(N+1)", "=({n}-1)*{D}*{N}+{n}*{D}*({N}+1)",
                     "Multiply-adds: the state update Ā·h + B̄u in every row after the first "
                     "(h_0 = 0), and the read-out C_t·h_t + D·u_t. Linear in L. The "
                     "discretisation Ā, B̄u and the gate are elementwise products, not "
                     "counted."),
            ]),
        ]


# the cost table (the last section): what the scan holds and multiplies, as functions of L
COST_TITLE = "Cost — linear in L: a D×N state updated once per step; at this sheet's L and " \
             "at L = 1k, 4k, 32k"
COST_SIZES = {"L": "seq_len", "D": "d_model", "N": "d_state"}


def formula_cells(kind: type[Kind], values: dict) -> int:
    """Formula cells of a kind's sheet: every cell of every step block, as placed."""
    p = make_params(kind, values)
    blocks = place_sheet(kind.sections(p), p).blocks
    return sum(blocks[name].rows * blocks[name].cols for name in kind.step_names(p))


def formula_cell_growth(lengths=(8, 16, 32, 64), d_model: int = 4, d_state: int = 4):
    """Formula cells of an ssm sheet and of an attention sheet (d_model = d_k = D) of the
    same length."""
    return [{"seq_len": n,
             "ssm": formula_cells(Ssm, {"seq_len": n, "d_model": d_model, "d_state": d_state}),
             "attention": formula_cells(Attention, {"seq_len": n, "d_model": d_model,
                                                    "d_k": d_model})}
            for n in lengths]


def growth_table() -> str:
    """Formula cells of ssm vs attention at the same length: linear vs quadratic."""
    lines = [f"{'L':>5} {'ssm cells':>10} {'attention cells':>16}   (D = N = d_k = 4)"]
    for r in formula_cell_growth():
        lines.append(f"{r['seq_len']:>5} {r['ssm']:>10} {r['attention']:>16}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m sheets.ssm: the linear-vs-quadratic table
    print(growth_table())
