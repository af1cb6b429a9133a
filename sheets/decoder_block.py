"""Kind `decoder-block`: one GPT-2 block (transformers' `GPT2Block`, eval), every step a
formula, weights in `X @ W` orientation (GPT-2's Conv1D stores them so already).

    LN1_OUT = LN1(X)                         LN(r) = (r − μ)/√(σ² + eps)·γ + β per row
    Q = LN1_OUT·W_Q + B_Q, likewise K and V  (the thirds of GPT-2's fused c_attn)
    head_h = softmax(mask(Q_h·K_hᵀ/√d_k))·V_h, query i sees keys j ≤ i
                                             (--scale-by-layer: the scores / --layer-number too)
    ATTN = [head_1 … head_H]·W_O + B_O       RESID_1 = X + ATTN
    LN2_OUT = LN2(RESID_1)                   FFN_OUT = GELU(LN2_OUT·W_1 + B_1)·W_2 + B_2
    OUTPUT = RESID_1 + FFN_OUT               GELU: tanh form (GPT-2's gelu_new) or exact

The block's sections are written once, in sheets/_blocks/layers.py: `gpt` stacks them as
blocks _L1, _L2, … whose formulas read their own layer's blocks (`scoped_sections`).
"""

from reference.decoder_block import decoder_block_ref
from sheets._blocks import layers
from sheets._blocks.attention import X
from workbook_builder.sheet import section

DecoderBlockParams = layers.Gpt2BlockParams
WEIGHTS = layers.gpt2_block_inputs()


class DecoderBlock(layers.LayerNormKind):
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
    def validate(cls, p):
        super().validate(p)
        layers.check_gpt2_sizes(p)

    @classmethod
    def sections(cls, p):
        return [section("Step 1 — input X (pre-LN, as GPT-2: X + attention(LN1(X)), then "
                        "+ MLP(LN2(·)); {heads} heads of d_k = {d_k})", X),
                *layers.gpt2_block_sections(p, WEIGHTS, divisor=p.divisor(p.layer_number))]
