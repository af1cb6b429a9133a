"""Heads as contiguous column slices: H query heads over G key/value heads (GQA; G = 1 is
multi-query), each d_k = d_model/H wide, query head h reading key/value head
g = ⌊h·G/H⌋ (PyTorch's `enable_gqa`):

    head_h = softmax(Q_h·K_gᵀ/√d_k (/ divisor), causal mask)·V_g      head_steps
    CONCAT = [head_1 … head_H]                                        concat_heads
    O = CONCAT·W_O (+ B_O)                                            concat_and_mix
"""

from dataclasses import dataclass, field

from sheets._blocks.attention import bias_of, scaled_scores
from sheets._blocks.softmax import softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import Custom, Input, Kind, MatMul, Step
from workbook_builder.sheet.declare import Labels, Size


@dataclass(frozen=True)
class GroupedHeads:
    """The sizes of H query heads over G key/value heads, each d_k = d_model/H wide: a base
    of the Params of kinds with grouped heads."""

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


def head_labels(prefix: str, count_of, width_of):
    """Labels of heads side by side: q1.1, q1.2, …, q2.1, …"""
    return lambda p: [f"{prefix}{h + 1}.{j + 1}" for h in range(count_of(p))
                      for j in range(width_of(p))]


def _heads(p):
    return p.heads


def _groups(p):
    return p.groups


def _d_k(p):
    return p.d_k


# the projection weights with the heads side by side (X·W_Q is n × H·d_k, X·W_K and X·W_V
# n × G·d_k), W_O back to d_model, and their bias rows (present with the parameter `bias`)
W_Q = Input("W_Q", "d_model", lambda p: p.heads * p.d_k, "query weights, heads side by side",
            "d", head_labels("q", _heads, _d_k))
W_K = Input("W_K", "d_model", lambda p: p.groups * p.d_k, "key weights", "d",
            head_labels("k", _groups, _d_k))
W_V = Input("W_V", "d_model", lambda p: p.groups * p.d_k, "value weights", "d",
            head_labels("v", _groups, _d_k))
W_O = Input("W_O", lambda p: p.heads * p.d_k, "d_model", "output weights",
            head_labels("h", _heads, _d_k), "d")
B_Q, B_K, B_V = (bias_of(W_Q, "query bias"), bias_of(W_K, "key bias"),
                 bias_of(W_V, "value bias"))
B_O = bias_of(W_O, "output bias")


def head_steps(h: int, g: int, d_k: int, mask: str | None, q: str = "Q", k: str = "K",
               divisor: int = 1, v: str = "V", prefix: str = "") -> list:
    """Query head h (0-based) over key/value head g: scores of columns h·d_k … of `q`
    against columns g·d_k … of `k` (divided by √d_k and `divisor`), their softmax (causal
    with `mask`) and its chart, HEAD = A·V over columns g·d_k … of `v`. Names are prefix +
    SCORES, SCALED, ROW_MAX, EXP, ROW_SUM, WEIGHTS, HEAD + _H{h+1} (a decoder layer's
    cross-attention: prefix "CROSS_")."""
    sfx, qs, ks = f"_H{h + 1}", (h * d_k, (h + 1) * d_k - 1), (g * d_k, (g + 1) * d_k - 1)
    why = "Scores of this head divided by √d_k." if divisor == 1 else \
        f"Scores of this head divided by √d_k and by {divisor}, the layer's index + 1 " \
        f"(GPT-2's scale_attn_by_inverse_layer_idx)."
    scores = scaled_scores(sfx, f"S = Q_{h + 1}·K_{g + 1}ᵀ", q=q, k=k, q_cols=qs, k_cols=ks,
                           explanation=why, divisor=divisor, prefix=prefix)
    weights = f"{prefix}WEIGHTS{sfx}"
    return [*scores, *softmax_steps(scores[-1].name, mask, sfx, chart=True, prefix=prefix),
            Step(f"{prefix}HEAD{sfx}", f"head_{h + 1} = A·V_{g + 1}",
                 MatMul(weights, v, b_cols=ks), f"Output of head {h + 1}.",
                 col_labels=f"h{h + 1}.")]


def concat_heads(heads: int, d_k: int, prefix: str = "", rows: Size = "seq_len",
                 row_labels: Labels = "tokens") -> Step:
    """CONCAT = [head_1 … head_H]: head h fills columns h·d_k … (h+1)·d_k − 1 (names
    prefix + CONCAT and prefix + HEAD_Hh), `rows` rows labelled `row_labels`."""
    def head(h: int) -> str:
        return f"{prefix}HEAD_H{h}"

    return Step(f"{prefix}CONCAT", "[head_1 … head_H]", Custom(
        rows, heads * d_k,
        each=lambda i, j, env: f"={env[head(j // d_k + 1)].cell(i, j % d_k)}",
        per_slice=(d_k, lambda h, env: f"={env[head(h + 1)].whole()}")),
        "The head outputs side by side.", row_labels=row_labels,
        col_labels=[f"h{h + 1}.{j + 1}" for h in range(heads) for j in range(d_k)])


def concat_and_mix(heads: int, d_k: int, w_o: Input, b_o: Input | None = None) -> list:
    """CONCAT = [head_1 … head_H], the W_O input (and its bias B_O) beside it, and
    O = CONCAT·W_O (+ B_O)."""
    if b_o is None:
        return [concat_heads(heads, d_k), w_o,
                Step("OUTPUT", "O = CONCAT·W_O", MatMul("CONCAT", "W_O"))]
    return [concat_heads(heads, d_k), w_o, b_o,
            Step("OUTPUT", "O = CONCAT·W_O + B_O", MatMul("CONCAT", "W_O", plus=b_o.name))]
