"""Kind `linear`: linear attention with a positive feature map φ, elu(x) + 1 by default or
Performer's positive random features with --features favor.

    Q = X·W_Q   K = X·W_K   V = X·W_V
    elu:    φ(x) = IF(x>0, x+1, EXP(x))
    favor:  x' = x / d_k^¼   φ(x') = exp(x'·Ω − |x'|²/2) / √m    (Ω = OMEGA, d_k×m, N(0, 1))
    non-causal:  KV = φ(K)ᵀ·V   z = Σ_j φ(K_j)   O_i = φ(Q_i)·KV / (φ(Q_i)·z + eps)
    causal:      S_i = S_{i−1} + φ(K_i)ᵀ·V_i   z_i = z_{i−1} + φ(K_i)
                 O_i = φ(Q_i)·S_i / (φ(Q_i)·z_i + eps)        eps = 1E-06
    favor, beside it:  exact softmax attention O_softmax from the same Q, K, V;
                 MAX_ABS_ERR = max |O − O_softmax|; for m' = 4, 16, … below m, O' from the
                 first m' columns of Ω only, and ERR_BY_M = max |O' − O_softmax| for each m'
"""

from dataclasses import dataclass, field, replace

import numpy as np

from reference.linear import linear_ref
from sheets._blocks.attention import (
    CAUSAL_MASK,
    D_V,
    QKV_INPUTS,
    AttentionParams,
    projections,
    scaled_scores,
    weighted_values,
)
from sheets._blocks.costs import Cost, cost_section
from sheets._blocks.softmax import softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    ByRow,
    Custom,
    Dim,
    Input,
    Kind,
    Map,
    MatMul,
    MaxAbsDiff,
    Rows,
    Scan,
    Step,
    row_or_cell,
    rows_of,
    section,
)
from workbook_builder.sheet.refs import range_ref

EPS = "1E-06"  # fast-transformers' default, written with a signed exponent
FEATURE_MAPS = ("elu", "favor")
DEFAULT_M = 16     # random features when --features favor comes without --n-features
MAX_M = 1000       # a row of m features fits the 1,024 columns of LibreOffice before 7.4


@dataclass(frozen=True)
class LinearParams(AttentionParams):
    """Attention's sizes; d_k is the feature width here (m random features with favor)."""

    d_k: int = field(default=3, metadata={"help": "feature width (columns of W_Q, W_K)"})
    causal: bool = field(default=False, metadata={
        "help": "running state S_i, z_i down the rows (query i sees keys j ≤ i)"})
    features: str = field(default="elu", metadata={
        "choices": list(FEATURE_MAPS),
        "help": "feature map φ: elu = elu(x)+1; favor = Performer's positive random "
                "features, an estimate of softmax attention shown beside the exact one"})
    n_features: int | None = field(default=None, metadata={
        "metavar": "m",
        "help": f"random features m (columns of OMEGA), with --features favor only; "
                f"default {DEFAULT_M}"})

    @property
    def favor(self) -> bool:
        return self.features == "favor"

    @property
    def feature_count(self) -> int:
        """m, the random features of favor."""
        return DEFAULT_M if self.n_features is None else self.n_features

    @property
    def feature_width(self) -> int:
        """Columns of φ(Q) and φ(K): m with favor, d_k with elu."""
        return self.feature_count if self.favor else self.d_k


def width(p) -> int:
    return p.feature_width


def feature_labels(p) -> str:
    """Feature columns are k1, k2, … (elu: φ acts on each column of K) or f1, f2, …"""
    return "f" if p.favor else "k"


def prefix_counts(p) -> list[int]:
    """m' = 4, 16, 64, … below m: the smaller feature counts the error table shows.
    Written again on purpose (as in reference.linear): a sheet imports only its *_ref."""
    counts, c = [], 4
    while c < p.feature_count:
        counts.append(c)
        c *= 4
    return counts


# Ω: column r is the random direction ω_r, iid N(0, 1) entries (not orthogonalised)
OMEGA = Input("OMEGA", "d_k", Dim("n_features", lambda p: p.feature_count),
              "Ω: m random directions ω_r ~ N(0, 1)", "k", "f",
              note="Column r is ω_r, drawn from the seed: independent N(0, 1) entries "
                   "rounded to 2 decimals (plain iid Gaussian, not the orthogonal "
                   "directions Performer also offers).", when=lambda p: p.favor)


def feature_map(name: str, source: str) -> Step:
    """φ(x) = x + 1 for x > 0, exp(x) otherwise (elu with α = 1, plus 1)."""
    return Step(name, f"φ({source}) = IF(x>0, x+1, EXP(x))",
                Map("=IF({S}>0,{S}+1,EXP({S}))", S=source),
                "elu(x)+1: a positive feature map standing in for exp(q·k).")


def random_features(x: str) -> tuple[list[Step], list[Step]]:
    """Performer's features of Q (or K): x' = x/d_k^¼, x'·Ω, |x'|²/2 and φ(x'); the two
    small blocks, then the two m wide ones."""
    v, prime, proj, norm = x.lower(), f"{x}_PRIME", f"{x}_OMEGA", f"{x}_NORM"
    return ([
        # x' = x / d_k^¼, so that q'·k' = q·k/√d_k
        Step(prime, f"{v}' = {v} / d_k^¼   (d_k = {{d_k}})",
             Map("={X}/POWER({d_k},0.25)", X=x),
             "Scaled by d_k^(−1/4) on both sides, so q'·k' = q·k/√d_k: the score softmax "
             "exponentiates."),
        # |x'|²/2
        Step(norm, f"|{v}'|²/2", Rows("=SUMPRODUCT({X},{X})/2", X=prime),
             "Half the squared length of each row; subtracting it makes "
             "E[φ(q')·φ(k')] = exp(q'·k').", col_labels=["|x|²/2"]),
    ], [
        # x'·ω_r for every random direction r
        Step(proj, f"{v}'·Ω", MatMul(prime, "OMEGA"),
             "Each row projected on each random direction ω_r."),
        # φ(x')_r = exp(x'·ω_r − |x'|²/2) / √m
        Step(f"PHI_{x}", f"φ({v}') = exp({v}'·ω_r − |{v}'|²/2) / √m   (m = {{feature_count}})",
             Map("=EXP({P}-{N})/SQRT({feature_count})", P=proj, N=norm),
             "Positive random features. The exponent x'·ω − |x'|²/2 is at most |ω|²/2 "
             "whatever the input, so EXP cannot overflow here."),
    ])


def favor_bands(p) -> list[list]:
    """Ω, then q', k' and their half squared norms, then q'·Ω, φ(q'), k'·Ω, φ(k')."""
    (q_small, q_wide), (k_small, k_wide) = random_features("Q"), random_features("K")
    return [[OMEGA], [q_small[0], k_small[0], q_small[1], k_small[1]],
            *([step] for step in (*q_wide, *k_wide))]


def denominator(equation: str, explanation: str) -> Step:
    """d_i = φ(Q_i)·z (z_i when causal) + eps."""
    return Step("DENOM", f"{equation} + {EPS}",
                Rows(f"=SUMPRODUCT({{Q}},{{Z}})+{EPS}", Q="PHI_Q", Z="Z"), explanation,
                col_labels=["denom"])


def non_causal_steps(p) -> list[Step]:
    return [
        # KV_ab = Σ_j φ(K)_ja · V_jb
        Step("KV", "KV = φ(K)ᵀ·V", MatMul("PHI_K", "V", transpose="a"),
            "Every key's feature vector times its value, summed over tokens.",
            row_labels=feature_labels(p), col_labels="v"),
        # z_a = Σ_j φ(K)_ja
        Step("Z", "z = Σ_j φ(K_j)",
             Custom(BROADCAST, width, each=lambda _, a, env: f"=SUM({env['PHI_K'].col(a)})"),
             "The normaliser: the keys' feature vectors summed.", row_labels=["Σ"],
             col_labels=feature_labels(p)),
        Step("NUMER", "φ(Q)·KV", MatMul("PHI_Q", "KV")),
        denominator("φ(Q_i)·z", "Sum of the (unnormalised) weights of row i, plus eps."),
    ]


# -- causal: recurrences down the rows; STATE row i·w + a holds row a of S_i (w = d_k or m) -
def running_sum(rows, cols, lag, term) -> Scan:
    """Row r = row r − lag(p) of this block + term(r) (the first lag rows: the term alone).
    term(r, j, env) is one cell of the term (j None: its whole row)."""
    def formula(r, j, env):
        back = r - lag(env.params)
        if back < 0:
            return f"={term(r, j, env)}"
        return f"={row_or_cell(env.me, back, j)}+{term(r, j, env)}"

    return Scan(rows, cols, formula)


def outer(r: int, b: int | None, env) -> str:
    """φ(K_i)_a · V_i (column b), for STATE row r = i·w + a."""
    i, a = divmod(r, env.params.feature_width)
    v = env["V"]
    return f"{env['PHI_K'].cell(i, a)}*{v.row(i) if b is None else v.cell(i, b)}"


def phi_k(i: int, a: int | None, env) -> str:
    """φ(K_i) (column a)."""
    return env["PHI_K"].row(i) if a is None else env["PHI_K"].cell(i, a)


def state_of(env, i: int, first: int = 0, last: int | None = None,
             rows: int | None = None) -> str:
    """S_i as a range (STATE rows i·w … (i+1)·w − 1, or its first `rows` rows; columns
    first … last)."""
    state, w = env["STATE"], env.params.feature_width
    last = state.cols - 1 if last is None else last
    return range_ref(state.top + i * w, state.left + first, state.top + i * w + (rows or w) - 1,
                     state.left + last, fix_row=True, fix_col=True)


def causal_steps(p) -> list[Step]:
    w, f, last = ("m", "f", "f_m") if p.favor else ("d_k", "k", "k_d")
    return [
        # S_i[a, b] = S_{i−1}[a, b] + φ(K_i)_a · V_ib
        Step("STATE", "S_i = S_{i−1} + φ(K_i)ᵀ·V_i",
             running_sum(lambda p: p.seq_len * p.feature_width, D_V, width, outer),
             f"Rows t:{f}1 … t:{last} hold S_t = Σ_{{j≤t}} φ(K_j)ᵀV_j, the {w}×d_v memory "
             f"after reading token t.", row_labels="state", col_labels="v", corner="token:row"),
        # z_i = z_{i−1} + φ(K_i)
        Step("Z", "z_i = z_{i−1} + φ(K_i)",
             running_sum("seq_len", width, lambda p: 1, phi_k),
             "Running sum of the keys' feature vectors.", row_labels="tokens",
             col_labels=feature_labels(p)),
        # NUMER_i = φ(Q_i)·S_i
        Step("NUMER", "φ(Q_i)·S_i", ByRow(
            "seq_len", D_V,
            lambda i, b, env: f"=MMULT({env['PHI_Q'].row(i)},{state_of(env, i, b or 0, b)})"),
            "Query i reads the memory as it stood after token i.", row_labels="tokens",
            col_labels="v"),
        denominator("φ(Q_i)·z_i", "Sum of the (unnormalised) weights of keys j ≤ i, plus eps."),
    ]


# -- favor: exact softmax beside the estimate, and the estimate from fewer features --------
def softmax_comparison(p) -> list[list]:
    """SCORES … WEIGHTS as in `attention`, O_softmax = A·V, and max |O − O_softmax|."""
    mask = "MASK" if p.causal else None
    return [scaled_scores(explanation="The score whose exponential φ(q')·φ(k') estimates: "
                                      "exp(q·k/√d_k).") + ([CAUSAL_MASK] if mask else []),
            softmax_steps(mask=mask),
            [weighted_values("Exact softmax attention from the same Q, K, V.",
                             name="OUTPUT_SOFTMAX", equation="O_softmax = A·V"),
             # max_ij |O − O_softmax|_ij
             Step("MAX_ABS_ERR", "max |O − O_softmax|", MaxAbsDiff("OUTPUT", "OUTPUT_SOFTMAX"),
                 "Largest error of the random-feature estimate: it shrinks like 1/√m for "
                 "large m.", row_labels=["favor vs softmax"],
                 col_labels=["max |Δ|"])]]


def fewer_features(p, count: int) -> Step:
    """O' from the first m' = count columns of Ω: the features φ[:, :m'] are the m'-feature
    ones times √(m'/m), so r = m/m' multiplies both sums:
        O'_i = r·φ(Q_i)[:m']·KV[:m'] / (r·φ(Q_i)[:m']·z[:m'] + eps)   (causal: S_i, z_i)."""
    m, last = p.feature_count, count - 1
    r = f"({m}/{count})"

    def memory(env, i: int, b: int | None) -> str:
        """The first m' rows of KV (causal: of S_i), column b or all."""
        if p.causal:
            return state_of(env, i, b or 0, b, rows=count)
        return rows_of(env["KV"], 0, last) if b is None else env["KV"].col(b, 0, last)

    def formula(i: int, b: int | None, env) -> str:
        phi, z = env["PHI_Q"].row(i, 0, last), env["Z"].row(i if p.causal else 0, 0, last)
        return f"={r}*MMULT({phi},{memory(env, i, b)})/({r}*SUMPRODUCT({phi},{z})+{EPS})"

    def whole(env) -> str:
        phi = env["PHI_Q"].cols_range(0, last)
        return (f"={r}*MMULT({phi},{rows_of(env['KV'], 0, last)})/({r}*MMULT({phi},"
                f"TRANSPOSE({env['Z'].cols_range(0, last)}))+{EPS})")

    kv, z = ("S'_i", "z'_i") if p.causal else ("KV'", "z'")
    return Step(f"OUTPUT_M{count}",
                f"O' = r·φ'(Q)·{kv} / (r·φ'(Q)·{z} + eps), r = {m}/{count}",
                ByRow("seq_len", D_V, formula, whole=None if p.causal else whole),
                f"Attention estimated from ω_1 … ω_{count} only: ' keeps the first {count} "
                f"feature columns, and r turns their 1/m into 1/{count}.",
                row_labels="tokens", col_labels="v")


def error_table(p) -> list[list]:
    """O' for each m' below m, then max |O' − O_softmax| for every m' and for m."""
    counts = prefix_counts(p)
    # row r: m' = counts[r], the last row m itself
    estimates = [*(f"OUTPUT_M{c}" for c in counts), "OUTPUT"]

    return [[fewer_features(p, c) for c in counts],
            [Step("ERR_BY_M", "max |O' − O_softmax| for each m'",
                  MaxAbsDiff.column(*((e, "OUTPUT_SOFTMAX") for e in estimates)),
                  "More features, smaller error: like 1/√m' once m' is large (×4 features, "
                  "½ the error); one draw of Ω, so not at every step.",
                  row_labels=[*counts, p.feature_count], col_labels=["max |Δ|"], corner="m'")]]


class Linear(Kind):
    name = "linear"
    summary = ("linear attention φ(Q)(φ(K)ᵀV), φ = elu+1; --causal: running state (RNN "
               "view); --features favor: Performer's random features vs softmax")
    sheet_title = "Linear"
    Params = LinearParams
    reference = staticmethod(linear_ref)
    inputs = [*QKV_INPUTS, OMEGA]
    test_cases = [
        {"seq_len": 4, "d_model": 3, "d_k": 2},
        {"seq_len": 5, "d_model": 4, "d_k": 3, "d_v": 2, "causal": True},
        {"seq_len": 1, "d_model": 2, "d_k": 2, "causal": True},
        {"seq_len": 3, "d_model": 3, "d_k": 2, "features": "favor"},
        {"seq_len": 4, "d_model": 3, "d_k": 3, "d_v": 2, "features": "favor",
         "n_features": 17, "causal": True},
        {"seq_len": 2, "d_model": 2, "d_k": 1, "features": "favor", "n_features": 3},
    ]
    demo_cases = [
        ("linear", {"seq_len": 5, "d_model": 4, "d_k": 3}),
        ("linear_causal", {"seq_len": 5, "d_model": 4, "d_k": 3, "causal": True}),
        ("linear_favor", {"seq_len": 5, "d_model": 4, "d_k": 4, "features": "favor",
                          "n_features": 64}),
        ("linear_favor_causal", {"seq_len": 5, "d_model": 4, "d_k": 3, "features": "favor",
                                 "n_features": 16, "causal": True}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.features not in FEATURE_MAPS:
            raise UserError(f"--features must be elu or favor, got {p.features!r}")
        if p.n_features is not None and not p.favor:
            raise UserError("--n-features (or an OMEGA input) needs --features favor")
        if p.favor and p.feature_count > MAX_M:
            raise UserError(f"--n-features must be at most {MAX_M} (one sheet row of "
                            f"features), got {p.feature_count}")

    @classmethod
    def infer_params(cls, given):
        """An OMEGA given by hand means the favor features."""
        return {**super().infer_params(given), **({"features": "favor"} if "OMEGA" in given
                                                  else {})}

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if name == "OMEGA":  # ω_r ~ N(0, I), rounded like every input
            return np.round(rng.standard_normal(size=shape), 2)
        return super().random_input(name, shape, params, rng)

    @classmethod
    def describe(cls, p):
        return super().describe(replace(p, n_features=p.feature_count) if p.favor else p)

    @classmethod
    def label_sets(cls, p, labels):
        prefix = feature_labels(p)
        return {"tokens": labels,
                "state": [f"{t}:{prefix}{a + 1}" for t in labels
                          for a in range(p.feature_width)]}

    @classmethod
    def sections(cls, p):
        steps = causal_steps(p) if p.causal else non_causal_steps(p)
        # favor: z is m wide, so it gets a band of its own above the memory
        bands = [[steps[1]], [steps[0], *steps[2:]]] if p.favor else [steps]
        step4 = section(f"Step 4 — the RNN view: a running state S_i "
                        f"({'m' if p.favor else 'd_k'}×d_v, stacked down the rows) and "
                        f"normaliser z_i, each updated once per token" if p.causal else
                        "Step 4 — summarise all keys and values once: KV = φ(K)ᵀ·V and "
                        "z = Σ_j φ(K_j); cost grows with n, not n²", *bands)
        step3 = (section("Step 3 — Performer's positive random features (FAVOR+): q and k "
                         "scaled by d_k^(−1/4), then φ(x) = exp(x·ω_r − |x|²/2)/√m over "
                         "m = {feature_count} random directions ω_r; on average "
                         "φ(q')·φ(k') = exp(q·k/√d_k), softmax's kernel", *favor_bands(p))
                 if p.favor else
                 section("Step 3 — feature map φ(x) = elu(x) + 1 (positive, so no softmax is "
                         "needed)", [feature_map("PHI_Q", "Q"), feature_map("PHI_K", "K")]))
        sections = [
            section("Step 1 — inputs: token rows X and the projection weights", QKV_INPUTS),
            section("Step 2 — queries, keys, values", projections()),
            step3,
            step4,
            section("Step 5 — divide: each output row is a weighted average of value rows",
                    Step("OUTPUT", "O = NUMER / DENOM",
                         Map("={N}/{D}", N="NUMER", D="DENOM"))),
        ]
        if not p.favor:  # the cost of the exact kernel path (favor: see the README)
            sections.append(cost_section(COST_TITLE, COST_SIZES, COSTS))
        if p.favor:
            sections.append(section("Step 6 — for comparison: exact softmax attention from "
                                    "the same Q, K, V, and the estimate's error",
                                    *softmax_comparison(p)))
        if p.favor and prefix_counts(p):
            sections.append(section("Step 7 — fewer features, larger error: the same "
                                    "estimate from only the first m' columns of Ω",
                                    *error_table(p)))
        return sections


# -- the cost table: what the steps above hold and multiply, as functions of n -----------
COST_TITLE = "Cost — O(n·d²): a d_k×d_v state instead of an n×n matrix; at this sheet's n " \
             "and at n = 1k, 4k, 32k"
COST_SIZES = {"n": "seq_len", "d_k": "d_k", "d_v": D_V}
COSTS = [
    # d_k·d_v + d_k: KV and z (causal: S_i and z_i, one token's row of STATE and Z)
    Cost("COST_HELD", "d_k·d_v + d_k", "={d_k}*{d_v}+{d_k}",
         "State held at once: KV (d_k×d_v) and z (d_k); causal, S_i and z_i, of which the "
         "sheet stacks all n for reading while an RNN keeps one. Does not grow with n.",
         "state"),
    # KV = φ(K)ᵀV (or the S_i updates): n·d_k·d_v; NUMER = φ(Q)·KV: n·d_k·d_v;
    # DENOM = φ(Q)·z: n·d_k; z is sums only
    Cost("COST_MACS", "2·n·d_k·d_v + n·d_k", "=2*{n}*{d_k}*{d_v}+{n}*{d_k}",
         "Multiply-adds: φ(K)ᵀV (causal: the S_i updates) and φ(Q)·KV, n·d_k·d_v each, and "
         "φ(Q)·z, n·d_k (z itself is sums only). Linear in n."),
    Cost("COST_STD_HELD", "n²", "={n}^2",
         "Softmax attention of the same sizes holds n×n scores.", "scores"),
    Cost("COST_STD_MACS", "n²·(d_k + d_v)", "={n}^2*({d_k}+{d_v})",
         "Multiply-adds of softmax attention: Q·Kᵀ and A·V. Linear attention needs fewer "
         "once n > (2·d_k·d_v + d_k)/(d_k + d_v), about d when d_k = d_v = d."),
]
