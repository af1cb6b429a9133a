"""`sliding-window`: the band + global mask, the reference against PyTorch SDPA with a
boolean mask, and bad parameters on the command line."""

import numpy as np
import pytest
from conftest import cli, one_line_error, requires_torch

from reference.attention import attention_ref
from reference.sliding_window import sliding_window_ref, window_allowed
from sheets.sliding_window import SlidingWindowParams


def _inputs(n, d_model, d_k, seed):
    rng = np.random.default_rng(seed)
    return {"X": rng.normal(size=(n, d_model)), "W_Q": rng.normal(size=(d_model, d_k)),
            "W_K": rng.normal(size=(d_model, d_k)), "W_V": rng.normal(size=(d_model, d_k))}


def test_mask_by_hand():
    """n=6, w=1, global {0, 4}: band of width 3 plus full rows and columns 0 and 4."""
    exp = np.array([[1, 1, 1, 1, 1, 1],
                    [1, 1, 1, 0, 1, 0],
                    [1, 1, 1, 1, 1, 0],
                    [1, 0, 1, 1, 1, 0],
                    [1, 1, 1, 1, 1, 1],
                    [1, 0, 0, 0, 1, 1]], dtype=bool)
    got = window_allowed(6, 1, [0, 4])
    assert (got == exp).all(), got.astype(int)


def test_wide_window_is_full_attention():
    """A window reaching every key leaves nothing masked: plain attention."""
    inputs = _inputs(5, 3, 2, seed=1)
    got = sliding_window_ref(inputs, SlidingWindowParams(seq_len=5, d_model=3, d_k=2,
                                                          window=4))
    exp = attention_ref(inputs, type("P", (), {"causal": False})())
    np.testing.assert_allclose(got["OUTPUT"], exp["OUTPUT"], rtol=0, atol=1e-14)


@requires_torch
@pytest.mark.parametrize("window,global_tokens", [(0, ""), (1, ""), (2, "0"), (1, "0,5"),
                                                  (0, "3,6")])
def test_reference_equals_torch_sdpa(window, global_tokens):
    import torch
    import torch.nn.functional as F

    n, d_model, d_k = 7, 4, 3
    inputs = _inputs(n, d_model, d_k, seed=window + len(global_tokens))
    params = SlidingWindowParams(seq_len=n, d_model=d_model, d_k=d_k, window=window,
                                 global_tokens=global_tokens)
    got = sliding_window_ref(inputs, params)
    # independent mask: True = may attend (SDPA's boolean convention)
    pos = torch.arange(n)
    mask = (pos[None, :] - pos[:, None]).abs() <= window
    for g in [int(t) for t in global_tokens.split(",") if t]:
        mask[g, :] = True
        mask[:, g] = True
    x = torch.tensor(inputs["X"])
    q, k, v = (x @ torch.tensor(inputs[w]) for w in ("W_Q", "W_K", "W_V"))
    exp = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]
    error = np.abs(got["OUTPUT"] - exp.numpy()).max()
    print(f"w={window} global={global_tokens!r}: max |ref − SDPA| = {error:.1e}")
    assert error < 1e-12
    np.testing.assert_array_equal(got["MASK"], mask.numpy().astype(float))


def test_global_flag_builds(tmp_path):
    """--global names the global tokens (the field is global_tokens: `global` is a keyword)."""
    out = tmp_path / "sw.xlsx"
    result = cli("build", "sliding-window", "-o", out, "--global", "0,3",
                 "--window", "0", "--seq-len", "5")
    assert result.returncode == 0, result.stderr
    assert "global_tokens=0,3" in result.stdout


@pytest.mark.parametrize("args,message", [
    (["--window", "-1"], "--window must be 0 or more"),
    (["--global", "6"], "position 6 is outside the sequence"),
    (["--global", "0,x"], "comma-separated whole numbers"),
    (["--seq-len", "0"], "--seq-len must be a positive"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
    result = cli("build", "sliding-window", "-o", tmp_path / "x.xlsx", *args)
    assert message in one_line_error(result)
    assert not (tmp_path / "x.xlsx").exists()
