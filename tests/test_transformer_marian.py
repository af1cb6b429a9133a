"""transformer with a tiny random MarianMT model saved by transformers (`save_pretrained`,
weights of standard deviation ≥ 0.3): ENC_OUTPUT equals `encoder_last_hidden_state`, each
step's LOGITS the model's logits for the same prefix, GENERATED `generate(num_beams=1,
do_sample=False, max_new_tokens=K)` without its start token (the pad id after its end), in
float64 to 1e-12 relative; each config key that changes the math is reproduced or refused
naming it."""

import numpy as np
import pytest
from helpers.cli import cli, one_line_error, says_contradiction
from helpers.requires import requires_transformers
from helpers.translation import (
    ENGINES,
    MARIAN_SIZES,
    contradicted_line,
    generate_outputs,
    relative,
    save_tiny_marian,
    sheet_against,
    stray_tensor_error,
)

from workbook_builder import api

pytestmark = requires_transformers
VOCAB, PAD = 13, 12
IDS = [5, 3, 9, 1, 7]
K = 5
SMALL = MARIAN_SIZES
assert (SMALL["vocab_size"], SMALL["pad_token_id"]) == (VOCAB, PAD)


def float64_model(folder):
    """The saved model in float64, its sinusoid tables exact (transformers makes them in
    float32: sin and cos rounded to 2⁻²⁴, which the sheet's SIN and COS are not)."""
    import torch
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(folder, dtype=torch.float64).eval()
    for table in (model.model.encoder.embed_positions, model.model.decoder.embed_positions):
        rows, d = table.weight.shape
        angle = np.arange(rows)[:, None] / np.power(10000.0, 2 * np.arange(d // 2)[None] / d)
        exact = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
        with torch.no_grad():
            table.weight.copy_(torch.tensor(exact))
    return model


def marian_outputs(folder, ids, steps):
    """What `generate_outputs` gives for the saved model, float64 with exact sinusoids."""
    return generate_outputs(float64_model(folder), ids, steps)


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = save_tiny_marian(tmp_path_factory.mktemp("marian") / "tiny",
                              generation={"bad_words_ids": [[PAD]]})
    return folder, marian_outputs(folder, IDS, K)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_sheet_translates_as_generate_does(marian, tmp_path, engine):
    folder, outputs = marian
    book, worst, generated = sheet_against(folder, IDS, K, outputs, engine,
                                           tmp_path / "marian.xlsx")
    chosen = outputs[2]
    p = book.params
    assert (p.sinusoid, p.no_scale, p.start_id, p.pad_id, p.ban_pad, p.forced_end) == \
        ("halves", False, PAD, PAD, True, True)
    print(f"{engine.__name__}: largest relative |sheet − MarianMT| = {worst:.1e}; "
          f"generate {chosen}")
    assert worst < 1e-12
    assert generated == chosen
    assert chosen[-1] == 0  # the last step forced to the end id (forced_eos_token_id)
    assert PAD not in chosen  # bad_words_ids keeps generate off the pad id


def test_check_passes_and_the_pad_id_is_never_chosen(marian, tmp_path):
    folder, _ = marian
    path = tmp_path / "marian.xlsx"
    book = api.build("transformer", path, checkpoint=folder, token_ids=IDS, decode=K,
                     layout="blocks")
    assert api.check(book).passed
    blocks = api.read_blocks(book)
    assert all(blocks[f"GEN_LOGITS_T{t}"].iloc[0, PAD] == -1e30 for t in range(1, K + 1))


# config keys that change the math: each value the sheet computes equals transformers
EQUAL = [pytest.param({"scale_embedding": False}, {}, id="scale_embedding-false"),
         pytest.param({"activation_function": "relu"}, {}, id="activation-relu"),
         pytest.param({"activation_function": "gelu"}, {}, id="activation-gelu"),
         pytest.param({"activation_function": "silu"}, {}, id="activation-silu"),
         pytest.param({"forced_eos_token_id": None}, {"forced_eos_token_id": None},
                      id="forced_eos-none"),
         pytest.param({"decoder_start_token_id": 4}, {"decoder_start_token_id": 4},
                      id="decoder-start-4"),
         pytest.param({"eos_token_id": 3, "forced_eos_token_id": 3},
                      {"eos_token_id": 3, "forced_eos_token_id": 3}, id="eos-3")]


@pytest.mark.parametrize("config,generation", EQUAL)
def test_each_config_value_the_sheet_computes_equals_transformers(tmp_path, config,
                                                                   generation):
    folder = save_tiny_marian(tmp_path / "m", seed=1, generation=generation, **config)
    outputs = marian_outputs(folder, IDS[:4], 3)
    _, worst, generated = sheet_against(folder, IDS[:4], 3, outputs)
    print(f"{config}: largest relative difference {worst:.1e}; generate {outputs[2]}")
    assert worst < 1e-12
    assert generated == outputs[2]


REFUSED = [
    pytest.param({"activation_function": "gelu_new"}, {}, "activation_function",
                 id="activation-gelu_new"),
    pytest.param({"share_encoder_decoder_embeddings": False}, {},
                 "share_encoder_decoder_embeddings", id="separate-tables"),
    pytest.param({"tie_word_embeddings": False}, {}, "tie_word_embeddings", id="untied"),
    pytest.param({"decoder_ffn_dim": 5}, {}, "decoder_ffn_dim", id="ffn-dims-differ"),
    pytest.param({"decoder_attention_heads": 1}, {}, "decoder_attention_heads",
                 id="heads-differ"),
    pytest.param({}, {"repetition_penalty": 1.3}, "repetition_penalty",
                 id="repetition-penalty"),
    pytest.param({}, {"no_repeat_ngram_size": 2}, "no_repeat_ngram_size", id="no-repeat"),
    pytest.param({}, {"min_length": 3}, "min_length", id="min-length"),
    pytest.param({}, {"bad_words_ids": [[3]]}, "bad_words_ids", id="other-bad-words"),
    pytest.param({}, {"forced_eos_token_id": 4}, "forced_eos_token_id", id="forced-other"),
    pytest.param({}, {"suppress_tokens": [3]}, "suppress_tokens", id="suppress-tokens"),
]


def test_more_positions_than_the_model_has_are_refused(tmp_path):
    folder = save_tiny_marian(tmp_path / "m")
    ran = cli("build", "transformer", "-o", tmp_path / "t.xlsx", "--checkpoint", folder,
              "--token-ids", "1,2,3", "--decode", "17", "--layout", "blocks")
    assert "exceed max_position_embeddings 16" in one_line_error(ran)


@pytest.mark.parametrize("config,generation,key", REFUSED)
def test_each_config_value_the_sheet_does_not_compute_is_refused_naming_it(
        tmp_path, config, generation, key):
    folder = save_tiny_marian(tmp_path / "m", generation=generation, **config)
    ran = cli("build", "transformer", "-o", tmp_path / "t.xlsx", "--checkpoint", folder,
              "--token-ids", "1,2,3", "--layout", "blocks")
    assert key in one_line_error(ran)


def test_a_tensor_the_sheet_does_not_read_is_refused(tmp_path):
    """A stray tensor beside the model's (here a fake pooler) is named, not left out."""
    folder = save_tiny_marian(tmp_path / "m")
    assert "model.pooler.weight" in stray_tensor_error(folder, tmp_path / "t.xlsx", 6)


def test_after_generate_ends_the_sheet_gives_the_pad_id(tmp_path):
    """A model whose first choice is the end id (seed 7): generate stops after it, and the
    sheet's later steps give the pad id, as generate's padding of a finished sequence."""
    folder = save_tiny_marian(tmp_path / "m", seed=7, generation={"bad_words_ids": [[PAD]]})
    memory, logits, chosen = marian_outputs(folder, IDS, K)
    assert chosen == [0] + [PAD] * (K - 1)
    book = api.build("transformer", checkpoint=folder, token_ids=IDS, decode=K,
                     layout="blocks")
    got = {name: frame.to_numpy(float) for name, frame in api.read_blocks(book).items()}
    assert got["GENERATED"][:, 0].astype(int).tolist() == chosen
    assert relative(got["ENC_OUTPUT"], memory) < 1e-12
    assert relative(got["LOGITS_T1"][0], logits[0]) < 1e-12


# -- a flag given by hand against the checkpoint: one line naming the flag and its value --
CONTRADICTED = [
    (("--heads", "2"), "--heads 2 contradicts config.json: encoder_attention_heads gives 3)"),
    (("--d-model", "4"), "--d-model 4 contradicts config.json: d_model gives 6)"),
    (("--d-ff", "5"), "--d-ff 5 contradicts config.json: encoder_ffn_dim gives 7)"),
    (("--layers", "1"), "--layers 1 contradicts config.json: encoder_layers gives 2)"),
    (("--dec-layers", "1"), "--dec-layers 1 contradicts config.json: decoder_layers gives 2)"),
    (("--vocab", "12"), "--vocab 12 contradicts config.json: vocab_size gives 13)"),
    (("--activation", "relu"), '--activation relu contradicts the checkpoint '
                               '(activation_function "swish" gives silu)'),
    (("--pre-ln",), "--pre-ln True contradicts the checkpoint (MarianMT's layer gives False)"),
    (("--embed-ln",), "--embed-ln True contradicts the checkpoint (MarianMT's layer gives "
                      "False)"),
    (("--ln-eps", "1e-6"), "--ln-eps 1e-06 contradicts the checkpoint (MarianMT's code gives "
                           "1e-05)"),
    (("--no-scale",), "--no-scale True contradicts the checkpoint (scale_embedding true gives "
                      "False)"),
    (("--positions", "learned"), "--positions learned contradicts the checkpoint (MarianMT's "
                                 "code gives sinusoidal)"),
    (("--sinusoid", "interleaved"), "--sinusoid interleaved contradicts the checkpoint "
                                    "(MarianMT's code gives halves)"),
    (("--pad-id", "3"), "--pad-id 3 contradicts config.json: pad_token_id gives 12)"),
    (("--start-id", "3"), "--start-id 3 contradicts config.json: decoder_start_token_id "
                          "gives 12)"),
    (("--end-id", "3"), "--end-id 3 contradicts config.json: eos_token_id gives 0)"),
    (("--forced-bos",), "--forced-bos True contradicts config.json: forced_bos_token_id "
                        "gives False)"),
    (("--src-len", "4"), "--src-len 4 contradicts the checkpoint (the tokens of --text or "
                         "--token-ids give 5)"),
]


@pytest.mark.parametrize("flags,says", CONTRADICTED, ids=[f[0][2:] for f, _ in CONTRADICTED])
def test_a_flag_that_contradicts_the_checkpoint_is_one_line(marian, tmp_path, flags, says):
    folder, _ = marian
    line = contradicted_line(folder, IDS, flags, tmp_path / "t.xlsx")
    assert says_contradiction(says, line) and f"leave {flags[0]} out" in line, line


# switches the command line can only turn on, here turned off against the checkpoint
@pytest.mark.parametrize("flag,key", [("logits_bias", "MarianMT's code"),
                                      ("ban_pad", "bad_words_ids"),
                                      ("forced_end", "forced_eos_token_id")])
def test_a_switch_turned_off_against_the_checkpoint_is_refused(marian, flag, key):
    folder, _ = marian
    with pytest.raises(api.AttnsheetsError, match=f"--{flag.replace('_', '-')} False "
                                                   f"contradicts the checkpoint \\((.*: )?{key}"):
        api.build("transformer", checkpoint=folder, token_ids=IDS, layout="blocks",
                  **{flag: False})


def test_flags_that_agree_with_the_checkpoint_build_its_model(marian):
    """Every flag the checkpoint decides, given at its own value (and --bos-id, which
    changes nothing when no first id is forced): the sheet still equals transformers."""
    folder, outputs = marian
    same = {"heads": 3, "d_model": 6, "d_ff": 7, "layers": 2, "dec_layers": 2, "vocab": VOCAB,
            "activation": "silu", "pre_ln": False, "embed_ln": False, "ln_eps": 1e-5,
            "no_scale": False, "positions": "sinusoidal", "sinusoid": "halves",
            "logits_bias": True, "pad_id": PAD, "start_id": PAD, "end_id": 0,
            "ban_pad": True, "forced_end": True, "forced_bos": False, "bos_id": 7,
            "src_len": len(IDS)}
    _, worst, generated = sheet_against(folder, IDS, K, outputs, **same)
    assert worst < 1e-12
    assert generated == outputs[2]
