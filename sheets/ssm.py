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

from reference.ssm import ssm_ref
from sheets._blocks import recurrence
from sheets._blocks.costs import Cost, cost_section
from sheets._blocks.ffn import silu
from workbook_builder.sheet import (
    Chart,
    Example,
    Input,
    Kind,
    Map,
    MatMul,
    Section,
    Series,
    Step,
    section,
)
from workbook_builder.sheet.declare import block_shapes
from workbook_builder.sheet.kind import make_params


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


SELECTION = [
    # Δ_pre = U·W_Δ + b_Δ   (the 1×D bias row is added to every row)
    Step("DELTA_PRE", "U·W_Δ + b_Δ", MatMul("U", "W_DELTA", plus="DELTA_BIAS"),
         "The step size before softplus."),
    recurrence.SOFTPLUS,
    Step("B_SEL", "B_t = u_t·W_B", MatMul("U", "W_B"), "Input matrix B for each time step."),
    Step("C_SEL", "C_t = u_t·W_C", MatMul("U", "W_C"), "Read-out matrix C for each time step."),
    recurrence.A_STEP,
]


H, Y = recurrence.scan_step(), recurrence.read_out()
GATE = [
    # silu(z) = z·σ(z) = z·(1 + tanh(z/2))/2, which never overflows
    silu("SILU_Z", "Z", "z", "tanh"),
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
    def demo_note(cls, kinds) -> str:
        return "Formula cells grow linearly with length here, quadratically in attention:\n" \
            + growth_table(kinds["attention"])

    @classmethod
    def random_input(cls, name, shape, p, rng):
        drawn = recurrence.scan_input(name, shape, rng)  # A_LOG, DELTA_BIAS and D, as Mamba
        return super().random_input(name, shape, p, rng) if drawn is None else drawn

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
                    "selective_scan_ref does", recurrence.discretised(p.d_state)),
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
    """Formula cells of a kind's sheet: every cell of every step block, as declared."""
    p = make_params(kind, values)
    shapes = block_shapes(kind.sections(p), p)
    return sum(rows * cols for name, (rows, cols) in shapes.items()
               if name in set(kind.step_names(p)))


def formula_cell_growth(attention: type[Kind], lengths=(8, 16, 32, 64), d_model: int = 4,
                        d_state: int = 4):
    """Formula cells of an ssm sheet and of an `attention` sheet (d_model = d_k = D) of the
    same length (the attention kind is given: a kind imports no other kind)."""
    return [{"seq_len": n,
             "ssm": formula_cells(Ssm, {"seq_len": n, "d_model": d_model, "d_state": d_state}),
             "attention": formula_cells(attention, {"seq_len": n, "d_model": d_model,
                                                    "d_k": d_model})}
            for n in lengths]


def growth_table(attention: type[Kind]) -> str:
    """Formula cells of ssm vs attention at the same length: linear vs quadratic."""
    lines = [f"{'L':>5} {'ssm cells':>10} {'attention cells':>16}   (D = N = d_k = 4)"]
    for r in formula_cell_growth(attention):
        lines.append(f"{r['seq_len']:>5} {r['ssm']:>10} {r['attention']:>16}")
    return "\n".join(lines)
