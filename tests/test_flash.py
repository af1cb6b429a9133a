"""Kind `flash`: the online-softmax reference is exact attention (NumPy, PyTorch), every
intermediate block holds what its equation says, and the workbook agrees with `attention`."""

import re

import numpy as np
import openpyxl
import pytest
from helpers.books import build, evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.requires import requires_torch

from reference.attention import attention_ref
from reference.flash import block_bounds, flash_ref
from sheets.attention import AttentionParams
from sheets.flash import FlashParams
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.sheet.names import find_name

# (n, B, causal): every block size 1..n, so sizes that do not divide n, B = 1 and B = n
CASES = [(n, b, causal) for n in (1, 2, 3, 5, 7, 8) for b in range(1, n + 1)
         for causal in (False, True)]
PORTABLE = {"SUMPRODUCT", "MMULT", "TRANSPOSE", "EXP", "LN", "SQRT", "MAX", "MIN", "SUM",
            "IF", "AND", "OR", "ABS", "TANH", "POWER", "INDEX",
            "INT"}  # the cost table's T = ⌈n/B⌉ (see ALLOWED in conftest.py)


def random_inputs(n: int, seed: int, d_model: int = 4, d_k: int = 3, d_v: int = 2):
    """Scaled up so some blocks raise the running max a lot (α far from 1)."""
    rng = np.random.default_rng(seed)
    return {"X": rng.normal(size=(n, d_model)) * 2, "W_Q": rng.normal(size=(d_model, d_k)),
            "W_K": rng.normal(size=(d_model, d_k)), "W_V": rng.normal(size=(d_model, d_v))}


def tolerance(values: np.ndarray, n: int) -> float:
    """A convex combination of n rows, summed in another order: ~n·eps relative."""
    return 8 * n * np.finfo(float).eps * max(1.0, float(np.abs(values).max()))


@pytest.mark.parametrize("n,b,causal", CASES)
def test_reference_equals_plain_attention(n, b, causal):
    inputs = random_inputs(n, seed=n * 100 + b)
    got = flash_ref(inputs, FlashParams(seq_len=n, d_model=4, d_k=3, d_v=2, block_size=b,
                                        causal=causal))
    exp = attention_ref(inputs, AttentionParams(seq_len=n, d_model=4, d_k=3, d_v=2,
                                                causal=causal))
    tol = tolerance(exp["V"], n)
    error = np.abs(got["OUTPUT"] - exp["OUTPUT"]).max()
    lse_exp = exp["ROW_MAX"] + np.log(exp["ROW_SUM"])
    lse_error = np.abs(got["LSE"] - lse_exp).max()
    print(f"n={n} B={b} causal={causal}: |ΔO| {error:.1e}, |ΔLSE| {lse_error:.1e}, tol {tol:.1e}")
    assert error <= tol and lse_error <= tolerance(lse_exp, n)
    assert got["MAX_ABS_DIFF"][0, 0] == pytest.approx(error, abs=1e-300)
    assert all(np.isfinite(block).all() for block in got.values())


@pytest.mark.parametrize("n,b,causal", [c for c in CASES if c[0] in (5, 7)])
def test_every_block_is_the_softmax_of_the_keys_seen_so_far(n, b, causal):
    """After key block j, row r holds max, sum and weighted sum over keys 1..end of block j
    (causal: only keys ≤ r); rows whose query block skips block j carry their state."""
    inputs = random_inputs(n, seed=7 + b)
    got = flash_ref(inputs, FlashParams(seq_len=n, block_size=b, causal=causal))
    scaled, v = got["SCALED"], got["V"]
    bounds = block_bounds(n, b)
    for j, (c0, c1) in enumerate(bounds, start=1):
        for r in range(n):
            if causal and r < c0:  # query block of r lies before key block j: skipped
                assert (got[f"S_B{j}"][r] == 0).all() and (got[f"P_B{j}"][r] == 0).all()
                for name in ("M", "L", "ACC"):
                    np.testing.assert_array_equal(got[f"{name}_B{j}"][r],
                                                  got[f"{name}_B{j - 1}"][r])
                assert got[f"ALPHA_B{j}"][r, 0] == 1.0
                continue
            seen = slice(0, min(c1, r + 1) if causal else c1)
            m = scaled[r, seen].max()
            weights = np.exp(scaled[r, seen] - m)
            np.testing.assert_allclose(got[f"S_B{j}"][r], scaled[r, c0:c1], atol=1e-14)
            assert got[f"M_B{j}"][r, 0] == pytest.approx(m, abs=1e-14)
            assert got[f"L_B{j}"][r, 0] == pytest.approx(weights.sum(), rel=1e-13)
            np.testing.assert_allclose(got[f"ACC_B{j}"][r], weights @ v[seen], rtol=1e-12,
                                       atol=1e-13)
            if j > 1:
                previous = got[f"M_B{j - 1}"][r, 0]
                assert got[f"ALPHA_B{j}"][r, 0] == pytest.approx(np.exp(previous - m))
    assert "ALPHA_B1" not in got  # the state starts from block 1: no −∞, no sentinel


@requires_torch
@pytest.mark.parametrize("n,b,causal", [c for c in CASES if c[0] in (1, 3, 7, 8)])
def test_reference_equals_torch_sdpa_and_logsumexp(n, b, causal):
    import torch

    inputs = random_inputs(n, seed=3 * n + b)
    got = flash_ref(inputs, FlashParams(seq_len=n, d_model=4, d_k=3, d_v=2, block_size=b,
                                        causal=causal))
    q, k, v = (torch.from_numpy(got[name]) for name in ("Q", "K", "V"))  # float64
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -torch.inf)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    tol = tolerance(got["V"], n)
    error = np.abs(got["OUTPUT"] - out.numpy()).max()
    lse_error = np.abs(got["LSE"] - lse.numpy()).max()
    print(f"n={n} B={b} causal={causal}: |ΔO| {error:.1e}, |ΔLSE| {lse_error:.1e}, tol {tol:.1e}")
    assert error <= tol and lse_error <= tolerance(lse.numpy(), n)


@pytest.mark.parametrize("layout,causal", [("cells", True), ("blocks", False),
                                           ("blocks", True)])
def test_sheet_output_equals_attention_sheet_output(tmp_path, layout, causal):
    """Same seed and sizes: the same X, W_Q, W_K, W_V, and the same OUTPUT."""
    sizes = {"seq_len": 4, "d_model": 3, "d_k": 2, "d_v": 3, "causal": causal}
    flash = build(tmp_path, "flash", {**sizes, "block_size": 3}, layout, seed=11,
                  name="flash.xlsx")
    plain = build(tmp_path, "attention", sizes, layout, seed=11, name="attention.xlsx")
    names = ["X", "W_Q", "W_K", "W_V", "OUTPUT"]
    got = evaluated_blocks(flash, evaluate_with_formulas(flash), names + ["MAX_ABS_DIFF"])
    exp = evaluated_blocks(plain, evaluate_with_formulas(plain), names)
    for name in names[:4]:
        np.testing.assert_array_equal(got[name], exp[name])
    error = np.abs(got["OUTPUT"] - exp["OUTPUT"]).max()
    print(f"{layout} causal={causal}: max |flash − attention| {error:.1e}, "
          f"sheet's own MAX_ABS_DIFF {got['MAX_ABS_DIFF'][0, 0]:.1e}")
    assert error <= 1e-14 and got["MAX_ABS_DIFF"][0, 0] <= 1e-14


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_formulas_are_portable_and_causal_tiles_are_skipped(tmp_path, layout):
    path = build(tmp_path, "flash", {"seq_len": 5, "d_model": 3, "d_k": 2, "block_size": 2,
                                     "causal": True}, layout)
    wb = openpyxl.load_workbook(path)
    ws = wb["Flash"]
    texts = []
    for row in ws.iter_rows():
        for cell in row:
            value = cell.value
            text = getattr(value, "text", value)
            if isinstance(text, str) and text.startswith("="):
                texts.append(text)
    used = {f for text in texts for f in re.findall(r"([A-Z][A-Z0-9.]*)\(", text)}
    assert used <= PORTABLE, used - PORTABLE
    assert not any(re.search(r"INF|NAN|E\+30", t, re.IGNORECASE) for t in texts)
    # key block 2 (keys 3–4): query rows 1–2 never visit it; their S cells compute nothing
    s2 = find_name(wb, "S_B2", path)
    m2, m1 = find_name(wb, "M_B2", path), find_name(wb, "M_B1", path)
    for r in range(2):
        columns = range(2) if layout == "cells" else range(1)  # blocks: one formula a row
        for c in columns:
            value = ws.cell(s2.top + r, s2.left + c).value
            assert getattr(value, "text", value) == "=0"
        m1_cell = f"${openpyxl.utils.get_column_letter(m1.left)}{m1.top + r}"
        assert ws.cell(m2.top + r, m2.left).value == f"={m1_cell}"  # state carried


@pytest.mark.parametrize("size", ["0", "6", "-1"])
def test_cli_rejects_a_bad_block_size(tmp_path, size):
    result = cli("build", "flash", "-o", tmp_path / "f.xlsx", "--seq-len", "5",
                 f"--block-size={size}")
    assert "block-size" in one_line_error(result)
    assert not (tmp_path / "f.xlsx").exists()
