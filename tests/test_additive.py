"""`additive`: the reference against a torch re-implementation of the PyTorch seq2seq
tutorial's BahdanauAttention (with biases) and against the paper's sum written as loops
(without); b_v cancels in the weights; the CLI's refusals."""

import numpy as np
import pytest
from helpers.books import build
from helpers.cli import build_refused, cli, one_line_error
from helpers.requires import requires_torch
from helpers.sheets import assert_steps_are_formulas

from reference.additive import additive_ref
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.kind import make_params

KIND = load_kinds()["additive"]


def _case(n, m, d_enc, d_dec, d_att, bias, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {"ENC_H": rng.normal(size=(n, d_enc)), "DEC_S": rng.normal(size=(m, d_dec)),
              "W_A": rng.normal(size=(d_dec, d_att)), "U_A": rng.normal(size=(d_enc, d_att)),
              "V_A": rng.normal(size=(d_att, 1))}
    if bias:
        inputs.update(B_W=rng.normal(size=(1, d_att)), B_U=rng.normal(size=(1, d_att)),
                      B_V=rng.normal(size=(1, 1)))
    params = make_params(KIND, {"src_len": n, "tgt_len": m, "d_enc": d_enc, "d_dec": d_dec,
                                "d_att": d_att, "bias": bias})
    return inputs, params


@requires_torch
def test_reference_matches_the_pytorch_tutorials_bahdanau_attention():
    import torch
    from torch import nn

    class BahdanauAttention(nn.Module):       # the tutorial's module, sizes generalised
        def __init__(self, d_dec, d_enc, d_att):
            super().__init__()
            self.Wa = nn.Linear(d_dec, d_att)
            self.Ua = nn.Linear(d_enc, d_att)
            self.Va = nn.Linear(d_att, 1)

        def forward(self, query, keys):
            scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
            scores = scores.squeeze(2).unsqueeze(1)
            weights = torch.nn.functional.softmax(scores, dim=-1)
            context = torch.bmm(weights, keys)
            return context, weights, scores

    n, m, d_enc, d_dec, d_att = 5, 3, 4, 2, 3
    inputs, params = _case(n, m, d_enc, d_dec, d_att, bias=True, seed=4)
    got = additive_ref(inputs, params)
    module = BahdanauAttention(d_dec, d_enc, d_att).double()
    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    with torch.no_grad():                     # nn.Linear computes x·weightᵀ + bias
        module.Wa.weight.copy_(t["W_A"].T), module.Wa.bias.copy_(t["B_W"][0])
        module.Ua.weight.copy_(t["U_A"].T), module.Ua.bias.copy_(t["B_U"][0])
        module.Va.weight.copy_(t["V_A"].T), module.Va.bias.copy_(t["B_V"][0])
        keys = t["ENC_H"][None]               # (B=1, T=n, H)
        for i in range(m):                    # one decoder step at a time, query (1, 1, H)
            context, weights, scores = module(t["DEC_S"][i][None, None], keys)
            print(i, np.abs(got["CONTEXT"][i] - context[0, 0].numpy()).max())
            np.testing.assert_allclose(got["SCORES"][i], scores[0, 0].numpy(), atol=1e-12)
            np.testing.assert_allclose(got["WEIGHTS"][i], weights[0, 0].numpy(), atol=1e-12)
            np.testing.assert_allclose(got["CONTEXT"][i], context[0, 0].numpy(), atol=1e-12)


def test_reference_matches_the_papers_sum_without_biases():
    n, m = 4, 2
    inputs, params = _case(n, m, 3, 2, 5, bias=False, seed=2)
    got = additive_ref(inputs, params)
    s, h = inputs["DEC_S"], inputs["ENC_H"]
    w, u, v = inputs["W_A"].T, inputs["U_A"].T, inputs["V_A"][:, 0]   # paper: W_a s, U_a h
    for i in range(m):
        e = np.array([v @ np.tanh(w @ s[i] + u @ h[j]) for j in range(n)])
        alpha = np.exp(e) / np.exp(e).sum()
        c = sum(alpha[j] * h[j] for j in range(n))
        np.testing.assert_allclose(got["SCORES"][i], e, atol=1e-13)
        np.testing.assert_allclose(got["WEIGHTS"][i], alpha, atol=1e-13)
        np.testing.assert_allclose(got["CONTEXT"][i], c, atol=1e-13)
    np.testing.assert_allclose(got["WEIGHTS"].sum(axis=1), 1, atol=1e-14)


def test_the_bias_of_v_cancels_in_the_weights():
    inputs, params = _case(4, 2, 3, 3, 3, bias=True, seed=6)
    shifted = dict(inputs, B_V=inputs["B_V"] + 7.0)
    a, b = additive_ref(inputs, params), additive_ref(shifted, params)
    np.testing.assert_allclose(b["SCORES"], a["SCORES"] + 7.0, atol=1e-13)
    np.testing.assert_allclose(b["WEIGHTS"], a["WEIGHTS"], atol=1e-13)
    # the other two biases do not cancel
    moved = dict(inputs, B_U=inputs["B_U"] + np.array([[1.0, -1.0, 0.5]]))
    assert np.abs(additive_ref(moved, params)["WEIGHTS"] - a["WEIGHTS"]).max() > 1e-3


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_every_step_cell_is_a_formula(tmp_path, layout):
    case = {"src_len": 3, "tgt_len": 2, "bias": True}
    path = build(tmp_path, "additive", case, layout=layout)
    assert_steps_are_formulas(path, KIND.input_shapes(make_params(KIND, case)))


def test_cli_builds_a_translation_example_and_check_passes(tmp_path):
    path = tmp_path / "a.xlsx"
    built = cli("build", "additive", "-o", path, "--src-len", "3", "--tgt-len", "3",
                "--bias", "--tokens", "我,爱,AI|I,love,AI")
    assert built.returncode == 0, built.stderr
    report = check_workbook(path)              # in-process: one subprocess less
    print(format_report(report))
    assert report.passed and "CONTEXT" in {s.name for s in report.steps}


@pytest.mark.parametrize("args,words", [
    (["--tokens", "a,b,c,d"], "SOURCE|TARGET"),
    (["--tokens", "a,b,c|x", "--tgt-len", "2"], "3 source and 1 target"),
    (["--d-att", "0"], "positive"),
])
def test_cli_refuses_bad_input(tmp_path, args, words):
    assert words in build_refused("additive", tmp_path, *args)


def test_cli_refuses_inputs_of_the_wrong_shape(tmp_path):
    csv = tmp_path / "v.csv"
    csv.write_text("1,2,3\n")               # V_A must be a column (d_att×1)
    result = cli("build", "additive", "-o", tmp_path / "a.xlsx", "--inputs", f"V_A={csv}")
    assert "V_A" in one_line_error(result)
