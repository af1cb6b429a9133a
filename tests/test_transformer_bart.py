"""transformer with a tiny random BART model saved by transformers (`save_pretrained` of a
`BartForConditionalGeneration`, weights of standard deviation ≥ 0.3): ENC_OUTPUT equals
`encoder_last_hidden_state`, each step's LOGITS the model's logits for the same prefix,
GENERATED `generate(num_beams=1, do_sample=False, max_new_tokens=K)` without its start token
(the pad id after its end), in float64 to 1e-12 relative; each config key that changes the
math is reproduced or refused naming it."""

import json

import numpy as np
import pytest
from helpers.cli import cli, one_line_error, says_contradiction
from helpers.requires import requires_transformers
from helpers.translation import (
    BART_SIZES,
    ENGINES,
    contradicted_line,
    generate_outputs,
    relative,
    save_tiny_bart,
    sheet_against,
    stray_tensor_error,
)

from workbook_builder import api

pytestmark = requires_transformers
VOCAB, BOS, PAD, EOS = 17, 0, 1, 2
IDS = [5, 9, 3, 14, 7, 11]
K = 4
SMALL = BART_SIZES
assert SMALL["vocab_size"] == VOCAB


def bart_outputs(folder, ids, steps):
    """What `generate_outputs` gives for the saved model in float64."""
    import torch
    from transformers import BartForConditionalGeneration

    model = BartForConditionalGeneration.from_pretrained(folder, dtype=torch.float64).eval()
    return generate_outputs(model, ids, steps)


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    folder = save_tiny_bart(tmp_path_factory.mktemp("bart") / "tiny",
                            generation={"forced_bos_token_id": BOS})
    return folder, bart_outputs(folder, IDS, K)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_sheet_generates_as_bart_does(bart, tmp_path, engine):
    folder, outputs = bart
    book, worst, generated = sheet_against(folder, IDS, K, outputs, engine,
                                           tmp_path / "bart.xlsx")
    chosen = outputs[2]
    p = book.params
    assert (p.positions, p.embed_ln, p.no_scale, p.start_id, p.pad_id, p.end_id,
            p.forced_bos, p.bos_id, p.forced_end, p.activation) == \
        ("per_stack", True, True, EOS, PAD, EOS, True, BOS, True, "gelu")
    print(f"{engine.__name__}: largest relative |sheet − BART| = {worst:.1e}; "
          f"generate {chosen}")
    assert worst < 1e-12
    assert generated == chosen
    assert chosen[0] == BOS  # forced_bos_token_id
    assert chosen[-1] in (EOS, PAD)  # forced_eos_token_id at the last step, or ended before


def test_check_passes_and_the_embedding_norm_and_positions_are_on_the_sheet(bart, tmp_path):
    folder, _ = bart
    from safetensors.numpy import load_file

    book = api.build("transformer", tmp_path / "bart.xlsx", checkpoint=folder,
                     token_ids=IDS, decode=K, layout="blocks")
    assert api.check(book).passed
    blocks = api.read_blocks(book)
    weights = load_file(str(folder / "model.safetensors"))
    # position p is row p + 2 of each stack's own table
    assert np.array_equal(blocks["ENC_POS_EMB"].to_numpy(float),
                          weights["model.encoder.embed_positions.weight"][2:2 + len(IDS)])
    assert np.array_equal(blocks["DEC_POS_EMB"].to_numpy(float),
                          weights["model.decoder.embed_positions.weight"][2:2 + K])
    assert {"ENC_X_LN", "DEC_X_LN_T1", f"DEC_X_LN_T{K}"} <= set(blocks)
    assert blocks["GEN_LOGITS_T1"].iloc[0, BOS] != -1e30
    assert (blocks["GEN_LOGITS_T1"].to_numpy(float)[0, 1:] == -1e30).all()


# config keys that change the math: each value the sheet computes equals transformers
EQUAL = [pytest.param({}, {}, id="defaults"),
         pytest.param({"scale_embedding": True}, {}, id="scale_embedding-true"),
         pytest.param({"activation_function": "relu"}, {}, id="activation-relu"),
         pytest.param({"activation_function": "silu"}, {}, id="activation-silu"),
         pytest.param({"activation_function": "swish"}, {}, id="activation-swish"),
         pytest.param({}, {"forced_bos_token_id": 6}, id="forced_bos-6"),
         pytest.param({"forced_eos_token_id": None}, {"forced_eos_token_id": None},
                      id="forced_eos-none"),
         pytest.param({"decoder_start_token_id": 4}, {"decoder_start_token_id": 4},
                      id="decoder-start-4"),
         pytest.param({"eos_token_id": 3, "forced_eos_token_id": 3},
                      {"eos_token_id": 3, "forced_eos_token_id": 3}, id="eos-3"),
         pytest.param({}, {"bad_words_ids": [[PAD]]}, id="bad-words-pad")]


@pytest.mark.parametrize("config,generation", EQUAL)
def test_each_config_value_the_sheet_computes_equals_transformers(tmp_path, config,
                                                                   generation):
    folder = save_tiny_bart(tmp_path / "m", seed=1, generation=generation, **config)
    outputs = bart_outputs(folder, IDS[:4], 3)
    _, worst, generated = sheet_against(folder, IDS[:4], 3, outputs)
    print(f"{config} {generation}: largest relative difference {worst:.1e}; "
          f"generate {outputs[2]}")
    assert worst < 1e-12
    assert generated == outputs[2]


def test_one_step_with_both_forced_ids_ends_as_generate_does(tmp_path):
    """With K = 1 the first step is also the last: generate's forced end wins."""
    folder = save_tiny_bart(tmp_path / "m", seed=2, generation={"forced_bos_token_id": BOS})
    _, logits, chosen = bart_outputs(folder, IDS, 1)
    book = api.build("transformer", checkpoint=folder, token_ids=IDS, decode=1,
                     layout="blocks")
    got = api.read_blocks(book)
    assert chosen == [EOS]
    assert int(got["GENERATED"].iloc[0, 0]) == EOS
    assert relative(got["LOGITS_T1"].to_numpy(float)[0], logits[0]) < 1e-12


REFUSED = [
    pytest.param({"activation_function": "gelu_new"}, {}, "activation_function",
                 id="activation-gelu_new"),
    pytest.param({"tie_word_embeddings": False}, {}, "tie_word_embeddings", id="untied"),
    pytest.param({"decoder_ffn_dim": 5}, {}, "decoder_ffn_dim", id="ffn-dims-differ"),
    pytest.param({"decoder_attention_heads": 5}, {}, "decoder_attention_heads",
                 id="heads-differ"),
    pytest.param({}, {"repetition_penalty": 1.3}, "repetition_penalty",
                 id="repetition-penalty"),
    pytest.param({}, {"no_repeat_ngram_size": 3}, "no_repeat_ngram_size", id="no-repeat"),
    pytest.param({}, {"min_length": 3}, "min_length", id="min-length"),
    pytest.param({}, {"bad_words_ids": [[3]]}, "bad_words_ids", id="other-bad-words"),
    pytest.param({}, {"forced_eos_token_id": 4}, "forced_eos_token_id", id="forced-other"),
    pytest.param({}, {"forced_bos_token_id": 99}, "forced_bos_token_id",
                 id="forced-bos-outside"),
    pytest.param({}, {"suppress_tokens": [3]}, "suppress_tokens", id="suppress-tokens"),
    pytest.param({}, {"encoder_no_repeat_ngram_size": 2}, "encoder_no_repeat_ngram_size",
                 id="encoder-no-repeat"),
]


@pytest.mark.parametrize("config,generation,key", REFUSED)
def test_each_config_value_the_sheet_does_not_compute_is_refused_naming_it(
        tmp_path, config, generation, key):
    folder = save_tiny_bart(tmp_path / "m", generation=generation, **config)
    ran = cli("build", "transformer", "-o", tmp_path / "t.xlsx", "--checkpoint", folder,
              "--token-ids", "3,4,5", "--layout", "blocks")
    assert key in one_line_error(ran)


def test_another_model_type_is_refused_naming_it(tmp_path):
    folder = save_tiny_bart(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "mbart"}),
                                        encoding="utf-8")
    ran = cli("build", "transformer", "-o", tmp_path / "t.xlsx", "--checkpoint", folder,
              "--token-ids", "3,4,5", "--layout", "blocks")
    assert "model_type" in one_line_error(ran)


def test_more_steps_than_the_model_has_positions_are_refused(tmp_path):
    folder = save_tiny_bart(tmp_path / "m")
    ran = cli("build", "transformer", "-o", tmp_path / "t.xlsx", "--checkpoint", folder,
              "--token-ids", "3,4,5", "--decode", "13", "--layout", "blocks")
    assert "exceed max_position_embeddings 12" in one_line_error(ran)


def test_a_tensor_the_sheet_does_not_read_is_refused(tmp_path):
    """A stray tensor beside the model's (here a fake pooler) is named, not left out."""
    folder = save_tiny_bart(tmp_path / "m")
    assert "model.pooler.weight" in stray_tensor_error(folder, tmp_path / "t.xlsx", 10)


def test_text_is_encoded_by_the_checkpoints_tokenizer(tmp_path):
    """A WordLevel tokenizer.json saved into the folder: --text reaches SRC_IDS as its ids,
    the source rows are labelled by its tokens, and the sheet still equals the model."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    folder = save_tiny_bart(tmp_path / "m", seed=3)
    words = ["<s>", "<pad>", "</s>", *(f"w{i}" for i in range(3, VOCAB))]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    text = "w7 w3 w12 w9 w16"
    ids = [7, 3, 12, 9, 16]
    assert tokenizer.encode(text).ids == ids
    memory, logits, chosen = bart_outputs(folder, ids, 3)
    path = tmp_path / "text.xlsx"
    book = api.build("transformer", path, checkpoint=folder, text=text, decode=3,
                     layout="blocks")
    assert book.params.src_len == len(ids)
    got = api.read_blocks(book)
    assert got["SRC_IDS"].iloc[:, 0].astype(int).tolist() == ids
    assert got["SRC_IDS"].index.tolist() == text.split()
    assert relative(got["ENC_OUTPUT"].to_numpy(float), memory) < 1e-12
    assert got["GENERATED"].iloc[:, 0].astype(int).tolist() == chosen
    for t in range(3):
        assert relative(got[f"LOGITS_T{t + 1}"].to_numpy(float)[0], logits[t]) < 1e-12


def test_a_t5_checkpoint_is_refused_in_one_line_saying_why(tmp_path):
    from transformers import T5Config, T5ForConditionalGeneration

    folder = tmp_path / "t5"
    T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=8, d_kv=4, d_ff=6,
                                        num_layers=1, num_heads=2)).save_pretrained(folder)
    line = one_line_error(cli("build", "transformer", "-o", tmp_path / "t.xlsx",
                              "--checkpoint", folder, "--token-ids", "3,4,5"))
    assert "T5" in line and "relative position buckets" in line
    assert not (tmp_path / "t.xlsx").exists()


# -- a flag given by hand against the checkpoint: one line naming the flag and its value --
CONTRADICTED = [
    (("--heads", "5"), "--heads 5 contradicts config.json: encoder_attention_heads gives 2)"),
    (("--d-model", "8"), "--d-model 8 contradicts config.json: d_model gives 10)"),
    (("--d-ff", "5"), "--d-ff 5 contradicts config.json: encoder_ffn_dim gives 9)"),
    (("--layers", "2"), "--layers 2 contradicts config.json: encoder_layers gives 1)"),
    (("--dec-layers", "1"), "--dec-layers 1 contradicts config.json: decoder_layers gives 2)"),
    (("--vocab", "16"), "--vocab 16 contradicts config.json: vocab_size gives 17)"),
    (("--activation", "relu"), "--activation relu contradicts the checkpoint "
                               "(activation_function gives gelu)"),
    (("--pre-ln",), "--pre-ln True contradicts the checkpoint (BART's layer gives False)"),
    (("--ln-eps", "1e-6"), "--ln-eps 1e-06 contradicts the checkpoint (BART's code gives "
                           "1e-05)"),
    (("--positions", "learned"), "--positions learned contradicts the checkpoint (BART's code "
                                 "gives per_stack)"),
    (("--pad-id", "3"), "--pad-id 3 contradicts config.json: pad_token_id gives 1)"),
    (("--start-id", "3"), "--start-id 3 contradicts config.json: decoder_start_token_id "
                          "gives 2)"),
    (("--end-id", "3"), "--end-id 3 contradicts config.json: eos_token_id gives 2)"),
    (("--bos-id", "3"), "--bos-id 3 contradicts config.json: forced_bos_token_id gives 0)"),
    (("--ban-pad",), "--ban-pad True contradicts config.json: bad_words_ids gives False)"),
    (("--src-len", "4"), "--src-len 4 contradicts the checkpoint (the tokens of --text or "
                         "--token-ids give 6)"),
]


@pytest.mark.parametrize("flags,says", CONTRADICTED, ids=[f[0][2:] for f, _ in CONTRADICTED])
def test_a_flag_that_contradicts_the_checkpoint_is_one_line(bart, tmp_path, flags, says):
    folder, _ = bart
    line = contradicted_line(folder, IDS, flags, tmp_path / "t.xlsx")
    assert says_contradiction(says, line) and f"leave {flags[0]} out" in line, line


# switches the command line can only turn on, here turned off against the checkpoint
@pytest.mark.parametrize("flag,key", [("no_scale", "scale_embedding false"),
                                      ("embed_ln", "BART's layer"),
                                      ("logits_bias", "BART's code"),
                                      ("forced_bos", "forced_bos_token_id"),
                                      ("forced_end", "forced_eos_token_id")])
def test_a_switch_turned_off_against_the_checkpoint_is_refused(bart, flag, key):
    folder, _ = bart
    with pytest.raises(api.AttnsheetsError, match=f"--{flag.replace('_', '-')} False "
                                                   f"contradicts the checkpoint \\((.*: )?{key}"):
        api.build("transformer", checkpoint=folder, token_ids=IDS, layout="blocks",
                  **{flag: False})


def test_flags_that_agree_with_the_checkpoint_build_its_model(bart):
    """Every flag the checkpoint decides, given at its own value (and --sinusoid, which
    changes nothing with learned positions): the sheet still equals transformers."""
    folder, outputs = bart
    same = {"heads": 2, "d_model": 10, "d_ff": 9, "layers": 1, "dec_layers": 2,
            "vocab": VOCAB, "activation": "gelu", "pre_ln": False, "embed_ln": True,
            "ln_eps": 1e-5, "no_scale": True, "positions": "per_stack",
            "sinusoid": "halves", "logits_bias": True, "pad_id": PAD, "start_id": EOS,
            "end_id": EOS, "ban_pad": False, "forced_end": True, "forced_bos": True,
            "bos_id": BOS, "src_len": len(IDS)}
    _, worst, generated = sheet_against(folder, IDS, K, outputs, **same)
    assert worst < 1e-12
    assert generated == outputs[2]
