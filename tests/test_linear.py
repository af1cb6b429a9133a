"""`linear`: the reference's two forms (summary KV and running state) against an explicit
quadratic form, and against each other."""

import numpy as np
import pytest
from conftest import cli, one_line_error, requires_torch

from reference.linear import EPS, elu_plus_one, linear_ref
from sheets.linear import LinearParams


def _case(causal, n=6, d_model=4, d_k=3, d_v=2, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {"X": rng.normal(size=(n, d_model)), "W_Q": rng.normal(size=(d_model, d_k)),
              "W_K": rng.normal(size=(d_model, d_k)), "W_V": rng.normal(size=(d_model, d_v))}
    params = LinearParams(seq_len=n, d_model=d_model, d_k=d_k, d_v=d_v, causal=causal)
    return inputs, params


def _quadratic(inputs, causal):
    """O = (A·V) / (Σ_j A_ij + eps), A_ij = φ(q_i)·φ(k_j) (j ≤ i when causal): the
    attention-matrix form that linear attention avoids materialising."""
    def phi(m):  # elu(m) + 1, written via expm1 unlike the reference
        return np.where(m > 0, m, np.expm1(np.minimum(m, 0))) + 1

    x = inputs["X"]
    a = phi(x @ inputs["W_Q"]) @ phi(x @ inputs["W_K"]).T
    if causal:
        a = np.tril(a)
    return a @ (x @ inputs["W_V"]) / (a.sum(axis=1, keepdims=True) + EPS)


@pytest.mark.parametrize("causal", [False, True])
def test_reference_equals_quadratic_form(causal):
    inputs, params = _case(causal)
    got = linear_ref(inputs, params)["OUTPUT"]
    exp = _quadratic(inputs, causal)
    error = np.abs(got - exp).max()
    print(f"causal={causal}: max |ref − quadratic| = {error:.1e}")
    assert error < 1e-13


def test_causal_last_row_and_state_equal_non_causal():
    """After the last token the running state holds every key: S_n = KV, z_n = z."""
    inputs, params = _case(False)
    full = linear_ref(inputs, params)
    run = linear_ref(inputs, LinearParams(**{**params.__dict__, "causal": True}))
    d_k = params.d_k
    np.testing.assert_allclose(run["STATE"][-d_k:], full["KV"], rtol=1e-13)
    np.testing.assert_allclose(run["Z"][-1:], full["Z"], rtol=1e-13)
    np.testing.assert_allclose(run["OUTPUT"][-1], full["OUTPUT"][-1], rtol=1e-13)
    assert not np.allclose(run["OUTPUT"][0], full["OUTPUT"][0])


@requires_torch
def test_feature_map_equals_torch_elu_plus_one():
    import torch

    x = np.linspace(-30, 30, 241)
    exp = (torch.nn.functional.elu(torch.tensor(x)) + 1).numpy()
    # torch adds 1 to expm1(x), so for x ≪ 0 the two agree to ~1e-16 absolute, not relative
    np.testing.assert_allclose(elu_plus_one(x), exp, rtol=1e-15, atol=1e-15)


def test_bad_input_exits_2_with_one_line(tmp_path):
    result = cli("build", "linear", "-o", tmp_path / "x.xlsx", "--d-k", "0")
    assert "--d-k must be a positive" in one_line_error(result)
