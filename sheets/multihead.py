"""Kind `multihead`: multi-head attention, heads as contiguous column slices, optional
grouped K/V heads (GQA).

    Q = X·W_Q (n×H·d_k)   K = X·W_K, V = X·W_V (n×G·d_k)   d_k = d_model / H
    head h uses K/V head g = ⌊h·G/H⌋
    head_h = softmax(Q_h·K_gᵀ/√d_k)·V_g   CONCAT = [head_1 … head_H]   O = CONCAT·W_O
"""

from dataclasses import dataclass, field

from reference.multihead import multihead_ref
from sheets._steps import causal_mask, dims, matmul, matmul_transposed, scale, softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.kind import Kind


@dataclass(frozen=True)
class MultiheadParams:
    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width; d_k = d_model/heads"})
    heads: int = field(default=2, metadata={"help": "query heads H (must divide d_model)"})
    kv_heads: int | None = field(default=None, metadata={
        "help": "key/value heads G (must divide H; 1 = multi-query); default H"})
    causal: bool = field(default=False, metadata={
        "help": "mask future tokens (query i sees keys j ≤ i)"})

    @property
    def groups(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads


class Multihead(Kind):
    name = "multihead"
    summary = "multi-head attention: split, per-head softmax, concat, W_O (GQA via --kv-heads)"
    sheet_title = "Multihead"
    Params = MultiheadParams
    reference = staticmethod(multihead_ref)
    test_cases = [
        {"seq_len": 3, "d_model": 6, "heads": 3},
        {"seq_len": 5, "d_model": 4, "heads": 2, "kv_heads": 1, "causal": True},
        {"seq_len": 4, "d_model": 8, "heads": 4, "kv_heads": 2, "causal": True},
    ]
    input_dims = {"X": ("seq_len", "d_model"), "W_Q": ("d_model", None),
                  "W_K": ("d_model", None), "W_V": ("d_model", None), "W_O": (None, "d_model")}
    demo_cases = [
        ("multihead", {"seq_len": 4, "d_model": 4, "heads": 2}),
        ("multihead_gqa_causal", {"seq_len": 5, "d_model": 8, "heads": 4, "kv_heads": 2,
                                  "causal": True}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.d_model % p.heads:
            raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
        if p.heads % p.groups:
            raise UserError(f"--kv-heads {p.groups} does not divide --heads {p.heads}")

    @classmethod
    def input_shapes(cls, p):
        return {"X": (p.seq_len, p.d_model), "W_Q": (p.d_model, p.heads * p.d_k),
                "W_K": (p.d_model, p.groups * p.d_k), "W_V": (p.d_model, p.groups * p.d_k),
                "W_O": (p.heads * p.d_k, p.d_model)}

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        d_k, heads, groups = p.d_k, p.heads, p.groups
        model_dims = dims("d", p.d_model)

        def head_dims(prefix, count):
            return [f"{prefix}{h + 1}.{j + 1}" for h in range(count) for j in range(d_k)]

        sheet.text(f"Step 1 — inputs ({heads} query heads, {groups} key/value heads, "
                   f"d_k = d_model/H = {d_k})", bold=True)
        with sheet.band():
            x = sheet.input_block("X", inputs["X"], "token embeddings", tokens, model_dims)
            wq = sheet.input_block("W_Q", inputs["W_Q"], "query weights, heads side by side",
                                   model_dims, head_dims("q", heads))
            wk = sheet.input_block("W_K", inputs["W_K"], "key weights", model_dims,
                                   head_dims("k", groups))
            wv = sheet.input_block("W_V", inputs["W_V"], "value weights", model_dims,
                                   head_dims("v", groups))
        sheet.text("Step 2a — projections; head h owns columns h·d_k … (h+1)·d_k − 1",
                   bold=True)
        with sheet.band():
            q = matmul(sheet, "Q", "Q = X·W_Q", x, wq, tokens, head_dims("q", heads))
            k = matmul(sheet, "K", "K = X·W_K", x, wk, tokens, head_dims("k", groups))
            v = matmul(sheet, "V", "V = X·W_V", x, wv, tokens, head_dims("v", groups))
            mask = causal_mask(sheet, p.seq_len) if p.causal else None
        head_blocks = []
        for h in range(heads):
            g = h * groups // heads             # K/V head shared by this query head
            qs, ks = (h * d_k, (h + 1) * d_k - 1), (g * d_k, (g + 1) * d_k - 1)
            sfx = f"_H{h + 1}"
            sheet.text(f"Head {h + 1} — query columns q{h + 1}.*, key/value head {g + 1}",
                       bold=True)
            with sheet.band():
                scores = matmul_transposed(sheet, "SCORES" + sfx, f"S = Q_{h + 1}·K_{g + 1}ᵀ",
                                           q, k, tokens, tokens, a_cols=qs, b_cols=ks)
                scaled = scale(sheet, "SCALED" + sfx, scores, d_k, tokens,
                               "Scores of this head divided by √d_k.")
                weights = softmax_steps(sheet, scaled, mask, tokens, sfx)
                head_blocks.append(matmul(
                    sheet, "HEAD" + sfx, f"head_{h + 1} = A·V_{g + 1}", weights, v, tokens,
                    dims(f"h{h + 1}.", d_k), f"Output of head {h + 1}.", b_cols=ks))
        sheet.text("Step 2f-4 — concatenate the heads and mix them with W_O", bold=True)
        with sheet.band():
            concat = sheet.step_block(
                "CONCAT", "[head_1 … head_H]", p.seq_len, heads * d_k, tokens,
                head_dims("h", heads),
                cells=lambda i, j: f"={head_blocks[j // d_k].cell(i, j % d_k)}",
                col_array=(d_k, lambda h, me: f"={head_blocks[h].whole()}"),
                explanation="The head outputs side by side.")
            wo = sheet.input_block("W_O", inputs["W_O"], "output weights",
                                   head_dims("h", heads), model_dims)
            matmul(sheet, "OUTPUT", "O = CONCAT·W_O", concat, wo, tokens, model_dims)



# sheet text in Chinese (workbook_builder/i18n.py); the tutorial's own step names
Multihead.translations = {"zh": {
    "multi-head attention: split, per-head softmax, concat, W_O (GQA via --kv-heads)":
        "多头注意力：拆分、各头 Softmax、拼接、W_O（--kv-heads 即 GQA）",
    "Step 1 — inputs ({h} query heads, {g} key/value heads, d_k = d_model/H = {d})":
        "Step 1：输入（{h} 个查询头，{g} 个键/值头，d_k = d_model/H = {d}）",
    "query weights, heads side by side": "查询权重，各头并排",
    "Step 2a — projections; head h owns columns h·d_k … (h+1)·d_k − 1":
        "Step 2f-1：拆分 Q、K、V — 头 h 占第 h·d_k … (h+1)·d_k − 1 列",
    "Head {h} — query columns q{hq}.*, key/value head {g}":
        "Step 2f-2：头 {h} 独立做注意力（查询列 q{hq}.*，键/值头 {g}）",
    "Output of head {h}.": "头 {h} 的输出。",
    "Step 2f-4 — concatenate the heads and mix them with W_O":
        "Step 2f-4：拼接各头，再用 W_O 线性变换整合",
    "The head outputs side by side.": "各头的输出并排拼接。",
}}
