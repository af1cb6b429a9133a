"""Kind `additive`: Bahdanau (additive) attention, e_ij = vᵀ·tanh(W·s_i + U·h_j).

    WS = DEC_S·W_A (+B_W)   UH = ENC_H·U_A (+B_U)
    PRE(i,j) = WS_i + UH_j   HIDDEN = tanh(PRE)   (one row per decoder/encoder pair)
    e_ij = HIDDEN(i,j)·V_A (+B_V)   α_i = softmax_j(e_i)   c_i = Σ_j α_ij h_j

Without --bias it is the paper's form; --bias adds the nn.Linear biases of the PyTorch
seq2seq tutorial (B_V cancels in the softmax but shows in SCORES).
Tokens: `--tokens "SOURCE|TARGET"`, as for cross-attention.
"""

from dataclasses import dataclass, field

from reference.additive import additive_ref
from sheets._steps import dims, matmul, softmax_steps
from sheets.cross_attention import TwoSequenceKind
from workbook_builder.sheet.refs import range_ref


@dataclass(frozen=True)
class AdditiveParams:
    src_len: int = field(default=4, metadata={"help": "source tokens n (encoder states h_j)"})
    tgt_len: int = field(default=2, metadata={
        "help": "decoder states m (rows s_i, one per target step)"})
    d_enc: int = field(default=4, metadata={"help": "encoder state width (columns of ENC_H)"})
    d_dec: int = field(default=4, metadata={"help": "decoder state width (columns of DEC_S)"})
    d_att: int = field(default=3, metadata={"help": "attention hidden width (columns of W_A)"})
    bias: bool = field(default=False, metadata={
        "help": "add biases B_W, B_U, B_V as the PyTorch tutorial's nn.Linear layers"})


class Additive(TwoSequenceKind):
    name = "additive"
    summary = "Bahdanau additive attention: score vᵀ·tanh(W·s + U·h_j), softmax, context"
    sheet_title = "Additive"
    Params = AdditiveParams
    reference = staticmethod(additive_ref)
    test_cases = [
        {"src_len": 3, "tgt_len": 1, "d_enc": 2, "d_dec": 3, "d_att": 2},
        {"src_len": 4, "tgt_len": 2, "d_enc": 3, "d_dec": 2, "d_att": 3, "bias": True},
        {"src_len": 1, "tgt_len": 3, "d_enc": 1, "d_dec": 1, "d_att": 1, "bias": True},
    ]
    demo_cases = [
        ("additive", {"src_len": 4, "tgt_len": 2, "d_enc": 4, "d_dec": 4, "d_att": 3}),
        ("additive_bias", {"src_len": 5, "tgt_len": 3, "d_enc": 4, "d_dec": 4, "d_att": 4,
                           "bias": True}),
    ]

    @classmethod
    def input_shapes(cls, p):
        shapes = {"ENC_H": (p.src_len, p.d_enc), "DEC_S": (p.tgt_len, p.d_dec),
                  "W_A": (p.d_dec, p.d_att), "U_A": (p.d_enc, p.d_att), "V_A": (p.d_att, 1)}
        if p.bias:
            shapes.update(B_W=(1, p.d_att), B_U=(1, p.d_att), B_V=(1, 1))
        return shapes

    input_dims = {"ENC_H": ("src_len", "d_enc"), "DEC_S": ("tgt_len", "d_dec"),
                  "W_A": ("d_dec", "d_att"), "U_A": ("d_enc", "d_att"),
                  "V_A": ("d_att", None)}

    @classmethod
    def infer_params(cls, given):
        sizes = super().infer_params(given)
        if any(name in given for name in ("B_W", "B_U", "B_V")):
            sizes["bias"] = True  # a bias given by hand switches the biases on
        return sizes

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        n, m = p.src_len, p.tgt_len
        src, tgt = tokens[:n], tokens[n:]
        enc_dims, dec_dims, att_dims = dims("e", p.d_enc), dims("s", p.d_dec), dims("a", p.d_att)
        pairs = [f"{t}→{s}" for t in tgt for s in src]      # row i·n + j of PRE/HIDDEN
        sheet.text("Step 1 — inputs: encoder states h_j, decoder states s_i, the weights",
                   bold=True)
        with sheet.band():
            h = sheet.input_block("ENC_H", inputs["ENC_H"], "encoder states h_j", src,
                                  enc_dims, "One row per source token (the paper's "
                                  "annotations h_j); keys and values at once.")
            s = sheet.input_block("DEC_S", inputs["DEC_S"], "decoder states s_i", tgt,
                                  dec_dims, "One row per decoder step: the state before "
                                  "emitting that target token (the paper's s_{i−1}).")
            w = sheet.input_block("W_A", inputs["W_A"], "W (decoder side)", dec_dims, att_dims)
            u = sheet.input_block("U_A", inputs["U_A"], "U (encoder side)", enc_dims, att_dims)
            v = sheet.input_block("V_A", inputs["V_A"], "v", att_dims, ["v"])
        if p.bias:
            with sheet.band():
                bw = sheet.input_block("B_W", inputs["B_W"], "bias of W", ["b"], att_dims)
                bu = sheet.input_block("B_U", inputs["B_U"], "bias of U", ["b"], att_dims)
                bv = sheet.input_block("B_V", inputs["B_V"], "bias of v", ["b"], ["v"],
                                       "Adds the same number to every score of a row, so "
                                       "it cancels in the softmax.")
        plus_w = "+b_W" if p.bias else ""
        plus_u = "+b_U" if p.bias else ""
        sheet.text("Step 2 — project both sides into the attention space", bold=True)
        with sheet.band():
            # WS = S·W (+ b_W)   UH = H·U (+ b_U)
            if p.bias:
                ws = sheet.step_block(
                    "WS", "W·s_i + b_W", m, p.d_att, tgt, att_dims,
                    cells=lambda i, j: f"=MMULT({s.row(i)},{w.col(j)})+{bw.cell(0, j)}",
                    row_array=lambda i, me: f"=MMULT({s.row(i)},{w.whole()})+{bw.whole()}",
                    explanation="Decoder side of the score, once per decoder step.")
                uh = sheet.step_block(
                    "UH", "U·h_j + b_U", n, p.d_att, src, att_dims,
                    cells=lambda i, j: f"=MMULT({h.row(i)},{u.col(j)})+{bu.cell(0, j)}",
                    row_array=lambda i, me: f"=MMULT({h.row(i)},{u.whole()})+{bu.whole()}",
                    explanation="Encoder side of the score; it does not depend on the "
                                "decoder step, so it is computed once.")
            else:
                ws = matmul(sheet, "WS", "W·s_i", s, w, tgt, att_dims,
                            "Decoder side of the score, once per decoder step.")
                uh = matmul(sheet, "UH", "U·h_j", h, u, src, att_dims,
                            "Encoder side of the score; it does not depend on the decoder "
                            "step, so it is computed once.")
        sheet.text("Step 3 — every (decoder step, source token) pair through tanh", bold=True)
        with sheet.band():
            # PRE(i,j) = WS_i + UH_j, row i·n + j
            pre = sheet.step_block(
                "PRE", f"W·s_i{plus_w} + U·h_j{plus_u}", m * n, p.d_att, pairs, att_dims,
                cells=lambda r, c: f"={ws.cell(r // n, c)}+{uh.cell(r % n, c)}",
                row_array=lambda r, me: f"={ws.row(r // n)}+{uh.row(r % n)}",
                corner="s_i→h_j",
                explanation="Row 'y→x': decoder step y's projection plus source token x's.")
            hidden = sheet.step_block(
                "HIDDEN", "tanh(PRE)", m * n, p.d_att, pairs, att_dims,
                cells=lambda r, c: f"=TANH({pre.cell(r, c)})",
                array=lambda me: f"=TANH({pre.whole()})", corner="s_i→h_j",
                explanation="The one hidden layer of the alignment model.")
        sheet.text("Step 4 — scores e_ij = vᵀ·tanh(…), softmax over the source positions",
                   bold=True)
        plus_v = f"+{bv.fixed(0, 0)}" if p.bias else ""

        def pair_rows(i: int) -> str:
            """Rows of HIDDEN for decoder step i (all source tokens)."""
            return range_ref(hidden.top + i * n, hidden.left, hidden.top + i * n + n - 1,
                             hidden.right, fix_row=True, fix_col=True)

        with sheet.band():
            # e_ij = HIDDEN(i,j)·v (+ b_v)
            scores = sheet.step_block(
                "SCORES", "e_ij = vᵀ·tanh(W·s_i + U·h_j)" + (" + b_v" if p.bias else ""),
                m, n, tgt, src,
                cells=lambda i, j: f"=MMULT({hidden.row(i * n + j)},{v.col(0)}){plus_v}",
                row_array=lambda i, me: f"=TRANSPOSE(MMULT({pair_rows(i)},{v.whole()}))"
                                        f"{plus_v}",
                corner="s_i\\h_j",
                explanation="Alignment score of decoder step i with source token j.")
            weights = softmax_steps(sheet, scores, None, tgt, col_labels=src,
                                    over="source tokens")
        sheet.text("Step 5 — context vectors c_i = Σ_j α_ij h_j", bold=True)
        matmul(sheet, "CONTEXT", "c = A·H", weights, h, tgt, enc_dims,
               "Each decoder step's weighted average of the encoder states.")


# sheet text in Chinese (workbook_builder/i18n.py)
Additive.translations = {"zh": {
    "Bahdanau additive attention: score vᵀ·tanh(W·s + U·h_j), softmax, context":
        "Bahdanau 加性注意力：分数 vᵀ·tanh(W·s + U·h_j)、Softmax、上下文向量",
    "Step 1 — inputs: encoder states h_j, decoder states s_i, the weights":
        "Step 1：输入 — 编码器状态 h_j、解码器状态 s_i、权重",
    "One row per source token (the paper's annotations h_j); keys and values at once.":
        "每行一个源词（论文中的注释向量 h_j）；同时充当键和值。",
    "One row per decoder step: the state before emitting that target token (the paper's "
    "s_{i−1}).": "每个解码步一行：输出该目标词之前的状态（论文中的 s_{i−1}）。",
    "encoder states h_j": "编码器状态 h_j", "decoder states s_i": "解码器状态 s_i",
    "W (decoder side)": "W（解码器侧）", "U (encoder side)": "U（编码器侧）",
    "Step 2 — project both sides into the attention space": "Step 2：把两侧投影到注意力空间",
    "Decoder side of the score, once per decoder step.": "分数的解码器侧部分，每个解码步一次。",
    "Encoder side of the score; it does not depend on the decoder step, so it is computed "
    "once.": "分数的编码器侧部分；它与解码步无关，因此只算一次。",
    "Step 3 — every (decoder step, source token) pair through tanh":
        "Step 3：每个（解码步，源词）对经过 tanh",
    "Row 'y→x': decoder step y's projection plus source token x's.":
        "行“y→x”：解码步 y 的投影加上源词 x 的投影。",
    "The one hidden layer of the alignment model.": "对齐模型唯一的隐藏层。",
    "Step 4 — scores e_ij = vᵀ·tanh(…), softmax over the source positions":
        "Step 4：分数 e_ij = vᵀ·tanh(…)，在源位置上做 Softmax 归一化",
    "Alignment score of decoder step i with source token j.": "解码步 i 与源词 j 的对齐分数。",
    "Step 5 — context vectors c_i = Σ_j α_ij h_j":
        "Step 5：加权求和 — 上下文向量 c_i = Σ_j α_ij h_j",
    "Each decoder step's weighted average of the encoder states.":
        "每个解码步对编码器状态的加权平均。",
    "Adds the same number to every score of a row, so it cancels in the softmax.":
        "给一行的每个分数加上同一个数，因此在 Softmax 中被抵消。",
    "bias of W": "W 的偏置", "bias of U": "U 的偏置", "bias of v": "v 的偏置",
}}
