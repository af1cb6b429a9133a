"""The attention and multihead references equal independent formulations: a plain-Python
loop over the textbook softmax, and PyTorch where it is installed."""

import math

import numpy as np
import pytest
from helpers.requires import requires_torch

from reference.attention import attention_ref
from reference.multihead import multihead_ref


class P:
    """Parameters as the references read them (duck-typed, like the kinds' dataclasses)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def loop_attention(x, wq, wk, wv, causal):
    """softmax(QKᵀ/√d)V with Python lists and math.exp, no max subtraction."""
    def matmul(a, b):
        return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))]
                for i in range(len(a))]
    q, k, v = matmul(x, wq), matmul(x, wk), matmul(x, wv)
    d = len(q[0])
    out = []
    for i in range(len(q)):
        keys = range(i + 1) if causal else range(len(k))
        e = {j: math.exp(sum(q[i][t] * k[j][t] for t in range(d)) / math.sqrt(d)) for j in keys}
        total = sum(e.values())
        out.append([sum(e[j] / total * v[j][c] for j in keys) for c in range(len(v[0]))])
    return np.array(out)


def random_inputs(rng, n, d_model, d_k, d_v):
    return {"X": rng.normal(size=(n, d_model)), "W_Q": rng.normal(size=(d_model, d_k)),
            "W_K": rng.normal(size=(d_model, d_k)), "W_V": rng.normal(size=(d_model, d_v))}


@pytest.mark.parametrize("n,d_model,d_k,d_v", [(1, 2, 2, 2), (3, 2, 2, 2), (5, 4, 3, 2),
                                               (7, 3, 5, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_ref_equals_python_loop(n, d_model, d_k, d_v, causal):
    inputs = random_inputs(np.random.default_rng(n * 10 + d_k), n, d_model, d_k, d_v)
    steps = attention_ref(inputs, P(causal=causal))
    exp = loop_attention(*(inputs[k].tolist() for k in ("X", "W_Q", "W_K", "W_V")), causal)
    np.testing.assert_allclose(steps["OUTPUT"], exp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(steps["WEIGHTS"].sum(axis=1), 1.0, rtol=1e-14)
    if causal:
        assert np.all(steps["WEIGHTS"][np.triu_indices(n, 1)] == 0.0)


@requires_torch
@pytest.mark.parametrize("n,d_model,d_k,d_v", [(3, 2, 2, 2), (6, 4, 3, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_ref_equals_torch_sdpa(n, d_model, d_k, d_v, causal):
    import torch
    import torch.nn.functional as F

    inputs = random_inputs(np.random.default_rng(3), n, d_model, d_k, d_v)
    steps = attention_ref(inputs, P(causal=causal))
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in inputs.items()}
    q, k, v = t["X"] @ t["W_Q"], t["X"] @ t["W_K"], t["X"] @ t["W_V"]
    exp = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]
    print("max |ref − torch|:", np.abs(steps["OUTPUT"] - exp.numpy()).max())
    np.testing.assert_allclose(steps["OUTPUT"], exp.numpy(), rtol=1e-12, atol=1e-13)


def multihead_inputs(rng, n, d_model, heads, groups):
    d_k = d_model // heads
    return {"X": rng.normal(size=(n, d_model)), "W_Q": rng.normal(size=(d_model, heads * d_k)),
            "W_K": rng.normal(size=(d_model, groups * d_k)),
            "W_V": rng.normal(size=(d_model, groups * d_k)),
            "W_O": rng.normal(size=(heads * d_k, d_model))}


@requires_torch
@pytest.mark.parametrize("n,d_model,heads,groups", [(3, 6, 3, 3), (5, 8, 4, 2), (4, 4, 2, 1),
                                                    (2, 6, 6, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_ref_equals_torch_sdpa_with_gqa(n, d_model, heads, groups, causal):
    import torch
    import torch.nn.functional as F

    inputs = multihead_inputs(np.random.default_rng(n + heads), n, d_model, heads, groups)
    steps = multihead_ref(inputs, P(heads=heads, kv_heads=groups, d_model=d_model,
                                    causal=causal))
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in inputs.items()}
    d_k = d_model // heads
    # (n, H·d_k) -> (H, n, d_k): heads are contiguous column slices
    q = (t["X"] @ t["W_Q"]).reshape(n, heads, d_k).transpose(0, 1)
    k = (t["X"] @ t["W_K"]).reshape(n, groups, d_k).transpose(0, 1)
    v = (t["X"] @ t["W_V"]).reshape(n, groups, d_k).transpose(0, 1)
    heads_out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    concat = heads_out.transpose(0, 1).reshape(n, heads * d_k)
    np.testing.assert_allclose(steps["CONCAT"], concat.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(steps["OUTPUT"], (concat @ t["W_O"]).numpy(), rtol=1e-12,
                               atol=1e-12)


@requires_torch
def test_multihead_ref_equals_torch_multihead_attention():
    """nn.MultiheadAttention computes y = x·Wᵀ, so our X @ W weights enter transposed."""
    n, d_model, heads = 5, 6, 3
    inputs = multihead_inputs(np.random.default_rng(11), n, d_model, heads, heads)
    steps = multihead_ref(inputs, P(heads=heads, kv_heads=None, d_model=d_model, causal=False))
    np.testing.assert_allclose(steps["OUTPUT"], torch_multihead(inputs, heads), rtol=1e-12,
                               atol=1e-12)


def torch_multihead(inputs: dict[str, np.ndarray], heads: int) -> np.ndarray:
    """nn.MultiheadAttention's output on our inputs (weights transposed into its y = x·Wᵀ;
    with B_Q, B_K, B_V, B_O given, its biases too)."""
    import torch

    bias = "B_Q" in inputs
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in inputs.items()}
    mha = torch.nn.MultiheadAttention(t["W_O"].shape[1], heads, bias=bias, batch_first=True,
                                      dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([t["W_Q"].T, t["W_K"].T, t["W_V"].T]))
        mha.out_proj.weight.copy_(t["W_O"].T)
        if bias:
            mha.in_proj_bias.copy_(torch.cat([t["B_Q"][0], t["B_K"][0], t["B_V"][0]]))
            mha.out_proj.bias.copy_(t["B_O"][0])
        out, _ = mha(t["X"][None], t["X"][None], t["X"][None], need_weights=False)
    return out[0].numpy()


def test_multihead_with_one_head_is_single_head_attention():
    """H = 1 and W_O = I reduce multi-head attention to the single-head kind."""
    rng = np.random.default_rng(5)
    inputs = multihead_inputs(rng, 4, 3, 1, 1)
    inputs["W_O"] = np.eye(3)
    for causal in (False, True):
        multi = multihead_ref(inputs, P(heads=1, kv_heads=1, d_model=3, causal=causal))
        single = attention_ref(inputs, P(causal=causal))
        np.testing.assert_allclose(multi["OUTPUT"], single["OUTPUT"], rtol=1e-14)


@requires_torch
def test_biases_are_nn_linear_biases():
    """With B_Q, B_K, B_V (and B_O) the projections are nn.Linear(bias=True): attention's
    against three Linear layers and SDPA, multihead's against nn.MultiheadAttention."""
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(21)
    n, d_model, d_k, d_v = 4, 5, 3, 2
    inputs = random_inputs(rng, n, d_model, d_k, d_v)
    inputs.update({"B_Q": rng.normal(size=(1, d_k)), "B_K": rng.normal(size=(1, d_k)),
                   "B_V": rng.normal(size=(1, d_v))})
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in inputs.items()}
    projected = []
    for name, width in (("Q", d_k), ("K", d_k), ("V", d_v)):
        linear = torch.nn.Linear(d_model, width, dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(t[f"W_{name}"].T)
            linear.bias.copy_(t[f"B_{name}"][0])
            projected.append(linear(t["X"]))
    exp = F.scaled_dot_product_attention(*(p[None] for p in projected))[0].detach()
    got = attention_ref(inputs, P(causal=False))["OUTPUT"]
    np.testing.assert_allclose(got, exp.numpy(), rtol=1e-12, atol=1e-13)
    assert np.abs(got - attention_ref({k: inputs[k] for k in ("X", "W_Q", "W_K", "W_V")},
                                      P(causal=False))["OUTPUT"]).max() > 1e-3

    n, d_model, heads = 5, 6, 3
    inputs = multihead_inputs(np.random.default_rng(12), n, d_model, heads, heads)
    for name in ("B_Q", "B_K", "B_V", "B_O"):
        inputs[name] = rng.normal(size=(1, d_model))
    steps = multihead_ref(inputs, P(heads=heads, kv_heads=None, d_model=d_model, causal=False))
    np.testing.assert_allclose(steps["OUTPUT"], torch_multihead(inputs, heads), rtol=1e-12,
                               atol=1e-12)
