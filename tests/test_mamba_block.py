"""mamba-block against transformers: a tiny random Mamba saved with save_pretrained, its blocks
built from that folder and compared with the module's own MambaBlock (1e-6: it casts A, the
RMSNorm and the residual to float32 even in float64) and with a float64 transcription of the
module's code (1e-9), under the `formulas` engine and LibreOffice; the SiLU and softplus
formulas at the extremes; and one line, exit 2, for a checkpoint that does not fit."""

import json
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from helpers.books import build, check_built, evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.models import (
    MAMBA_SIZES,
    engine_values,
    loaded,
    save_mamba,
    transcribed_hidden_states,
)
from helpers.requires import requires_libreoffice, requires_torch, requires_transformers

from workbook_builder import api
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.models.mamba import model_inputs

IDS = [3, 1, 4, 1, 5, 9]
REALISTIC = {"vocab_size": 256, "hidden_size": 64, "state_size": 16, "num_hidden_layers": 2}












def module_block(model, layer: int, x: np.ndarray) -> np.ndarray:
    """transformers' own MambaBlock `layer` on x (no cache: the full-sequence path; without
    the mamba_ssm and causal_conv1d packages its kernels fall back to pure PyTorch)."""
    import torch

    assert find_spec("mamba_ssm") is None and find_spec("causal_conv1d") is None

    with torch.no_grad():
        return model.backbone.layers[layer](torch.tensor(x)[None])[0].numpy()


def relative(got, expected) -> float:
    return float(np.abs(got - expected).max() / max(1.0, np.abs(expected).max()))




def compare_with_transformers(folder: Path, path: Path, ids: list[int], layer: int,
                              layout: str, libreoffice: bool) -> None:
    model = loaded(folder)
    states = transcribed_hidden_states(model, ids)
    book = api.build("mamba-block", path, checkpoint=folder, layer=layer,
                     token_ids=",".join(map(str, ids)), layout=layout)
    assert book.params.conv_kernel == 4 and book.params.ln_eps == 1e-5
    for engine, values in engine_values(path, book, libreoffice):
        got = evaluated_blocks(path, values, ["X", "OUTPUT"])
        what = f"{engine} {layout} layer {layer}"
        # X: the embedding rows carried through the earlier blocks by our reference
        assert relative(got["X"], states[layer]) < 1e-9, what
        transcription = relative(got["OUTPUT"], states[layer + 1])
        module = relative(got["OUTPUT"], module_block(model, layer, got["X"]))
        print(f"{what}: OUTPUT vs transcription {transcription:.1e}, vs MambaBlock "
              f"{module:.1e}")
        assert transcription < 1e-9, what
        assert module < 1e-6, what
    assert api.check(book).passed


@requires_transformers
@pytest.mark.parametrize("layout, layer", [("cells", 0), ("blocks", 1)])
def test_teaching_size_equals_mamba_block(tiny_mamba, tmp_path, layout, layer):
    compare_with_transformers(tiny_mamba, tmp_path / "mamba.xlsx", IDS[:5], layer, layout,
                              libreoffice=True)


@requires_transformers
def test_realistic_size_equals_mamba_block(tmp_path):
    """d = 64, d_inner = 128, N = 16, R = 4, 2 layers, vocab 256, 6 tokens: layer 1."""
    folder = save_mamba(tmp_path / "mamba64", REALISTIC)
    compare_with_transformers(folder, tmp_path / "mamba64.xlsx", IDS, 1, "blocks",
                              libreoffice=False)


@requires_transformers
def test_loader_maps_every_tensor(tiny_mamba):
    """Each sheet input is the tensor the name table says, in the sheet's orientation."""
    from safetensors.numpy import load_file

    weights = load_file(str(tiny_mamba / "model.safetensors"))
    got = model_inputs("mamba-block", tiny_mamba, layer=1)
    mixer = "backbone.layers.1.mixer."
    assert got.params == {"d_model": 4, "d_inner": 8, "d_state": 3, "dt_rank": 1,
                          "conv_kernel": 4, "ln_eps": 1e-5}
    np.testing.assert_array_equal(got.inputs["W_IN"], weights[mixer + "in_proj.weight"].T)
    np.testing.assert_array_equal(got.inputs["CONV_W"],
                                  weights[mixer + "conv1d.weight"][:, 0, :].T)
    np.testing.assert_array_equal(got.inputs["A_LOG"], weights[mixer + "A_log"])
    np.testing.assert_array_equal(got.inputs["D"][0], weights[mixer + "D"])
    np.testing.assert_array_equal(got.inputs["NORM_W"][0],
                                  weights["backbone.layers.1.norm.weight"])
    # a bare .safetensors has no config: every size comes from the shapes
    bare = model_inputs("mamba-block", tiny_mamba / "model.safetensors", layer=1)
    assert bare.params == {k: v for k, v in got.params.items() if k != "ln_eps"}
    np.testing.assert_array_equal(bare.inputs["W_X"], got.inputs["W_X"])


@requires_transformers
def test_checkpoints_that_do_not_fit_are_one_line(tiny_mamba, tmp_path):
    folder = str(tiny_mamba)
    cases = {
        ("--layer", "2"): "no layer 2",
        ("--token-ids", "3,99"): "token id 99 is outside the vocabulary",
        ("--d-state", "5"): "--d-state 5 contradicts the checkpoint (the shapes of its tensors "
                            "give 3)",
    }
    for flags, message in cases.items():
        result = cli("build", "mamba-block", "--checkpoint", folder, *flags,
                     "-o", str(tmp_path / "x.xlsx"))
        assert result.returncode == 2 and message in one_line_error(result), flags
    biased = tmp_path / "biased"
    biased.mkdir()
    (biased / "model.safetensors").write_bytes((tiny_mamba / "model.safetensors").read_bytes())
    config = json.loads((tiny_mamba / "config.json").read_text())
    (biased / "config.json").write_text(json.dumps({**config, "use_bias": True}))
    result = cli("build", "mamba-block", "--checkpoint", str(biased), "-o",
                 str(tmp_path / "x.xlsx"))
    assert result.returncode == 2 and "use_bias" in one_line_error(result)
    result = cli("build", "encoder-block", "--checkpoint", folder, "-o",
                 str(tmp_path / "x.xlsx"))
    assert result.returncode == 2 and "model_type 'mamba'" in one_line_error(result)


@requires_torch
@requires_libreoffice
def test_silu_and_softplus_at_the_extremes(tmp_path):
    """CONV at ±800 (x/(1+EXP(−x)) overflows below −709) and Δ's pre-activation from −40 to
    25 (softplus returns x itself above 20, as torch): both engines evaluate every cell,
    and U and DELTA equal torch's silu and softplus."""
    import torch
    import torch.nn.functional as F

    given = {"CONV_B": [[800.0, -800.0, 0.5, -3.0]], "W_X": np.zeros((4, 7)),
             "DELTA_BIAS": [[-40.0, -5.0, 19.9, 25.0]]}
    path = build(tmp_path, "mamba-block", {}, layout="blocks", given=given)
    assert check_built(path).passed
    book_values = {"formulas": None, "libreoffice": evaluate_with_libreoffice(path)}
    for engine, values in book_values.items():
        if values is None:
            from helpers.books import BUILT
            values = BUILT[path].values
        got = evaluated_blocks(path, values, ["CONV", "U", "DELTA_PRE", "DELTA"])
        expected_u = F.silu(torch.tensor(got["CONV"])).numpy()
        expected_delta = F.softplus(torch.tensor(got["DELTA_PRE"])).numpy()
        assert np.isfinite(got["U"]).all(), engine
        assert relative(got["U"], expected_u) < 1e-12, engine
        assert relative(got["DELTA"], expected_delta) < 1e-12, engine
        assert got["U"][-1, 0] > 799 and got["DELTA"][0, 3] == got["DELTA_PRE"][0, 3], engine


@requires_transformers
def test_conv_without_bias_reads_as_zero_bias(tmp_path):
    """use_conv_bias false: the checkpoint has no conv1d.bias, CONV_B is zeros, and the
    kind's reference still equals the module's block."""
    folder = tmp_path / "no-conv-bias"
    save_mamba(folder, {**MAMBA_SIZES, "use_conv_bias": False})
    got = model_inputs("mamba-block", folder, layer=0, token_ids=IDS)
    assert not got.inputs["CONV_B"].any()
    steps = api.reference("mamba-block", got.inputs, **got.params)
    assert relative(steps["OUTPUT"], module_block(loaded(folder), 0, got.inputs["X"])) < 1e-6
