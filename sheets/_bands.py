"""Bands several kinds share, declared once: the X/W_Q/W_K/W_V inputs, the Q/K/V
projections, scaled scores, the causal mask, the four visible steps of a row softmax,
attention per head with its concatenation, source|target token labels, and the cost table
(cells held and multiply-adds as functions of n)."""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.sheet import Custom, Dim, Input, Kind, Map, MatMul, MatMulT, Rows, Step
from workbook_builder.sheet.declare import (
    Chart,
    Section,
    Series,
    Size,
    Table,
    section,
    size_of,
)


class ValueWidth:
    """Mixed into Params that have d_k and an optional d_v: W_V's width defaults to d_k."""

    @property
    def value_width(self) -> int:
        return self.d_k if self.d_v is None else self.d_v


D_V = Dim("d_v", lambda p: p.value_width)


@dataclass(frozen=True)
class GroupedHeads:
    """The sizes of H query heads over G key/value heads (GQA; G = 1 is multi-query), each
    d_k = d_model/H wide: a base of the Params of kinds with grouped heads."""

    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width; d_k = d_model/heads"})
    heads: int = field(default=2, metadata={"help": "query heads H (must divide d_model)"})
    kv_heads: int | None = field(default=None, metadata={
        "help": "key/value heads G (must divide H; 1 = multi-query); default H"})

    @property
    def groups(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads


class GroupedHeadsKind(Kind):
    """A kind whose Params are GroupedHeads: H divides d_model and G divides H, or one line
    saying which does not. Not registered itself: it has no name."""

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.d_model % p.heads:
            raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
        if p.heads % p.groups:
            raise UserError(f"--kv-heads {p.groups} does not divide --heads {p.heads}")

X = Input("X", "seq_len", "d_model", "token embeddings", note="One row per token.")
W_Q = Input("W_Q", "d_model", "d_k", "query weights", "d", "k")
W_K = Input("W_K", "d_model", "d_k", "key weights", "d", "k")
W_V = Input("W_V", "d_model", D_V, "value weights", "d", "v")
QKV_WEIGHTS = [W_Q, W_K, W_V]
QKV_INPUTS = [X, *QKV_WEIGHTS]


def bias_of(weight: Input, title: str, when: str | None = "bias") -> Input:
    """The bias row B_n of a weight W_n (1 × its columns, labelled as its columns), added
    to every row of X·W_n; present when the parameter `when` is set."""
    return Input("B_" + weight.name.removeprefix("W_"), 1, weight.cols, title, ["b"],
                 weight.col_labels, when=when)


def projections(source: str = "X", q_source: str | None = None,
                bias: bool = False) -> list[Step]:
    """Q = X·W_Q, K = X·W_K, V = X·W_V (queries from `q_source` when it differs); with
    `bias`, + B_Q, B_K, B_V (nn.Linear with bias=True)."""
    q_from = q_source or source

    def project(n: str, src: str, explanation: str) -> Step:
        # n = src·W_n (+ B_n)
        plus = f"B_{n}" if bias else None
        return Step(n, f"{n} = {src}·W_{n}" + (f" + B_{n}" if bias else ""),
                    MatMul(src, f"W_{n}", plus=plus), explanation)

    return [project("Q", q_from, "Queries: what each token is looking for."),
            project("K", source, "Keys: what each token offers to be found by."),
            project("V", source, "Values: the content each token passes on.")]


def scaled_scores(suffix: str = "", equation: str = "S = Q·Kᵀ", q: str = "Q", k: str = "K",
                  q_cols=None, k_cols=None,
                  explanation: str = "Dividing by √d_k keeps the scores from growing with "
                                     "the width.", divisor: int = 1) -> list[Step]:
    """S = Q·Kᵀ (over column slices for one head) and S/√d_k, with d_k written into the
    formula as the tutorial writes it; a `divisor` other than 1 divides them once more
    (GPT-2's scale_attn_by_inverse_layer_idx: layer index + 1)."""
    scores = "SCORES" + suffix
    extra, extra_text = ("", "") if divisor == 1 else (f"/{divisor}", f" / {divisor}")
    return [Step(scores, equation, MatMulT(q, k, q_cols, k_cols),
                 "Dot product of query i with key j.", corner=QUERY_KEY),
            Step("SCALED" + suffix, "S / √d_k" + extra_text + "   (d_k = {d_k})",
                 Map("={S}/SQRT({d_k})" + extra, S=scores), explanation, corner=QUERY_KEY)]


QUERY_KEY = "query\\key"  # the corner of a square block: rows are queries, columns keys


def positions_from_1(p) -> list[int]:
    return list(range(1, p.seq_len + 1))


# M_ij = 1 where key j ≤ query i (PyTorch `is_causal`, top-left); the labels are the
# positions the formula compares
CAUSAL_MASK = Step(
    "MASK", "1 if key j ≤ query i else 0",
    Map("=IF({COL_LABEL}<={ROW_LABEL},1,0)", rows="seq_len", cols="seq_len"),
    "Causal mask: a token may attend only to itself and earlier tokens. Masked entries are "
    "left out of the row max and sum below, so no −∞ is needed.",
    row_labels=positions_from_1, col_labels=positions_from_1, corner=QUERY_KEY)


def weights_chart(weights: str = "WEIGHTS") -> Chart:
    """Each query's row of `weights` as a group of bars over the keys, read live from the
    block (so an edited input redraws it); left out past the layout's chart limit."""
    return Chart(f"{weights}: each query's weights over the keys",
                 (Series(weights, along="row"),), kind="bar", x_title="keys j",
                 y_title="weight A_ij", legend_title="query i", y_range=(0, 1), cols=8,
                 rows=12)


def softmax_steps(scaled: str = "SCALED", mask: str | None = None, suffix: str = "",
                  over: str = "keys", of: str = "(S/√d_k)",
                  corner: str = QUERY_KEY, chart: bool = False) -> list:
    """The row softmax as visible steps over the block `scaled`, written `of` in the
    equations; a causal mask ends each row's max at the diagonal and zeroes the masked
    exponentials (shown grey as –). With `chart`, the weights' chart beside them."""
    row_max, exp, row_sum = "ROW_MAX" + suffix, "EXP" + suffix, "ROW_SUM" + suffix
    shifted = "EXP({S}-{M})"
    return [
        # m_i = max_{j allowed} z_ij   (subtracting it keeps EXP from overflowing)
        Step(row_max, f"m_i = max_{{j ≤ i}} {of}_ij" if mask else f"m_i = max_j {of}_ij",
             Rows("=MAX({S})", upto=(lambda i: i) if mask else None, S=scaled),
             "Largest allowed score of each row; subtracting it before EXP is the stable "
             "softmax and changes no weight.", col_labels=["max"]),
        # p_ij = exp(z_ij − m_i), 0 where masked
        Step(exp, f"P_ij = exp({of}_ij − m_i)" + (" · M_ij" if mask else ""),
             Map(f"=IF({{K}}=1,{shifted},0)" if mask else f"={shifted}", labels_from=scaled,
                 S=scaled, M=row_max, **({"K": mask} if mask else {})),
             "Exponential of each shifted score; masked entries are 0.", corner=corner,
             masked_by=mask),
        # ℓ_i = Σ_j p_ij
        Step(row_sum, "ℓ_i = Σ_j P_ij", Rows("=SUM({P})", P=exp),
             "Row sums of the exponentials: the softmax denominator.", col_labels=["sum"]),
        # a_ij = p_ij / ℓ_i
        Step("WEIGHTS" + suffix, "A_ij = P_ij / ℓ_i", Map("={P}/{L}", P=exp, L=row_sum),
             f"Attention weights: each row is a probability distribution over the {over} "
             f"(sums to 1).", heatmap=True, corner=corner, masked_by=mask),
    ] + ([weights_chart("WEIGHTS" + suffix)] if chart else [])


def weighted_values(explanation: str = "Each output row mixes the value rows by that "
                                       "row's weights.", name: str = "OUTPUT",
                    values: str = "V", equation: str = "O = A·V") -> Step:
    """O = A·V: each row the value rows weighted by that row's attention weights."""
    return Step(name, equation, MatMul("WEIGHTS", values), explanation)


def head_labels(prefix: str, count_of, width_of):
    """Labels of heads side by side: q1.1, q1.2, …, q2.1, …"""
    return lambda p: [f"{prefix}{h + 1}.{j + 1}" for h in range(count_of(p))
                      for j in range(width_of(p))]


def head_steps(h: int, g: int, d_k: int, mask: str | None, q: str = "Q",
               k: str = "K", divisor: int = 1) -> list:
    """Query head h (0-based) over key/value head g: scores (of blocks `q` and `k`, divided
    by √d_k and `divisor`), softmax and its chart, A·V."""
    sfx, qs, ks = f"_H{h + 1}", (h * d_k, (h + 1) * d_k - 1), (g * d_k, (g + 1) * d_k - 1)
    why = "Scores of this head divided by √d_k." if divisor == 1 else \
        f"Scores of this head divided by √d_k and by {divisor}, the layer's index + 1 " \
        f"(GPT-2's scale_attn_by_inverse_layer_idx)."
    scores = scaled_scores(sfx, f"S = Q_{h + 1}·K_{g + 1}ᵀ", q=q, k=k, q_cols=qs, k_cols=ks,
                           explanation=why, divisor=divisor)
    return [*scores, *softmax_steps("SCALED" + sfx, mask, sfx, chart=True),
            Step("HEAD" + sfx, f"head_{h + 1} = A·V_{g + 1}", MatMul("WEIGHTS" + sfx, "V",
                                                                      b_cols=ks),
                 f"Output of head {h + 1}.", col_labels=f"h{h + 1}.")]


def concat_heads(heads: int, d_k: int) -> Step:
    """CONCAT = [head_1 … head_H]: head h fills columns h·d_k … (h+1)·d_k − 1."""
    return Step("CONCAT", "[head_1 … head_H]", Custom(
        "seq_len", heads * d_k,
        each=lambda i, j, env: f"={env[f'HEAD_H{j // d_k + 1}'].cell(i, j % d_k)}",
        per_slice=(d_k, lambda h, env: f"={env[f'HEAD_H{h + 1}'].whole()}")),
        "The head outputs side by side.", row_labels="tokens",
        col_labels=[f"h{h + 1}.{j + 1}" for h in range(heads) for j in range(d_k)])


def concat_and_mix(heads: int, d_k: int, w_o: Input, b_o: Input | None = None) -> list:
    """CONCAT = [head_1 … head_H], the W_O input (and its bias B_O) beside it, and
    O = CONCAT·W_O (+ B_O)."""
    if b_o is None:
        return [concat_heads(heads, d_k), w_o,
                Step("OUTPUT", "O = CONCAT·W_O", MatMul("CONCAT", "W_O"))]
    return [concat_heads(heads, d_k), w_o, b_o,
            Step("OUTPUT", "O = CONCAT·W_O + B_O", MatMul("CONCAT", "W_O", plus=b_o.name))]


class TwoSequenceKind(Kind):
    """A kind over a source (src_len) and a target (tgt_len) sequence, labelled by
    --tokens "SOURCE|TARGET". Not registered itself: it has no name."""

    tokens_help = ('"SOURCE|TARGET" labels, each side comma-separated, e.g. '
                   '"我,爱,AI|I,love,AI" (also sets --src-len and --tgt-len)')

    @classmethod
    def params_from_tokens(cls, tokens):
        """--src-len/--tgt-len implied by "x1,x2|y1"; a malformed list is reported by
        `labels`."""
        sides = ",".join(tokens).split("|")
        if len(sides) != 2:
            return {}
        return {"src_len": len(sides[0].split(",")), "tgt_len": len(sides[1].split(","))}

    @classmethod
    def labels(cls, p, tokens):
        """Source labels then target labels. The CLI splits --tokens on commas, so the two
        sequences are told apart by one "|": "x1,x2,x3|y1,y2"."""
        if tokens is None:
            return [f"x{i + 1}" for i in range(p.src_len)] + \
                [f"y{i + 1}" for i in range(p.tgt_len)]
        joined = ",".join(tokens)
        if joined.count("|") != 1:
            raise UserError(f'--tokens for {cls.name} is "SOURCE|TARGET", each side '
                            f'comma-separated, e.g. "我,爱,AI|I,love,AI"')
        src, tgt = ([t.strip() for t in side.split(",")] for side in joined.split("|"))
        if not all(src) or not all(tgt):
            raise UserError("--tokens has an empty label")
        if len(src) != p.src_len or len(tgt) != p.tgt_len:
            raise UserError(f"--tokens gives {len(src)} source and {len(tgt)} target labels "
                            f"but --src-len is {p.src_len} and --tgt-len is {p.tgt_len}")
        return src + tgt

    @classmethod
    def label_sets(cls, p, labels):
        return {"tokens": labels, "src": labels[:p.src_len], "tgt": labels[p.src_len:]}


def position_label_sets(cls, p, labels):
    """Label sets of a kind whose formulas read 0-based positions from their labels:
    "positions" = 0 … n−1 besides "tokens". In the kind: label_sets =
    classmethod(position_label_sets)."""
    return {"tokens": labels, "positions": list(range(p.seq_len))}


# -- cost tables: the complexity statements, computed -------------------------------------
# every table's lengths: this sheet's n, then 1k, 4k and 32k tokens
COST_LENGTHS = (1024, 4096, 32768)
COST_ROWS = ["sheet", "1k", "4k", "32k"]
# whole numbers below a million as they are, larger ones as 6.87E+10 (columns are narrow)
COST_FORMAT = "[<1000000]0;0.00E+00"
_COST_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Cost:
    """One column of a cost table: the block `name` (4×1, one row per length), its
    equation, and a formula template in which {n} is the row's length, {d_k}, {B}, … a
    cell of COST_SIZES and {COST_…} the same row of an earlier column; `template` may be
    a function of the parameters. `counts` labels the column (what is counted)."""

    name: str
    equation: str
    template: str | Callable[[Any], str]
    explanation: str
    counts: str = "MACs"


def _cost_formula(cost: Cost, i: int, env, sizes: Sequence[str]) -> str:
    """Row i of a cost column: the template with its slots made cell references."""
    template = cost.template(env.params) if callable(cost.template) else cost.template

    def ref(match) -> str:
        slot = match.group(1)
        if slot == "n":
            return env["COST_N"].cell(i, 0)
        if slot.startswith("COST_"):
            return env[slot].cell(i, 0)
        return env["COST_SIZES"].fixed(0, sizes.index(slot))

    return _COST_SLOT.sub(ref, template)


def cost_section(title: str, sizes: Mapping[str, Size], costs: Sequence[Cost]) -> Section:
    """A live cost table: COST_SIZES (the sheet's sizes as numbers; the first is the
    length), COST_N (this sheet's length, then 1k, 4k, 32k) and one column per Cost, each
    a formula of its row's length and the sizes, so editing a size or a length
    recalculates the table."""
    labels, values = list(sizes), list(sizes.values())
    length = labels[0]
    sizes_step = Step(
        "COST_SIZES", "sizes of this sheet",
        Custom(1, len(labels), each=lambda _, j, env: f"={size_of(values[j], env.params)}"),
        "This sheet's sizes, written as numbers: every cost below reads them, so typing "
        "another value shows what it would cost.", row_labels=["size"], col_labels=labels,
        number_format="0")
    lengths = Step(
        "COST_N", f"{length} = sheet, 1k, 4k, 32k",
        Custom(4, 1, each=lambda i, _, env: f"={env['COST_SIZES'].fixed(0, 0)}" if i == 0
               else f"={COST_LENGTHS[i - 1]}"),
        "The lengths the costs are computed at; type another length to see its cost.",
        row_labels=COST_ROWS, col_labels=[length], number_format=COST_FORMAT)
    columns = [Step(c.name, c.equation,
                    Custom(4, 1, each=lambda i, _, env, c=c: _cost_formula(c, i, env, labels)),
                    c.explanation, row_labels=COST_ROWS, col_labels=[c.counts],
                    number_format=COST_FORMAT) for c in costs]
    notes = Table((("multiply-add = one product a·b added into a sum", ""),
                   ("the projections X·W are left out: they grow only linearly in n", "")))
    return section(title, [sizes_step, notes], [lengths, *columns])
