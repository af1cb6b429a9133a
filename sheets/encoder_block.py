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

from reference.encoder_block import encoder_block_ref
from sheets._blocks.attention import X
from sheets._blocks.ffn import ACTIVATIONS, GELU_FORMS
from sheets._blocks.layers import LayerNormKind, encoder_layer_inputs, encoder_layer_sections
from sheets._blocks.norms import layer_norm_inputs, layer_norm_section
from workbook_builder.errors import UserError
from workbook_builder.sheet import Input, Map, Step, section


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


LAYER = encoder_layer_inputs()
EMB_NORM = layer_norm_inputs("EMB", when="embeddings")
# X is an input, or with --embeddings the result of BERT's embedding step
X_INPUT = dataclasses.replace(X, when=lambda p: not p.embeddings)
EMBEDDING_ROWS = [
    Input("WORD_EMB", "seq_len", "d_model", "word embedding rows, one per token",
          when="embeddings"),
    Input("POS_EMB", "seq_len", "d_model", "position embedding rows 0 … n−1",
          when="embeddings"),
    Input("TYPE_EMB", "seq_len", "d_model", "token-type embedding rows (segment)",
          when="embeddings")]


def embedding_sections(eps: float) -> list:
    """BERT's embedding step: X = LN_EMB(WORD_EMB + POS_EMB + TYPE_EMB), the looked-up rows
    as inputs and their sum and LayerNorm live."""
    # EMB_SUM = WORD_EMB + POS_EMB + TYPE_EMB
    total = Step("EMB_SUM", "WORD_EMB + POS_EMB + TYPE_EMB",
                 Map("={W}+{P}+{T}", W="WORD_EMB", P="POS_EMB", T="TYPE_EMB"),
                 "Each token's three embedding rows added.")
    return [section("Step 0 — embeddings: the rows looked up for each token, added",
                    EMBEDDING_ROWS, total),
            layer_norm_section("EMB", "EMB_SUM", "X", eps, *EMB_NORM)]


class EncoderBlock(LayerNormKind):
    name = "encoder-block"
    summary = "a whole Transformer encoder layer: MHA, residual, LayerNorm, FFN (--pre-ln)"
    sheet_title = "EncoderBlock"
    Params = EncoderBlockParams
    reference = staticmethod(encoder_block_ref)
    inputs = [*EMBEDDING_ROWS, *EMB_NORM, X_INPUT, *LAYER.values()]
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
        if p.activation not in ACTIVATIONS:
            raise UserError(f"--activation must be relu or gelu, got {p.activation!r}")
        if p.gelu not in GELU_FORMS:
            raise UserError(f"--gelu must be tanh or exact, got {p.gelu!r}")
        if p.gelu == "exact" and p.activation != "gelu":
            raise UserError("--gelu exact needs --activation gelu")
        if not 0 < p.ln_eps < 1:
            raise UserError(f"--ln-eps must be a small positive number, got {p.ln_eps}")

    @classmethod
    def sections(cls, p):
        return [*(embedding_sections(p.ln_eps) if p.embeddings else []),
                *encoder_layer_sections(p, LAYER, p.pre_ln, p.activation, p.gelu, p.ln_eps,
                                        leading=[] if p.embeddings else [X_INPUT])]
