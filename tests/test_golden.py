"""Golden formula text: the exact formulas of tiny workbooks, compared with files in
tests/golden/. Every registered kind has cases here (a kind without one fails
`test_every_kind_has_golden_formula_text`), in `cells` and `blocks`, the two layouts whose
formulas differ. After an intended change, regenerate with UPDATE_GOLDEN=1 and review the
diff."""

import os
from pathlib import Path

import openpyxl
import pytest
from helpers.books import build
from helpers.sheets import formulas_of

from workbook_builder.registry import load_kinds

GOLDEN = Path(__file__).parent / "golden"


def both_layouts(stem: str, kind: str, params: dict) -> dict:
    """The same tiny sheet in `cells` and in `blocks`."""
    return {f"{stem}_{layout}": (kind, params, layout) for layout in ("cells", "blocks")}


CASES = {
    "attention_n2_causal_cells": ("attention", {"seq_len": 2, "d_model": 2, "d_k": 1,
                                                "causal": True}, "cells"),
    "attention_n2_causal_blocks": ("attention", {"seq_len": 2, "d_model": 2, "d_k": 1,
                                                 "causal": True}, "blocks"),
    # every product between copies of its operands: X·W_Q + B_Q, Q·Kᵀ, A·V
    "attention_n2_causal_bias_hand": ("attention", {"seq_len": 2, "d_model": 2, "d_k": 1,
                                                    "causal": True, "bias": True}, "hand"),
    "multihead_n2_gqa_cells": ("multihead", {"seq_len": 2, "d_model": 2, "heads": 2,
                                             "kv_heads": 1}, "cells"),
    "multihead_n2_causal_bias_blocks": ("multihead", {"seq_len": 2, "d_model": 2, "heads": 2,
                                                      "kv_heads": 1, "causal": True,
                                                      "bias": True}, "blocks"),
    # the default elu+1 feature map, as it was before --features favor
    "linear_n2_cells": ("linear", {"seq_len": 2, "d_model": 2, "d_k": 2}, "cells"),
    "linear_n2_causal_blocks": ("linear", {"seq_len": 2, "d_model": 2, "d_k": 2,
                                           "causal": True}, "blocks"),
    # favor with m = 5: one smaller count m' = 4 in the error table
    **both_layouts("linear_n2_favor_causal", "linear",
                   {"seq_len": 2, "d_model": 1, "d_k": 1, "features": "favor",
                    "n_features": 5, "causal": True}),
    "linear_n2_favor_blocks": ("linear", {"seq_len": 2, "d_model": 1, "d_k": 1,
                                          "features": "favor", "n_features": 5}, "blocks"),
    **both_layouts("additive_n2_bias", "additive",
                   {"src_len": 2, "tgt_len": 1, "d_enc": 1, "d_dec": 1, "d_att": 1,
                    "bias": True}),
    "additive_n2_blocks": ("additive", {"src_len": 2, "tgt_len": 2, "d_enc": 1, "d_dec": 1,
                                        "d_att": 1}, "blocks"),
    **both_layouts("cross_attention_n2", "cross-attention",
                   {"src_len": 2, "tgt_len": 1, "d_model": 1, "d_k": 1}),
    **both_layouts("decoder_block_n2", "decoder-block",
                   {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 1}),
    "decoder_block_n2_exact_scaled_blocks": ("decoder-block", {
        "seq_len": 2, "d_model": 2, "heads": 2, "d_ff": 1, "gelu": "exact",
        "scale_by_layer": True, "layer_number": 2}, "blocks"),
    **both_layouts("encoder_block_n2_pre_ln_gelu", "encoder-block",
                   {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 1, "activation": "gelu",
                    "pre_ln": True}),
    **both_layouts("encoder_block_n2_bert", "encoder-block",
                   {"seq_len": 2, "d_model": 2, "heads": 2, "d_ff": 1, "activation": "gelu",
                    "gelu": "exact", "ln_eps": 1e-12, "embeddings": True}),
    "encoder_block_n2_relu_cells": ("encoder-block", {"seq_len": 2, "d_model": 2, "heads": 1,
                                                      "d_ff": 1}, "cells"),
    # two texts through two layers: the second text's layers read the first's weights;
    # where token 2 looks in each layer
    **both_layouts("encoder_n2_two_texts", "encoder",
                   {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 1, "layers": 2,
                    "vocab": 3, "normalize": True, "seq_len2": 1, "focus": 2}),
    # a causal query row skips key block 2
    **both_layouts("flash_n3_causal", "flash",
                   {"seq_len": 3, "d_model": 1, "d_k": 1, "block_size": 2, "causal": True}),
    "flash_n3_blocks": ("flash", {"seq_len": 3, "d_model": 1, "d_k": 1, "block_size": 2},
                        "blocks"),
    # two blocks: the second reads the first's OUTPUT_L1
    **both_layouts("gpt_n2_two_layers", "gpt",
                   {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 1, "layers": 2,
                    "vocab": 3}),
    # the vocabulary down the rows: LOGITS = WTE·FINALᵀ, the next token's softmax a column
    **both_layouts("gpt_n2_vocab_down_rows", "gpt",
                   {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 1, "layers": 1,
                    "vocab": 3, "vocab_down_rows": True}),
    **both_layouts("kv_cache_n2_gqa_bias", "kv-cache",
                   {"seq_len": 2, "d_model": 2, "heads": 2, "kv_heads": 1, "bias": True}),
    **both_layouts("llama_block_n2_biases", "llama-block",
                   {"seq_len": 2, "d_model": 4, "heads": 2, "kv_heads": 1, "d_ff": 1,
                    "qkv_bias": True, "o_bias": True, "mlp_bias": True}),
    **both_layouts("mamba_block_n2", "mamba-block",
                   {"seq_len": 2, "d_model": 1, "d_inner": 1, "d_state": 1, "dt_rank": 1,
                    "conv_kernel": 2}),
    **both_layouts("positional_n2", "positional", {"seq_len": 2, "d_model": 2, "d_k": 2}),
    "positional_n2_half_blocks": ("positional", {"seq_len": 2, "d_model": 2, "d_k": 4,
                                                 "rope": "half"}, "blocks"),
    # three heads: the slopes of a head count that is not a power of two
    **both_layouts("relative_position_n2_alibi", "relative-position",
                   {"bias": "alibi", "seq_len": 2, "d_model": 3, "heads": 3}),
    # distances 1 and 2 take the float32 log (max_exact = 1)
    **both_layouts("relative_position_n3_t5", "relative-position",
                   {"bias": "t5", "seq_len": 3, "d_model": 1, "heads": 1, "buckets": 4,
                    "max_distance": 2}),
    "relative_position_n3_t5_causal_blocks": ("relative-position", {
        "bias": "t5", "seq_len": 3, "d_model": 1, "heads": 1, "buckets": 2,
        "max_distance": 2, "causal": True}, "blocks"),
    **both_layouts("scaling_n2", "scaling", {"widths": "1,2", "seq_len": 2}),
    # BigBird: a global token and one random key per block of two queries
    **both_layouts("sliding_window_n3_bigbird", "sliding-window",
                   {"seq_len": 3, "d_model": 1, "d_k": 1, "window": 0, "global_tokens": "0",
                    "random": 1, "block_size": 2}),
    "sliding_window_n3_global_blocks": ("sliding-window", {
        "seq_len": 3, "d_model": 1, "d_k": 1, "window": 0, "global_tokens": "2"}, "blocks"),
    "sliding_window_n3_cells": ("sliding-window", {"seq_len": 3, "d_model": 1, "d_k": 1},
                                "cells"),
    **both_layouts("ssm_n2_gate", "ssm", {"seq_len": 2, "d_model": 1, "d_state": 2,
                                          "gate": True}),
    # two decode steps: step 2 reads step 1's id; pre-LN with learned positions and a bias
    **both_layouts("transformer_n2_two_steps", "transformer",
                   {"src_len": 2, "d_model": 2, "heads": 1, "d_ff": 1, "layers": 1,
                    "dec_layers": 1, "vocab": 3, "decode": 2}),
    "transformer_n2_pre_ln_learned_blocks": ("transformer", {
        "src_len": 2, "d_model": 2, "heads": 1, "d_ff": 1, "layers": 1, "dec_layers": 1,
        "vocab": 3, "decode": 2, "pre_ln": True, "positions": "learned", "logits_bias": True,
        "activation": "silu"}, "blocks"),

    # two encoder and two decoder steps: step 2 reads step 1's state and chosen id
    **both_layouts("seq2seq_n2", "seq2seq", {"src_len": 2, "hidden": 1, "src_vocab": 2,
                                             "tgt_vocab": 2, "decode": 2}),
    "seq2seq_n2_bottleneck_forced_cells": ("seq2seq", {
        "src_len": 2, "hidden": 1, "src_vocab": 2, "tgt_vocab": 2, "decode": 2,
        "no_attention": True, "teacher_forcing": True}, "cells"),
    # the backward GRU up the rows: step 1 reads the state of step 2
    "seq2seq_n2_bidirectional_blocks": ("seq2seq", {
        "src_len": 2, "hidden": 1, "src_vocab": 2, "tgt_vocab": 2, "decode": 1,
        "bidirectional": True}, "blocks"),
    # two steps of each: t > 1 reads the step before (Adam: its moments)
    **both_layouts("train_n2_causal", "train",
                   {"seq_len": 2, "vocab": 2, "d_k": 1, "steps": 2, "causal": True}),
    **both_layouts("train_n2_adam_compare", "train",
                   {"seq_len": 2, "vocab": 2, "d_k": 1, "steps": 2, "optimizer": "adam",
                    "lr": 0.1, "compare_scale": True}),
}


def formula_text(path: Path) -> str:
    """One line per formula cell, plus the defined names, in sheet order."""
    lines = [f"{where} {{{text}}}" if array else f"{where} {text}"
             for where, text, array in formulas_of(path)]
    for name, defined in sorted(openpyxl.load_workbook(path).defined_names.items()):
        lines.append(f"name {name} -> {defined.attr_text}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind_name", sorted(load_kinds()))
def test_every_kind_has_golden_formula_text(kind_name):
    """A kind registered without golden cases in both layouts is named here."""
    layouts = {layout for kind, _, layout in CASES.values() if kind == kind_name}
    assert {"cells", "blocks"} <= layouts, \
        f"kind {kind_name} has golden formula text for {sorted(layouts) or 'no layout'}: " \
        f"add its cases to CASES in tests/test_golden.py and run with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_formula_text_matches_golden(tmp_path, case):
    kind, params, layout = CASES[case]
    got = formula_text(build(tmp_path, kind, params, layout=layout))
    golden = GOLDEN / f"{case}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(got, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden.name}: run with UPDATE_GOLDEN=1"
    assert got == golden.read_text(encoding="utf-8")
