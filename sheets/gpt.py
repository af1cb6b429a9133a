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

A vocabulary wider than Excel's columns (GPT-2's 50,257), or --vocab-down-rows, lays the
vocabulary down the rows instead, one row per id:
    LOGITS = WTE·FINALᵀ                      vocab × n, one column per position
    NEXT_PROBS = softmax(last column of LOGITS), one column;  NEXT_TOKEN its argmax
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
from workbook_builder.sheet.limits import EXCEL_COLS

# GPT-2 XL has 48 blocks; the inputs of every possible block are declared once
MAX_LAYERS = 48
# the widest vocabulary a row of logits holds: every block has its row labels on its left
WIDEST_VOCAB_ACROSS = EXCEL_COLS - 1


@dataclass(frozen=True)
class GptParams(Gpt2BlockParams):
    """decoder-block's sizes (every block has them), the number of blocks and the
    vocabulary."""

    layers: int = field(default=2, metadata={"help": f"decoder blocks L (1 … {MAX_LAYERS})"})
    vocab: int = field(default=16, metadata={"help": "vocabulary size (rows of WTE)"})
    vocab_down_rows: bool = field(default=False, metadata={
        "help": "lay the vocabulary down the rows: LOGITS = WTE·FINALᵀ (vocab × n) and the "
                f"next token's softmax one column (always, for a vocabulary over "
                f"{WIDEST_VOCAB_ACROSS:,})"})

    @property
    def logits_down_rows(self) -> bool:
        """Whether LOGITS and the NEXT_ steps run down the rows (vocab × n, one column
        each), the reference's orientation too: a row of the whole vocabulary would be
        wider than Excel's columns, or it is asked for."""
        return self.vocab_down_rows or self.vocab > WIDEST_VOCAB_ACROSS


TOKEN_IDS = token_ids_input(title="token ids: edit one to change the prediction")
WTE = Input("WTE", "vocab", "d_model", "token embedding table (wte), one row per id",
            ids_from_0("vocab"), "d")
WPE = Input("WPE", "seq_len", "d_model", "position embedding rows 0 … n−1 (wpe)",
            ids_from_0("seq_len"), "d")
LNF = layer_norm_inputs("LNF")
LAYER_WEIGHTS = [gpt2_block_inputs(f"_L{layer}", when=lambda p, layer=layer: p.layers >= layer)
                 for layer in range(1, MAX_LAYERS + 1)]


def _next_token(env, down_rows: bool) -> Cell:
    # the id of the largest probability: the smallest id among the maxima, as argmax; the
    # ids are the labels along NEXT_PROBS (above it, or left of it down the rows)
    probs = env["NEXT_PROBS"]
    ids = probs.row_labels() if down_rows else probs.col_labels()
    return Cell(f"=MIN(IF({probs.whole()}=MAX({probs.whole()}),{ids}))", array=True)


NEXT_NAMES = ("NEXT_MAX", "NEXT_EXP", "NEXT_SUM", "NEXT_PROBS")
NEXT_EXPLANATIONS = ("Largest logit of the last position.", "Exponential of each shifted logit.",
                     "The softmax denominator.",
                     "The model's probability of every token id coming next.")


def next_token_steps(down_rows: bool = False) -> list[Step]:
    """The softmax of the last position over the vocabulary, and its argmax: along the
    last row of LOGITS, or `down_rows` down its last column (LOGITS vocab × n)."""
    if down_rows:
        probs = softmax_band(
            "LOGITS", NEXT_NAMES,
            ("m = max_v LOGITS_v,n", "e_v = exp(LOGITS_v,n − m)", "ℓ = Σ_v e_v", "p = e / ℓ"),
            NEXT_EXPLANATIONS, last_col="vocab", row_labels=ids_from_0("vocab"),
            col_labels=["next"])
    else:
        probs = softmax_band(
            "LOGITS", NEXT_NAMES,
            ("m = max_v LOGITS_n,v", "e = exp(LOGITS_n − m)", "ℓ = Σ_v e_v", "p = e / ℓ"),
            NEXT_EXPLANATIONS, last_row="vocab", row_labels=["next"],
            col_labels=ids_from_0("vocab"))
    # t_{n+1} = argmax_v p_v
    return [*probs, Step("NEXT_TOKEN", "t: p_t = max_v p_v",
                         Custom(1, 1, each=lambda i, j, env: _next_token(env, down_rows)),
                         "The predicted next token id: change a token id above and it "
                         "follows.", row_labels=["next"], col_labels=["id"], number_format="0")]


def logits_section(down_rows: bool):
    """LOGITS, one row per position, or `down_rows` one row per token id. The step keeps
    its name either way: it is the same scores (the reference gives them in the sheet's
    orientation), so `check`, exercises and the golden text name it alike."""
    if down_rows:
        # LOGITS = WTE·FINALᵀ = (FINAL·WTEᵀ)ᵀ, vocab × n
        return section("Logits: every row of the token embedding table against every "
                       "position (GPT-2 ties its output layer to it), one row per token id",
                       Step("LOGITS", "WTE·FINALᵀ", MatMul("WTE", "FINAL", transpose="b"),
                            "Score of every token id (down the rows) coming after each "
                            "position (across)."))
    # LOGITS = FINAL·WTEᵀ
    return section("Logits: every position against every row of the token embedding table "
                   "(GPT-2 ties its output layer to it)",
                   Step("LOGITS", "FINAL·WTEᵀ", MatMul("FINAL", "WTE", transpose="b"),
                        "Score of every token id coming after each position."))


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
        # the vocabulary down the rows: LOGITS vocab × n, the next token's softmax a column
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6, "layers": 1, "vocab": 9,
         "vocab_down_rows": True},
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
    def describe(cls, p):
        # vocab_down_rows=False would read as "across" where the vocabulary is too wide
        wide = p.logits_down_rows and not p.vocab_down_rows
        return super().describe(p) + (" (the vocabulary down the rows: wider than Excel's "
                                       "columns)" if wide else "")

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
            logits_section(p.logits_down_rows),
            section("The next token: softmax of the last position, and its most likely id",
                    next_token_steps(p.logits_down_rows)),
        ]
