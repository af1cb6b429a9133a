"""llama-block against transformers: a tiny random LLaMA (grouped K/V heads, RMSNorm weights
and RoPE base that tell) saved with save_pretrained, its layers built with --checkpoint and
compared with `LlamaDecoderLayer` run on its own rotary embedding (1e-6: it computes
RMSNorm, RoPE's tables and the softmax in float32 even in a float64 model) and with a float64
transcription of that code written here (1e-9), under the `formulas` engine and LibreOffice;
and SiLU's two branches, which never overflow."""

import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.models import (
    assert_close,
    embedded,
    engine_values,
    llama_model,
    save_llama,
    transcribed_layer,
)
from helpers.requires import requires_transformers

from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.models.loader import model_inputs

MODULE_RTOL, TRANSCRIPTION_RTOL = 1e-6, 1e-9
IDS = [5, 17, 3, 28, 11]
REALISTIC = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96}








def module_layer(model, layer: int, x: np.ndarray) -> np.ndarray:
    """transformers' LlamaDecoderLayer on x, with the position embeddings of the model's
    own LlamaRotaryEmbedding and a causal mask."""
    import torch

    n = len(x)
    hidden = torch.tensor(x[None])
    position_ids = torch.arange(n)[None]
    cos_sin = model.rotary_emb(hidden, position_ids)
    mask = torch.full((n, n), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)
    with torch.no_grad():
        out = model.layers[layer](hidden, attention_mask=mask[None, None],
                                  position_ids=position_ids, position_embeddings=cos_sin)
    out = out[0] if isinstance(out, tuple) else out
    return out[0].numpy()










def compare_layer(folder: Path, tmp_path: Path, layer: int, layout: str, libreoffice: bool):
    model = llama_model(folder)
    path = tmp_path / f"llama{layer}-{layout}.xlsx"
    book = api.build("llama-block", path, checkpoint=folder, layer=layer,
                     token_ids=",".join(map(str, IDS)), layout=layout)
    assert book.params.kv_heads == model.config.num_key_value_heads
    assert book.params.rope_theta == 100.0 and book.params.rms_eps == 1e-5
    x = embedded(model, IDS)
    for k in range(layer):  # the hidden states entering `layer`, in float64
        x = transcribed_layer(model, k, x)
    for engine, values in engine_values(path, book, libreoffice):
        got = evaluated_blocks(path, values, ["X", "OUTPUT"])
        assert_close(got["X"], x, f"{engine} X, layer {layer}", TRANSCRIPTION_RTOL)
        assert_close(got["OUTPUT"], transcribed_layer(model, layer, got["X"]),
                     f"{engine} OUTPUT vs float64 transcription", TRANSCRIPTION_RTOL)
        assert_close(got["OUTPUT"], module_layer(model, layer, got["X"]),
                     f"{engine} OUTPUT vs LlamaDecoderLayer", MODULE_RTOL)
    return path


@requires_transformers
@pytest.mark.parametrize("layer,layout,libreoffice", [(0, "cells", True),
                                                      (1, "blocks", False)])
def test_sheet_equals_llama_decoder_layer(tiny_llama, tmp_path, layer, layout, libreoffice):
    path = compare_layer(tiny_llama, tmp_path, layer, layout, libreoffice)
    if libreoffice:
        ran = cli("check", path, "--engine", "all")
        assert ran.returncode == 0, ran.stdout + ran.stderr


@requires_transformers
def test_realistic_size_equals_llama_decoder_layer(tmp_path):
    """d = 64, 4 query heads over 2 key/value heads, 2 layers, vocabulary 256: layer 1."""
    folder = save_llama(tmp_path / "llama-64", REALISTIC)
    compare_layer(folder, tmp_path, 1, "blocks", libreoffice=False)


@requires_transformers
def test_transcription_is_the_module_up_to_its_float32_steps(tiny_llama):
    """The float64 transcription differs from LlamaDecoderLayer only by float32 rounding:
    it is a transcription of that code, not another model."""
    model = llama_model(tiny_llama)
    x = embedded(model, IDS)
    gap = np.abs(transcribed_layer(model, 0, x) - module_layer(model, 0, x)).max()
    assert 0 < gap < 1e-6


@requires_transformers
def test_loader_reads_the_llama_names_and_rope_base(tiny_llama):
    from safetensors.numpy import load_file

    weights = load_file(str(tiny_llama / "model.safetensors"))
    got = model_inputs("llama-block", tiny_llama, layer=1)
    np.testing.assert_array_equal(got.inputs["W_K"],
                                  weights["model.layers.1.self_attn.k_proj.weight"].T)
    np.testing.assert_array_equal(got.inputs["RMS2_WEIGHT"][0],
                                  weights["model.layers.1.post_attention_layernorm.weight"])
    assert got.inputs["W_K"].shape == (8, 4)  # one key/value head of width 4
    assert got.params["rope_theta"] == 100.0 and got.params["kv_heads"] == 1


@requires_transformers
def test_llama_checkpoint_refusals(tiny_llama, tmp_path):
    import json

    bad = tmp_path / "scaled"
    shutil.copytree(tiny_llama, bad)
    config = json.loads((bad / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0}
    (bad / "config.json").write_text(json.dumps(config))
    line = one_line_error(cli("build", "llama-block", "--checkpoint", str(bad),
                              "-o", str(tmp_path / "x.xlsx")))
    assert "llama3" in line
    line = one_line_error(cli("build", "encoder-block", "--checkpoint", str(tiny_llama),
                              "-o", str(tmp_path / "y.xlsx")))
    assert "llama" in line


@pytest.mark.parametrize("bad,words", [({"heads": 3, "d_model": 8}, "divide"),
                                        ({"heads": 4, "kv_heads": 3}, "divide"),
                                        ({"d_model": 6, "heads": 2}, "even"),
                                        ({"rms_eps": 0}, "rms-eps"),
                                        ({"rope_theta": 0.5}, "rope-theta")])
def test_bad_sizes_are_one_line(tmp_path, bad, words):
    flags = [part for k, v in bad.items() for part in (f"--{k.replace('_', '-')}", str(v))]
    result = cli("build", "llama-block", *flags, "-o", str(tmp_path / "x.xlsx"))
    assert words in one_line_error(result)


def test_silu_takes_large_arguments_of_either_sign(tmp_path):
    """SiLU of ±800 (EXP(800) overflows a double): the sheet's IF picks the branch whose
    EXP has a non-positive argument, so both engines give x·σ(x), not an error. X = ones
    and no attention make RMS2_OUT ≈ 1, so GATE ≈ row 0 of W_GATE."""
    from reference.ssm import silu

    big = [800.0, -800.0, 0.5, -0.5]
    zeros = np.zeros((4, 4))
    inputs = {"X": np.ones((1, 4)), "W_Q": zeros, "W_K": zeros, "W_V": zeros, "W_O": zeros,
              "RMS2_WEIGHT": np.ones((1, 4)), "W_GATE": np.array([big] + [[0.0] * 4] * 3)}
    path = tmp_path / "silu.xlsx"
    api.build("llama-block", path, heads=1, d_ff=4, inputs=inputs, layout="blocks")
    for values in (evaluate_with_formulas(path), *(
            [evaluate_with_libreoffice(path)] if shutil.which("soffice") else [])):
        got = evaluated_blocks(path, values, ["GATE", "GATE_ACT"])
        assert got["GATE"][0, 0] > 799
        np.testing.assert_allclose(got["GATE_ACT"], silu(got["GATE"]), rtol=1e-12)
        assert got["GATE_ACT"][0, 0] == got["GATE"][0, 0] and got["GATE_ACT"][0, 1] == 0.0
