"""Kind `relative-position`: a bias that depends only on the offset j − i, added to every
head's attention scores: ALiBi's fixed linear penalty or T5's learned, bucketed bias.

    Q = X·W_Q   K = X·W_K   V = X·W_V   (H heads as column slices, d_k = d_model/H)
    REL_POS[i,j] = j − i
    alibi:  m_h = 2^(−8h/H)  (the paper's get_slopes; its rule for H not a power of two)
            BIAS_h = −m_h·|j − i|      S_h = Q_h·K_hᵀ/√d_k + BIAS_h      causal mask
    t5:     bucket(j − i) as transformers' T5Attention._relative_position_bucket, in float32
            BIAS_h[i,j] = BIAS_TABLE[bucket_ij, h]   S_h = Q_h·K_hᵀ + BIAS_h  (T5 does not
            scale)   bidirectional, or causal (--causal: decoder buckets and the causal mask)
    A_h = softmax(S_h)   head_h = A_h·V_h   O = [head_1 … head_H]·W_O

T5's log buckets are computed in float32 by transformers (`relative_position.float()`); the
sheet rounds each of those steps to float32 with f32(y) = (y − y·C) + y·C, C = 2^(p−24) + 1
(Veltkamp's split: the nearest number with float32's 24 significant bits), so it floors the
correctly rounded float32 values, the ones a user can check by hand: the log is LN in the
spreadsheet's precision rounded once. p is the spreadsheet's own precision, read by the
formula: 53 bits where 1 + 2⁻⁶⁰ = 1 (IEEE double: Excel, LibreOffice, `formulas`), 64 bits in
Gnumeric, whose arithmetic is long double. torch's float32 log, which transformers floors, is
not always correctly rounded and its last bit depends on the CPU; where x is a whole number in
exact arithmetic that bit decides the floor, and transformers' bucket can be one higher than
the sheet's (10 distances on the 11,567-setting test grid, with torch 2.13).
"""

from dataclasses import dataclass, field

from reference.relative_position import relative_position_ref
from sheets._blocks.attention import CAUSAL_MASK, QUERY_KEY, X, projections
from sheets._blocks.heads import W_K, W_O, W_Q, W_V, concat_and_mix
from sheets._blocks.softmax import softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    ByRow,
    Input,
    Kind,
    Map,
    MatMul,
    Step,
    section,
)

BIASES = ["alibi", "t5"]
# C = 2^(p−24) + 1, Veltkamp's constant that leaves 24 of the engine's p bits: 2^29 + 1 in
# IEEE double (1 + 2^-60 = 1), 2^40 + 1 in long double (Gnumeric), where 1 + 2^-60 > 1
SPLIT = "(2^IF(1+2^-60>1,40,29)+1)"


@dataclass(frozen=True)
class RelativePositionParams:
    seq_len: int = field(default=6, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width; d_k = d_model/heads"})
    heads: int = field(default=2, metadata={
        "help": "heads H (must divide d_model); ALiBi gives each head its own slope"})
    bias: str = field(default="alibi", metadata={
        "choices": BIASES,
        "help": "alibi: fixed slopes, bias −m_h·|i−j|, causal; t5: a learned bias per "
                "bucket of j − i"})
    buckets: int = field(default=32, metadata={
        "help": "t5: rows of BIAS_TABLE (relative_attention_num_buckets)"})
    max_distance: int = field(default=128, metadata={
        "help": "t5: distances from here on share the last bucket "
                "(relative_attention_max_distance)"})
    causal: bool = field(default=False, metadata={
        "help": "t5: decoder buckets (bidirectional=False) and the causal mask; alibi is "
                "always causal"})

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    @property
    def groups(self) -> int:  # every head has its own K/V head (multihead's weights)
        return self.heads

    @property
    def masked(self) -> bool:
        return self.causal or self.bias == "alibi"

    @property
    def direction_buckets(self) -> int:
        """B': the buckets of one direction (bidirectional T5 halves them)."""
        return self.buckets if self.causal else self.buckets // 2

    @property
    def max_exact(self) -> int:
        """e = B'/2: distances below e have a bucket each."""
        return self.direction_buckets // 2

    @property
    def log_buckets(self) -> int:
        """B' − e: the buckets shared out on a log scale."""
        return self.direction_buckets - self.max_exact

    @property
    def log_rows(self) -> int:
        """Distances e … n−1, the ones that take the log."""
        return max(0, self.seq_len - self.max_exact)

    @property
    def pow2_heads(self) -> int:
        """P = 2^⌊log2 H⌋, the power of two get_slopes starts from."""
        return 1 << (self.heads.bit_length() - 1)


def f32(y: str) -> str:
    """y rounded to float32's 24 significant bits (Veltkamp): exact in the engine's own
    precision, double or long double."""
    return f"({y}-{y}*{SPLIT})+{y}*{SPLIT}"


def _buckets(p):
    return list(range(p.buckets))


def _head_names(p):
    return [f"h{h + 1}" for h in range(p.heads)]


def _positions(p):
    return list(range(p.seq_len))


def _distances(p):  # the rows of the float32 log table
    return list(range(p.max_exact, p.seq_len))


BIAS_TABLE = Input("BIAS_TABLE", "buckets", "heads", "learned bias per bucket and head",
                   _buckets, _head_names, "T5's relative_attention_bias: one row per bucket.",
                   corner="bucket\\head", when=lambda p: p.bias == "t5")

# REL_POS[i,j] = j − i  (transformers: memory_position − context_position)
REL_POS = Step("REL_POS", "r = j − i", Map("={COL_LABEL}-{ROW_LABEL}", rows="seq_len",
                                           cols="seq_len"),
               "How far key j lies from query i: negative for earlier keys, positive for "
               "later ones.", row_labels=_positions, col_labels=_positions, corner="i\\j",
               number_format="0")

# m_h = 2^(−8h/H); H not a power of two: 2^(−8h/P) for h ≤ P, 2^(−4(2(h−P)−1)/P) after
SLOPES_POW2 = "=POWER(2,-8*{COL_LABEL}/{heads})"
SLOPES_MIXED = ("=IF({COL_LABEL}<={pow2_heads},POWER(2,-8*{COL_LABEL}/{pow2_heads}),"
                "POWER(2,-4*(2*({COL_LABEL}-{pow2_heads})-1)/{pow2_heads}))")


def slopes(p) -> Step:
    pow2 = p.heads == p.pow2_heads
    return Step("SLOPES", "m_h = 2^(−8h/{heads})" if pow2 else
                "m_h = 2^(−8h/{pow2_heads}) for h ≤ {pow2_heads}, then 2^(−4(2t−1)/{pow2_heads})",
                Map(SLOPES_POW2 if pow2 else SLOPES_MIXED, rows=1, cols="heads"),
                "One slope per head, a geometric sequence: steep heads look only nearby, "
                "gentle ones far." if pow2 else
                "H is not a power of two: the slopes of the nearest power of two P below H, "
                "then every other slope of 2P heads (the paper's get_slopes).",
                row_labels=["m"], col_labels=lambda p: list(range(1, p.heads + 1)),
                corner="h", number_format="0.000000")


# -- T5 buckets ------------------------------------------------------------------------------
def float32_table() -> list[Step]:
    """transformers' log-bucket steps for each distance d ≥ e, each rounded to float32; one
    formula per cell in both layouts (Gnumeric evaluates the rounding inside an array
    formula with more precision, which defeats it)."""
    table = {"row_labels": _distances, "col_labels": ["f32"], "corner": "d",
             "number_format": "0.0000000"}
    return [
        # c = f32(ln(max_distance / e))
        Step("LOG_RANGE", "c = f32(ln({max_distance}/{max_exact}))",
             Map("=" + f32("LN({max_distance}/{max_exact})"), rows=BROADCAST, cols=BROADCAST,
                 per_cell=True),
             "The log of the range the log buckets cover; transformers casts this Python "
             "float to float32.", row_labels=["c"], col_labels=["f32"],
             number_format="0.0000000"),
        # a_d = f32(d / e)
        Step("RATIO", "a = f32(d / {max_exact})",
             Map("=" + f32("{ROW_LABEL}/{max_exact}"), rows=lambda p: p.log_rows, cols=1,
                 per_cell=True),
             "relative_position.float() / max_exact: float32, like every step of this "
             "table.", **table),
        # ℓ_d = f32(ln a_d): ln in the engine's precision, rounded once (correctly rounded)
        Step("LOG_RATIO", "ℓ = f32(ln a)", Map("=" + f32("LN({A})"), per_cell=True, A="RATIO"),
             "ln a rounded once to float32: the correctly rounded float32 log. torch.log in "
             "float32 can be one unit in the last place off, depending on the CPU.", **table),
        # q_d = f32(ℓ_d / c)
        Step("LOG_FRACTION", "q = f32(ℓ / c)", Map("=" + f32("{L}/{C}"), per_cell=True,
                                                    L="LOG_RATIO", C="LOG_RANGE"),
             "How far along the log range distance d lies.", **table),
        # x_d = f32(q_d · (B' − e))
        Step("LOG_BIN", "x = f32(q · {log_buckets})",
             Map("=" + f32("{Q}*{log_buckets}"), per_cell=True, Q="LOG_FRACTION"),
             "Log buckets above max_exact before flooring; float32 decides the floor where "
             "x is a whole number in exact arithmetic.", **table),
    ]


def _bucket_parts(r: str, p, array: bool = False) -> tuple[str, str]:
    """(offset +, distance d) of a relative position r, as formula text; in an array
    formula −min(r, 0) is an IF (MIN of an array is one number)."""
    if p.causal:
        return "", f"IF({r}<0,-{r},0)" if array else f"-MIN({r},0)"
    return f"IF({r}>0,{p.direction_buckets},0)+", f"ABS({r})"


def bucket_cell(i, j, env):
    """offset (bidirectional: B' for keys after the query) + d if d < e, else
    min(B' − 1, e + ⌊x_d⌋), x_d looked up in LOG_BIN by the distance."""
    p = env.params
    offset, distance = _bucket_parts(env["REL_POS"].cell(i, j), p)
    if not p.log_rows:
        return f"={offset}{distance}"
    log_bin = f"INDEX({env['LOG_BIN'].whole()},{distance}-{p.max_exact}+1,1)"
    return (f"={offset}IF({distance}<{p.max_exact},{distance},"
            f"MIN({p.direction_buckets - 1},{p.max_exact}+INT({log_bin})))")


def bucket_row(i, env):
    """Row i as one array formula: x_d picked by matching d against LOG_BIN's distance
    labels (MMULT with a 0/1 match matrix), and the cap as an IF."""
    p = env.params
    offset, distance = _bucket_parts(env["REL_POS"].row(i), p, array=True)
    if not p.log_rows:
        return f"={offset}{distance}"
    log_bin = env["LOG_BIN"]
    large = (f"{p.max_exact}+INT(MMULT(TRANSPOSE({log_bin.whole()}),"
             f"0+({log_bin.row_labels()}={distance})))")
    last = p.direction_buckets - 1
    return (f"={offset}IF({distance}<{p.max_exact},{distance},"
            f"IF({large}<{last},{large},{last}))")


# measured by tests/test_relative_position.py's grid test (torch 2.13; the same under
# ATEN_CPU_CAPABILITY=default, avx2 and avx512)
TRANSFORMERS_AT_BOUNDARIES = (
    " Where x is a whole number in exact arithmetic, transformers' bucket can be one higher, "
    "depending on the CPU's float32 log: at 10 distances of the 11,567 settings tested.")


def bucket_step(p) -> Step:
    last, half = p.direction_buckets - 1, p.direction_buckets
    rule = f"d if d < {{max_exact}} else min({last}, {{max_exact}} + ⌊x_d⌋)"
    equation = f"d = −min(r, 0);  {rule}" if p.causal else f"{half}·[r > 0] + ({rule}),  d = |r|"
    def bucket(i, j, env):  # cell (i, j), or the whole row i (j None)
        return bucket_row(i, env) if j is None else bucket_cell(i, j, env)

    return Step("BUCKET", equation, ByRow("seq_len", "seq_len", bucket),
                "T5's bucket of each offset: one per distance below max_exact, then "
                "logarithmically wider ones up to max_distance." +
                ("" if p.causal else " Keys after the query use the upper half.") +
                TRANSFORMERS_AT_BOUNDARIES,
                row_labels=_positions, col_labels=_positions, corner="i\\j",
                number_format="0")


# -- per-head bias ---------------------------------------------------------------------------
def alibi_bias(h: int) -> ByRow:
    """BIAS_h = −m_h·|j − i|."""
    def each(i, j, env):
        return f"=-{env['SLOPES'].fixed(0, h)}*ABS({env['REL_POS'].cell(i, j)})"

    def whole(env):
        return f"=-{env['SLOPES'].fixed(0, h)}*ABS({env['REL_POS'].whole()})"

    return ByRow("seq_len", "seq_len", each, whole=whole)


def t5_bias(h: int) -> ByRow:
    """BIAS_h[i,j] = BIAS_TABLE[bucket_ij, h]: INDEX per cell (it counts from 1); in
    `blocks` one array formula per row picks the entry whose bucket label matches, as
    column h of the table times a 0/1 match matrix (INDEX takes no array of rows portably)."""
    def row(i, j, env):  # cell (i, j), or the whole row i (j None)
        table = env["BIAS_TABLE"]
        if j is None:
            return (f"=MMULT(TRANSPOSE({table.col(h)}),"
                    f"0+({table.row_labels()}={env['BUCKET'].row(i)}))")
        return f"=INDEX({table.whole()},{env['BUCKET'].cell(i, j)}+1,{h + 1})"

    return ByRow("seq_len", "seq_len", row)


def head_band(h: int, p) -> list[Step]:
    """Head h (0-based): scores (scaled for ALiBi), + bias, softmax, A·V_h."""
    sfx, cols = f"_H{h + 1}", (h * p.d_k, (h + 1) * p.d_k - 1)
    scores = [Step("SCORES" + sfx, f"S = Q_{h + 1}·K_{h + 1}ᵀ",
                   MatMul("Q", "K", cols, cols, transpose="b"),
                   "Dot product of query i with key j.", corner=QUERY_KEY)]
    if p.bias == "alibi":
        scores.append(Step("SCALED" + sfx, "S / √d_k   (d_k = {d_k})",
                           Map("={S}/SQRT({d_k})", S="SCORES" + sfx),
                           "Scores of this head divided by √d_k.", corner=QUERY_KEY))
        bias = Step("BIAS" + sfx, f"−m_{h + 1}·|j − i|", alibi_bias(h),
                    "ALiBi: a penalty growing linearly with the distance, at this head's "
                    "slope.", row_labels="tokens", col_labels="tokens", corner=QUERY_KEY)
    else:
        bias = Step("BIAS" + sfx, f"BIAS_TABLE[BUCKET, h{h + 1}]", t5_bias(h),
                    "This head's learned bias for the bucket of each offset.",
                    row_labels="tokens", col_labels="tokens", corner=QUERY_KEY)
    logits = scores[-1].name
    return [*scores, bias,
            Step("BIASED" + sfx, "S + B" if p.bias == "t5" else "S/√d_k + B",
                 Map("={S}+{B}", S=logits, B="BIAS" + sfx, labels_from=logits),
                 "Scores plus the position bias; T5 does not divide by √d_k." if
                 p.bias == "t5" else "Scaled scores plus the position bias.",
                 corner=QUERY_KEY),
            *softmax_steps("BIASED" + sfx, "MASK" if p.masked else None, sfx,
                           of="(S + B)" if p.bias == "t5" else "(S/√d_k + B)", chart=True),
            Step("HEAD" + sfx, f"head_{h + 1} = A·V_{h + 1}",
                 MatMul("WEIGHTS" + sfx, "V", b_cols=cols), f"Output of head {h + 1}.",
                 col_labels=f"h{h + 1}.")]


class RelativePosition(Kind):
    name = "relative-position"
    summary = "relative position bias on the scores: ALiBi slopes or T5 buckets (--bias)"
    sheet_title = "RelativePosition"
    Params = RelativePositionParams
    reference = staticmethod(relative_position_ref)
    inputs = [X, W_Q, W_K, W_V, BIAS_TABLE, W_O]
    test_cases = [
        {"bias": "alibi", "seq_len": 5, "d_model": 4, "heads": 2},
        {"bias": "alibi", "seq_len": 4, "d_model": 6, "heads": 3},
        {"bias": "t5", "seq_len": 7, "d_model": 4, "heads": 2, "buckets": 8,
         "max_distance": 6},
        {"bias": "t5", "seq_len": 6, "d_model": 2, "heads": 1, "buckets": 6,
         "max_distance": 7, "causal": True},
        {"bias": "t5", "seq_len": 3, "d_model": 2, "heads": 1},  # every distance exact
    ]
    demo_cases = [
        ("relative_position_alibi", {"bias": "alibi", "seq_len": 6, "d_model": 8,
                                     "heads": 4}),
        ("relative_position_t5", {"bias": "t5", "seq_len": 8, "d_model": 4, "heads": 2,
                                  "buckets": 12, "max_distance": 16}),
        ("relative_position_t5_causal", {"bias": "t5", "seq_len": 8, "d_model": 4,
                                         "heads": 2, "buckets": 8, "max_distance": 16,
                                         "causal": True}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.bias not in BIASES:
            raise UserError(f"--bias must be one of {', '.join(BIASES)}, got {p.bias!r}")
        if p.d_model % p.heads:
            raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
        if p.bias != "t5":
            return
        if p.max_exact < 1:
            least = 2 if p.causal else 4
            raise UserError(f"--buckets must be at least {least} for "
                            f"{'causal' if p.causal else 'bidirectional'} T5 buckets, "
                            f"got {p.buckets}")
        if p.max_distance <= p.max_exact:
            raise UserError(f"--max-distance must exceed max_exact = {p.max_exact} "
                            f"(half of the {p.direction_buckets} buckets of a direction), "
                            f"got {p.max_distance}")

    @classmethod
    def describe(cls, p):
        if p.bias == "alibi":
            return f"seq_len={p.seq_len}, d_model={p.d_model}, heads={p.heads}, bias=alibi, " \
                   f"causal=always"
        return super().describe(p)

    @classmethod
    def sections(cls, p):
        if p.bias == "alibi":
            position = section("Step 3 — ALiBi: a slope per head and the offsets j − i",
                               [REL_POS, slopes(p)])
        else:
            direction = "causal" if p.causal else "bidirectional"
            table = [float32_table()] if p.log_rows else []
            position = section(
                f"Step 3 — T5 buckets of the offsets j − i ({{buckets}} buckets, max distance "
                f"{{max_distance}}, {direction}); distances from max_exact = {{max_exact}} on "
                f"take the log, in float32 as transformers",
                [REL_POS], *table, [bucket_step(p)])
        inputs = [X, W_Q, W_K, W_V] + ([BIAS_TABLE] if p.bias == "t5" else [])
        heads = [section(f"Head {h + 1} — scores, position bias, softmax, A·V",
                         head_band(h, p)) for h in range(p.heads)]
        mix = section("Step 5 — concatenate the heads and mix them with W_O",
                      concat_and_mix(p.heads, p.d_k, W_O))
        return [section("Step 1 — inputs ({heads} heads, d_k = d_model/H = {d_k})", inputs),
                section("Step 2 — projections; head h owns columns h·d_k … (h+1)·d_k − 1",
                        [*projections()] + ([CAUSAL_MASK] if p.masked else [])),
                position, *heads, mix]
