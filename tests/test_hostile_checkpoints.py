"""Hostile checkpoints are one line and exit 2: safetensors headers whose offsets, dtypes or
shapes lie, config.json values of the wrong type or nested beyond reason, scalar tensors
where matrices belong, tokenizer.json files that are not UTF-8 or cannot encode. The
checkpoints are written with NumPy (no PyTorch needed, `helpers.numpy_models`): random
weights of tiny models named by the families' own tables."""

from importlib.util import find_spec

import numpy as np
import pytest
from helpers.cli import cli, one_line_error
from helpers.numpy_models import (
    BERT_CONFIG,
    HEADS,
    LLAMA_CONFIG,
    bert_weights,
    gpt2_weights,
    llama_weights,
    model_folder,
)

from workbook_builder.models.families import BERT

requires_tokenizers = pytest.mark.skipif(
    find_spec("tokenizers") is None, reason="tokenizers is not installed (pip install "
                                            "tokenizers)")


def header_change(key: str, value):
    def change(header):
        header[BERT.anchor][key] = value
    return change


def overlapping(header):
    header[BERT.layer["W_K"][0].format(layer=0)]["data_offsets"] = \
        header[BERT.anchor]["data_offsets"]


def build_line(tmp_path, kind, folder, *args) -> str:
    ran = cli("build", kind, "--checkpoint", folder, *args, "-o", tmp_path / "x.xlsx")
    line = one_line_error(ran)
    assert not (tmp_path / "x.xlsx").exists()
    return line


@pytest.mark.parametrize("change,says", [
    (header_change("data_offsets", [-64, 0]), "must be whole numbers, 0 or more"),
    (header_change("data_offsets", [64, 0]), "needs 64 bytes, its data_offsets [64, 0] "
                                             "hold -64"),
    (header_change("data_offsets", ["0", "64"]), "must be whole numbers, 0 or more"),
    (header_change("dtype", ["F32"]), "has dtype ['F32'], which this reader does not know"),
    (header_change("shape", [10**9, 10**9]), "needs 4,000,000,000,000,000,000 bytes"),
    (overlapping, "overlap in the data"),
], ids=["negative", "reversed", "strings", "dtype-list", "10^9x10^9", "overlapping"])
def test_a_safetensors_header_that_lies_is_one_line(tmp_path, change, says):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG, change)
    assert says in build_line(tmp_path, "encoder-block", folder, "--token-ids", "1,2")


@pytest.mark.parametrize("kind,weights,config,says", [
    ("encoder-block", bert_weights, {**BERT_CONFIG, "num_hidden_layers": "abc"},
     "num_hidden_layers must be a whole number, 1 or more, not 'abc'"),
    ("encoder-block", bert_weights, {**BERT_CONFIG, "num_hidden_layers": -1},
     "num_hidden_layers must be a whole number, 1 or more, not -1"),
    ("encoder-block", bert_weights, {**BERT_CONFIG, "hidden_act": ["gelu"]},
     "hidden_act must be a text, not ['gelu']"),
    ("encoder-block", bert_weights, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "not readable JSON (nested too deeply)"),
    ("llama-block", llama_weights, {**LLAMA_CONFIG, "rope_scaling": [1]},
     "rope_scaling must be an object ({…}), not [1]"),
    ("llama-block", llama_weights, {**LLAMA_CONFIG, "head_dim": "2"},
     "head_dim must be a whole number, 1 or more, not '2'"),
], ids=["layers-text", "layers-negative", "act-list", "nested", "rope-list", "head-dim-text"])
def test_a_config_value_of_the_wrong_type_names_the_key(tmp_path, kind, weights, config, says):
    folder = model_folder(tmp_path / "m", weights(), config)
    line = build_line(tmp_path, kind, folder)
    assert f"config.json: {says}" in line or says in line, line


@pytest.mark.parametrize("kind,weights,scalar", [
    ("decoder-block", gpt2_weights, "h.0.attn.c_attn.weight"),
    ("decoder-block", gpt2_weights, "wpe.weight"),
    ("encoder-block", bert_weights, BERT.anchor),
    ("encoder-block", bert_weights, "encoder.layer.0.intermediate.dense.weight"),
])
def test_a_scalar_where_a_matrix_belongs_is_one_line(tmp_path, kind, weights, scalar):
    folder = model_folder(tmp_path / "m", {**weights(), scalar: np.array(1.0)}, None)
    line = build_line(tmp_path, kind, folder, "--heads", str(HEADS))
    assert f"tensor {scalar} has shape a scalar" in line, line


def test_a_tokenizer_that_is_not_utf8_is_one_line_and_ids_still_build(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG,
                          tokenizer='{"note": "café"}'.encode("latin-1"))
    line = build_line(tmp_path, "encoder-block", folder, "--text", "the")
    assert "tokenizer.json: not UTF-8 text" in line and "give --token-ids" in line, line
    ran = cli("build", "encoder-block", "--checkpoint", folder, "--token-ids", "1,2", "-o",
              tmp_path / "x.xlsx")  # the tokenizer only labels the rows: #1, #2
    assert ran.returncode == 0, ran.stderr


def word_level(normalizer=None, unknown: str | None = "[UNK]") -> bytes:
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"the": 0, "cat": 1, **({unknown: 2} if unknown else {})}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    return tokenizer.to_str().encode()


@requires_tokenizers
def test_a_tokenizer_whose_encoder_raises_is_one_line(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG,
                          tokenizer=word_level(unknown=None))
    line = build_line(tmp_path, "encoder-block", folder, "--text", "dog")
    assert "its tokenizer.json cannot encode --text (WordPiece error" in line, line


@requires_tokenizers
def test_a_text_that_gives_no_tokens_says_so_not_seq_len(tmp_path):
    from tokenizers import Regex
    from tokenizers.normalizers import Replace

    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG,
                          tokenizer=word_level(Replace(Regex("[^a-z ]"), "")))
    line = build_line(tmp_path, "encoder-block", folder, "--text", "!!")
    assert "--text '!!' gives no tokens" in line and "--seq-len" not in line, line
