"""Kind `gpt`: a whole decoder-only model (transformers' `GPT2LMHeadModel`), token ids to the
next token, every step a formula.

    TOK_EMB_i = INDEX(WTE, t_i + 1, ·)      the token's row of the embedding table
              = (one-hot of t_i)·WTE       as the `blocks` layout writes it
    EMBEDDED = TOK_EMB + WPE                 plus its position's row
    h_l = block_l(h_{l−1}), l = 1 … L        decoder-block's steps, names ending _L1 … _LL
    FINAL = LNF(h_L)                         the final LayerNorm
    LOGITS = FINAL·WTEᵀ                      the output layer tied to the embedding table
    NEXT_PROBS = softmax(last row of LOGITS);  NEXT_TOKEN = the id of its largest entry
Editing a token id recomputes the whole sheet: the prediction follows.
"""

from dataclasses import dataclass, field

from reference.gpt import gpt_ref
from sheets._blocks.attention import CAUSAL_MASK
from sheets._blocks.embedding import ids_from_0, token_ids_input, token_lookup
from sheets._blocks.layers import (
    Gpt2BlockParams,
    LayerNormKind,
    check_gpt2_sizes,
    gpt2_block_inputs,
    gpt2_block_sections,
    scoped_sections,
)
from sheets._blocks.norms import layer_norm_inputs, layer_norm_section
from sheets._blocks.softmax import softmax_band
from workbook_builder.errors import UserError
from workbook_builder.sheet import Cell, Custom, Input, Map, MatMul, Step, section

# GPT-2 XL has 48 blocks; the inputs of every possible block are declared once
MAX_LAYERS = 48


@dataclass(frozen=True)
class GptParams(Gpt2BlockParams):
    """decoder-block's sizes (every block has them), the number of blocks and the
    vocabulary."""

    layers: int = field(default=2, metadata={"help": f"decoder blocks L (1 … {MAX_LAYERS})"})
    vocab: int = field(default=16, metadata={"help": "vocabulary size (rows of WTE)"})


TOKEN_IDS = token_ids_input(title="token ids: edit one to change the prediction")
WTE = Input("WTE", "vocab", "d_model", "token embedding table (wte), one row per id",
            ids_from_0("vocab"), "d")
WPE = Input("WPE", "seq_len", "d_model", "position embedding rows 0 … n−1 (wpe)",
            ids_from_0("seq_len"), "d")
LNF = layer_norm_inputs("LNF")
LAYER_WEIGHTS = [gpt2_block_inputs(f"_L{layer}", when=lambda p, layer=layer: p.layers >= layer)
                 for layer in range(1, MAX_LAYERS + 1)]


def _next_token(env) -> Cell:
    # the id of the largest probability: the smallest id among the maxima, as argmax
    probs, ids = env["NEXT_PROBS"].whole(), env["NEXT_PROBS"].col_labels()
    return Cell(f"=MIN(IF({probs}=MAX({probs}),{ids}))", array=True)


def next_token_steps() -> list[Step]:
    """The softmax of the last position over the vocabulary, and its argmax."""
    probs = softmax_band(
        "LOGITS", ("NEXT_MAX", "NEXT_EXP", "NEXT_SUM", "NEXT_PROBS"),
        ("m = max_v LOGITS_n,v", "e = exp(LOGITS_n − m)", "ℓ = Σ_v e_v", "p = e / ℓ"),
        ("Largest logit of the last position.", "Exponential of each shifted logit.",
         "The softmax denominator.", "The model's probability of every token id coming next."),
        last_row="vocab", row_labels=["next"], col_labels=ids_from_0("vocab"))
    # t_{n+1} = argmax_v p_v
    return [*probs, Step("NEXT_TOKEN", "t: p_t = max_v p_v",
                         Custom(1, 1, each=lambda i, j, env: _next_token(env)),
                         "The predicted next token id: change a token id above and it "
                         "follows.", row_labels=["next"], col_labels=["id"], number_format="0")]


class Gpt(LayerNormKind):
    name = "gpt"
    summary = "a whole GPT: token ids, embeddings, L decoder blocks, logits, the next token"
    sheet_title = "GPT"
    Params = GptParams
    reference = staticmethod(gpt_ref)
    inputs = [TOKEN_IDS, WTE, WPE, *(w for weights in LAYER_WEIGHTS for w in weights.values()),
              *LNF]
    test_cases = [
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6, "layers": 2, "vocab": 10},
        {"seq_len": 4, "d_model": 6, "heads": 3, "d_ff": 5, "layers": 1, "vocab": 7,
         "gelu": "exact"},
    ]
    demo_cases = [("gpt", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8, "layers": 2,
                           "vocab": 12})]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        check_gpt2_sizes(p)
        if p.layers > MAX_LAYERS:
            raise UserError(f"--layers must be 1 … {MAX_LAYERS}, got {p.layers}")
        if p.layer_number != 1:
            raise UserError("--layer-number is decoder-block's: gpt's blocks are numbered "
                            "1 … --layers")

    @classmethod
    def sections(cls, p):
        stack = []
        for layer in range(1, p.layers + 1):
            source = "EMBEDDED" if layer == 1 else f"OUTPUT_L{layer - 1}"
            blocks = gpt2_block_sections(p, LAYER_WEIGHTS[layer - 1], mask=False,
                                         divisor=p.divisor(layer))
            stack += scoped_sections(blocks, f"_L{layer}", f"Block {layer} of {p.layers}",
                                     X=source)
        return [
            section("Step 1 — the token ids and the token embedding table", [TOKEN_IDS, WTE]),
            # TOK_EMB = WTE[ids];  EMBEDDED = TOK_EMB + WPE
            section("Step 2 — embeddings: each token's row of WTE plus its position's row "
                    "of WPE", WPE,
                    [token_lookup(),
                     Step("EMBEDDED", "TOK_EMB + WPE", Map("={T}+{P}", T="TOK_EMB", P="WPE"),
                          "What enters block 1: token row plus position row."),
                     CAUSAL_MASK]),
            *stack,
            layer_norm_section("LNF", f"OUTPUT_L{p.layers}", "FINAL", p.ln_eps, *LNF),
            # LOGITS = FINAL·WTEᵀ
            section("Logits: every position against every row of the token embedding table "
                    "(GPT-2 ties its output layer to it)",
                    Step("LOGITS", "FINAL·WTEᵀ", MatMul("FINAL", "WTE", transpose="b"),
                         "Score of every token id coming after each position.")),
            section("The next token: softmax of the last position, and its most likely id",
                    next_token_steps()),
        ]
