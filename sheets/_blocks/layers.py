"""Whole layers, each a function of its parameters and its weights, written for a layer
that reads a block named X; `scoped_sections` makes copies of one for a stack (names
suffixed _L1, _L2, …, X read from the block below).

    residual:      A + B
    encoder layer (nn.TransformerEncoderLayer, dropout 0), heads as column slices:
      MHA(h) = [head_1 … head_H]·W_O + B_O,  head_i = softmax(Q_i·K_iᵀ/√d_k)·V_i,
               Q = h·W_Q + B_Q, K = h·W_K + B_K, V = h·W_V + B_V
      FFN(h) = act(h·W_1 + B_1)·W_2 + B_2
      post-LN: RESID_1 = X + MHA(X)   LN1_OUT = LN1(RESID_1)
               RESID_2 = LN1_OUT + FFN(LN1_OUT)   OUTPUT = LN2(RESID_2)
      pre-LN:  LN1_OUT = LN1(X)   RESID_1 = X + MHA(LN1_OUT)
               LN2_OUT = LN2(RESID_1)   OUTPUT = RESID_1 + FFN(LN2_OUT)
    GPT-2 block (transformers' GPT2Block, eval):
      LN1_OUT = LN1(X)   Q, K, V = LN1_OUT·W + B   causal heads (÷ the layer's index + 1
      with scale_attn_by_inverse_layer_idx)   RESID_1 = X + ATTN
      LN2_OUT = LN2(RESID_1)   OUTPUT = RESID_1 + GELU(LN2_OUT·W_1 + B_1)·W_2 + B_2
"""

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sheets._blocks.attention import CAUSAL_MASK
from sheets._blocks.ffn import GELU_FORMS, feed_forward
from sheets._blocks.heads import concat_heads, head_labels, head_steps
from sheets._blocks.norms import layer_norm, layer_norm_inputs, layer_norm_section
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    Dim,
    Input,
    Kind,
    Map,
    MatMul,
    Rows,
    Step,
    section,
)
from workbook_builder.sheet.declare import Chart, Env, Formula, Labels, Section, Size


def residual(name: str, a: str, b: str, explanation: str = "") -> Step:
    """A + B, elementwise: a residual connection."""
    return Step(name, f"{a} + {b}", Map("={A}+{B}", A=a, B=b), explanation)


# -- a stack of layers ---------------------------------------------------------------------
class _Scope(Mapping):
    """Names as a block of layer `sfx` sees them: its own blocks by their plain names
    (W_Q means W_Q_L2), `renames` for what it reads from outside (X), the rest as they are."""

    def __init__(self, base: Mapping, sfx: str, renames: Mapping[str, str]):
        self.base, self.sfx, self.renames = base, sfx, renames

    def __getitem__(self, name: str):
        if name in self.renames:
            return self.base[self.renames[name]]
        return self.base[name + self.sfx] if name + self.sfx in self.base else self.base[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)


@dataclass(frozen=True)
class Scoped(Formula):
    """`inner` written for one layer of a stack: its block names resolved in that layer."""

    inner: Formula
    sfx: str
    renames: tuple[tuple[str, str], ...] = ()
    sizes: tuple[tuple[str, str], ...] = ()  # size -> the parameter it is in this copy

    def _env(self, env: Env) -> Env:
        renames = dict(self.renames)
        params = env.params
        if self.sizes:  # a second text's layers: seq_len is its own length
            params = dataclasses.replace(params, **{size: getattr(params, theirs)
                                                    for size, theirs in self.sizes})
        return Env(_Scope(env.blocks, self.sfx, renames), _Scope(env.labels, self.sfx, renames),
                   params, env.me, env.vectors)

    # a per-row formula stays a column the later formulas broadcast (declare.vector_kind)
    @property
    def rows(self):
        return getattr(self.inner, "rows", None)

    @property
    def cols(self):
        return BROADCAST if isinstance(self.inner, Rows) else getattr(self.inner, "cols", None)

    def shape(self, env):
        return self.inner.shape(self._env(env))

    def check(self, env):
        self.inner.check(self._env(env))

    def describe(self):
        return self.inner.describe()

    def labels(self, env):
        return self.inner.labels(self._env(env))

    def cell(self, i, j, env):
        return self.inner.cell(i, j, self._env(env))

    def arrays(self, env):
        return self.inner.arrays(self._env(env))


def scoped_sections(sections: Sequence[Section], sfx: str, title: str,
                    sizes: Mapping[str, str] | None = None,
                    labels: Mapping[str, str] | None = None, **reads: str) -> list[Section]:
    """A layer's sections as layer `sfx` of a stack (e.g. "_L2"): step names take the
    suffix, formulas read the layer's own blocks (its inputs, declared with the same
    suffix) and, for each name=block of `reads`, that block where the layer reads `name`
    (X="OUTPUT_L1": the layer below); section titles start with `title`. `sizes` maps a
    size to the parameter it is in this copy and `labels` a label set to the one its steps
    take (a second text: seq_len → seq_len2, tokens → tokens2)."""
    renames, resized = tuple(reads.items()), tuple((sizes or {}).items())
    relabel = dict(labels or {})

    def step(s: Step) -> Step:
        # a mask read from outside the layer is shaded by the block the layer reads
        masked_by = reads.get(s.masked_by, s.masked_by) if s.masked_by else None
        rows = relabel.get(s.row_labels, s.row_labels) if isinstance(s.row_labels, str) \
            else s.row_labels
        return dataclasses.replace(s, name=s.name + sfx, masked_by=masked_by, row_labels=rows,
                                   formula=Scoped(s.formula, sfx, renames, resized))

    def chart(c: Chart) -> Chart:
        series = tuple(dataclasses.replace(s, block=s.block + sfx) for s in c.series)
        return dataclasses.replace(c, title=c.title.replace(c.series[0].block,
                                                            c.series[0].block + sfx),
                                   series=series)

    def item_of(item):
        return step(item) if isinstance(item, Step) else \
            chart(item) if isinstance(item, Chart) else item

    return [dataclasses.replace(
        sec, title=f"{title} — {sec.title}",
        bands=tuple(tuple(item_of(item) for item in band) for band in sec.bands))
        for sec in sections]


def gamma_near_one(shape, rng) -> np.ndarray:
    """LayerNorm's and RMSNorm's scales drawn near 1, as after training."""
    return np.round(rng.uniform(0.5, 1.5, size=shape), 2)


class LayerNormKind(Kind):
    """A kind whose LayerNorm scales (inputs named …_GAMMA…) are drawn near 1, as after
    training. Not registered itself: it has no name."""

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if "_GAMMA" in name:
            return gamma_near_one(shape, rng)
        return super().random_input(name, shape, params, rng)


HEAD_DIMS = head_labels("h", lambda p: p.heads, lambda p: p.d_k)  # h1.1, h1.2, h2.1, …


def _plus(bias: bool, name: str) -> str | None:
    return name if bias else None


def activation_name(activation: str, gelu: str = "tanh") -> str:
    """The FFN's activation as a section title names it."""
    return {"gelu": f"GELU ({gelu} form)", "silu": "SiLU"}.get(activation, "ReLU")


# -- an encoder layer ----------------------------------------------------------------------
def encoder_layer_inputs(sfx: str = "", when=None, bias: bool = True) -> dict[str, Input]:
    """Every weight of one encoder layer (d_model × d_model projections, heads side by
    side; the FFN's d_model × d_ff and back; γ, β of LN1 and LN2), named with `sfx`, by
    plain name; with `bias` the bias rows too."""
    made = [Input(f"W_{n}{sfx}", "d_model", "d_model", f"{n.lower()} weights", "d",
                  HEAD_DIMS, when=when) for n in "QKV"]
    if bias:
        made += [Input(f"B_{n}{sfx}", 1, "d_model", f"{n.lower()} bias", ["b"], HEAD_DIMS,
                       when=when) for n in "QKV"]
    made.append(Input(f"W_O{sfx}", "d_model", "d_model", "output weights", HEAD_DIMS, "d",
                      when=when))
    if bias:
        made.append(Input(f"B_O{sfx}", 1, "d_model", "output bias", ["b"], "d", when=when))
    made.append(Input(f"W_1{sfx}", "d_model", "d_ff", "first FFN weights", "d", "f",
                      when=when))
    if bias:
        made.append(Input(f"B_1{sfx}", 1, "d_ff", "first FFN bias", ["b"], "f", when=when))
    made.append(Input(f"W_2{sfx}", "d_ff", "d_model", "second FFN weights", "f", "d",
                      when=when))
    if bias:
        made.append(Input(f"B_2{sfx}", 1, "d_model", "second FFN bias", ["b"], "d",
                          when=when))
    made += [*layer_norm_inputs("LN1", sfx, when), *layer_norm_inputs("LN2", sfx, when)]
    return {item.name.removesuffix(sfx) if sfx else item.name: item for item in made}


def encoder_layer_sections(p, weights: Mapping[str, Input], pre_ln: bool = False,
                           activation: str = "relu", gelu: str = "tanh", eps: float = 1e-5,
                           bias: bool = True, leading: Sequence = (),
                           rows: Size = "seq_len", row_labels: Labels = "tokens"
                           ) -> list[Section]:
    """One encoder layer on the block X (p has heads, d_k, d_model, d_ff), post-LN
    (PyTorch's default) or `pre_ln`, the FFN's `activation` relu, gelu (`gelu` its tanh
    or exact form) or silu, LayerNorm's `eps`, with or without `bias` rows; `leading` are
    bands placed first with the projection weights (the encoder-block kind: X itself); X
    has `rows` rows labelled `row_labels`. Stacked with `scoped_sections`."""
    w = weights
    attn_in, ffn_in = ("LN1_OUT", "LN2_OUT") if pre_ln else ("X", "LN1_OUT")
    order = ("pre-LN: X + MHA(LN1(X)), then + FFN(LN2(·))" if pre_ln else
             "post-LN: LN1(X + MHA(X)), then LN2(· + FFN(·))")
    act_name = activation_name(activation, gelu)
    # Q = h·W_Q + B_Q, likewise K and V (h = X, or LN1_OUT pre-LN)
    qkv = [Step(n, f"{n} = h·W_{n}" + (f" + B_{n}" if bias else ""),
                MatMul(attn_in, f"W_{n}", plus=_plus(bias, f"B_{n}"))) for n in "QKV"]
    # head h: softmax(Q_h·K_hᵀ/√d_k)·V_h over columns h·d_k … (h+1)·d_k − 1
    heads = [section(f"Head {h + 1} — columns h{h + 1}.* of Q, K, V",
                     head_steps(h, h, p.d_k, None)) for h in range(p.heads)]
    if pre_ln:  # OUTPUT = RESID_1 + FFN(LN2(RESID_1))
        ending = [section("Step 5 — second residual: the layer's output",
                          residual("OUTPUT", "RESID_1", "FFN_OUT",
                                   "Pre-LN leaves the residual stream un-normalised."))]
    else:  # OUTPUT = LN2(LN1_OUT + FFN(LN1_OUT))
        ending = [section("Step 5 — second residual, then LayerNorm: the layer's output",
                          residual("RESID_2", "LN1_OUT", "FFN_OUT")),
                  layer_norm_section("LN2", "RESID_2", "OUTPUT", eps, w["LN2_GAMMA"],
                                     w["LN2_BETA"])]
    biases = [[w["B_Q"], w["B_K"], w["B_V"]]] if bias else []
    return [
        section(f"Step 1 — inputs ({order}; {{heads}} heads of d_k = {{d_k}})", *leading,
                [w["W_Q"], w["W_K"], w["W_V"]], *biases),
        *([layer_norm_section("LN1", "X", "LN1_OUT", eps, w["LN1_GAMMA"], w["LN1_BETA"])]
          if pre_ln else []),
        section(f"Step 2 — multi-head self-attention on {attn_in}", qkv),
        *heads,
        # ATTN = CONCAT·W_O + B_O;  RESID_1 = X + ATTN
        section("Step 3 — concatenate the heads, project with W_O, add the residual",
                [concat_heads(p.heads, p.d_k, rows=rows, row_labels=row_labels), w["W_O"],
                 *([w["B_O"]] if bias else [])],
                [Step("ATTN", "CONCAT·W_O" + (" + B_O" if bias else ""),
                      MatMul("CONCAT", "W_O", plus=_plus(bias, "B_O"))),
                 residual("RESID_1", "X", "ATTN",
                          "The residual connection: the layer adds to its input.")]),
        layer_norm_section("LN2", "RESID_1", "LN2_OUT", eps, w["LN2_GAMMA"], w["LN2_BETA"])
        if pre_ln else
        layer_norm_section("LN1", "RESID_1", "LN1_OUT", eps, w["LN1_GAMMA"], w["LN1_BETA"]),
        # FFN(h) = act(h·W_1 + B_1)·W_2 + B_2
        section(f"Step 4 — feed-forward network, {act_name}, applied to each row",
                [w[n] for n in ("W_1", "B_1", "W_2", "B_2") if bias or n.startswith("W")],
                feed_forward(ffn_in, kind=activation, form=gelu, bias=bias)),
        *ending,
    ]


# -- an encoder-decoder Transformer's decoder layer -----------------------------------------
def decoder_layer_inputs(sfx: str = "", when=None) -> dict[str, Input]:
    """Every weight of one nn.TransformerDecoderLayer, named with `sfx`, by plain name: the
    self-attention's W_Q … B_O, the cross-attention's CROSS_W_Q … CROSS_B_O (queries from
    the decoder, keys and values from the encoder's output), the FFN's W_1 … B_2, and γ, β
    of LN1, LN2, LN3."""
    made = encoder_layer_inputs(sfx, when)
    cross = {}
    for n in "QKVO":  # W_O's rows are the heads side by side, its columns d
        rows, cols = (HEAD_DIMS, "d") if n == "O" else ("d", HEAD_DIMS)
        cross[f"CROSS_W_{n}"] = Input(f"CROSS_W_{n}{sfx}", "d_model", "d_model",
                                      f"cross-attention {n.lower()} weights", rows, cols,
                                      when=when)
        cross[f"CROSS_B_{n}"] = Input(f"CROSS_B_{n}{sfx}", 1, "d_model",
                                      f"cross-attention {n.lower()} bias", ["b"], cols,
                                      when=when)
    gamma, beta = layer_norm_inputs("LN3", sfx, when)
    return {**made, **cross, "LN3_GAMMA": gamma, "LN3_BETA": beta}


def decoder_layer_sections(p, rows: Size, row_labels: Labels, pre_ln: bool = False,
                           activation: str = "relu", gelu: str = "exact",
                           eps: float = 1e-5) -> list[Section]:
    """One nn.TransformerDecoderLayer (dropout 0) on the block X of `rows` target rows,
    steps only: it reads its weights by their plain names (decoder_layer_inputs), the
    causal MASK, and CROSS_K, CROSS_V, the encoder output's keys and values (made once
    for every step that reads them). Heads are column slices of width d_k.
      post-LN: LN1_OUT = LN1(X + SA(X))   LN2_OUT = LN2(LN1_OUT + CA(LN1_OUT))
               OUTPUT = LN3(LN2_OUT + FFN(LN2_OUT))
      pre-LN:  RESID_1 = X + SA(LN1(X))   RESID_2 = RESID_1 + CA(LN2(RESID_1))
               OUTPUT = RESID_2 + FFN(LN3(RESID_2))"""
    sa_in, ca_in, ffn_in = ("LN1_OUT", "LN2_OUT", "LN3_OUT") if pre_ln else \
        ("X", "LN1_OUT", "LN2_OUT")
    order = ("pre-LN: X + SA(LN1(X)), + CA(LN2(·)), + FFN(LN3(·))" if pre_ln else
             "post-LN: LN1(X + SA(X)), LN2(· + CA(·)), LN3(· + FFN(·))")
    # Q = h·W_Q + B_Q, likewise K and V, all from the target rows
    qkv = [Step(n, f"{n} = h·W_{n} + B_{n}", MatMul(sa_in, f"W_{n}", plus=f"B_{n}"))
           for n in "QKV"]
    self_heads = [section(f"Masked self-attention, head {h + 1} — columns h{h + 1}.* of Q, "
                          f"K, V", head_steps(h, h, p.d_k, "MASK")) for h in range(p.heads)]
    # CROSS_Q = h·CROSS_W_Q + CROSS_B_Q: queries from the decoder, keys from the encoder
    cross_q = Step("CROSS_Q", "CROSS_Q = h·CROSS_W_Q + CROSS_B_Q",
                   MatMul(ca_in, "CROSS_W_Q", plus="CROSS_B_Q"),
                   "Cross-attention queries: one per target row.")
    cross_heads = [section(f"Cross-attention, head {h + 1} — target queries over the "
                           f"source keys", head_steps(h, h, p.d_k, None, q="CROSS_Q",
                                                      k="CROSS_K", v="CROSS_V",
                                                      prefix="CROSS_"))
                   for h in range(p.heads)]

    def norm(ln: str, src: str, out: str) -> Section:
        return section(f"{ln} — LayerNorm over each row: mean, centre, variance, scale",
                       layer_norm(ln, src, out, eps))

    sa_resid = residual("RESID_1", "X", "ATTN", "The residual connection: the layer adds "
                                                "to its input.")
    ca_resid = residual("RESID_2", "RESID_1" if pre_ln else "LN1_OUT", "CROSS_ATTN",
                        "The second residual: the cross-attention's result added.")
    ffn_resid = (residual("OUTPUT", "RESID_2", "FFN_OUT", "Pre-LN leaves the residual "
                                                          "stream un-normalised.")
                 if pre_ln else residual("RESID_3", "LN2_OUT", "FFN_OUT"))
    return [
        *([norm("LN1", "X", "LN1_OUT")] if pre_ln else []),
        section(f"Masked self-attention on {sa_in} ({order}; {{heads}} heads of "
                f"d_k = {{d_k}})", qkv),
        *self_heads,
        # ATTN = CONCAT·W_O + B_O;  RESID_1 = X + ATTN
        section("Concatenate the self-attention heads, project with W_O, add the residual",
                [concat_heads(p.heads, p.d_k, rows=rows, row_labels=row_labels),
                 Step("ATTN", "CONCAT·W_O + B_O", MatMul("CONCAT", "W_O", plus="B_O")),
                 sa_resid]),
        norm("LN2", "RESID_1", "LN2_OUT") if pre_ln else norm("LN1", "RESID_1", "LN1_OUT"),
        section(f"Cross-attention on {ca_in}: queries from the target, keys and values "
                f"from the encoder's output", cross_q),
        *cross_heads,
        # CROSS_ATTN = CROSS_CONCAT·CROSS_W_O + CROSS_B_O
        section("Concatenate the cross-attention heads, project with CROSS_W_O, add the "
                "residual",
                [concat_heads(p.heads, p.d_k, "CROSS_", rows=rows, row_labels=row_labels),
                 Step("CROSS_ATTN", "CROSS_CONCAT·CROSS_W_O + CROSS_B_O",
                      MatMul("CROSS_CONCAT", "CROSS_W_O", plus="CROSS_B_O")),
                 ca_resid]),
        norm("LN3", "RESID_2", "LN3_OUT") if pre_ln else norm("LN2", "RESID_2", "LN2_OUT"),
        # FFN(h) = act(h·W_1 + B_1)·W_2 + B_2
        section(f"Feed-forward network, {activation_name(activation, gelu)}, applied to "
                f"each row", [*feed_forward(ffn_in, kind=activation, form=gelu), ffn_resid]),
        *([] if pre_ln else [norm("LN3", "RESID_3", "OUTPUT")]),
    ]


# -- a GPT-2 block -------------------------------------------------------------------------
@dataclass(frozen=True)
class Gpt2BlockParams:
    """The sizes of one GPT-2 block (decoder-block's parameters; gpt's with its own)."""

    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width d; d_k = d/heads"})
    heads: int = field(default=2, metadata={"help": "attention heads H (must divide d_model)"})
    d_ff: int | None = field(default=None, metadata={
        "help": "MLP width (columns of W_1); default 4·d_model, as GPT-2"})
    gelu: str = field(default="tanh", metadata={
        "choices": list(GELU_FORMS),
        "help": "GELU form: tanh (GPT-2's gelu_new, the default) or exact, 0.5·x·(1 + erf(x/√2))"})
    ln_eps: float = field(default=1e-5, metadata={"help": "LayerNorm's eps (GPT-2: 1e-05)"})
    scale_by_layer: bool = field(default=False, metadata={
        "help": "divide the scores also by the layer's index + 1 (GPT-2's "
                "scale_attn_by_inverse_layer_idx)"})
    layer_number: int = field(default=1, metadata={
        "help": "this block's place in its model, from 1 (its layer index + 1): with "
                "--scale-by-layer the scores are divided by it"})

    def divisor(self, layer_number: int) -> int:
        """What the scores of block `layer_number` (from 1) are divided by besides √d_k."""
        return layer_number if self.scale_by_layer else 1

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    @property
    def ffn_width(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff


D_FF = Dim("d_ff", lambda p: p.ffn_width)


def check_gpt2_sizes(p) -> None:
    """H divides d_model, the GELU form is known, eps is small and positive."""
    if p.d_model % p.heads:
        raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
    if p.gelu not in GELU_FORMS:
        raise UserError(f"--gelu must be tanh or exact, got {p.gelu!r}")
    if not 0 < p.ln_eps < 1:
        raise UserError(f"--ln-eps must be a small positive number, got {p.ln_eps}")


def gpt2_block_inputs(sfx: str = "", when=None) -> dict[str, Input]:
    """Every weight of one GPT-2 block, named with `sfx` (gpt: _L1, _L2, …), by its plain
    name: LN1's γ, β, W_Q … B_V (the thirds of c_attn), W_O, B_O (c_proj), LN2's γ, β, the
    MLP's W_1, B_1 (c_fc) and W_2, B_2 (mlp.c_proj)."""
    made = list(layer_norm_inputs("LN1", sfx, when))
    for n in "QKV":
        made += [Input(f"W_{n}{sfx}", "d_model", "d_model", f"{n.lower()} weights (c_attn)",
                       "d", HEAD_DIMS, when=when),
                 Input(f"B_{n}{sfx}", 1, "d_model", f"{n.lower()} bias (c_attn)", ["b"],
                       HEAD_DIMS, when=when)]
    made += [Input(f"W_O{sfx}", "d_model", "d_model", "output weights (c_proj)", HEAD_DIMS,
                   "d", when=when),
             Input(f"B_O{sfx}", 1, "d_model", "output bias (c_proj)", ["b"], "d", when=when),
             *layer_norm_inputs("LN2", sfx, when),
             Input(f"W_1{sfx}", "d_model", D_FF, "MLP weights (c_fc)", "d", "f", when=when),
             Input(f"B_1{sfx}", 1, D_FF, "MLP bias (c_fc)", ["b"], "f", when=when),
             Input(f"W_2{sfx}", D_FF, "d_model", "MLP output weights (mlp.c_proj)", "f", "d",
                   when=when),
             Input(f"B_2{sfx}", 1, "d_model", "MLP output bias (mlp.c_proj)", ["b"], "d",
                   when=when)]
    return {item.name.removesuffix(sfx) if sfx else item.name: item for item in made}


def gpt2_block_sections(p, weights: Mapping[str, Input], mask: bool = True,
                        divisor: int = 1) -> list[Section]:
    """GPT-2's block after its input X: LN1, causal attention (scores divided by √d_k and
    `divisor`), residual, LN2, MLP, residual. `mask` places the causal mask here (a stack
    places it once, before)."""
    eps, w = p.ln_eps, weights
    # Q = LN1_OUT·W_Q + B_Q, likewise K and V
    qkv = [Step(n, f"{n} = LN1_OUT·W_{n} + B_{n}", MatMul("LN1_OUT", f"W_{n}", plus=f"B_{n}"))
           for n in "QKV"]
    # head h: softmax(mask(Q_h·K_hᵀ/√d_k))·V_h over columns h·d_k … (h+1)·d_k − 1
    heads = [section(f"Head {h + 1} — columns h{h + 1}.* of Q, K, V",
                     head_steps(h, h, p.d_k, "MASK", divisor=divisor))
             for h in range(p.heads)]
    return [
        layer_norm_section("LN1", "X", "LN1_OUT", eps, w["LN1_GAMMA"], w["LN1_BETA"]),
        section("Step 2 — causal self-attention on LN1_OUT; W_Q, W_K, W_V are the thirds of "
                "GPT-2's fused c_attn", [w["W_Q"], w["W_K"], w["W_V"]],
                [w["B_Q"], w["B_K"], w["B_V"]], qkv + ([CAUSAL_MASK] if mask else [])),
        *heads,
        # ATTN = CONCAT·W_O + B_O;  RESID_1 = X + ATTN
        section("Step 3 — concatenate the heads, project with W_O, add the residual",
                [concat_heads(p.heads, p.d_k), w["W_O"], w["B_O"]],
                [Step("ATTN", "CONCAT·W_O + B_O", MatMul("CONCAT", "W_O", plus="B_O")),
                 residual("RESID_1", "X", "ATTN",
                          "The residual connection: the block adds to its input.")]),
        layer_norm_section("LN2", "RESID_1", "LN2_OUT", eps, w["LN2_GAMMA"], w["LN2_BETA"]),
        # FFN_OUT = GELU(LN2_OUT·W_1 + B_1)·W_2 + B_2
        section(f"Step 4 — MLP, GELU ({p.gelu} form), applied to each row",
                [w["W_1"], w["B_1"], w["W_2"], w["B_2"]],
                feed_forward("LN2_OUT", "LN2_OUT", "GELU", "gelu", p.gelu)),
        # OUTPUT = RESID_1 + FFN_OUT
        section("Step 5 — second residual: the block's output",
                residual("OUTPUT", "RESID_1", "FFN_OUT",
                         "GPT-2 normalises before each sub-layer and leaves the residual "
                         "stream itself un-normalised.")),
    ]
