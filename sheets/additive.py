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
from sheets._blocks.additive import additive_scores, alignment_pairs, side_projection
from sheets._blocks.attention import weighted_values
from sheets._blocks.labels import TwoSequenceKind
from sheets._blocks.softmax import softmax_steps
from workbook_builder.sheet import Input, section


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


MAIN_INPUTS = [
    Input("ENC_H", "src_len", "d_enc", "encoder states h_j", "src", "e",
          note="One row per source token (the paper's annotations h_j); keys and values at "
               "once."),
    Input("DEC_S", "tgt_len", "d_dec", "decoder states s_i", "tgt", "s",
          note="One row per decoder step: the state before emitting that target token (the "
               "paper's s_{i−1})."),
    Input("W_A", "d_dec", "d_att", "W (decoder side)", "s", "a"),
    Input("U_A", "d_enc", "d_att", "U (encoder side)", "e", "a"),
    Input("V_A", "d_att", 1, "v", "a", ["v"]),
]
BIASES = [
    Input("B_W", 1, "d_att", "bias of W", ["b"], "a", when="bias"),
    Input("B_U", 1, "d_att", "bias of U", ["b"], "a", when="bias"),
    Input("B_V", 1, 1, "bias of v", ["b"], ["v"], when="bias",
          note="Adds the same number to every score of a row, so it cancels in the softmax."),
]


class Additive(TwoSequenceKind):
    name = "additive"
    summary = "Bahdanau additive attention: score vᵀ·tanh(W·s + U·h_j), softmax, context"
    sheet_title = "Additive"
    Params = AdditiveParams
    reference = staticmethod(additive_ref)
    inputs = MAIN_INPUTS + BIASES
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
    def label_sets(cls, p, labels):
        sets = super().label_sets(p, labels)
        return {**sets, "pairs": [f"{t}→{s}" for t in sets["tgt"] for s in sets["src"]]}

    @classmethod
    def sections(cls, p):
        pre = "W·s_i+b_W + U·h_j+b_U" if p.bias else "W·s_i + U·h_j"

        def bias(name: str) -> str | None:
            return name if p.bias else None

        return [
            section("Step 1 — inputs: encoder states h_j, decoder states s_i, the weights",
                    MAIN_INPUTS, *([BIASES] if p.bias else [])),
            # WS = S·W (+ b_W)   UH = H·U (+ b_U)
            section("Step 2 — project both sides into the attention space", [
                side_projection("WS", "W·s_i", "DEC_S", "W_A", bias("B_W"), "tgt_len", "tgt",
                                "Decoder side of the score, once per decoder step."),
                side_projection("UH", "U·h_j", "ENC_H", "U_A", bias("B_U"), "src_len", "src",
                                "Encoder side of the score; it does not depend on the "
                                "decoder step, so it is computed once.")]),
            # PRE(i,j) = WS_i + UH_j   HIDDEN = tanh(PRE)
            section("Step 3 — every (decoder step, source token) pair through tanh",
                    alignment_pairs(pre, "tgt_len", "src_len")),
            # e_ij = vᵀ·HIDDEN(i,j) (+ b_v), softmax over j
            section("Step 4 — scores e_ij = vᵀ·tanh(…), softmax over the source positions", [
                additive_scores("e_ij = vᵀ·tanh(W·s_i + U·h_j)" + (" + b_v" if p.bias else ""),
                                "tgt_len", "src_len", b_v=bias("B_V")),
                *softmax_steps("SCORES", over="source tokens", of="e",
                                corner="target\\source", chart=True)]),
            # c_i = Σ_j α_ij h_j
            section("Step 5 — context vectors c_i = Σ_j α_ij h_j", weighted_values(
                "Each decoder step's weighted average of the encoder states.", "CONTEXT",
                "ENC_H", "c = A·H")),
        ]
