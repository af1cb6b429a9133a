"""`encoder-block`: the reference against `nn.TransformerEncoderLayer` (post- and pre-LN,
ReLU, tanh and exact GELU, LayerNorm's eps), ERF alike in every engine, and bad parameters on
the command line."""

import math

import numpy as np
import pytest
from helpers.books import formula_book
from helpers.cli import build_refused
from helpers.requires import requires_gnumeric, requires_libreoffice, requires_torch
from openpyxl.worksheet.formula import ArrayFormula

from reference.encoder_block import encoder_block_ref, gelu_exact, gelu_tanh
from sheets.encoder_block import EncoderBlock, EncoderBlockParams
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.gnumeric import evaluate_with_gnumeric
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice


def _torch_layer(inputs, params):
    """The PyTorch layer holding the same weights (torch stores W transposed)."""
    import torch
    import torch.nn.functional as F

    act = F.relu if params.activation == "relu" else (
        lambda t: F.gelu(t, approximate="none" if params.gelu == "exact" else "tanh"))
    layer = torch.nn.TransformerEncoderLayer(
        params.d_model, params.heads, params.d_ff, dropout=0.0, activation=act,
        layer_norm_eps=params.ln_eps, batch_first=True, norm_first=params.pre_ln,
        dtype=torch.float64).eval()
    t = {name: torch.tensor(value) for name, value in inputs.items()}
    with torch.no_grad():
        attn = layer.self_attn
        attn.in_proj_weight.copy_(torch.cat([t["W_Q"].T, t["W_K"].T, t["W_V"].T]))
        attn.in_proj_bias.copy_(torch.cat([t["B_Q"][0], t["B_K"][0], t["B_V"][0]]))
        for module, w, b in [(attn.out_proj, "W_O", "B_O"), (layer.linear1, "W_1", "B_1"),
                             (layer.linear2, "W_2", "B_2")]:
            module.weight.copy_(t[w].T)
            module.bias.copy_(t[b][0])
        for module, which in [(layer.norm1, "LN1"), (layer.norm2, "LN2")]:
            assert module.eps == params.ln_eps
            module.weight.copy_(t[which + "_GAMMA"][0])
            module.bias.copy_(t[which + "_BETA"][0])
    return layer


@requires_torch
@pytest.mark.parametrize("pre_ln", [False, True], ids=["post-ln", "pre-ln"])
@pytest.mark.parametrize("activation,gelu,eps", [("relu", "tanh", 1e-5), ("gelu", "tanh", 1e-5),
                                                 ("gelu", "exact", 1e-12),
                                                 ("relu", "tanh", 0.3)])
def test_reference_equals_torch_encoder_layer(pre_ln, activation, gelu, eps):
    import torch

    params = EncoderBlockParams(seq_len=5, d_model=6, heads=3, d_ff=7,
                                activation=activation, pre_ln=pre_ln, gelu=gelu, ln_eps=eps)
    rng = np.random.default_rng(3)
    inputs = {name: rng.normal(size=shape)
              for name, shape in EncoderBlock.input_shapes(params).items()}
    got = encoder_block_ref(inputs, params)["OUTPUT"]
    with torch.no_grad():
        exp = _torch_layer(inputs, params)(torch.tensor(inputs["X"])[None])[0].numpy()
    error = np.abs(got - exp).max()
    print(f"pre_ln={pre_ln} {activation} {gelu} eps={eps}: max |ref − torch layer| = "
          f"{error:.1e}")
    assert error < 1e-10


@requires_torch
def test_gelu_is_the_tanh_form():
    """Documents the choice: equal to torch's approximate='tanh', not the exact erf GELU."""
    import torch
    import torch.nn.functional as F

    x = np.linspace(-6, 6, 121)
    tanh_form = F.gelu(torch.tensor(x), approximate="tanh").numpy()
    exact = F.gelu(torch.tensor(x)).numpy()
    np.testing.assert_allclose(gelu_tanh(x), tanh_form, rtol=0, atol=1e-15)
    assert 1e-5 < np.abs(gelu_tanh(x) - exact).max() < 1e-3
    np.testing.assert_allclose(gelu_exact(x), exact, rtol=1e-15, atol=1e-16)


# -- ERF, the one function the exact GELU adds to the portable set ---------------------------
ERF_ARGUMENTS = [-7.5, -5.5, -2.0, -0.7071067811865476, -1e-9, 0, 1e-9, 0.3, 1.0, 3.25, 5.5,
                 7.5]


@pytest.fixture(scope="module")
def erf_book(tmp_path_factory):
    """ERF of each argument in column A (in B), the exact GELU of it (in C), and the GELU
    of the whole column as one array formula (in D), as the blocks layout writes it."""
    path = tmp_path_factory.mktemp("erf") / "erf.xlsx"
    wb = formula_book("ERF", ERF_ARGUMENTS, lambda row: f"=ERF(A{row})",
                      lambda row: f"=0.5*A{row}*(1+ERF(A{row}/SQRT(2)))")
    last = len(ERF_ARGUMENTS)
    wb.active["D1"] = ArrayFormula(f"D1:D{last}", f"=0.5*A1:A{last}*(1+ERF(A1:A{last}/SQRT(2)))")
    wb.save(path)
    return path


@pytest.mark.parametrize("engine", [
    evaluate_with_formulas,
    pytest.param(evaluate_with_libreoffice, marks=requires_libreoffice),
    pytest.param(evaluate_with_gnumeric, marks=requires_gnumeric)],
    ids=["formulas", "libreoffice", "gnumeric"])
def test_erf_agrees_with_math_erf_in_every_engine(erf_book, engine):
    values = engine(erf_book)
    got = np.array([[values[("ERF", row, c)] for c in (2, 3, 4)]
                    for row in range(1, len(ERF_ARGUMENTS) + 1)], dtype=float)
    exp = np.array([[math.erf(x)] + [0.5 * x * (1 + math.erf(x / math.sqrt(2)))] * 2
                    for x in ERF_ARGUMENTS])
    print("max |engine − math.erf|:", np.abs(got - exp).max())
    np.testing.assert_allclose(got, exp, rtol=1e-14, atol=1e-16)


def test_post_and_pre_ln_differ():
    params = EncoderBlockParams()
    rng = np.random.default_rng(0)
    inputs = {name: rng.normal(size=shape)
              for name, shape in EncoderBlock.input_shapes(params).items()}
    post = encoder_block_ref(inputs, params)
    pre = encoder_block_ref(inputs, EncoderBlockParams(pre_ln=True))
    assert not np.allclose(post["OUTPUT"], pre["OUTPUT"])
    # LN2 centres each row before scaling
    np.testing.assert_allclose(post["LN2_CENTERED"].mean(axis=1), 0, atol=1e-14)


@pytest.mark.parametrize("args,message", [
    (["--heads", "3"], "--heads 3 does not divide --d-model 4"),
    (["--activation", "swish"], "invalid choice"),
    (["--d-ff", "-2"], "--d-ff must be a positive"),
    (["--gelu", "exact"], "--gelu exact needs --activation gelu"),
    (["--gelu", "erf"], "invalid choice"),
    (["--ln-eps", "0"], "--ln-eps must be a small positive number"),
    (["--ln-eps", "tiny"], "invalid float value"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
    assert message in build_refused("encoder-block", tmp_path, *args)
