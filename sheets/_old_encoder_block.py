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
from sheets._steps import dims, matmul, matmul_transposed, scale, softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind

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


class EncoderBlock(Kind):
    name = "encoder-block"
    summary = "a whole Transformer encoder layer: MHA, residual, LayerNorm, FFN (--pre-ln)"
    sheet_title = "EncoderBlock"
    Params = EncoderBlockParams
    reference = staticmethod(encoder_block_ref)
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
    def input_shapes(cls, p):
        d, f = p.d_model, p.d_ff
        shapes = {"X": (p.seq_len, d)}
        for name in ("Q", "K", "V"):
            shapes[f"W_{name}"] = (d, d)
        for name in ("Q", "K", "V"):
            shapes[f"B_{name}"] = (1, d)
        shapes.update({"W_O": (d, d), "B_O": (1, d), "W_1": (d, f), "B_1": (1, f),
                       "W_2": (f, d), "B_2": (1, d), "LN1_GAMMA": (1, d), "LN1_BETA": (1, d),
                       "LN2_GAMMA": (1, d), "LN2_BETA": (1, d)})
        return shapes

    input_dims = {"X": ("seq_len", "d_model"), "W_1": ("d_model", "d_ff"),
                  "W_2": ("d_ff", "d_model")}

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if name.endswith("_GAMMA"):  # LayerNorm scales near 1, as after training
            return np.round(rng.uniform(0.5, 1.5, size=shape), 2)
        return super().random_input(name, shape, params, rng)

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        d_k, heads = p.d_k, p.heads
        model_dims, ff_dims = dims("d", p.d_model), dims("f", p.d_ff)
        head_dims = [f"h{h + 1}.{j + 1}" for h in range(heads) for j in range(d_k)]
        order = "pre-LN: X + MHA(LN1(X)), then + FFN(LN2(·))" if p.pre_ln else \
            "post-LN: LN1(X + MHA(X)), then LN2(· + FFN(·))"
        act_name = "GELU (tanh form)" if p.activation == "gelu" else "ReLU"

        def inp(name, equation, rows, cols):
            return sheet.input_block(name, inputs[name], equation, rows, cols)

        sheet.text(f"Step 1 — inputs ({order}; {heads} heads of d_k = {d_k})", bold=True)
        x = inp("X", "token embeddings", tokens, model_dims)
        with sheet.band():
            ws = {n: inp(f"W_{n}", f"{n.lower()} weights", model_dims, head_dims)
                  for n in ("Q", "K", "V")}
        with sheet.band():
            bs = {n: inp(f"B_{n}", f"{n.lower()} bias", ["b"], head_dims) for n in ("Q", "K", "V")}

        def layer_norm(which, src, out_name):
            sheet.text(f"{which} — LayerNorm over each row: mean, centre, variance, scale",
                       bold=True)
            with sheet.band():
                gamma = inp(f"{which}_GAMMA", "γ (scale)", ["γ"], model_dims)
                beta = inp(f"{which}_BETA", "β (shift)", ["β"], model_dims)
            with sheet.band():
                return _layer_norm(sheet, which, src, gamma, beta, out_name, tokens,
                                   model_dims)

        if p.pre_ln:
            attn_in = layer_norm("LN1", x, "LN1_OUT")
            sheet.text("Step 2 — multi-head self-attention on LN1_OUT", bold=True)
        else:
            attn_in = x
            sheet.text("Step 2 — multi-head self-attention on X", bold=True)
        with sheet.band():
            q, k, v = (_affine(sheet, n, f"{n} = h·W_{n} + B_{n}", attn_in, ws[n], bs[n],
                               tokens, head_dims) for n in ("Q", "K", "V"))
        head_blocks = []
        for h in range(heads):
            cols, sfx = (h * d_k, (h + 1) * d_k - 1), f"_H{h + 1}"
            sheet.text(f"Head {h + 1} — columns h{h + 1}.* of Q, K, V", bold=True)
            with sheet.band():
                scores = matmul_transposed(sheet, "SCORES" + sfx, f"S = Q_{h + 1}·K_{h + 1}ᵀ",
                                           q, k, tokens, tokens, a_cols=cols, b_cols=cols)
                scaled = scale(sheet, "SCALED" + sfx, scores, d_k, tokens,
                               "Scores of this head divided by √d_k.")
                weights = softmax_steps(sheet, scaled, None, tokens, sfx)
                head_blocks.append(matmul(sheet, "HEAD" + sfx, f"head_{h + 1} = A·V_{h + 1}",
                                          weights, v, tokens, dims(f"h{h + 1}.", d_k),
                                          b_cols=cols))
        sheet.text("Step 3 — concatenate the heads, project with W_O, add the residual",
                   bold=True)
        with sheet.band():
            concat = sheet.step_block(
                "CONCAT", "[head_1 … head_H]", p.seq_len, p.d_model, tokens, head_dims,
                cells=lambda i, j: f"={head_blocks[j // d_k].cell(i, j % d_k)}",
                col_array=(d_k, lambda h, me: f"={head_blocks[h].whole()}"))
            w_o = inp("W_O", "output weights", head_dims, model_dims)
            b_o = inp("B_O", "output bias", ["b"], model_dims)
        with sheet.band():
            attn = _affine(sheet, "ATTN", "CONCAT·W_O + B_O", concat, w_o, b_o, tokens,
                           model_dims)
            resid1 = _add(sheet, "RESID_1", "X + ATTN", x, attn, tokens, model_dims,
                          "The residual connection: the layer adds to its input.")
        if p.pre_ln:
            ffn_in = layer_norm("LN2", resid1, "LN2_OUT")
        else:
            ffn_in = layer_norm("LN1", resid1, "LN1_OUT")
        sheet.text(f"Step 4 — feed-forward network, {act_name}, applied to each row",
                   bold=True)
        with sheet.band():
            w_1 = inp("W_1", "first FFN weights", model_dims, ff_dims)
            b_1 = inp("B_1", "first FFN bias", ["b"], ff_dims)
            w_2 = inp("W_2", "second FFN weights", ff_dims, model_dims)
            b_2 = inp("B_2", "second FFN bias", ["b"], model_dims)
        with sheet.band():
            hidden = _affine(sheet, "FFN_HIDDEN", "h·W_1 + B_1", ffn_in, w_1, b_1, tokens,
                             ff_dims)
            act = _activation(sheet, p.activation, hidden, tokens, ff_dims)
            ffn_out = _affine(sheet, "FFN_OUT", "act·W_2 + B_2", act, w_2, b_2, tokens,
                              model_dims)
        if p.pre_ln:
            sheet.text("Step 5 — second residual: the layer's output", bold=True)
            _add(sheet, "OUTPUT", "RESID_1 + FFN_OUT", resid1, ffn_out, tokens, model_dims,
                 "Pre-LN leaves the residual stream un-normalised.")
        else:
            sheet.text("Step 5 — second residual, then LayerNorm: the layer's output",
                       bold=True)
            resid2 = _add(sheet, "RESID_2", "LN1_OUT + FFN_OUT", ffn_in, ffn_out, tokens,
                          model_dims)
            layer_norm("LN2", resid2, "OUTPUT")


def _affine(sheet, name, equation, a, w, b, labels, col_labels):
    """Y = A·W + b, b a 1-row bias added to every row."""
    return sheet.step_block(
        name, equation, a.rows, w.cols, labels, col_labels,
        cells=lambda i, j: f"=MMULT({a.row(i)},{w.col(j)})+{b.fixed(0, j)}",
        array=lambda me: f"=MMULT({a.whole()},{w.whole()})+{b.whole()}")


def _add(sheet, name, equation, a, b, labels, col_labels, explanation=""):
    """Elementwise A + B (a residual connection)."""
    return sheet.step_block(
        name, equation, a.rows, a.cols, labels, col_labels,
        cells=lambda i, j: f"={a.cell(i, j)}+{b.cell(i, j)}",
        array=lambda me: f"={a.whole()}+{b.whole()}", explanation=explanation)


def _activation(sheet, kind, hidden, labels, col_labels):
    """ReLU: IF(x>0, x, 0) (MAX would reduce an array); GELU: the tanh form."""
    if kind == "gelu":
        equation = "0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))"

        def formula(x):
            return "=" + GELU.format(x=x)
    else:
        equation = "max(x, 0)"

        def formula(x):
            return f"=IF({x}>0,{x},0)"
    return sheet.step_block(
        "FFN_ACT", equation, hidden.rows, hidden.cols, labels, col_labels,
        cells=lambda i, j: formula(hidden.cell(i, j)),
        array=lambda me: formula(hidden.whole()))


def _layer_norm(sheet, which, src, gamma, beta, out_name, labels, col_labels):
    """LN(r) = (r − μ)/√(σ² + eps)·γ + β, as four visible steps."""
    d = src.cols
    # μ_i = Σ_j r_ij / d
    mean = sheet.step_block(
        f"{which}_MEAN", "μ = Σ_j r_j / d", src.rows, 1, labels, ["μ"],
        cells=lambda i, j: f"=SUM({src.row(i)})/{d}")
    # c_ij = r_ij − μ_i
    centered = sheet.step_block(
        f"{which}_CENTERED", "c = r − μ", src.rows, d, labels, col_labels,
        cells=lambda i, j: f"={src.cell(i, j)}-{mean.row(i)}",
        array=lambda me: f"={src.whole()}-{mean.whole()}")
    # σ²_i = Σ_j c_ij² / d   (biased, as LayerNorm)
    var = sheet.step_block(
        f"{which}_VAR", "σ² = Σ_j c_j² / d", src.rows, 1, labels, ["σ²"],
        cells=lambda i, j: f"=SUMPRODUCT({centered.row(i)},{centered.row(i)})/{d}",
        explanation="Biased variance (divide by d, not d − 1), as nn.LayerNorm.")
    # out_ij = c_ij / √(σ²_i + eps) · γ_j + β_j
    return sheet.step_block(
        out_name, f"c / √(σ² + {LN_EPS}) · γ + β", src.rows, d, labels, col_labels,
        cells=lambda i, j: f"={centered.cell(i, j)}/SQRT({var.row(i)}+{LN_EPS})"
                           f"*{gamma.fixed(0, j)}+{beta.fixed(0, j)}",
        array=lambda me: f"={centered.whole()}/SQRT({var.whole()}+{LN_EPS})"
                         f"*{gamma.whole()}+{beta.whole()}",
        explanation=f"{which}: each row rescaled to mean 0 and variance 1, then by γ and β.")


# sheet text in Chinese (workbook_builder/i18n.py)
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
