"""Kind `flash`: FlashAttention-2's blockwise online softmax, one key block at a time.

    Q = X·W_Q   K = X·W_K   V = X·W_V                     (as in `attention`)
    for each key block j (B keys; the last block may be shorter):
      S_j = Q·K_jᵀ/√d_k    m_j = max(m_{j−1}, rowmax S_j)   α_j = exp(m_{j−1} − m_j)
      P_j = exp(S_j − m_j)  ℓ_j = α_j·ℓ_{j−1} + rowsum P_j   Õ_j = α_j·Õ_{j−1} + P_j·V_j
    O = Õ_T / ℓ_T     LSE = m_T + ln ℓ_T
Block 1 starts the state (m_1 = rowmax S_1, ℓ_1 = rowsum P_1, Õ_1 = P_1·V_1), so no −∞ is
needed. Causal: query rows are blocked like the keys; a key block wholly above a query
block's diagonal is skipped (its S and P cells hold 0, shown grey as "skip"; m, ℓ and Õ
pass through, α = 1); the diagonal block keeps every score in S and masks P with IF and
the max with its range, as `attention` does. Beside it, plain softmax attention from the
same Q, K, V and a live max |flash − standard|.
"""

from dataclasses import dataclass, field

from reference.flash import flash_ref
from sheets._blocks.attention import (
    CAUSAL_MASK,
    QKV_INPUTS,
    AttentionParams,
    projections,
    scaled_scores,
)
from sheets._blocks.costs import Cost, cost_section
from sheets._blocks.labels import positions_from_1
from sheets._blocks.softmax import softmax_steps
from sheets._examples import hand_qkv, sentence_qkv, wo_ai_ai
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    ByRow,
    Chart,
    Kind,
    Map,
    MatMul,
    MaxAbsDiff,
    Series,
    Step,
    Table,
    row_or_cell,
    rows_of,
    section,
)
from workbook_builder.sheet.places import CHART_MAX_POINTS, CHART_MAX_SERIES


@dataclass(frozen=True)
class FlashParams(AttentionParams):
    block_size: int = field(default=2, metadata={
        "help": "keys per block B (1..n; query rows are blocked the same way)"})


def block_bounds(p) -> list[tuple[int, int]]:
    """[start, stop) of each key block; the last is shorter when B does not divide n.
    Written again on purpose (as in reference.flash): a sheet imports only its *_ref."""
    return [(s, min(s + p.block_size, p.seq_len)) for s in range(0, p.seq_len, p.block_size)]


def key_width(j: int):
    """Keys in block j as a function of the parameters, not a literal 1: a block one key
    wide is still an n×B matrix, read cell for cell."""
    return lambda p: min(j * p.block_size, p.seq_len) - (j - 1) * p.block_size


# -- key block j: keys c0..c1−1; `skip`: causal query rows that never visit it ------------
def key_labels(p, j, c0, c1) -> dict:
    """Causal: positions, so the mask's IF can compare key with query; else tokens."""
    if p.causal:
        return {"row_labels": positions_from_1, "col_labels": list(range(c0 + 1, c1 + 1)),
                "corner": "query\\key"}
    return {"row_labels": "tokens", "col_labels": f"keys_B{j}", "corner": "query\\key"}


def scores(p, j, c0, c1, skip) -> Step:
    """S_j = Q·K_jᵀ/√d_k; skipped rows are not computed (0, shown as "skip")."""
    scale = f"/SQRT({p.d_k})"

    def product(queries: str, env) -> str:  # queries (a row or all) times this block's keys
        return f"=MMULT({queries},TRANSPOSE({rows_of(env['K'], c0, c1 - 1)})){scale}"

    def row(r, c, env):  # key c of query r, or all of query r's keys (c None)
        if r in skip:
            return "=0"
        if c is None:
            return product(env["Q"].row(r), env)
        return f"=SUMPRODUCT({env['Q'].row(r)},{env['K'].row(c0 + c)}){scale}"

    return Step(f"S_B{j}", f"S{j} = Q·K{j}ᵀ/√d_k", ByRow(
        "seq_len", key_width(j), row,
        whole=None if skip else lambda env: product(env["Q"].whole(), env)),
        f"Scaled scores of every query against keys {c0 + 1}–{c1} only: n×B cells, never the "
        f"whole n×n matrix. Grey 'skip' cells (causal) belong to query blocks that never "
        f"visit this key block.", skipped_rows=skip, **key_labels(p, j, c0, c1))


def running_max(p, j, c0, c1, skip) -> Step:
    """m_j = max(m_{j−1}, rowmax S_j) over the keys that take part (causal: up to r)."""
    def each(r, _, env):
        if r in skip:
            return f"={env[f'M_B{j - 1}'].row(r)}"
        row = env[f"S_B{j}"].row(r, 0, (min(r, c1 - 1) if p.causal else c1 - 1) - c0)
        return f"=MAX({row})" if j == 1 else f"=MAX({env[f'M_B{j - 1}'].row(r)},{row})"

    return Step(f"M_B{j}", f"m{j} = max(m{j - 1}, rowmax S{j})" if j > 1 else "m1 = rowmax S1",
                ByRow("seq_len", BROADCAST, each, per_cell=True),
                "Running row max over the keys seen so far (skipped rows keep theirs).",
                row_labels="tokens", col_labels=["max"])


def rescale(j) -> Step:
    """α_j = exp(m_{j−1} − m_j): rescales what was summed under the old max."""
    return Step(f"ALPHA_B{j}", f"α{j} = exp(m{j - 1} − m{j})",
                Map("=EXP({A}-{B})", A=f"M_B{j - 1}", B=f"M_B{j}"),
                "1 when the max did not move; below 1 when this block raised it.",
                col_labels=["α"])


def probabilities(p, j, c0, c1, skip) -> Step:
    """P_j = exp(S_j − m_j), 0 where the key comes after the query (IF)."""
    template = "=IF({COL_LABEL}<={ROW_LABEL},EXP({S}-{M}),0)" if p.causal else "=EXP({S}-{M})"
    return Step(f"P_B{j}", f"P{j} = exp(S{j} − m{j})" + (" if key ≤ query" if p.causal else ""),
                Map(template, S=f"S_B{j}", M=f"M_B{j}"),
                "Unnormalised weights under the running max; masked keys give 0.",
                skipped_rows=skip, **key_labels(p, j, c0, c1))


def running_sum(j, skip) -> Step:
    """ℓ_j = α_j·ℓ_{j−1} + rowsum P_j."""
    def each(r, _, env):
        total = f"SUM({env[f'P_B{j}'].row(r)})"
        if j == 1:
            return f"={total}"
        prev = env[f"L_B{j - 1}"].row(r)
        return f"={prev}" if r in skip else f"={env[f'ALPHA_B{j}'].row(r)}*{prev}+{total}"

    return Step(f"L_B{j}", f"ℓ{j} = α{j}·ℓ{j - 1} + rowsum P{j}" if j > 1 else "ℓ1 = rowsum P1",
                ByRow("seq_len", BROADCAST, each, per_cell=True),
                "Running softmax denominator, rescaled to the current max.",
                row_labels="tokens", col_labels=["ℓ"])


def accumulate(j, c0, c1, skip) -> Step:
    """Õ_j = α_j·Õ_{j−1} + P_j·V_j   (unnormalised: FlashAttention-2)."""
    p_j, alpha, prev = f"P_B{j}", f"ALPHA_B{j}", f"ACC_B{j - 1}"

    def each(r, c, env):  # column c of row r, or the whole row (c None)
        values = rows_of(env["V"], c0, c1 - 1) if c is None else env["V"].col(c, c0, c1 - 1)
        dot = f"MMULT({env[p_j].row(r)},{values})"
        if j == 1:
            return f"={dot}"
        carried = row_or_cell(env[prev], r, c)
        return f"={carried}" if r in skip else f"={env[alpha].row(r)}*{carried}+{dot}"

    def whole(env):
        dot = f"MMULT({env[p_j].whole()},{rows_of(env['V'], c0, c1 - 1)})"
        return f"={dot}" if j == 1 else f"={env[alpha].whole()}*{env[prev].whole()}+{dot}"

    return Step(f"ACC_B{j}", f"Õ{j} = α{j}·Õ{j - 1} + P{j}·V{j}" if j > 1 else "Õ1 = P1·V1",
                ByRow("seq_len", "value_width", each, whole=whole),
                "Running weighted sum of value rows, not yet divided by ℓ.",
                row_labels="tokens", col_labels="v")


def key_block(p, j, c0, c1):
    """Key block j's section, its header naming the block's key tokens."""
    skip = frozenset(range(c0)) if p.causal else frozenset()  # rows of earlier query blocks

    def keys(labels) -> str:
        tokens = labels["tokens"]
        return tokens[c0] if c1 - c0 == 1 else f"{tokens[c0]}…{tokens[c1 - 1]}"

    rows = "query row 1" if c0 == 1 else f"query rows 1–{c0}"
    note = f"; {rows} skip it (grey: wholly above their diagonal, the state passes through " \
           f"unchanged)" if skip else ""
    return section(lambda labels: f"Key block {j}: keys {keys(labels)}{note}", [
        scores(p, j, c0, c1, skip), running_max(p, j, c0, c1, skip),
        *([rescale(j)] if j > 1 else []), probabilities(p, j, c0, c1, skip),
        running_sum(j, skip), accumulate(j, c0, c1, skip)], bold=False)


def state_charts(t: int):
    """m_j and α_j of every key block j as bars over the query rows, read live from the
    M_Bj and ALPHA_Bj blocks: where α dips below 1, block j raised that row's max and the
    sums so far were rescaled."""
    # bars, not lines: the query rows are separate rows, with nothing between them
    running = Chart("m_j: each query row's running max after key block j",
                    tuple(Series(f"M_B{j}", 0) for j in range(1, t + 1)), kind="bar",
                    x_title="query row i", y_title="m", legend_title="key block j",
                    cols=7, rows=12)
    rescales = Chart("α_j = exp(m_{j−1} − m_j): below 1 where key block j raised the max",
                     tuple(Series(f"ALPHA_B{j}", 0) for j in range(2, t + 1)), kind="bar",
                     x_title="query row i", y_title="α", legend_title="key block j",
                     y_range=(0, 1), cols=7, rows=12)
    return section("The running state at a glance: m and α per query row and key block",
                   [running, *([rescales] if t > 1 else [])])


def comparison(p) -> list:
    """Standard attention from the same Q, K, V; max |O − O_std|; the n² vs n·B sizes."""
    mask, n, b = "MASK" if p.causal else None, p.seq_len, p.block_size
    explained = "The same scores FlashAttention computed block by block."
    return [scaled_scores(explanation=explained) + ([CAUSAL_MASK] if mask else []),
            softmax_steps(mask=mask, chart=True),
            [Step("OUTPUT_STD", "O_std = A·V", MatMul("WEIGHTS", "V")),
             Step("MAX_ABS_DIFF", "max |O − O_std|", MaxAbsDiff("OUTPUT", "OUTPUT_STD"),
                 "Largest difference between the two outputs: rounding only (about 1e-16), "
                 "because the online softmax is exact.", row_labels=["flash vs std"],
                 col_labels=["max |Δ|"], number_format="0.0E+00"),
             # score cells each approach holds at once
             Table((("score cells held at once", ""), ("standard: n²", f"{n}² = {n * n}"),
                    ("flash: n·B", f"{n}·{b} = {n * b}")))]]


# -- the cost table: what the steps above hold and multiply, as functions of n -----------
COST_SIZES = {"n": "seq_len", "d_k": "d_k", "d_v": "value_width", "B": "block_size"}
# T = ⌈n/B⌉ key blocks (the last one shorter when B does not divide n)
BLOCKS = Cost("COST_BLOCKS", "T = ⌈n/B⌉", "=INT(({n}+{B}-1)/{B})",
              "Key blocks: one S, P, m, ℓ, Õ group each (INT rounds down).", "blocks")
# n·min(n, B): one S_Bj block, all query rows against B keys
HELD = Cost("COST_HELD", "n·B", "={n}*MIN({n},{B})",
            "Score cells held at once: one n×B block S_j (min(n, B) keys when B > n). "
            "Linear in n.", "scores")
STD_HELD = Cost("COST_STD_HELD", "n²", "={n}^2",
                "Standard attention (Step 5) holds the whole n×n SCORES matrix.", "scores")
# causal: key block j is visited by query rows (j−1)·B … n−1 only:
# P = Σ_j (n − (j−1)·B)·B_j = (T−1)·B·n − B²·(T−1)·(T−2)/2 + (n − (T−1)·B)²
PAIRS = Cost("COST_PAIRS", "P = Σ_j (n − (j−1)·B)·B_j",
             "=({COST_BLOCKS}-1)*{B}*{n}-{B}^2*({COST_BLOCKS}-1)*({COST_BLOCKS}-2)/2"
             "+({n}-({COST_BLOCKS}-1)*{B})^2",
             "Scores computed with the causal skip: key block j meets only query rows from "
             "its own block on (the grey 'skip' rows compute nothing); n·(n+B)/2 when B "
             "divides n.", "q·k")
# n²·(d_k + d_v) for S_j = Q·K_jᵀ and P_j·V_j over all blocks, plus one multiply-add per
# value and per row for α_j·Õ_{j−1} and α_j·ℓ_{j−1} in blocks 2 … T
MACS = Cost("COST_MACS", "n²·(d_k+d_v) + (T−1)·n·(d_v+1)",
            "={n}^2*({d_k}+{d_v})+({COST_BLOCKS}-1)*{n}*({d_v}+1)",
            "Multiply-adds: every score (d_k each) and its share of P·V (d_v each), as in "
            "standard attention, plus the rescaling α·Õ and α·ℓ in blocks 2 … T. Still "
            "O(n²·d): FlashAttention saves memory traffic, not arithmetic.")
# causal: P scores and their P·V terms; rescaling only in rows that visit block j:
# R = Σ_{j≥2} (n − (j−1)·B) = (T−1)·n − B·T·(T−1)/2
CAUSAL_MACS = Cost(
    "COST_MACS", "P·(d_k+d_v) + R·(d_v+1)",
    "={COST_PAIRS}*({d_k}+{d_v})+(({COST_BLOCKS}-1)*{n}-{B}*{COST_BLOCKS}*({COST_BLOCKS}-1)/2)"
    "*({d_v}+1)",
    "Multiply-adds: P scores (d_k each) and their P·V terms (d_v each), plus the rescaling "
    "α·Õ and α·ℓ in the R = (T−1)·n − B·T·(T−1)/2 rows that visit blocks 2 … T.")
# SCORES = Q·Kᵀ and OUTPUT_STD = A·V of Step 5: n² dot products of d_k, n·d_v of n
STD_MACS = Cost("COST_STD_MACS", "n²·(d_k + d_v)", "={n}^2*({d_k}+{d_v})",
                "Multiply-adds of standard attention (Step 5): Q·Kᵀ and A·V.")


def costs(p) -> list[Cost]:
    if p.causal:
        return [BLOCKS, HELD, STD_HELD, STD_MACS, PAIRS, CAUSAL_MACS]
    return [BLOCKS, HELD, STD_HELD, STD_MACS, MACS]


class Flash(Kind):
    name = "flash"
    summary = "FlashAttention: blockwise online softmax (running max and sum), exact"
    sheet_title = "Flash"
    Params = FlashParams
    reference = staticmethod(flash_ref)
    inputs = QKV_INPUTS
    test_cases = [
        {"seq_len": 4, "d_model": 3, "d_k": 2, "block_size": 2},
        {"seq_len": 3, "d_model": 2, "d_k": 2, "block_size": 1, "causal": True},
        {"seq_len": 5, "d_model": 3, "d_k": 2, "d_v": 3, "block_size": 2, "causal": True},
    ]
    demo_cases = [
        ("flash", {"seq_len": 6, "d_model": 4, "d_k": 4, "block_size": 3}),
        ("flash_causal", {"seq_len": 5, "d_model": 4, "d_k": 3, "block_size": 2,
                          "causal": True}),
    ]
    # hand: query rows 3 and 4 find a larger score in key block 2, so their α₂ < 1
    examples = {"hand": hand_qkv(block_size=2),
                "sentence": sentence_qkv(bias=False, block_size=4),
                "wo-ai-ai": wo_ai_ai("attention", block_size=2)}
    demo_examples = ("hand", "wo-ai-ai")

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.block_size > p.seq_len:
            raise UserError(f"--block-size {p.block_size} is larger than --seq-len "
                            f"{p.seq_len}; use 1 to {p.seq_len}")

    @classmethod
    def label_sets(cls, p, labels):
        """Tokens, and the tokens of each key block's keys: keys_B1, keys_B2, …"""
        return {"tokens": labels, **{f"keys_B{j}": labels[c0:c1]
                                     for j, (c0, c1) in enumerate(block_bounds(p), start=1)}}

    @classmethod
    def sections(cls, p):
        bounds = block_bounds(p)
        t = len(bounds)
        # a generator: one section per key block, and a sheet too large for Excel is
        # refused at its first block beyond the grid (workbook_builder/sheet/limits.py)
        yield from [
            section("Step 1 — inputs: token rows X and the projection weights", QKV_INPUTS),
            section("Step 2 — project every token to a query, a key and a value",
                    projections()),
            section(f"Step 3 — FlashAttention: {t} key block(s) of B = {p.block_size}, one at "
                    f"a time, keeping only a running max m, a running sum ℓ and an "
                    f"unnormalised output Õ per query row")]
        for j, (c0, c1) in enumerate(bounds, start=1):
            yield key_block(p, j, c0, c1)
        if t <= CHART_MAX_SERIES and p.seq_len <= CHART_MAX_POINTS:
            yield state_charts(t)
        yield from [
            section("Step 4 — normalise once at the end; keep the log-sum-exp", [
                # O = Õ_T / ℓ_T   (one division, at the end)
                Step("OUTPUT", f"O = Õ{t} / ℓ{t}", Map("={A}/{L}", A=f"ACC_B{t}", L=f"L_B{t}"),
                     "Divide the accumulated output by the running sum once, at the end "
                     "(FlashAttention-2)."),
                # LSE = m_T + ln ℓ_T
                Step("LSE", f"L = m{t} + ln ℓ{t}", Map("={M}+LN({L})", M=f"M_B{t}", L=f"L_B{t}"),
                     "log Σ_j exp(s_ij): what the kernel saves for the backward pass.",
                     col_labels=["lse"])]),
            section("Step 5 — for comparison: standard attention holds the whole n×n score "
                    "matrix at once", *comparison(p)),
            cost_section("Cost — still O(n²·d) time, but only n·B scores held at once; at "
                         "this sheet's n and at n = 1k, 4k, 32k", COST_SIZES, costs(p)),
        ]

    @classmethod
    def describe(cls, p):
        return super().describe(p) + f" ({len(block_bounds(p))} blocks)"
