"""decoder-block: a tiny random GPT-2 saved by transformers with save_pretrained, one of its
layers built as a sheet from that folder and compared, in float64, with transformers' own
GPT2Block under the `formulas` engine and LibreOffice; and one line, exit 2, for a
checkpoint or flag that does not fit."""

import json
import shutil

import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.models import (
    assert_close,
    engine_values,
    gpt2_forward,
    realistic_gpt2,
    save_tiny_gpt2,
)
from helpers.requires import requires_transformers

from workbook_builder import api

RTOL = 1e-9
IDS = [5, 17, 3, 42, 8, 0]












@requires_transformers
@pytest.mark.parametrize("layer,layout", [(0, "cells"), (1, "blocks")])
def test_decoder_block_equals_gpt2_block(tiny_gpt2, tmp_path, layer, layout):
    """X = the hidden states entering GPT2Block `layer`, OUTPUT = its output, both layouts,
    under the `formulas` engine and LibreOffice; check --engine all passes."""
    blocks, _ = gpt2_forward(tiny_gpt2, IDS)
    path = tmp_path / f"layer{layer}.xlsx"
    book = api.build("decoder-block", path, checkpoint=tiny_gpt2, layer=layer,
                     token_ids=IDS, layout=layout)
    assert (book.params.d_model, book.params.heads, book.params.ffn_width) == (8, 2, 32)
    for engine, values in engine_values(path, book, libreoffice=layer == 1):
        got = evaluated_blocks(path, values, ["X", "OUTPUT"])
        assert_close(got["X"], blocks[layer][0], f"{engine} layer {layer} X")
        assert_close(got["OUTPUT"], blocks[layer][1], f"{engine} layer {layer} OUTPUT")
    if layer == 1:
        ran = cli("check", path, "--engine", "all")
        assert ran.returncode == 0, ran.stdout + ran.stderr


@requires_transformers
def test_decoder_block_at_a_realistic_size(tmp_path):
    """d = 64, 4 heads, 16 tokens, vocab 256: layer 1 of a 2-layer GPT-2, blocks layout."""
    folder, ids, blocks, _ = realistic_gpt2(tmp_path)
    path = tmp_path / "real.xlsx"
    book = api.build("decoder-block", path, checkpoint=folder, layer=1, token_ids=ids,
                     layout="blocks")
    got = evaluated_blocks(path, book.values, ["X", "OUTPUT"])
    assert_close(got["X"], blocks[1][0], "X")
    assert_close(got["OUTPUT"], blocks[1][1], "OUTPUT")
    assert api.check(book).passed


@requires_transformers
def test_gpt2_exact_gelu_and_eps_come_from_the_config(tmp_path):
    """activation_function "gelu" is the erf form; layer_norm_epsilon is written into the
    LayerNorm formulas: both follow config.json, and the sheet still equals GPT2Block."""
    folder = save_tiny_gpt2(tmp_path / "gpt2", activation_function="gelu",
                            layer_norm_epsilon=0.25, n_inner=12)
    blocks, _ = gpt2_forward(folder, IDS)
    path = tmp_path / "exact.xlsx"
    book = api.build("decoder-block", path, checkpoint=folder, token_ids=IDS,
                     layout="blocks")
    assert (book.params.gelu, book.params.ln_eps, book.params.ffn_width) == ("exact", 0.25, 12)
    got = evaluated_blocks(path, book.values, ["OUTPUT"])
    assert_close(got["OUTPUT"], blocks[0][1], "OUTPUT")


@requires_transformers
def test_wrong_gpt2_checkpoints_are_one_line(tiny_gpt2, tmp_path):
    out = tmp_path / "x.xlsx"
    ran = cli("build", "decoder-block", "--checkpoint", tiny_gpt2, "--layer", "2", "-o", out)
    assert "no layer 2" in one_line_error(ran)
    ran = cli("build", "decoder-block", "--checkpoint", tiny_gpt2, "--token-ids", "3,50",
              "-o", out)
    assert "token id 50 is outside the vocabulary" in one_line_error(ran)
    ran = cli("build", "decoder-block", "--checkpoint", tiny_gpt2, "--token-ids",
              ",".join(["1"] * 17), "-o", out)
    assert "17 tokens, but it has 16 positions" in one_line_error(ran)
    ran = cli("build", "encoder-block", "--checkpoint", tiny_gpt2, "-o", out)
    assert "model_type 'gpt2'" in one_line_error(ran)
    odd = tmp_path / "odd"
    shutil.copytree(tiny_gpt2, odd)
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "scale_attn_weights": False}))
    ran = cli("build", "decoder-block", "--checkpoint", odd, "-o", out)
    assert "scale_attn_weights" in one_line_error(ran)
    ran = cli("build", "decoder-block", "--heads", "3", "-o", out)
    assert "--heads 3 does not divide --d-model 4" in one_line_error(ran)
    assert not out.exists()
