"""Kind `encoder-block`: one Transformer encoder layer (PyTorch `nn.TransformerEncoderLayer`,
dropout 0), every step a formula, weights in `X @ W` orientation.

    MHA(h):  Q = h·W_Q + B_Q, K = h·W_K + B_K, V = h·W_V + B_V   (H heads, d_k = d/H)
             head_i = softmax(Q_i·K_iᵀ/√d_k)·V_i   ATTN = [head_1 … head_H]·W_O + B_O
    FFN(h):  act(h·W_1 + B_1)·W_2 + B_2      act = ReLU or GELU (tanh or exact erf form)
    LN(r):   (r − μ)/√(σ² + eps)·γ + β       per row, σ² the biased variance, eps --ln-eps
    --embeddings (BERT):  X = LN_EMB(WORD_EMB + POS_EMB + TYPE_EMB)
    post-LN: RESID_1 = X + MHA(X)    LN1_OUT = LN1(RESID_1)
             RESID_2 = LN1_OUT + FFN(LN1_OUT)    OUTPUT = LN2(RESID_2)
    pre-LN:  LN1_OUT = LN1(X)    RESID_1 = X + MHA(LN1_OUT)
             LN2_OUT = LN2(RESID_1)    OUTPUT = RESID_1 + FFN(LN2_OUT)
"""

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from reference.encoder_block import encoder_block_ref
from sheets._bands import X, concat_heads, head_labels, head_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import BROADCAST, Input, Kind, Map, MatMul, Rows, Step, section

# GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))   (torch approximate='tanh')
GELU_TANH = "0.5*{x}*(1+TANH(SQRT(2/PI())*({x}+0.044715*POWER({x},3))))"
# GELU, exact: 0.5·x·(1 + erf(x/√2))   (torch's default, BERT's "gelu")
GELU_EXACT = "0.5*{x}*(1+ERF({x}/SQRT(2)))"
GELU_FORMS = {"tanh": ("0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))", GELU_TANH),
              "exact": ("0.5·x·(1 + erf(x/√2))", GELU_EXACT)}


def excel_number(x: float) -> str:
    """A float as a formula literal that reads back as the same double, with a signed
    exponent (1E-12, not 1e-12 or 1E12: the `formulas` engine rejects an unsigned one)."""
    return repr(float(x)).upper()


@dataclass(frozen=True)
class EncoderBlockParams:
    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width d; d_k = d/heads"})
    heads: int = field(default=2, metadata={"help": "attention heads H (must divide d_model)"})
    d_ff: int = field(default=8, metadata={"help": "feed-forward width (columns of W_1)"})
    activation: str = field(default="relu", metadata={
        "choices": ["relu", "gelu"], "help": "feed-forward activation"})
    pre_ln: bool = field(default=False, metadata={
        "help": "pre-LN order (norm_first): LayerNorm before attention and FFN"})
    gelu: str = field(default="tanh", metadata={
        "choices": list(GELU_FORMS),
        "help": "GELU form with --activation gelu: tanh (torch approximate='tanh') or exact, "
                "0.5·x·(1 + erf(x/√2)) (torch's default, BERT)"})
    ln_eps: float = field(default=1e-5, metadata={
        "help": "LayerNorm's eps (PyTorch's default; BERT uses 1e-12)"})
    embeddings: bool = field(default=False, metadata={
        "help": "compute X on the sheet as BERT does: LayerNorm(word + position + token-type "
                "embedding rows)"})

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads


HEAD_DIMS = head_labels("h", lambda p: p.heads, lambda p: p.d_k)  # h1.1, h1.2, h2.1, …


def _weights_and_bias(n: str, what: str):
    """W_n (d × d, heads side by side) and its bias row B_n."""
    return (Input(f"W_{n}", "d_model", "d_model", f"{what} weights", "d", HEAD_DIMS),
            Input(f"B_{n}", 1, "d_model", f"{what} bias", ["b"], HEAD_DIMS))


(W_Q, B_Q), (W_K, B_K), (W_V, B_V) = (_weights_and_bias(n, n.lower()) for n in "QKV")
W_O = Input("W_O", "d_model", "d_model", "output weights", HEAD_DIMS, "d")
B_O = Input("B_O", 1, "d_model", "output bias", ["b"], "d")
W_1 = Input("W_1", "d_model", "d_ff", "first FFN weights", "d", "f")
B_1 = Input("B_1", 1, "d_ff", "first FFN bias", ["b"], "f")
W_2 = Input("W_2", "d_ff", "d_model", "second FFN weights", "f", "d")
B_2 = Input("B_2", 1, "d_model", "second FFN bias", ["b"], "d")
LN_INPUTS = {ln: (Input(f"{ln}_GAMMA", BROADCAST, "d_model", "γ (scale)", ["γ"], "d",
                        when=None if ln != "EMB" else "embeddings"),
                  Input(f"{ln}_BETA", BROADCAST, "d_model", "β (shift)", ["β"], "d",
                        when=None if ln != "EMB" else "embeddings"))
             for ln in ("EMB", "LN1", "LN2")}
# X is an input, or with --embeddings the result of BERT's embedding step
X_INPUT = dataclasses.replace(X, when=lambda p: not p.embeddings)
EMBEDDING_ROWS = [
    Input("WORD_EMB", "seq_len", "d_model", "word embedding rows, one per token",
          when="embeddings"),
    Input("POS_EMB", "seq_len", "d_model", "position embedding rows 0 … n−1",
          when="embeddings"),
    Input("TYPE_EMB", "seq_len", "d_model", "token-type embedding rows (segment)",
          when="embeddings")]


def layer_norm(ln: str, src: str, out: str, eps: float) -> list[Step]:
    """LN(r) = (r − μ)/√(σ² + eps)·γ + β over each row of `src`, as four visible steps."""
    eps_text = excel_number(eps)
    return [
        # μ_i = Σ_j r_ij / d
        Step(f"{ln}_MEAN", "μ = Σ_j r_j / d", Rows("=SUM({R})/{d_model}", R=src),
             col_labels=["μ"]),
        # c_ij = r_ij − μ_i
        Step(f"{ln}_CENTERED", "c = r − μ", Map("={R}-{M}", R=src, M=f"{ln}_MEAN")),
        # σ²_i = Σ_j c_ij² / d   (biased, as LayerNorm)
        Step(f"{ln}_VAR", "σ² = Σ_j c_j² / d",
             Rows("=SUMPRODUCT({C},{C})/{d_model}", C=f"{ln}_CENTERED"),
             "Biased variance (divide by d, not d − 1), as nn.LayerNorm.", col_labels=["σ²"]),
        # out_ij = c_ij / √(σ²_i + eps) · γ_j + β_j
        Step(out, f"c / √(σ² + {eps_text}) · γ + β",
             Map(f"={{C}}/SQRT({{V}}+{eps_text})*{{G}}+{{B}}", C=f"{ln}_CENTERED",
                 V=f"{ln}_VAR", G=f"{ln}_GAMMA", B=f"{ln}_BETA"),
             f"{ln}: each row rescaled to mean 0 and variance 1, then by γ and β."),
    ]


def layer_norm_section(ln: str, src: str, out: str, eps: float):
    """γ and β of `ln`, then its four steps."""
    return section(f"{ln} — LayerNorm over each row: mean, centre, variance, scale",
                   list(LN_INPUTS[ln]), layer_norm(ln, src, out, eps))


def embedding_sections(eps: float) -> list:
    """BERT's embedding step: X = LN_EMB(WORD_EMB + POS_EMB + TYPE_EMB), the looked-up rows
    as inputs and their sum and LayerNorm live."""
    # EMB_SUM = WORD_EMB + POS_EMB + TYPE_EMB
    total = Step("EMB_SUM", "WORD_EMB + POS_EMB + TYPE_EMB",
                 Map("={W}+{P}+{T}", W="WORD_EMB", P="POS_EMB", T="TYPE_EMB"),
                 "Each token's three embedding rows added.")
    return [section("Step 0 — embeddings: the rows looked up for each token, added",
                    EMBEDDING_ROWS, total),
            layer_norm_section("EMB", "EMB_SUM", "X", eps)]


def residual(name: str, a: str, b: str, explanation: str = "") -> Step:
    """A + B, elementwise: a residual connection."""
    return Step(name, f"{a} + {b}", Map("={A}+{B}", A=a, B=b), explanation)


def activation(kind: str, form: str) -> Step:
    """ReLU: IF(x>0, x, 0) (MAX would reduce an array); GELU: its tanh or exact form."""
    if kind == "gelu":
        equation, template = GELU_FORMS[form]
        return Step("FFN_ACT", equation, Map("=" + template.format(x="{H}"), H="FFN_HIDDEN"))
    return Step("FFN_ACT", "max(x, 0)", Map("=IF({H}>0,{H},0)", H="FFN_HIDDEN"))


class EncoderBlock(Kind):
    name = "encoder-block"
    summary = "a whole Transformer encoder layer: MHA, residual, LayerNorm, FFN (--pre-ln)"
    sheet_title = "EncoderBlock"
    Params = EncoderBlockParams
    reference = staticmethod(encoder_block_ref)
    inputs = [*EMBEDDING_ROWS, *LN_INPUTS["EMB"], X_INPUT, W_Q, W_K, W_V, B_Q, B_K, B_V,
              W_O, B_O, W_1, B_1, W_2, B_2, *LN_INPUTS["LN1"], *LN_INPUTS["LN2"]]
    test_cases = [
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6},
        {"seq_len": 3, "d_model": 6, "heads": 3, "d_ff": 4, "activation": "gelu",
         "pre_ln": True},
        {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 3, "activation": "gelu"},
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 5, "activation": "gelu",
         "gelu": "exact", "ln_eps": 1e-12, "embeddings": True},
    ]
    demo_cases = [
        ("encoder_block", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8}),
        ("encoder_block_pre_ln_gelu", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8,
                                       "activation": "gelu", "pre_ln": True}),
        ("encoder_block_bert", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8,
                                "activation": "gelu", "gelu": "exact", "ln_eps": 1e-12,
                                "embeddings": True}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.d_model % p.heads:
            raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
        if p.activation not in ("relu", "gelu"):
            raise UserError(f"--activation must be relu or gelu, got {p.activation!r}")
        if p.gelu not in GELU_FORMS:
            raise UserError(f"--gelu must be tanh or exact, got {p.gelu!r}")
        if p.gelu == "exact" and p.activation != "gelu":
            raise UserError("--gelu exact needs --activation gelu")
        if not 0 < p.ln_eps < 1:
            raise UserError(f"--ln-eps must be a small positive number, got {p.ln_eps}")

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if name.endswith("_GAMMA"):  # LayerNorm scales near 1, as after training
            return np.round(rng.uniform(0.5, 1.5, size=shape), 2)
        return super().random_input(name, shape, params, rng)

    @classmethod
    def sections(cls, p):
        pre = p.pre_ln
        attn_in, ffn_in = ("LN1_OUT", "LN2_OUT") if pre else ("X", "LN1_OUT")
        order = ("pre-LN: X + MHA(LN1(X)), then + FFN(LN2(·))" if pre else
                 "post-LN: LN1(X + MHA(X)), then LN2(· + FFN(·))")
        act_name = f"GELU ({p.gelu} form)" if p.activation == "gelu" else "ReLU"
        eps = p.ln_eps
        # Q = h·W_Q + B_Q, likewise K and V (h = X, or LN1_OUT pre-LN)
        qkv = [Step(n, f"{n} = h·W_{n} + B_{n}", MatMul(attn_in, f"W_{n}", plus=f"B_{n}"))
               for n in "QKV"]
        # head h: softmax(Q_h·K_hᵀ/√d_k)·V_h over columns h·d_k … (h+1)·d_k − 1
        heads = [section(f"Head {h + 1} — columns h{h + 1}.* of Q, K, V",
                         head_steps(h, h, p.d_k, None)) for h in range(p.heads)]
        # FFN(h) = act(h·W_1 + B_1)·W_2 + B_2
        ffn = [Step("FFN_HIDDEN", "h·W_1 + B_1", MatMul(ffn_in, "W_1", plus="B_1")),
               activation(p.activation, p.gelu),
               Step("FFN_OUT", "act·W_2 + B_2", MatMul("FFN_ACT", "W_2", plus="B_2"))]
        if pre:  # OUTPUT = RESID_1 + FFN(LN2(RESID_1))
            ending = [section("Step 5 — second residual: the layer's output",
                              residual("OUTPUT", "RESID_1", "FFN_OUT",
                                       "Pre-LN leaves the residual stream un-normalised."))]
        else:  # OUTPUT = LN2(LN1_OUT + FFN(LN1_OUT))
            ending = [section("Step 5 — second residual, then LayerNorm: the layer's output",
                              residual("RESID_2", "LN1_OUT", "FFN_OUT")),
                      layer_norm_section("LN2", "RESID_2", "OUTPUT", eps)]
        return [
            *(embedding_sections(eps) if p.embeddings else []),
            section(f"Step 1 — inputs ({order}; {{heads}} heads of d_k = {{d_k}})",
                    *([] if p.embeddings else [X_INPUT]), [W_Q, W_K, W_V], [B_Q, B_K, B_V]),
            *([layer_norm_section("LN1", "X", "LN1_OUT", eps)] if pre else []),
            section(f"Step 2 — multi-head self-attention on {attn_in}", qkv),
            *heads,
            # ATTN = CONCAT·W_O + B_O;  RESID_1 = X + ATTN
            section("Step 3 — concatenate the heads, project with W_O, add the residual",
                    [concat_heads(p.heads, p.d_k), W_O, B_O],
                    [Step("ATTN", "CONCAT·W_O + B_O", MatMul("CONCAT", "W_O", plus="B_O")),
                     residual("RESID_1", "X", "ATTN",
                              "The residual connection: the layer adds to its input.")]),
            layer_norm_section("LN2", "RESID_1", "LN2_OUT", eps) if pre else
            layer_norm_section("LN1", "RESID_1", "LN1_OUT", eps),
            section(f"Step 4 — feed-forward network, {act_name}, applied to each row",
                    [W_1, B_1, W_2, B_2], ffn),
            *ending,
        ]
