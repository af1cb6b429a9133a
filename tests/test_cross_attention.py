"""`cross-attention`: the reference against PyTorch SDPA and against self-attention when
Y = X; source|target tokens; sizes inferred from given inputs; the CLI's refusals."""

import json

import numpy as np
import openpyxl
import pytest
from helpers.books import build
from helpers.cli import build_refused, cli
from helpers.requires import requires_torch
from helpers.sheets import assert_steps_are_formulas

from reference.attention import attention_ref
from reference.cross_attention import cross_attention_ref
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import find_name

KIND = load_kinds()["cross-attention"]


def _case(n, m, d, d_k, d_v, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {"X": rng.normal(size=(n, d)), "Y": rng.normal(size=(m, d)),
              "W_Q": rng.normal(size=(d, d_k)), "W_K": rng.normal(size=(d, d_k)),
              "W_V": rng.normal(size=(d, d_v))}
    params = make_params(KIND, {"src_len": n, "tgt_len": m, "d_model": d, "d_k": d_k,
                                "d_v": d_v})
    return inputs, params


@requires_torch
@pytest.mark.parametrize("n,m", [(5, 2), (2, 6), (3, 3)])
def test_reference_matches_torch_sdpa(n, m):
    import torch
    import torch.nn.functional as F

    inputs, params = _case(n, m, 4, 3, 2, seed=n * 10 + m)
    got = cross_attention_ref(inputs, params)
    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    q, k, v = t["Y"] @ t["W_Q"], t["X"] @ t["W_K"], t["X"] @ t["W_V"]
    exp = F.scaled_dot_product_attention(q[None], k[None], v[None], dropout_p=0.0)[0]
    weights = torch.softmax(q @ k.T / 3 ** 0.5, dim=-1)
    print(np.abs(got["OUTPUT"] - exp.numpy()).max())
    assert got["OUTPUT"].shape == (m, 2) and got["WEIGHTS"].shape == (m, n)
    np.testing.assert_allclose(got["OUTPUT"], exp.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["WEIGHTS"], weights.numpy(), rtol=0, atol=1e-12)


def test_with_y_equal_to_x_it_is_self_attention():
    inputs, params = _case(4, 4, 3, 2, 2, seed=1)
    inputs["Y"] = inputs["X"]
    got = cross_attention_ref(inputs, params)
    self_params = make_params(load_kinds()["attention"], {"seq_len": 4, "d_model": 3,
                                                         "d_k": 2, "d_v": 2})
    exp = attention_ref({k: inputs[k] for k in ("X", "W_Q", "W_K", "W_V")}, self_params)
    for name, block in exp.items():
        np.testing.assert_allclose(got[name], block, rtol=0, atol=1e-14, err_msg=name)


def test_rows_are_target_tokens_and_columns_source_tokens(tmp_path):
    path = build(tmp_path, "cross-attention", {"src_len": 3, "tgt_len": 2},
                 tokens=["我", "爱", "AI|I", "love"])
    ws = openpyxl.load_workbook(path)["Cross-attention"]
    where = find_name(ws.parent, "WEIGHTS", path)
    cols = [ws.cell(where.top - 1, where.left + j).value for j in range(3)]
    rows = [ws.cell(where.top + i, where.left - 1).value for i in range(2)]
    assert cols == ["我", "爱", "AI"] and rows == ["I", "love"]


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_every_step_cell_is_a_formula(tmp_path, layout):
    case = {"src_len": 3, "tgt_len": 5, "d_v": 2}
    path = build(tmp_path, "cross-attention", case, layout=layout)
    assert_steps_are_formulas(path, KIND.input_shapes(make_params(KIND, case)))


def test_cli_infers_sizes_from_given_inputs_and_check_passes(tmp_path):
    rng = np.random.default_rng(0)
    given = tmp_path / "in.json"
    given.write_text(json.dumps({"X": rng.normal(size=(5, 3)).tolist(),
                                 "Y": rng.normal(size=(2, 3)).tolist()}))
    path = tmp_path / "c.xlsx"
    built = cli("build", "cross-attention", "-o", path, "--inputs", given, "--d-k", "2",
                "--tokens", "a,b,c,d,e|x,y")
    assert built.returncode == 0, built.stderr
    assert "src_len=5, tgt_len=2, d_model=3" in built.stdout
    report = check_workbook(path)              # in-process: one subprocess less
    print(format_report(report))
    assert report.passed


@pytest.mark.parametrize("args,words", [
    (["--tokens", "a,b,c"], "SOURCE|TARGET"),
    (["--tokens", "a|b|c"], "SOURCE|TARGET"),
    (["--tokens", "a,b|c", "--src-len", "4"], "2 source and 1 target"),
    (["--tokens", "a,,b,c|x,y,z"], "empty label"),
    (["--src-len", "0"], "positive"),
])
def test_cli_refuses_bad_input(tmp_path, args, words):
    assert words in build_refused("cross-attention", tmp_path, *args)
