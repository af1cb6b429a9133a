"""Kind `decoder-block`: one GPT-2 block (transformers' `GPT2Block`, eval), every step a
formula, weights in `X @ W` orientation (GPT-2's Conv1D stores them so already).

    LN1_OUT = LN1(X)                         LN(r) = (r − μ)/√(σ² + eps)·γ + β per row
    Q = LN1_OUT·W_Q + B_Q, likewise K and V  (the thirds of GPT-2's fused c_attn)
    head_h = softmax(mask(Q_h·K_hᵀ/√d_k))·V_h, query i sees keys j ≤ i
                                             (--scale-by-layer: the scores / --layer-number too)
    ATTN = [head_1 … head_H]·W_O + B_O       RESID_1 = X + ATTN
    LN2_OUT = LN2(RESID_1)                   FFN_OUT = GELU(LN2_OUT·W_1 + B_1)·W_2 + B_2
    OUTPUT = RESID_1 + FFN_OUT               GELU: tanh form (GPT-2's gelu_new) or exact

The block's sections are written once, for a suffix: `gpt` stacks them as blocks _L1, _L2, …
whose formulas read their own layer's blocks through `Scoped`.
"""

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from reference.decoder_block import decoder_block_ref
from sheets._bands import CAUSAL_MASK, X, concat_heads, head_labels, head_steps
from sheets.encoder_block import (
    GELU_FORMS,
    activation,
    layer_norm,
    residual,
)
from workbook_builder.errors import UserError
from workbook_builder.sheet import BROADCAST, Dim, Input, Kind, MatMul, Rows, Step, section
from workbook_builder.sheet.declare import Chart, Env, Formula, Section


@dataclass(frozen=True)
class DecoderBlockParams:
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
HEAD_DIMS = head_labels("h", lambda p: p.heads, lambda p: p.d_k)  # h1.1, h1.2, h2.1, …


def block_inputs(sfx: str = "", when=None) -> dict[str, Input]:
    """Every weight of one block, named with `sfx` (gpt: _L1, _L2, …), by its plain name."""
    made = [Input(f"LN1_GAMMA{sfx}", BROADCAST, "d_model", "γ (scale)", ["γ"], "d", when=when),
            Input(f"LN1_BETA{sfx}", BROADCAST, "d_model", "β (shift)", ["β"], "d", when=when)]
    for n in "QKV":
        made += [Input(f"W_{n}{sfx}", "d_model", "d_model", f"{n.lower()} weights (c_attn)",
                       "d", HEAD_DIMS, when=when),
                 Input(f"B_{n}{sfx}", 1, "d_model", f"{n.lower()} bias (c_attn)", ["b"],
                       HEAD_DIMS, when=when)]
    made += [Input(f"W_O{sfx}", "d_model", "d_model", "output weights (c_proj)", HEAD_DIMS,
                   "d", when=when),
             Input(f"B_O{sfx}", 1, "d_model", "output bias (c_proj)", ["b"], "d", when=when),
             Input(f"LN2_GAMMA{sfx}", BROADCAST, "d_model", "γ (scale)", ["γ"], "d", when=when),
             Input(f"LN2_BETA{sfx}", BROADCAST, "d_model", "β (shift)", ["β"], "d", when=when),
             Input(f"W_1{sfx}", "d_model", D_FF, "MLP weights (c_fc)", "d", "f", when=when),
             Input(f"B_1{sfx}", 1, D_FF, "MLP bias (c_fc)", ["b"], "f", when=when),
             Input(f"W_2{sfx}", D_FF, "d_model", "MLP output weights (mlp.c_proj)", "f", "d",
                   when=when),
             Input(f"B_2{sfx}", 1, "d_model", "MLP output bias (mlp.c_proj)", ["b"], "d",
                   when=when)]
    return {item.name.removesuffix(sfx) if sfx else item.name: item for item in made}


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
    """`inner` written for one block of a stack: its block names resolved in that block."""

    inner: Formula
    sfx: str
    renames: tuple[tuple[str, str], ...] = ()

    def _env(self, env: Env) -> Env:
        renames = dict(self.renames)
        return Env(_Scope(env.blocks, self.sfx, renames), _Scope(env.labels, self.sfx, renames),
                   env.params, env.me, env.vectors)

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


def scoped_sections(sections: list[Section], sfx: str, source: str,
                    title: str) -> list[Section]:
    """The block's sections for layer `sfx`: step names take the suffix, formulas read the
    layer's own blocks and `source` for X, titles start with `title`."""
    def step(s: Step) -> Step:
        return dataclasses.replace(s, name=s.name + sfx,
                                   formula=Scoped(s.formula, sfx, (("X", source),)))

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


def layer_norm_band(ln: str, src: str, out: str, eps: float, weights: dict[str, Input]):
    """γ and β of `ln`, then its four steps (LN(r) = (r − μ)/√(σ² + eps)·γ + β)."""
    return section(f"{ln} — LayerNorm over each row: mean, centre, variance, scale",
                   [weights[f"{ln}_GAMMA"], weights[f"{ln}_BETA"]],
                   layer_norm(ln, src, out, eps))


def block_sections(p, weights: dict[str, Input], mask: bool = True,
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
    # FFN_OUT = GELU(LN2_OUT·W_1 + B_1)·W_2 + B_2
    mlp = [Step("FFN_HIDDEN", "LN2_OUT·W_1 + B_1", MatMul("LN2_OUT", "W_1", plus="B_1")),
           activation("gelu", p.gelu),
           Step("FFN_OUT", "GELU·W_2 + B_2", MatMul("FFN_ACT", "W_2", plus="B_2"))]
    return [
        layer_norm_band("LN1", "X", "LN1_OUT", eps, w),
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
        layer_norm_band("LN2", "RESID_1", "LN2_OUT", eps, w),
        section(f"Step 4 — MLP, GELU ({p.gelu} form), applied to each row",
                [w["W_1"], w["B_1"], w["W_2"], w["B_2"]], mlp),
        # OUTPUT = RESID_1 + FFN_OUT
        section("Step 5 — second residual: the block's output",
                residual("OUTPUT", "RESID_1", "FFN_OUT",
                         "GPT-2 normalises before each sub-layer and leaves the residual "
                         "stream itself un-normalised.")),
    ]


def check_block_sizes(p) -> None:
    if p.d_model % p.heads:
        raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
    if p.gelu not in GELU_FORMS:
        raise UserError(f"--gelu must be tanh or exact, got {p.gelu!r}")
    if not 0 < p.ln_eps < 1:
        raise UserError(f"--ln-eps must be a small positive number, got {p.ln_eps}")


def gamma_near_one(shape, rng) -> np.ndarray:
    """LayerNorm scales near 1, as after training."""
    return np.round(rng.uniform(0.5, 1.5, size=shape), 2)


WEIGHTS = block_inputs()


class DecoderBlock(Kind):
    name = "decoder-block"
    summary = "a GPT-2 block: LN, causal MHA with biases, residual, LN, tanh-GELU MLP, residual"
    sheet_title = "DecoderBlock"
    Params = DecoderBlockParams
    reference = staticmethod(decoder_block_ref)
    inputs = [X, *WEIGHTS.values()]
    test_cases = [
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6},
        {"seq_len": 4, "d_model": 6, "heads": 3, "d_ff": 5, "gelu": "exact", "ln_eps": 0.3},
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6, "scale_by_layer": True,
         "layer_number": 3},
    ]
    demo_cases = [("decoder_block", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8})]

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if "_GAMMA" in name:
            return gamma_near_one(shape, rng)
        return super().random_input(name, shape, params, rng)

    @classmethod
    def validate(cls, p):
        super().validate(p)
        check_block_sizes(p)

    @classmethod
    def sections(cls, p):
        return [section("Step 1 — input X (pre-LN, as GPT-2: X + attention(LN1(X)), then "
                        "+ MLP(LN2(·)); {heads} heads of d_k = {d_k})", X),
                *block_sections(p, WEIGHTS, divisor=p.divisor(p.layer_number))]
