"""Kind `encoder-block`: one Transformer encoder layer (PyTorch `nn.TransformerEncoderLayer`,
dropout 0), every step a formula, weights in `X @ W` orientation.

    MHA(h):  Q = h·W_Q + B_Q, K = h·W_K + B_K, V = h·W_V + B_V   (H heads, d_k = d/H)
             head_i = softmax(Q_i·K_iᵀ/√d_k)·V_i   ATTN = [head_1 … head_H]·W_O + B_O
    FFN(h):  act(h·W_1 + B_1)·W_2 + B_2      act = ReLU or GELU (tanh form)
    LN(r):   (r − μ)/√(σ² + 1E-05)·γ + β     per row, σ² the biased variance
    post-LN: RESID_1 = X + MHA(X)    LN1_OUT = LN1(RESID_1)
             RESID_2 = LN1_OUT + FFN(LN1_OUT)    OUTPUT = LN2(RESID_2)
    pre-LN:  LN1_OUT = LN1(X)    RESID_1 = X + MHA(LN1_OUT)
             LN2_OUT = LN2(RESID_1)    OUTPUT = RESID_1 + FFN(LN2_OUT)
"""

from dataclasses import dataclass, field

import numpy as np

from reference.encoder_block import encoder_block_ref
from sheets._bands import X, concat_heads, head_labels, head_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import Input, Kind, Map, MatMul, Rows, Step, section

LN_EPS = "1E-05"
# GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))  (ERF is not portable)
GELU = "0.5*{x}*(1+TANH(SQRT(2/PI())*({x}+0.044715*POWER({x},3))))"


@dataclass(frozen=True)
class EncoderBlockParams:
    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width d; d_k = d/heads"})
    heads: int = field(default=2, metadata={"help": "attention heads H (must divide d_model)"})
    d_ff: int = field(default=8, metadata={"help": "feed-forward width (columns of W_1)"})
    activation: str = field(default="relu", metadata={
        "choices": ["relu", "gelu"],
        "help": "feed-forward activation; gelu is the tanh form (torch approximate='tanh')"})
    pre_ln: bool = field(default=False, metadata={
        "help": "pre-LN order (norm_first): LayerNorm before attention and FFN"})

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
LN_INPUTS = {ln: (Input(f"{ln}_GAMMA", 1, "d_model", "γ (scale)", ["γ"], "d"),
                  Input(f"{ln}_BETA", 1, "d_model", "β (shift)", ["β"], "d"))
             for ln in ("LN1", "LN2")}


def layer_norm(ln: str, src: str, out: str) -> list[Step]:
    """LN(r) = (r − μ)/√(σ² + eps)·γ + β over each row of `src`, as four visible steps."""
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
        Step(out, f"c / √(σ² + {LN_EPS}) · γ + β",
             Map(f"={{C}}/SQRT({{V}}+{LN_EPS})*{{G}}+{{B}}", C=f"{ln}_CENTERED",
                 V=f"{ln}_VAR", G=f"{ln}_GAMMA", B=f"{ln}_BETA"),
             f"{ln}: each row rescaled to mean 0 and variance 1, then by γ and β."),
    ]


def layer_norm_section(ln: str, src: str, out: str):
    """γ and β of `ln`, then its four steps."""
    return section(f"{ln} — LayerNorm over each row: mean, centre, variance, scale",
                   list(LN_INPUTS[ln]), layer_norm(ln, src, out))


def residual(name: str, a: str, b: str, explanation: str = "") -> Step:
    """A + B, elementwise: a residual connection."""
    return Step(name, f"{a} + {b}", Map("={A}+{B}", A=a, B=b), explanation)


def activation(kind: str) -> Step:
    """ReLU: IF(x>0, x, 0) (MAX would reduce an array); GELU: the tanh form."""
    if kind == "gelu":
        return Step("FFN_ACT", "0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))",
                    Map("=" + GELU.format(x="{H}"), H="FFN_HIDDEN"))
    return Step("FFN_ACT", "max(x, 0)", Map("=IF({H}>0,{H},0)", H="FFN_HIDDEN"))


class EncoderBlock(Kind):
    name = "encoder-block"
    summary = "a whole Transformer encoder layer: MHA, residual, LayerNorm, FFN (--pre-ln)"
    sheet_title = "EncoderBlock"
    Params = EncoderBlockParams
    reference = staticmethod(encoder_block_ref)
    inputs = [X, W_Q, W_K, W_V, B_Q, B_K, B_V, W_O, B_O, W_1, B_1, W_2, B_2,
              *LN_INPUTS["LN1"], *LN_INPUTS["LN2"]]
    test_cases = [
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6},
        {"seq_len": 3, "d_model": 6, "heads": 3, "d_ff": 4, "activation": "gelu",
         "pre_ln": True},
        {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 3, "activation": "gelu"},
    ]
    demo_cases = [
        ("encoder_block", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8}),
        ("encoder_block_pre_ln_gelu", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8,
                                       "activation": "gelu", "pre_ln": True}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.d_model % p.heads:
            raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
        if p.activation not in ("relu", "gelu"):
            raise UserError(f"--activation must be relu or gelu, got {p.activation!r}")

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
        act_name = "GELU (tanh form)" if p.activation == "gelu" else "ReLU"
        # Q = h·W_Q + B_Q, likewise K and V (h = X, or LN1_OUT pre-LN)
        qkv = [Step(n, f"{n} = h·W_{n} + B_{n}", MatMul(attn_in, f"W_{n}", plus=f"B_{n}"))
               for n in "QKV"]
        # head h: softmax(Q_h·K_hᵀ/√d_k)·V_h over columns h·d_k … (h+1)·d_k − 1
        heads = [section(f"Head {h + 1} — columns h{h + 1}.* of Q, K, V",
                         head_steps(h, h, p.d_k, None)) for h in range(p.heads)]
        # FFN(h) = act(h·W_1 + B_1)·W_2 + B_2
        ffn = [Step("FFN_HIDDEN", "h·W_1 + B_1", MatMul(ffn_in, "W_1", plus="B_1")),
               activation(p.activation),
               Step("FFN_OUT", "act·W_2 + B_2", MatMul("FFN_ACT", "W_2", plus="B_2"))]
        if pre:  # OUTPUT = RESID_1 + FFN(LN2(RESID_1))
            ending = [section("Step 5 — second residual: the layer's output",
                              residual("OUTPUT", "RESID_1", "FFN_OUT",
                                       "Pre-LN leaves the residual stream un-normalised."))]
        else:  # OUTPUT = LN2(LN1_OUT + FFN(LN1_OUT))
            ending = [section("Step 5 — second residual, then LayerNorm: the layer's output",
                              residual("RESID_2", "LN1_OUT", "FFN_OUT")),
                      layer_norm_section("LN2", "RESID_2", "OUTPUT")]
        return [
            section(f"Step 1 — inputs ({order}; {{heads}} heads of d_k = {{d_k}})",
                    X, [W_Q, W_K, W_V], [B_Q, B_K, B_V]),
            *([layer_norm_section("LN1", "X", "LN1_OUT")] if pre else []),
            section(f"Step 2 — multi-head self-attention on {attn_in}", qkv),
            *heads,
            # ATTN = CONCAT·W_O + B_O;  RESID_1 = X + ATTN
            section("Step 3 — concatenate the heads, project with W_O, add the residual",
                    [concat_heads(p.heads, p.d_k), W_O, B_O],
                    [Step("ATTN", "CONCAT·W_O + B_O", MatMul("CONCAT", "W_O", plus="B_O")),
                     residual("RESID_1", "X", "ATTN",
                              "The residual connection: the layer adds to its input.")]),
            layer_norm_section("LN2", "RESID_1", "LN2_OUT") if pre else
            layer_norm_section("LN1", "RESID_1", "LN1_OUT"),
            section(f"Step 4 — feed-forward network, {act_name}, applied to each row",
                    [W_1, B_1, W_2, B_2], ffn),
            *ending,
        ]


# sheet text in Chinese (workbook_builder/teaching/i18n.py)
EncoderBlock.translations = {"zh": {
    "a whole Transformer encoder layer: MHA, residual, LayerNorm, FFN (--pre-ln)":
        "完整的 Transformer 编码器层：多头注意力、残差、LayerNorm、FFN（--pre-ln）",
    "Step 1 — inputs (post-LN: LN1(X + MHA(X)), then LN2(· + FFN(·)); {h} heads of "
    "d_k = {d})": "Step 1：输入（Post-LN：LN1(X + MHA(X))，再 LN2(· + FFN(·))；{h} 个头，"
                  "每头 d_k = {d}）",
    "Step 1 — inputs (pre-LN: X + MHA(LN1(X)), then + FFN(LN2(·)); {h} heads of d_k = {d})":
        "Step 1：输入（Pre-LN：X + MHA(LN1(X))，再 + FFN(LN2(·))；{h} 个头，每头 d_k = {d}）",
    "q weights": "q 权重", "k weights": "k 权重", "v weights": "v 权重",
    "q bias": "q 偏置", "k bias": "k 偏置", "v bias": "v 偏置",
    "Step 2 — multi-head self-attention on {src}": "Step 2：对 {src} 做多头自注意力",
    "Head {h} — columns h{hc}.* of Q, K, V": "头 {h}：Q、K、V 的 h{hc}.* 列",
    "Step 3 — concatenate the heads, project with W_O, add the residual":
        "Step 3：拼接各头，乘以 W_O，加上残差",
    "output bias": "输出偏置",
    "The residual connection: the layer adds to its input.":
        "残差连接：这一层的结果加回到它的输入上。",
    "{ln} — LayerNorm over each row: mean, centre, variance, scale":
        "{ln}：对每行做 LayerNorm — 均值、中心化、方差、缩放",
    "γ (scale)": "γ（缩放）", "β (shift)": "β（平移）",
    "Biased variance (divide by d, not d − 1), as nn.LayerNorm.":
        "有偏方差（除以 d 而不是 d − 1），与 nn.LayerNorm 相同。",
    "{ln}: each row rescaled to mean 0 and variance 1, then by γ and β.":
        "{ln}：每行先缩放为均值 0、方差 1，再乘 γ 加 β。",
    "Step 4 — feed-forward network, ReLU, applied to each row":
        "Step 4：前馈网络（ReLU），逐行作用",
    "Step 4 — feed-forward network, GELU (tanh form), applied to each row":
        "Step 4：前馈网络（GELU，tanh 形式），逐行作用",
    "first FFN weights": "FFN 第一层权重", "first FFN bias": "FFN 第一层偏置",
    "second FFN weights": "FFN 第二层权重", "second FFN bias": "FFN 第二层偏置",
    "Step 5 — second residual, then LayerNorm: the layer's output":
        "Step 5：第二个残差，再做 LayerNorm：这一层的输出",
    "Step 5 — second residual: the layer's output": "Step 5：第二个残差：这一层的输出",
    "Pre-LN leaves the residual stream un-normalised.": "Pre-LN 不对残差流本身做归一化。",
}}
