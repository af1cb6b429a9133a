"""Attention's steps in their general form, for the kinds that repeat or vary them (the
plain single-head sheet is written out in sheets/attention.py):

    Q = X·W_Q (+ B_Q)   K = X·W_K (+ B_K)   V = X·W_V (+ B_V)     projections
    S = Q·Kᵀ over column slices (one head)   S/√d_k (/ a divisor)  scaled_scores
    M_ij = 1 if key j ≤ query i else 0                           CAUSAL_MASK
    O = A·V                                                      weighted_values
and the sizes of single-head attention, its inputs and the chart of the weights.
"""

from dataclasses import dataclass, field

from sheets._blocks.labels import positions_from_1
from workbook_builder.sheet import Dim, Input, Map, MatMul, Step
from workbook_builder.sheet.declare import Chart, Series


class ValueWidth:
    """Mixed into Params that have d_k and an optional d_v: W_V's width defaults to d_k."""

    @property
    def value_width(self) -> int:
        return self.d_k if self.d_v is None else self.d_v


D_V = Dim("d_v", lambda p: p.value_width)


@dataclass(frozen=True)
class AttentionParams(ValueWidth):
    """The sizes of single-head attention; `flash` and `linear` add theirs to them."""

    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width (columns of X)"})
    d_k: int = field(default=4, metadata={"help": "query/key width (columns of W_Q, W_K)"})
    d_v: int | None = field(default=None, metadata={
        "help": "value width (columns of W_V); default d_k"})
    causal: bool = field(default=False, metadata={
        "help": "mask future tokens (query i sees keys j ≤ i)"})
    bias: bool = field(default=False, metadata={
        "help": "add bias rows B_Q, B_K, B_V to the projections (nn.Linear's bias)"})


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


PROJECTED = (("Q", "Queries: what each token is looking for."),
             ("K", "Keys: what each token offers to be found by."),
             ("V", "Values: the content each token passes on."))


def projections(source: str = "X", q_source: str | None = None,
                bias: bool = False) -> list[Step]:
    """n = src·W_n (+ B_n) for n = Q, K, V: queries from `q_source` (cross-attention: the
    target), keys and values from `source`; with `bias` + B_n (nn.Linear with
    bias=True)."""
    made = []
    for n, explanation in PROJECTED:
        src, plus = (q_source or source) if n == "Q" else source, f"B_{n}" if bias else None
        made.append(Step(n, f"{n} = {src}·W_{n}" + (f" + {plus}" if plus else ""),
                         MatMul(src, f"W_{n}", plus=plus), explanation))
    return made


QUERY_KEY = "query\\key"  # the corner of a square block: rows are queries, columns keys
SCALED_WHY = "Dividing by √d_k keeps the scores from growing with the width."


def scaled_scores(suffix: str = "", equation: str = "S = Q·Kᵀ", q: str = "Q", k: str = "K",
                  q_cols=None, k_cols=None, explanation: str = SCALED_WHY,
                  divisor: int = 1, prefix: str = "") -> list[Step]:
    """SCORES = Q·Kᵀ over column slices (one head: q_cols, k_cols) and SCALED = S/√d_k,
    with d_k written into the formula as the tutorial writes it; a `divisor` other than 1
    divides once more (GPT-2's scale_attn_by_inverse_layer_idx: the layer's index + 1).
    Names are prefix + SCORES/SCALED + suffix."""
    scores, scaled = f"{prefix}SCORES{suffix}", f"{prefix}SCALED{suffix}"
    extra, extra_text = ("", "") if divisor == 1 else (f"/{divisor}", f" / {divisor}")
    return [Step(scores, equation, MatMul(q, k, q_cols, k_cols, transpose="b"),
                 "Dot product of query i with key j.", corner=QUERY_KEY),
            Step(scaled, "S / √d_k" + extra_text + "   (d_k = {d_k})",
                 Map("={S}/SQRT({d_k})" + extra, S=scores), explanation, corner=QUERY_KEY)]


def causal_mask(name: str = "MASK", size: str = "seq_len") -> Step:
    """M_ij = 1 where key j ≤ query i, else 0 (PyTorch's `is_causal`, top-left aligned),
    over positions 1 … n, the labels the formula compares. Masked entries are left out of
    the row max and sum of a softmax (`softmax_steps(mask=…)`), so no −∞ is needed."""
    return Step(name, "1 if key j ≤ query i else 0",
                Map("=IF({COL_LABEL}<={ROW_LABEL},1,0)", rows=size, cols=size),
                "Causal mask: a token may attend only to itself and earlier tokens. Masked "
                "entries are left out of the row max and sum below, so no −∞ is needed.",
                row_labels=positions_from_1, col_labels=positions_from_1, corner=QUERY_KEY)


CAUSAL_MASK = causal_mask()


def weights_chart(weights: str = "WEIGHTS") -> Chart:
    """Each query's row of `weights` as a group of bars over the keys, read live from the
    block (so an edited input redraws it); left out past the layout's chart limit."""
    return Chart(f"{weights}: each query's weights over the keys",
                 (Series(weights, along="row"),), kind="bar", x_title="keys j",
                 y_title="weight A_ij", legend_title="query i", y_range=(0, 1), cols=8,
                 rows=12)


def weighted_values(explanation: str = "Each output row mixes the value rows by that "
                                       "row's weights.", name: str = "OUTPUT",
                    values: str = "V", equation: str = "O = A·V",
                    weights: str = "WEIGHTS") -> Step:
    """O = A·V: each row the value rows weighted by that row's attention weights."""
    return Step(name, equation, MatMul(weights, values), explanation)
