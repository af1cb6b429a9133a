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

import numpy as np

from reference.gpt import gpt_ref
from sheets._bands import CAUSAL_MASK
from sheets.decoder_block import (
    DecoderBlockParams,
    block_inputs,
    block_sections,
    check_block_sizes,
    gamma_near_one,
    layer_norm_band,
    scoped_sections,
)
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    ByRow,
    Cell,
    Custom,
    Input,
    Kind,
    Map,
    MatMulT,
    Reduce,
    Step,
    row_or_cell,
    section,
)

# GPT-2 XL has 48 blocks; the inputs of every possible block are declared once
MAX_LAYERS = 48


@dataclass(frozen=True)
class GptParams(DecoderBlockParams):
    """decoder-block's sizes (every block has them), the number of blocks and the
    vocabulary."""

    layers: int = field(default=2, metadata={"help": f"decoder blocks L (1 … {MAX_LAYERS})"})
    vocab: int = field(default=16, metadata={"help": "vocabulary size (rows of WTE)"})


def _ids(p) -> list[int]:
    return list(range(p.vocab))


def _positions(p) -> list[int]:
    return list(range(p.seq_len))


TOKEN_IDS = Input("TOKEN_IDS", "seq_len", 1, "token ids: edit one to change the prediction",
                  "tokens", ["id"])
WTE = Input("WTE", "vocab", "d_model", "token embedding table (wte), one row per id", _ids,
            "d")
WPE = Input("WPE", "seq_len", "d_model", "position embedding rows 0 … n−1 (wpe)", _positions,
            "d")
LNF = {"LNF_GAMMA": Input("LNF_GAMMA", BROADCAST, "d_model", "γ (scale)", ["γ"], "d"),
       "LNF_BETA": Input("LNF_BETA", BROADCAST, "d_model", "β (shift)", ["β"], "d")}
LAYER_WEIGHTS = [block_inputs(f"_L{layer}", when=lambda p, layer=layer: p.layers >= layer)
                 for layer in range(1, MAX_LAYERS + 1)]


def _token_row(i: int, env, j: int) -> str:
    # TOK_EMB_ij = WTE[t_i, j]: INDEX counts from 1. It reads column j only, not the whole
    # table: the `formulas` engine turns every cell of INDEX's range into a reference first
    return f"=INDEX({env['WTE'].col(j)},{env['TOKEN_IDS'].cell(i, 0)}+1,1)"


def _one_hot_times_table(env) -> str:
    # TOK_EMB = [t = v]·WTE: the one-hot rows, 1 where t_i is WTE's row label v (the ids),
    # times the table; the lookup as one matrix product, as fast as any other in every engine
    wte = env["WTE"]
    return (f"=MMULT(IF({env['TOKEN_IDS'].whole()}=TRANSPOSE({wte.row_labels()}),1,0),"
            f"{wte.whole()})")


def _last_logits(env) -> str:
    return env["LOGITS"].row(env["LOGITS"].rows - 1)


def _next_token(env) -> Cell:
    # the id of the largest probability: the smallest id among the maxima, as argmax
    probs, ids = env["NEXT_PROBS"].whole(), env["NEXT_PROBS"].col_labels()
    return Cell(f"=MIN(IF({probs}=MAX({probs}),{ids}))", array=True)


def next_token_steps() -> list[Step]:
    """The softmax of the last position over the vocabulary, and its argmax."""
    return [
        # m = max_v LOGITS_{n,v}
        Step("NEXT_MAX", "m = max_v LOGITS_n,v",
             ByRow(BROADCAST, BROADCAST, lambda i, env, j: f"=MAX({_last_logits(env)})",
                   per_cell=True),
             "Largest logit of the last position.", row_labels=["next"], col_labels=["max"]),
        # e_v = exp(LOGITS_{n,v} − m)
        Step("NEXT_EXP", "e = exp(LOGITS_n − m)",
             ByRow(BROADCAST, "vocab", lambda i, env, j:
                   f"=EXP({row_or_cell(env['LOGITS'], env['LOGITS'].rows - 1, j)}-"
                   f"{env['NEXT_MAX'].fixed(0, 0)})"),
             "Exponential of each shifted logit.", row_labels=["next"], col_labels=_ids),
        # ℓ = Σ_v e_v
        Step("NEXT_SUM", "ℓ = Σ_v e_v",
             Reduce("=SUM({E})", E="NEXT_EXP"),
             "The softmax denominator.", row_labels=["next"], col_labels=["sum"]),
        # p_v = e_v / ℓ
        Step("NEXT_PROBS", "p = e / ℓ", Map("={E}/{S}", E="NEXT_EXP", S="NEXT_SUM"),
             "The model's probability of every token id coming next.", row_labels=["next"],
             col_labels=_ids, heatmap=True),
        # t_{n+1} = argmax_v p_v
        Step("NEXT_TOKEN", "t: p_t = max_v p_v",
             Custom(1, 1, each=lambda i, j, env: _next_token(env)),
             "The predicted next token id: change a token id above and it follows.",
             row_labels=["next"], col_labels=["id"], number_format="0"),
    ]


def _check_token_ids(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    """gpt's reference, after the token ids are found to be ids of the vocabulary."""
    for i, token in enumerate(inputs["TOKEN_IDS"][:, 0]):
        if token != int(token) or not 0 <= token < params.vocab:
            raise UserError(f"TOKEN_IDS row {i + 1} holds {token:g}: a token id is a whole "
                            f"number 0 … {params.vocab - 1}")
    return gpt_ref(inputs, params)


class Gpt(Kind):
    name = "gpt"
    summary = "a whole GPT: token ids, embeddings, L decoder blocks, logits, the next token"
    sheet_title = "GPT"
    Params = GptParams
    reference = staticmethod(_check_token_ids)
    inputs = [TOKEN_IDS, WTE, WPE, *(w for weights in LAYER_WEIGHTS for w in weights.values()),
              *LNF.values()]
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
        check_block_sizes(p)
        if p.layers > MAX_LAYERS:
            raise UserError(f"--layers must be 1 … {MAX_LAYERS}, got {p.layers}")
        if p.layer_number != 1:
            raise UserError("--layer-number is decoder-block's: gpt's blocks are numbered "
                            "1 … --layers")

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if name == "TOKEN_IDS":
            return rng.integers(0, params.vocab, size=shape).astype(float)
        if "_GAMMA" in name:
            return gamma_near_one(shape, rng)
        return super().random_input(name, shape, params, rng)

    @classmethod
    def sections(cls, p):
        stack = []
        for layer in range(1, p.layers + 1):
            source = "EMBEDDED" if layer == 1 else f"OUTPUT_L{layer - 1}"
            blocks = block_sections(p, LAYER_WEIGHTS[layer - 1], mask=False,
                                    divisor=p.divisor(layer))
            stack += scoped_sections(blocks,
                                     f"_L{layer}", source, f"Block {layer} of {p.layers}")
        return [
            section("Step 1 — the token ids and the token embedding table", [TOKEN_IDS, WTE]),
            # TOK_EMB = WTE[ids];  EMBEDDED = TOK_EMB + WPE
            section("Step 2 — embeddings: each token's row of WTE plus its position's row "
                    "of WPE", WPE,
                    [Step("TOK_EMB", "WTE[id, ·] = [id = v]·WTE",
                          ByRow("seq_len", "d_model", _token_row,
                                whole=_one_hot_times_table),
                          "Each token's row of the embedding table, looked up by its id.",
                          col_labels="d"),
                     Step("EMBEDDED", "TOK_EMB + WPE", Map("={T}+{P}", T="TOK_EMB", P="WPE"),
                          "What enters block 1: token row plus position row."),
                     CAUSAL_MASK]),
            *stack,
            layer_norm_band("LNF", f"OUTPUT_L{p.layers}", "FINAL", p.ln_eps, LNF),
            # LOGITS = FINAL·WTEᵀ
            section("Logits: every position against every row of the token embedding table "
                    "(GPT-2 ties its output layer to it)",
                    Step("LOGITS", "FINAL·WTEᵀ", MatMulT("FINAL", "WTE"),
                         "Score of every token id coming after each position.")),
            section("The next token: softmax of the last position, and its most likely id",
                    next_token_steps()),
        ]
