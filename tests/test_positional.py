"""`positional`: the NumPy reference against independent formulations (the paper's check
value, the PyTorch tutorial's PositionalEncoding, Meta's complex-number RoPE, HF's
rotate_half), the relative-position property, and the CLI's refusals."""

import numpy as np
import openpyxl
import pytest
from helpers.books import build
from helpers.cli import build_refused, cli
from helpers.requires import requires_torch
from helpers.sheets import assert_steps_are_formulas

from reference.positional import positional_ref, rope, rope_angles
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import find_name

KIND = load_kinds()["positional"]


def _inputs(n, d, d_k, seed=0):
    rng = np.random.default_rng(seed)
    return {"X": rng.normal(size=(n, d)), "W_Q": rng.normal(size=(d, d_k)),
            "W_K": rng.normal(size=(d, d_k))}


def _ref(n, d, d_k, rope_kind="interleaved", base=10000, seed=0, inputs=None):
    params = make_params(KIND, {"seq_len": n, "d_model": d, "d_k": d_k, "rope": rope_kind,
                                "base": base})
    return positional_ref(inputs or _inputs(n, d, d_k, seed), params)


def test_pe_matches_the_check_value_for_d6_pos1():
    exp = [0.841471, 0.540302, 0.046399, 0.998923, 0.002154, 0.999998]  # algorithms.md §4.1
    got = _ref(2, 6, 2)["PE"][1]
    print(got)
    np.testing.assert_allclose(got, exp, atol=5e-7)
    np.testing.assert_array_equal(_ref(2, 6, 2)["PE"][0], [0, 1, 0, 1, 0, 1])


@requires_torch
def test_pe_matches_the_pytorch_tutorial_positional_encoding():
    import math

    import torch

    n, d = 7, 8
    # PyTorch tutorial / Annotated Transformer: div_term = exp(arange(0,d,2)·(−ln 10000/d))
    position = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    exp = torch.zeros(n, d, dtype=torch.float64)
    exp[:, 0::2] = torch.sin(position * div_term)
    exp[:, 1::2] = torch.cos(position * div_term)
    got = _ref(n, d, 2)
    print(np.abs(got["PE"] - exp.numpy()).max())
    np.testing.assert_allclose(got["PE"], exp.numpy(), rtol=0, atol=1e-13)
    x = _inputs(n, d, 2)["X"]
    np.testing.assert_allclose(got["X_PE"], x + exp.numpy(), rtol=0, atol=1e-13)


@requires_torch
def test_interleaved_rope_matches_metas_complex_form():
    import torch

    n, d_k = 6, 8
    got = _ref(n, 4, d_k, "interleaved")
    # Meta llama/model.py: freqs_cis = polar(1, outer(t, freqs)); x as complex pairs · freqs_cis
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d_k, 2, dtype=torch.float64) / d_k))
    freqs_cis = torch.polar(torch.ones(n, d_k // 2, dtype=torch.float64),
                            torch.outer(torch.arange(n, dtype=torch.float64), freqs))
    for name in ("Q", "K"):
        x = torch.from_numpy(got[name]).reshape(n, d_k // 2, 2)
        exp = torch.view_as_real(torch.view_as_complex(x.contiguous()) * freqs_cis)
        exp = exp.flatten(1).numpy()
        print(name, np.abs(got[name + "_ROT"] - exp).max())
        np.testing.assert_allclose(got[name + "_ROT"], exp, rtol=0, atol=1e-13)


@requires_torch
def test_half_rope_matches_hf_rotate_half():
    import torch

    n, d_k, base = 5, 6, 100
    got = _ref(n, 4, d_k, "half", base=base)

    def rotate_half(x):                      # transformers.models.llama.modeling_llama
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    inv_freq = 1.0 / (base ** (torch.arange(0, d_k, 2, dtype=torch.float64) / d_k))
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    for name in ("Q", "K"):
        x = torch.from_numpy(got[name])
        exp = (x * emb.cos() + rotate_half(x) * emb.sin()).numpy()
        print(name, np.abs(got[name + "_ROT"] - exp).max())
        np.testing.assert_allclose(got[name + "_ROT"], exp, rtol=0, atol=1e-13)


def test_hf_weight_permutation_turns_interleaved_into_half():
    """HF's conversion permutes W_q/W_k columns by [0,2,4,…,1,3,5,…] so that
    interleaved(x)[perm] = rotate_half(x[perm]); scores are then identical."""
    n, d, d_k = 5, 4, 6
    inputs = _inputs(n, d, d_k, seed=3)
    perm = np.r_[0:d_k:2, 1:d_k:2]
    permuted = dict(inputs, W_Q=inputs["W_Q"][:, perm], W_K=inputs["W_K"][:, perm])
    inter, half = _ref(n, d, d_k, "interleaved", inputs=inputs), \
        _ref(n, d, d_k, "half", inputs=permuted)
    np.testing.assert_allclose(half["Q_ROT"], inter["Q_ROT"][:, perm], rtol=0, atol=1e-13)
    np.testing.assert_allclose(half["SCORES"], inter["SCORES"], rtol=0, atol=1e-12)
    # without the permutation the two conventions really differ
    assert np.abs(_ref(n, d, d_k, "half", inputs=inputs)["SCORES"] - inter["SCORES"]).max() > 1e-3


@pytest.mark.parametrize("rope_kind", ["interleaved", "half"])
def test_rotated_scores_depend_only_on_the_offset(rope_kind):
    n, d_k = 7, 8
    got = _ref(n, 4, d_k, rope_kind, seed=5)
    print(got["REL_GAP"])
    assert got["REL_GAP"][0, 0] < 1e-12
    # the same holds for any q, k and any pair of positions with equal m − n
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(1, d_k)), rng.normal(size=(1, d_k))
    angle = rope_angles(20, d_k, 10000)
    cos, sin = np.cos(angle), np.sin(angle)
    score = rope(np.repeat(q, 20, 0), cos, sin, rope_kind) @ \
        rope(np.repeat(k, 20, 0), cos, sin, rope_kind).T
    assert abs(score[13, 4] - score[9, 0]) < 1e-12 and abs(score[2, 11] - score[8, 17]) < 1e-12
    assert abs(score[13, 4] - score[9, 1]) > 1e-6       # a different offset scores differently


def test_angles_cos_sin_and_rotation_are_formulas(tmp_path):
    path = build(tmp_path, "positional", {"seq_len": 3, "d_model": 4, "d_k": 4})
    wb = openpyxl.load_workbook(path)
    for name, fn in [("PE_ANGLE", "POWER"), ("PE", "SIN"), ("ROPE_ANGLE", "POWER"),
                     ("ROPE_COS", "COS"), ("ROPE_SIN", "SIN"), ("REL_GAP", "MAX")]:
        where = find_name(wb, name, path)
        text = wb[where.sheet].cell(where.top, where.left).value
        assert isinstance(text, str) and text.startswith("=") and fn in text, (name, text)




@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_every_step_cell_is_a_formula(tmp_path, layout):
    case = {"seq_len": 4, "d_model": 4, "d_k": 4, "rope": "half"}
    path = build(tmp_path, "positional", case, layout=layout)
    assert_steps_are_formulas(path, KIND.input_shapes(make_params(KIND, case)))


@pytest.mark.parametrize("args,words", [
    (["--d-model", "3"], "--d-model must be even"),
    (["--d-k", "5"], "--d-k must be even"),
    (["--seq-len", "1"], "at least 2"),
    (["--rope", "diagonal"], "invalid choice"),
    (["--seq-len", "4", "--tokens", "a,b,c"], "3 labels"),
])
def test_cli_refuses_bad_parameters(tmp_path, args, words):
    assert words in build_refused("positional", tmp_path, *args)


def test_cli_builds_with_tokens_and_check_passes(tmp_path):
    path = tmp_path / "p.xlsx"
    built = cli("build", "positional", "-o", path, "--tokens", "我,爱,机器,学习",
                "--rope", "half", "--base", "100")
    assert built.returncode == 0, built.stderr
    report = check_workbook(path)              # in-process: one subprocess less
    print(format_report(report))
    assert report.passed and "REL_GAP" in {s.name for s in report.steps}
