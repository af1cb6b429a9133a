"""Kind `train`: single-head attention that learns — K steps of gradient descent down the
sheet, every gradient a live formula.

The task: position i holds token t_i and is told to look at position p_i; it must output
t_{p_i}, which reaches it only through attention (the read-out sees nothing but A·V).

    X = [one-hot t_i | one-hot i | one-hot p_i]     y_i = t_{p_i} (INDEX), Y its one-hot rows
    step t (names end _Tt), with the weights step t−1 left:
      forward   Q = X·W_Q  K = X·W_K  V = X·W_V   S = Q·Kᵀ   Ŝ = S/√d_k   A = softmax(Ŝ)
                O = A·V    Z = O·W_OUT   P = softmax(Z)   L = Σ_i (m_i + ln ℓ_i − z_{i,y_i}) / n
      backward  dZ = (P − Y)/n   dW_OUT = Oᵀ·dZ   dO = dZ·W_OUTᵀ   dA = dO·Vᵀ   dV = Aᵀ·dO
                r = rowsum(dA ⊙ A)   dŜ = A ⊙ (dA − r)   dS = dŜ/√d_k
                dQ = dS·K   dK = dSᵀ·Q   dW_Q = Xᵀ·dQ   dW_K = Xᵀ·dK   dW_V = Xᵀ·dV
      update    W ← W − η·dW   (or Adam, with its two moment blocks per weight)
    LOSS = [L_1 … L_K] and GRAD_NORM = [‖dW_Q‖_F per step], charted.
With --compare-scale the same data and initial weights train a second time without 1/√d_k
(names marked _RAW), and one chart holds both loss curves.
"""

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from reference.train import train_ref
from sheets._blocks.attention import CAUSAL_MASK, QUERY_KEY
from sheets._blocks.labels import positions_from_1
from sheets._blocks.literals import excel_number
from sheets._blocks.softmax import softmax_band, softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    ByRow,
    Chart,
    Custom,
    Env,
    Input,
    Kind,
    Map,
    MatMul,
    Reduce,
    Rows,
    Series,
    Step,
    WholeNumbers,
    section,
)

OPTIMIZERS = ("sgd", "adam")
WEIGHTS = ("W_Q", "W_K", "W_V", "W_OUT")
# torch.optim.Adam's defaults, written again on purpose (as in reference.train): a sheet
# imports only its *_ref, and the tests hold both to PyTorch's Adam
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 0.9, 0.999, 1e-8


@dataclass(frozen=True)
class TrainParams:
    seq_len: int = field(default=3, metadata={"help": "positions n of the one sequence"})
    vocab: int = field(default=3, metadata={"help": "tokens c: ids 0 … c−1, the classes"})
    d_k: int = field(default=4, metadata={
        "help": "query/key/value width (columns of W_Q, W_K, W_V)"})
    steps: int = field(default=3, metadata={"help": "gradient steps K, one band each"})
    lr: float = field(default=0.5, metadata={"help": "learning rate η"})
    optimizer: str = field(default="sgd", metadata={
        "choices": list(OPTIMIZERS), "help": "sgd: W ← W − η·dW; adam: with moment blocks"})
    no_scale: bool = field(default=False, metadata={
        "help": "leave out the 1/√d_k (the scores go into the softmax as they are)"})
    compare_scale: bool = field(default=False, metadata={
        "help": "train twice from the same start, with and without 1/√d_k; one chart of both "
                "loss curves"})
    causal: bool = field(default=False, metadata={
        "help": "mask later positions (position i sees j ≤ i; p_i is drawn ≤ i)"})

    @property
    def d_model(self) -> int:
        return self.vocab + 2 * self.seq_len


def _d_model(p) -> int:
    return p.d_model


def x_labels(p) -> list[str]:
    """X's columns: token t = 0 … c−1, position i = 1 … n, look-at p = 1 … n."""
    return [f"t{v}" for v in range(p.vocab)] + [f"i{k}" for k in range(1, p.seq_len + 1)] + \
        [f"p{k}" for k in range(1, p.seq_len + 1)]


def token_ids(p) -> list[int]:
    return list(range(p.vocab))


def steps_from_1(p) -> list[int]:
    return list(range(1, p.steps + 1))


# -- the task and the initial weights -------------------------------------------------------
TOKEN_IDS = Input("TOKEN_IDS", "seq_len", 1, "token t_i at each position (an id 0 … c−1)",
                  positions_from_1, ["t"], values=WholeNumbers(0, "vocab", "a token id"))
LOOK_AT = Input("LOOK_AT", "seq_len", 1, "position p_i each position must look at",
                positions_from_1, ["p"],
                note="Position i must output the token at position p_i.",
                values=WholeNumbers(1, lambda p: p.seq_len + 1, "a position to look at"))
W_Q = Input("W_Q", _d_model, "d_k", "initial query weights", x_labels, "k")
W_K = Input("W_K", _d_model, "d_k", "initial key weights", x_labels, "k")
W_V = Input("W_V", _d_model, "d_k", "initial value weights", x_labels, "v")
W_OUT = Input("W_OUT", "d_k", "vocab", "initial read-out weights", "v", token_ids)
INITIAL = [W_Q, W_K, W_V, W_OUT]


def _x_cell(i: int, j: int, env: Env) -> str:
    # X_ij = 1 where column j is t_i, i or p_i: a token, a position or a look-at column
    p = env.params
    if j < p.vocab:
        return f"=IF({env['TOKEN_IDS'].cell(i, 0)}={j},1,0)"
    if j < p.vocab + p.seq_len:
        return f"=IF({env.me.row_label(i)}={j - p.vocab + 1},1,0)"
    return f"=IF({env['LOOK_AT'].cell(i, 0)}={j - p.vocab - p.seq_len + 1},1,0)"


X = Step("X", "X = [one-hot t_i | one-hot i | one-hot p_i]",
         Custom("seq_len", _d_model, _x_cell),
         "Each row holds three ones: its token, its position and the position it must look "
         "at.", row_labels=positions_from_1, col_labels=x_labels)
# y_i = t_{p_i}: INDEX counts from 1, as the positions do
TARGET = Step("TARGET", "y_i = t_{p_i}", ByRow(
    "seq_len", BROADCAST, lambda i, _, env: f"=INDEX({env['TOKEN_IDS'].col(0)},"
                                            f"{env['LOOK_AT'].cell(i, 0)},1)", per_cell=True),
    "The token each position must output: the one at the position it looks at.",
    row_labels=positions_from_1, col_labels=["y"], number_format="0")
# Y_iv = 1 if v = y_i
Y = Step("Y", "Y_iv = 1 if v = y_i else 0",
         Map("=IF({COL_LABEL}={T},1,0)", rows="seq_len", cols="vocab", T="TARGET"),
         "The targets as one-hot rows over the token ids.", row_labels=positions_from_1,
         col_labels=token_ids)


# -- one step --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """One training run: its name suffix ("" or "_RAW") and whether it divides by √d_k."""

    suffix: str
    scaled: bool

    def name(self, block: str, t: int) -> str:
        return f"{block}{self.suffix}_T{t}"

    def weight(self, w: str, t: int) -> str:
        """The weights step t starts from: the input at t = 1, else step t−1's update."""
        return w if t == 1 else self.name(w, t - 1)


def runs_of(p) -> list[Run]:
    if p.compare_scale:
        return [Run("", True), Run("_RAW", False)]
    return [Run("", not p.no_scale)]


def forward(p, run: Run, t: int) -> list[list]:
    """Q, K, V; scores and their softmax; output, logits and their softmax; the loss."""
    n = run.name
    mask = "MASK" if p.causal else None
    scores = [Step(n("SCORES", t), "S = Q·Kᵀ", MatMul(n("Q", t), n("K", t), transpose="b"),
                   "Dot product of query i with key j.", corner=QUERY_KEY)]
    if run.scaled:
        scores.append(Step(n("SCALED", t), "Ŝ = S / √d_k   (d_k = {d_k})",
                           Map("={S}/SQRT({d_k})", S=n("SCORES", t)),
                           "Dividing by √d_k keeps the scores from growing with the width.",
                           corner=QUERY_KEY))
    softmax = softmax_steps(n("SCALED" if run.scaled else "SCORES", t), mask,
                            f"{run.suffix}_T{t}", of="Ŝ" if run.scaled else "S")
    logits, lmax, lexp, lsum = (n(b, t) for b in ("LOGITS", "LOGIT_MAX", "LOGIT_EXP",
                                                  "LOGIT_SUM"))

    # P = softmax of each row of Z, its max, exp, sum and divide visible
    probs = softmax_band(
        logits, (lmax, lexp, lsum, n("PROBS", t)),
        ("m_i = max_v Z_iv", "E = exp(Z − m)", "ℓ_i = Σ_v E_iv", "P = E / ℓ"),
        ("Largest logit of each row (subtracted before EXP).",
         "Exponential of each shifted logit.", "The softmax denominator of each row.",
         "The model's probability of every token id at each position."))

    def nll(i, _, env):  # −ln p_{i,y_i} = m_i + ln ℓ_i − z_{i,y_i}
        return (f"={env[lmax].cell(i, 0)}+LN({env[lsum].cell(i, 0)})"
                f"-SUMPRODUCT({env['Y'].row(i)},{env[logits].row(i)})")

    return [
        [Step(n(b, t), f"{b} = X·W_{b}", MatMul("X", run.weight(f"W_{b}", t)), what)
         for b, what in (("Q", "Queries: what each position is looking for."),
                         ("K", "Keys: what each position offers to be found by."),
                         ("V", "Values: what each position passes on."))],
        scores + softmax,
        [Step(n("OUTPUT", t), "O = A·V", MatMul(n("WEIGHTS", t), n("V", t)),
              "Each row mixes the value rows by that row's weights."),
         Step(logits, "Z = O·W_OUT", MatMul(n("OUTPUT", t), run.weight("W_OUT", t)),
              "One score per token id: the read-out sees only the attention's output."),
         probs[0]],
        [*probs[1:],
         Step(n("NLL", t), "−ln P_i,y_i = m_i + ln ℓ_i − Σ_v Y_iv·Z_iv",
              ByRow("seq_len", 1, nll, per_cell=True),
              "Cross-entropy of each position, from the logits (no log of a tiny P).",
              col_labels=["−ln p"]),
         Step(n("LOSS", t), "L = Σ_i NLL_i / n",
              Reduce("=SUM({NLL})/{seq_len}", NLL=n("NLL", t)),
              "The loss of this step: the mean cross-entropy over the positions.",
              row_labels=[t], col_labels=["L"])],
    ]


def backward(p, run: Run, t: int) -> list[list]:
    """The gradient of L with respect to every block, back to the weights."""
    n = run.name
    mask = "MASK" if p.causal else None
    d_in = n("D_SCALED" if run.scaled else "D_SCORES", t)
    softmax_back = Step(d_in, ("dŜ" if run.scaled else "dS") + " = A ⊙ (dA − r)",
                        Map("={A}*({DA}-{R})", A=n("WEIGHTS", t), DA=n("D_WEIGHTS", t),
                            R=n("ROW_DOT", t)),
                        "The softmax backward: each weight's share of its row's gradient, "
                        "less the row's mean. Near a one-hot row it is near 0.",
                        corner=QUERY_KEY, masked_by=mask)
    scale_back = [Step(n("D_SCORES", t), "dS = dŜ / √d_k", Map("={G}/SQRT({d_k})", G=d_in),
                       "Through the scale: the gradient of S = Q·Kᵀ is divided by √d_k "
                       "too.", corner=QUERY_KEY)] if run.scaled else []
    w_out = run.weight("W_OUT", t)
    return [
        [Step(n("D_LOGITS", t), "dZ = (P − Y) / n",
              Map("=({P}-{Y})/{seq_len}", P=n("PROBS", t), Y="Y"),
              "The gradient of the mean cross-entropy with respect to the logits."),
         Step(n("D_W_OUT", t), "dW_OUT = Oᵀ·dZ",
              MatMul(n("OUTPUT", t), n("D_LOGITS", t), transpose="a"),
              "Read-out weights: each output column against each logit's gradient."),
         Step(n("D_OUTPUT", t), "dO = dZ·W_OUTᵀ", MatMul(n("D_LOGITS", t), w_out, transpose="b"),
              "Back through the read-out to the attention's output.")],
        [Step(n("D_WEIGHTS", t), "dA = dO·Vᵀ", MatMul(n("D_OUTPUT", t), n("V", t), transpose="b"),
              "Back to the attention weights: how L moves with each A_ij.",
              corner=QUERY_KEY),
         Step(n("D_V", t), "dV = Aᵀ·dO", MatMul(n("WEIGHTS", t), n("D_OUTPUT", t), transpose="a"),
              "Back to the values: each value row collects the gradient of the rows that "
              "read it.", row_labels=positions_from_1),
         Step(n("ROW_DOT", t), "r_i = Σ_j dA_ij·A_ij",
              Rows("=SUMPRODUCT({DA},{A})", DA=n("D_WEIGHTS", t), A=n("WEIGHTS", t)),
              "The weighted mean of each row of dA.", col_labels=["r"])],
        [softmax_back, *scale_back],
        [Step(n("D_Q", t), "dQ = dS·K", MatMul(n("D_SCORES", t), n("K", t)),
              "Back to the queries."),
         Step(n("D_K", t), "dK = dSᵀ·Q", MatMul(n("D_SCORES", t), n("Q", t), transpose="a"),
              "Back to the keys.", row_labels=positions_from_1)],
        [Step(n(f"D_W_{b}", t), f"dW_{b} = Xᵀ·d{b}", MatMul("X", n(f"D_{b}", t), transpose="a"),
              f"The gradient of the {what} weights: what this step changes.")
         for b, what in (("Q", "query"), ("K", "key"), ("V", "value"))],
    ]


def update(p, run: Run, t: int) -> list[list]:
    """W ← W − η·dW for the four weights (Adam: through its two moment blocks)."""
    n, lr = run.name, excel_number(p.lr)
    if p.optimizer == "sgd":
        return [[Step(n(w, t), f"{w} ← {w} − η·d{w}   (η = {{lr}})",
                      Map(f"={{W}}-{lr}*{{G}}", W=run.weight(w, t), G=n(f"D_{w}", t)),
                      "The weights the next step reads.") for w in WEIGHTS]]
    b1, b2, eps = excel_number(ADAM_BETA1), excel_number(ADAM_BETA2), excel_number(ADAM_EPS)
    moments, updates = [], []
    for w in WEIGHTS:
        m, v, g = n(f"ADAM_M_{w}", t), n(f"ADAM_V_{w}", t), n(f"D_{w}", t)
        # m ← β₁·m + (1 − β₁)·g,  v ← β₂·v + (1 − β₂)·g²   (m₀ = v₀ = 0)
        first = f"={b1}*{{M}}+(1-{b1})*{{G}}" if t > 1 else f"=(1-{b1})*{{G}}"
        second = f"={b2}*{{V}}+(1-{b2})*{{G}}^2" if t > 1 else f"=(1-{b2})*{{G}}^2"
        previous = {"M": run.name(f"ADAM_M_{w}", t - 1),
                    "V": run.name(f"ADAM_V_{w}", t - 1)} if t > 1 else {}
        moments.append([
            Step(m, f"m = β₁·m + (1 − β₁)·d{w}   (β₁ = {ADAM_BETA1})",
                 Map(first, G=g, **({"M": previous["M"]} if t > 1 else {})),
                 "Adam's first moment: a running mean of the gradient."),
            Step(v, f"v = β₂·v + (1 − β₂)·d{w}²   (β₂ = {ADAM_BETA2})",
                 Map(second, G=g, **({"V": previous["V"]} if t > 1 else {})),
                 "Adam's second moment: a running mean of the squared gradient.")])
        # W ← W − η·m̂ / (√v̂ + ε),  m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ)
        updates.append(Step(
            n(w, t), f"{w} ← {w} − η·m̂/(√v̂ + ε),  m̂ = m/(1 − β₁^{t}), v̂ = v/(1 − β₂^{t})",
            Map(f"={{W}}-{lr}*({{M}}/(1-{b1}^{t}))/(SQRT({{V}}/(1-{b2}^{t}))+{eps})",
                W=run.weight(w, t), M=m, V=v),
            "The weights the next step reads: each entry moves by about η, whatever the "
            "gradient's size."))
    return [*moments, updates]


def step_sections(p, run: Run, t: int) -> list:
    how = "" if not p.compare_scale else " (with 1/√d_k)" if run.scaled else \
        " (without 1/√d_k)"
    return [section(f"Step {t} of {p.steps}: forward — attention, read-out, loss{how}",
                    *forward(p, run, t)),
            section(f"Step {t} of {p.steps}: backward — the gradient of L, block by "
                    f"block{how}", *backward(p, run, t)),
            section(f"Step {t} of {p.steps}: update — the weights step {t + 1} reads{how}",
                    *update(p, run, t))]


# -- the curves ------------------------------------------------------------------------------
def curve_steps(p, run: Run) -> list[Step]:
    """LOSS: L of every step; GRAD_NORM: ‖dW_Q‖_F of every step."""
    def loss(i, _, env):
        return f"={env[run.name('LOSS', i + 1)].fixed(0, 0)}"

    def norm(i, _, env):
        grad = env[run.name("D_W_Q", i + 1)].whole()
        return f"=SQRT(SUMPRODUCT({grad},{grad}))"

    which = "" if not p.compare_scale else " (with 1/√d_k)" if run.scaled else \
        " (without 1/√d_k)"  # the same words as the step sections, translated once
    return [Step(f"LOSS{run.suffix}", "L at each step" + which,
                 ByRow("steps", 1, loss, per_cell=True),
                 "The loss of every step, before its update: the curve beside.",
                 row_labels=steps_from_1, col_labels=["L"], corner="step"),
            Step(f"GRAD_NORM{run.suffix}", "‖dW_Q‖_F at each step" + which,
                 ByRow("steps", 1, norm, per_cell=True),
                 "The size of the query weights' gradient: how fast attention can learn "
                 "where to look.", row_labels=steps_from_1, col_labels=["‖dW_Q‖"],
                 corner="step")]


def curves_section(p):
    runs = runs_of(p)
    loss = Chart("The loss at each step" + (": with and without 1/√d_k" if p.compare_scale
                                            else ""),
                 tuple(Series(f"LOSS{r.suffix}", 0) for r in runs), kind="line",
                 x_title="t", y_title="L", cols=8, rows=14)
    norm = Chart("‖dW_Q‖_F at each step" + (": with and without 1/√d_k" if p.compare_scale
                                             else ""),
                 tuple(Series(f"GRAD_NORM{r.suffix}", 0) for r in runs), kind="line",
                 x_title="t", y_title="‖dW_Q‖_F", cols=8, rows=14)
    return section("The curves: the loss and the query weights' gradient at every step "
                   "(read live from the steps above)",
                   [step for r in runs for step in curve_steps(p, r)] + [loss, norm])


class Train(Kind):
    name = "train"
    summary = "attention that learns: forward, every gradient and K SGD steps as formulas"
    sheet_title = "Train"
    Params = TrainParams
    reference = staticmethod(train_ref)
    inputs = [TOKEN_IDS, LOOK_AT, *INITIAL]
    repeated_by = ("steps",)  # one forward, backward and update band per step
    test_cases = [
        {"seq_len": 3, "vocab": 3, "d_k": 2, "steps": 2},
        {"seq_len": 3, "vocab": 2, "d_k": 3, "steps": 3, "causal": True, "no_scale": True,
         "lr": 0.8},
        {"seq_len": 2, "vocab": 2, "d_k": 2, "steps": 2, "compare_scale": True},
        {"seq_len": 3, "vocab": 2, "d_k": 2, "steps": 3, "optimizer": "adam", "lr": 0.1,
         "causal": True},
    ]
    # the default sheet, and the comparison over more steps at a width where it shows
    demo_cases = [("train", {}),
                  ("train_compare_scale", {"d_k": 16, "steps": 8, "compare_scale": True})]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if not isinstance(p.lr, numbers.Real) or not math.isfinite(p.lr) or p.lr <= 0:
            raise UserError(f"--lr must be a positive number, got {p.lr}")
        if p.optimizer not in OPTIMIZERS:
            raise UserError(f"--optimizer must be sgd or adam, got {p.optimizer!r}")
        if p.no_scale and p.compare_scale:
            raise UserError("--compare-scale trains with and without 1/√d_k already; "
                            "leave out --no-scale")

    @classmethod
    def random_input(cls, name, shape, p, rng):
        if name == "LOOK_AT":  # causal: position i can only see 1 … i
            highs = np.arange(1, p.seq_len + 1) if p.causal else np.full(p.seq_len, p.seq_len)
            return np.array([[rng.integers(1, high + 1)] for high in highs], dtype=float)
        return super().random_input(name, shape, p, rng)

    @classmethod
    def labels(cls, p, tokens):
        """Rows are positions 1 … n (LOOK_AT refers to them), not token labels."""
        if tokens is not None:
            raise UserError("train labels its rows by position (LOOK_AT refers to them); "
                            "--tokens does not apply, set the tokens in TOKEN_IDS")
        return [str(k) for k in range(1, p.seq_len + 1)]

    @classmethod
    def params_from_tokens(cls, tokens):
        return {}

    @classmethod
    def sections(cls, p):
        how = "with and without 1/√d_k" if p.compare_scale else \
            "without 1/√d_k" if p.no_scale else "with 1/√d_k"
        yield section(f"Attention learns to look: {p.steps} steps of "
                      f"{'SGD' if p.optimizer == 'sgd' else 'Adam'} ({how}), every gradient "
                      f"a formula. LOSS and its chart are at the bottom.", bold=False)
        yield section("The task: each position must output the token at the position it is "
                      "told to look at", [TOKEN_IDS, LOOK_AT, X, TARGET, Y],
                      *([CAUSAL_MASK] if p.causal else []))
        yield section("The initial weights (seeded; every run starts from them)", INITIAL)
        for run in runs_of(p):
            for t in range(1, p.steps + 1):
                yield from step_sections(p, run, t)
        yield curves_section(p)
