"""Kind `sliding-window`: Longformer-style local attention with optional global tokens,
and BigBird's random keys.

    Q = X·W_Q   K = X·W_K   V = X·W_V   S = Q·Kᵀ/√d_k
    g_i = 1 if position i is global
    R_kj = 1 if key j is one of RANDOM_KEYS[k], the picks of query block k (b queries)
    M_ij = 1 if |i − j| ≤ w or g_i = 1 or g_j = 1 or R_{⌊i/b⌋ j} = 1, else 0   (w one-sided)
    m_i = max_{j: M_ij=1} S_ij   P = M·exp(S − m)   ℓ = Σ_j P   A = P/ℓ   O = A·V
"""

import dataclasses
from dataclasses import dataclass, field, replace

import numpy as np

from reference.sliding_window import sliding_window_ref
from sheets._bands import (
    QKV_INPUTS,
    Cost,
    ValueWidth,
    cost_section,
    position_label_sets,
    projections,
    scaled_scores,
    softmax_steps,
    weighted_values,
    weights_chart,
)
from workbook_builder.errors import UserError
from workbook_builder.sheet import BROADCAST, ByRow, Cell, Input, Kind, Step, section


def parse_global(text: str) -> list[int]:
    """'0,5' -> [0, 5] (sorted, duplicates dropped); '' -> []. Written again here on purpose:
    a sheet imports only its own reference function (reference.sliding_window has the
    same)."""
    return sorted({int(part) for part in text.split(",") if part.strip()})


@dataclass(frozen=True)
class SlidingWindowParams(ValueWidth):
    seq_len: int = field(default=6, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width (columns of X)"})
    d_k: int = field(default=4, metadata={"help": "query/key width (columns of W_Q, W_K)"})
    d_v: int | None = field(default=None, metadata={
        "help": "value width (columns of W_V); default d_k"})
    window: int = field(default=1, metadata={
        "help": "one-sided window w: query i sees keys i−w … i+w (0 = itself only)"})
    global_tokens: str = field(default="", metadata={
        "metavar": "I,J,…", "flag": "--global",  # `global` is a Python keyword
        "help": "0-based positions of global tokens, e.g. 0,5 (they see and are seen by "
                "every token)"})
    random: int = field(default=0, metadata={
        "metavar": "R", "help": "BigBird: R random keys per query block, drawn by the seed "
                                "into the input RANDOM_KEYS (0 = none)"})
    block_size: int = field(default=2, metadata={
        "metavar": "b", "help": "with --random: queries per block sharing their random keys "
                                "(1..n; the last block is shorter when b does not divide n)"})

    @property
    def global_positions(self) -> list[int]:
        return parse_global(self.global_tokens)


# -- BigBird's random keys: query block k is queries k·b … k·b+b−1 ---------------------------
def query_blocks(p) -> list[tuple[int, int]]:
    """[start, stop) of each query block; the last is shorter when b does not divide n."""
    return [(s, min(s + p.block_size, p.seq_len)) for s in range(0, p.seq_len, p.block_size)]


def query_block_labels(p) -> list[str]:
    """'0–1', '2–3', … (0-based positions, as the mask's labels); a lone query: '4'."""
    return [f"{s}–{e - 1}" if e - s > 1 else str(s) for s, e in query_blocks(p)]


def free_keys(p, start: int, stop: int) -> list[int]:
    """Keys no query start … stop−1 sees through the band or a global token: BigBird draws
    its random keys among them, so each pick adds a key."""
    is_global = set(p.global_positions)
    return [j for j in range(p.seq_len) if j not in is_global
            and (j < start - p.window or j > stop - 1 + p.window)]


def check_random_keys(inputs, p) -> None:
    """A user may type any pick: each must be a whole key position 0 … n−1."""
    if not p.random:
        return
    labels = query_block_labels(p)
    for k, row in enumerate(np.asarray(inputs["RANDOM_KEYS"], dtype=float)):
        for r, key in enumerate(row):
            if not (key.is_integer() and 0 <= key <= p.seq_len - 1):
                raise UserError(f"input RANDOM_KEYS (queries {labels[k]}, pick r{r + 1}) "
                                f"holds {key:g}: a random key must be a whole position "
                                f"0 … {p.seq_len - 1}")


def checked_ref(inputs, params):
    """The reference, after refusing picks that are not key positions: RANDOM_KEYS is read
    back from the file, where a user may have typed anything."""
    check_random_keys(inputs, params)
    return sliding_window_ref(inputs, params)


RANDOM_KEYS = Input(
    "RANDOM_KEYS", lambda p: len(query_blocks(p)), "random",
    "random keys of each query block (0-based positions)", row_labels=query_block_labels,
    col_labels="r", corner="queries", when=lambda p: p.random > 0,
    note="Drawn by the seed: different keys outside the block's window and the global "
         "tokens. Type any position 0 … n−1 instead and the mask follows.")


# R_kj = 1 if key j (the column label) is one of block k's picks in RANDOM_KEYS
def random_cell(k, env, j):
    picks = env["RANDOM_KEYS"]
    tests = [f"{picks.fixed(k, r)}={env.me.col_label(j)}" for r in range(picks.cols)]
    return f"=IF({tests[0]},1,0)" if len(tests) == 1 else f"=IF(OR({','.join(tests)}),1,0)"


def random_whole(env):  # each pick column (blocks×1) against the key labels (1×n): blocks×n
    picks = env["RANDOM_KEYS"]
    tests = "+".join(f"({picks.col(r)}={env.me.col_labels()})" for r in range(picks.cols))
    return f"=IF(0+{tests}>0,1,0)"


# g_i = 1 if position i (the row label) is listed in --global
def global_cell(i, env, _):
    tests = ",".join(f"{env.me.row_label(i)}={g}" for g in env.params.global_positions)
    return f"=IF(OR({tests}),1,0)"


def global_whole(env):  # OR would collapse an array to one value; a sum of tests does not
    # "0+" turns a lone TRUE/FALSE into a number: Excel ranks TRUE and FALSE above 0
    tests = "+".join(f"({env.me.row_labels()}={g})" for g in env.params.global_positions)
    return f"=IF(0+{tests}>0,1,0)"


# M_ij = 1 if |j − i| ≤ w or g_i = 1 or g_j = 1 or R_{⌊i/b⌋ j} = 1; the labels are the
# 0-based positions
def mask_cell(i, env, j):
    """Cell (i, j) of the mask; with random keys, the whole row i when j is None."""
    if j is None:
        return mask_row(i, env)
    p = env.params
    band = f"ABS({env.me.col_label(j)}-{env.me.row_label(i)})<={p.window}"
    if not p.global_positions and not p.random:
        return f"=IF({band},1,0)"
    tests = [band]
    if p.global_positions:
        flags = env["GLOBAL"]
        tests += [f"{flags.fixed(i, 0)}=1", f"{flags.fixed(j, 0)}=1"]
    if p.random:
        tests.append(f"{env['RANDOM'].cell(i // p.block_size, j)}=1")
    return f"=IF(OR({','.join(tests)}),1,0)"


def mask_whole(env):
    band = f"(ABS({env.me.col_labels()}-{env.me.row_labels()})<={env.params.window})"
    if not env.params.global_positions:
        return f"=IF({band},1,0)"
    flags = env["GLOBAL"].whole()
    return f"=IF({band}+{flags}+TRANSPOSE({flags})>0,1,0)"


def mask_row(i, env):  # with random keys: row i adds the RANDOM row of its block ⌊i/b⌋
    p = env.params
    terms = [f"(ABS({env.me.col_labels()}-{env.me.row_label(i)})<={p.window})"]
    if p.global_positions:
        flags = env["GLOBAL"]
        terms += [flags.fixed(i, 0), f"TRANSPOSE({flags.whole()})"]
    terms.append(env["RANDOM"].row(i // p.block_size))
    return f"=IF({'+'.join(terms)}>0,1,0)"


# m_i = max_{j: M_ij=1} S_ij: a single-cell array formula per row (MAX over an IF). A masked
# entry stands in as S_ii, the row's own score, which is always allowed: no sentinel, so
# no score however large or small can be outranked by a fill value
def row_max_cell(i, env, _):
    scaled = env["SCALED"]
    return Cell(f"=MAX(IF({env['MASK'].row(i)}=1,{scaled.row(i)},{scaled.fixed(i, i)}))",
                array=True)


def masked_softmax() -> list:
    """The shared row softmax over entries with M_ij = 1 (any pattern, not only a causal
    prefix): its row max reads the mask instead of ending at the diagonal."""
    row_max, exp, row_sum, weights = softmax_steps(mask="MASK")
    return [
        replace(row_max, equation="m_i = max_{j: M_ij=1} (S/√d_k)_ij",
                formula=ByRow("seq_len", BROADCAST, row_max_cell, per_cell=True),
                row_labels="tokens",
                explanation="Largest allowed score of each row (an array formula: MAX over "
                            "IF(mask=1, score, own score)); a masked entry counts as the "
                            "row's own score, which every row allows."),
        replace(exp, equation="P_ij = exp((S/√d_k)_ij − m_i) if M_ij = 1 else 0",
                explanation="Exponential of each shifted allowed score; masked entries "
                            "are 0."),
        row_sum,
        replace(weights, explanation="Attention weights: zero outside the band, each row "
                                     "sums to 1."),
        weights_chart(),
    ]


class SlidingWindow(Kind):
    name = "sliding-window"
    summary = ("Longformer sliding-window attention (--window w one-sided, --global tokens, "
               "--random R BigBird keys)")
    sheet_title = "SlidingWindow"
    Params = SlidingWindowParams
    reference = staticmethod(checked_ref)
    inputs = [*QKV_INPUTS, RANDOM_KEYS]
    label_sets = classmethod(position_label_sets)
    test_cases = [
        {"seq_len": 5, "d_model": 3, "d_k": 2, "window": 1},
        {"seq_len": 6, "d_model": 4, "d_k": 3, "d_v": 2, "window": 1,
         "global_tokens": "0,4"},
        {"seq_len": 4, "d_model": 2, "d_k": 2, "window": 0, "global_tokens": "3"},
        # BigBird: random keys per query block, with and without global tokens
        {"seq_len": 7, "d_model": 3, "d_k": 2, "window": 1, "random": 2},
        {"seq_len": 8, "d_model": 4, "d_k": 3, "d_v": 2, "window": 1, "global_tokens": "0",
         "random": 1, "block_size": 3},
        {"seq_len": 5, "d_model": 2, "d_k": 2, "window": 0, "global_tokens": "4",
         "random": 3, "block_size": 1},
    ]
    demo_cases = [
        ("sliding_window", {"seq_len": 8, "d_model": 4, "d_k": 4, "window": 1}),
        ("sliding_window_global", {"seq_len": 8, "d_model": 4, "d_k": 4, "window": 1,
                                   "global_tokens": "0,5"}),
        ("sliding_window_bigbird", {"seq_len": 8, "d_model": 4, "d_k": 4, "window": 1,
                                    "global_tokens": "0", "random": 2, "block_size": 2}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(replace(p, window=1, random=1))  # sizes positive; these may be 0
        if p.window < 0:
            raise UserError(f"--window must be 0 or more (keys on each side), got {p.window}")
        if p.random < 0:
            raise UserError(f"--random must be 0 or more (keys per query block), got "
                            f"{p.random}")
        if p.random > p.seq_len:
            raise UserError(f"--random {p.random} is more than the {p.seq_len} keys there "
                            f"are (--seq-len)")
        if p.random and p.block_size > p.seq_len:
            raise UserError(f"--block-size {p.block_size} is larger than --seq-len "
                            f"{p.seq_len}")
        try:
            positions = p.global_positions
        except ValueError:
            raise UserError(f"--global must be comma-separated whole numbers, got "
                            f"{p.global_tokens!r}") from None
        outside = [g for g in positions if not 0 <= g < p.seq_len]
        if outside:
            raise UserError(f"--global position {outside[0]} is outside the sequence "
                            f"(positions 0 … {p.seq_len - 1})")

    @classmethod
    def random_input(cls, name, shape, params, rng):
        """RANDOM_KEYS: R different keys per query block, drawn among the keys it does not
        see yet (BigBird's rule), in increasing order; other inputs as every kind's."""
        if name != "RANDOM_KEYS":
            return super().random_input(name, shape, params, rng)
        rows = []
        for label, (start, stop) in zip(query_block_labels(params), query_blocks(params),
                                        strict=True):
            free = free_keys(params, start, stop)
            if len(free) < params.random:
                raise UserError(f"--random {params.random}: queries {label} have only "
                                f"{len(free)} keys outside their window and the global "
                                f"tokens to draw from; lower --random, --window or "
                                f"--block-size, or give RANDOM_KEYS with --inputs")
            rows.append(np.sort(rng.choice(free, size=params.random, replace=False)))
        return np.array(rows, dtype=float)

    @classmethod
    def describe(cls, params):
        """Without --random, the sheet's parameters as before (no random=0, block_size)."""
        unused = () if params.random else ("random", "block_size")
        return ", ".join(f"{f.name}={getattr(params, f.name)}"
                         for f in dataclasses.fields(params)
                         if getattr(params, f.name) is not None and f.name not in unused)

    @classmethod
    def sections(cls, p):
        shown = ", ".join(map(str, p.global_positions)) or "none"
        flags = [Step("GLOBAL", "g_i = 1 if i is a global position",
                      ByRow("seq_len", 1, global_cell, whole=global_whole),
                      "Global tokens (e.g. [CLS]) attend to every token and every token "
                      "attends to them.", row_labels="positions", col_labels=["global"],
                      corner="position")] if p.global_positions else []
        picks = [RANDOM_KEYS, Step(
            "RANDOM", "R_kj = 1 if key j is a random key of block k",
            ByRow(lambda q: len(query_blocks(q)), "seq_len", random_cell,
                  whole=random_whole),
            "BigBird's random attention: row k marks the keys picked for query block k in "
            "RANDOM_KEYS; every query of the block sees them.",
            row_labels=query_block_labels, col_labels="positions",
            corner="queries\\key")] if p.random else []
        equation = "1 if |j − i| ≤ {window}" + (" or i, j global" if flags else "") + \
            (" or R[⌊i/{block_size}⌋, j] = 1" if picks else "")
        mask = Step("MASK", equation,
                    ByRow("seq_len", "seq_len", mask_cell,
                          whole=None if picks else mask_whole),
                    "The band: query i sees keys within w positions on either side, plus "
                    "the global tokens" + (" and the random keys of its block" if picks
                                           else "") +
                    ". Masked entries are left out of the softmax, so no −∞ is needed.",
                    row_labels="positions", col_labels="positions",
                    corner="query\\key", heatmap=True)
        title = (f"Step 3 — the BigBird mask: window w = {{window}} on each side, global "
                 f"positions: {shown}, random keys: {{random}} per block of {{block_size}} "
                 f"queries") if picks else \
            f"Step 3 — the band mask: window w = {{window}} on each side, global positions: " \
            f"{shown}"
        return [
            section("Step 1 — inputs: token rows X and the projection weights", QKV_INPUTS),
            section("Step 2 — queries, keys, values and scaled scores (as in full "
                    "attention)", projections(), scaled_scores()),
            section(title, *([picks] if picks else []), flags + [mask]),
            section("Step 4 — softmax over the allowed keys only: max, exp, sum, divide",
                    masked_softmax()),
            section("Step 5 — weighted sum of the values", weighted_values(
                "Each output row mixes only the value rows its query may see.")),
            cost_section(COST_TITLE, COST_SIZES, costs(p)),
        ]


# -- the cost table: the band's scores and multiply-adds as functions of n ---------------
COST_TITLE = "Cost — the band holds about n·(2w+1) scores: O(n·w), not O(n²); at this " \
             "sheet's n and at n = 1k, 4k, 32k"
COST_SIZES = {"n": "seq_len", "d_k": "d_k", "d_v": "value_width", "w": "window",
              "r": "random"}
# Σ_i (min(i+w, n−1) − max(i−w, 0) + 1) = n·(2w′+1) − w′·(w′+1), w′ = min(w, n−1)
BAND = "={n}*(2*MIN({w},{n}-1)+1)-MIN({w},{n}-1)*(MIN({w},{n}-1)+1)"
BAND_EQUATION = "n·(2w′+1) − w′·(w′+1)"
BAND_NOTE = "Cells with |i − j| ≤ w: 2w+1 per row, fewer in the first and last w rows " \
            "(w′ = min(w, n−1))."


def global_extra(p) -> str:
    """Cells the global tokens add to the band: row g and column g are whole,
    2·Σ_g (n − band cells of row g), less the cells in both a global row and a global
    column that lie outside the band, #{(a, b) ∈ G²: |a − b| > w}. A term counts only
    while its position lies inside n."""
    rows = "+".join(f"IF({g}<{{n}},{{n}}-(MIN({g}+{{w}},{{n}}-1)-MAX({g}-{{w}},0)+1),0)"
                    for g in p.global_positions)
    pairs = "+".join(f"IF(AND({b}<{{n}},{b - a}>{{w}}),1,0)"
                     for a in p.global_positions for b in p.global_positions if a < b)
    return f"=2*({rows})" + (f"-2*({pairs})" if pairs else "")


# the allowed scores times d_k (Q·Kᵀ) and d_v (A·V), as a kernel that skips masked pairs
MACS = Cost("COST_MACS", "allowed·(d_k + d_v)", "={COST_HELD}*({d_k}+{d_v})",
            "Multiply-adds of a banded kernel: d_k per allowed score, d_v per allowed weight. "
            "This sheet computes all n² scores and masks them afterwards (to show the band): "
            "that is COST_STD_MACS.")
STD = [Cost("COST_STD_HELD", "n²", "={n}^2",
            "Full attention, and the SCORES block of this sheet: n×n.", "scores"),
       Cost("COST_STD_MACS", "n²·(d_k + d_v)", "={n}^2*({d_k}+{d_v})",
            "Multiply-adds of full attention: Q·Kᵀ and A·V over every pair.")]


def costs(p) -> list[Cost]:
    if not p.global_positions and not p.random:
        return [Cost("COST_HELD", BAND_EQUATION, BAND, BAND_NOTE + " The scores the mask "
                     "allows. O(n·w).", "scores"), MACS, *STD]
    parts = [Cost("COST_BAND", BAND_EQUATION, BAND, BAND_NOTE, "scores")]
    if p.global_positions:
        parts.append(Cost(
            "COST_GLOBAL", "2·Σ_g (n − band_g) − pairs", global_extra,
            "What the global tokens add: their rows and columns are whole (n cells), less "
            "the band_g cells of row g already counted and the pairs of global positions "
            "farther apart than w, counted twice. O(n·g).", "scores"))
    if p.random:
        # each non-global query sees its block's R picks (a global query sees every key
        # already); seeded picks lie outside the band and the global tokens
        globals_in = "".join(f"-IF({g}<{{n}},1,0)" for g in p.global_positions)
        parts.append(Cost("COST_RANDOM", "(n − global rows)·R", f"=({{n}}{globals_in})*{{r}}",
                          "What BigBird's random keys add: R per query that is not global "
                          "(exact for seeded picks, which lie outside the band and the global "
                          "tokens). O(n·R).", "scores"))
    total = "=" + "+".join(f"{{{c.name}}}" for c in parts)
    return [*parts, Cost("COST_HELD", " + ".join(c.name.removeprefix("COST_").lower()
                                                for c in parts), total,
                         "The scores the mask allows (the ones in MASK).", "scores"),
            MACS, *STD]
