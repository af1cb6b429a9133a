"""`relative-position`: ALiBi slopes against the paper's get_slopes; T5 buckets against
transformers' `T5Attention._relative_position_bucket` (the NumPy reference, and the sheet's
BUCKET block evaluated by the `formulas` engine and by LibreOffice), including the float32
boundary cases; whole heads against BLOOM's ALiBi and transformers' T5Attention; INT and the
float32 rounding across engines; the CLI's refusals."""

import functools
import math
from decimal import Decimal, localcontext

import numpy as np
import openpyxl
import pytest
from helpers.books import block_values, build, check_built
from helpers.cli import build_refused, cli, one_line_error
from helpers.requires import requires_gnumeric, requires_libreoffice, requires_transformers

from reference.relative_position import alibi_slopes, relative_position_ref, t5_buckets
from sheets.relative_position import RelativePositionParams, f32
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.gnumeric import recalculate
from workbook_builder.engines.libreoffice import (
    convert_many,
    evaluate_with_libreoffice,
    read_values,
)


def get_slopes(n):
    """ALiBi's slopes as the paper's code computes them (ofirpress/attention_with_linear_biases,
    fairseq/models/transformer.py)."""
    def get_slopes_power_of_2(n):
        start = (2**(-2**-(math.log2(n)-3)))
        ratio = start
        return [start*ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    else:
        closest_power_of_2 = 2**math.floor(math.log2(n))
        return get_slopes_power_of_2(closest_power_of_2) + \
            get_slopes(2*closest_power_of_2)[0::2][:n-closest_power_of_2]


def hf_buckets(rel_pos: np.ndarray, bidirectional: bool, buckets: int, max_distance: int):
    """transformers' T5 bucket of every relative position."""
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(
        torch.from_numpy(rel_pos), bidirectional=bidirectional, num_buckets=buckets,
        max_distance=max_distance).numpy()


def float64_buckets(rel_pos, bidirectional, buckets, max_distance):
    """T5's bucket function written again in float64: what a sheet without float32 rounding
    would floor."""
    offset = 0
    if bidirectional:
        buckets //= 2
        offset = np.where(rel_pos > 0, buckets, 0)
        distance = np.abs(rel_pos)
    else:
        distance = -np.minimum(rel_pos, 0)
    exact = buckets // 2
    x = np.log(np.maximum(distance, 1) / exact) / math.log(max_distance / exact) * \
        (buckets - exact)
    large = np.minimum(buckets - 1, exact + np.floor(x).astype(int))
    return offset + np.where(distance < exact, distance, large)


def nearest_float32(value: Decimal) -> np.float32:
    """The float32 nearest to `value`: float32(float(value)) or one of its neighbours (rounding
    twice can land one float32 off; the log of a ratio other than 1 is never a tie)."""
    guess = np.float32(float(value))
    around = (np.nextafter(guess, np.float32(-np.inf)), guess,
              np.nextafter(guess, np.float32(np.inf)))
    return min(around, key=lambda f: abs(Decimal(float(f)) - value))


@functools.cache
def correctly_rounded_log(ratio: float) -> np.float32:
    """ln(ratio) to 40 digits (Decimal), rounded once to float32."""
    with localcontext() as context:
        context.prec = 40
        return nearest_float32(Decimal(ratio).ln())


def correctly_rounded_buckets(rel_pos, bidirectional, buckets, max_distance):
    """T5's bucket function with each float32 step rounded once from its exact value: d/e,
    ℓ/c and q·(B' − e) in NumPy's float32 (IEEE rounds each), the log from 40 digits, and c as
    transformers takes it, the Python float ln(max_distance/e) cast to float32."""
    direction = buckets // 2 if bidirectional else buckets
    offset = np.where(rel_pos > 0, direction, 0) if bidirectional else 0
    distance = np.abs(rel_pos) if bidirectional else -np.minimum(rel_pos, 0)
    exact = direction // 2
    log_range = np.float32(math.log(max_distance / exact))

    def bucket(d):
        if d < exact:
            return d
        ratio = np.float32(d) / np.float32(exact)
        x = correctly_rounded_log(float(ratio)) / log_range * np.float32(direction - exact)
        return min(direction - 1, exact + math.floor(x))

    by_distance = np.array([bucket(d) for d in range(int(distance.max()) + 1)])
    return offset + by_distance[distance]


def x_is_whole(d, bidirectional, buckets, max_distance) -> bool:
    """Is x = ln(d/e)/ln(max_distance/e)·(B' − e) a whole number k in exact arithmetic? That
    is (d/e)^(B'−e) = (max_distance/e)^k, checked in integers as
    d^(B'−e)·e^k = max_distance^k·e^(B'−e) for the k nearest float64's x."""
    direction = buckets // 2 if bidirectional else buckets
    exact = direction // 2
    log_buckets = direction - exact
    k = round(math.log(d / exact) / math.log(max_distance / exact) * log_buckets)
    return k >= 0 and d ** log_buckets * exact ** k == max_distance ** k * exact ** log_buckets


def offsets(n: int) -> np.ndarray:
    positions = np.arange(n)
    return positions[None, :] - positions[:, None]               # j − i


def _params(**values):
    return RelativePositionParams(**values)


def _inputs(p, seed=0):
    rng = np.random.default_rng(seed)
    d = p.d_model
    inputs = {"X": rng.normal(size=(p.seq_len, d)), "W_Q": rng.normal(size=(d, d)),
              "W_K": rng.normal(size=(d, d)), "W_V": rng.normal(size=(d, d)),
              "W_O": rng.normal(size=(d, d))}
    if p.bias == "t5":
        inputs["BIAS_TABLE"] = rng.normal(size=(p.buckets, p.heads))
    return inputs


# -- ALiBi -----------------------------------------------------------------------------------

@pytest.mark.parametrize("heads", range(1, 41))
def test_alibi_slopes_equal_the_papers_get_slopes(heads):
    exp, got = np.array(get_slopes(heads)), alibi_slopes(heads)
    tol = 4 * heads * np.finfo(float).eps          # the paper multiplies start·ratio^i
    print(heads, np.abs(got / exp - 1).max(), tol)
    np.testing.assert_allclose(got, exp, rtol=tol, atol=0)


@pytest.mark.parametrize("heads", [4, 6])
def test_the_sheets_slopes_are_the_papers(tmp_path, heads):
    """SLOPES is a live POWER formula; for 6 heads it follows get_slopes' rule for
    non-powers of two (4 slopes of 4 heads, then every other slope of 8 heads)."""
    path = build(tmp_path, "relative-position", {"bias": "alibi", "seq_len": 2,
                                                  "d_model": heads, "heads": heads})
    got = np.array(block_values(path, "SLOPES"), dtype=float)[0]
    print(got)
    np.testing.assert_allclose(got, get_slopes(heads), rtol=1e-14, atol=0)
    text = openpyxl.load_workbook(path)["RelativePosition"]
    assert any("POWER(2," in str(c.value) for row in text.iter_rows() for c in row)


@requires_transformers
@pytest.mark.parametrize("heads", [1, 4, 6])
def test_alibi_attention_equals_bloom_alibi(heads):
    """BLOOM adds slope·j (not −slope·|i − j|) and relies on softmax ignoring a constant per
    row: with the causal mask both give the same weights and outputs."""
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    n, d = 7, 2 * heads
    p = _params(bias="alibi", seq_len=n, d_model=d, heads=heads)
    inputs = _inputs(p, seed=heads)
    got = relative_position_ref(inputs, p)
    alibi = build_alibi_tensor(torch.ones(1, n), heads, torch.float64)  # (H, 1, n), float32 slopes
    x = torch.from_numpy(inputs["X"])
    q, k, v = (x @ torch.from_numpy(inputs[w]) for w in ("W_Q", "W_K", "W_V"))
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    heads_out = []
    for h in range(heads):
        cols = slice(2 * h, 2 * h + 2)
        scores = q[:, cols] @ k[:, cols].T / math.sqrt(2) + alibi[h]
        weights = torch.softmax(scores.masked_fill(future, -math.inf), dim=-1)
        error = np.abs(got[f"WEIGHTS_H{h + 1}"] - weights.numpy()).max()
        print(f"head {h + 1}: max |weights − BLOOM| = {error:.1e}")
        assert error < 1e-6                           # BLOOM's slopes are float32
        heads_out.append(weights @ v[:, cols])
    exp = (torch.cat(heads_out, dim=1) @ torch.from_numpy(inputs["W_O"])).numpy()
    np.testing.assert_allclose(got["OUTPUT"], exp, rtol=0, atol=1e-5)
    # on the keys a query sees (j ≤ i) the biases differ by a constant per row (slope·i),
    # which the softmax ignores
    shift = got["BIAS_H1"] - alibi[0].numpy()
    seen = ~future.numpy()
    assert np.allclose(shift[seen], np.broadcast_to(shift[:, :1], shift.shape)[seen], atol=1e-6)
    assert not np.allclose(shift, shift[:, :1], atol=1e-6)     # not on the masked ones


# -- T5 buckets ------------------------------------------------------------------------------

@requires_transformers
@pytest.mark.parametrize("bidirectional", [True, False])
def test_reference_buckets_equal_transformers_at_n40(bidirectional):
    rel = offsets(40)
    exp = hf_buckets(rel, bidirectional, 32, 128)
    got, _ = t5_buckets(rel, bidirectional, 32, 128)
    print(np.unique(exp))
    np.testing.assert_array_equal(got, exp)
    log_buckets = (exp % 16 >= 8) if bidirectional else (exp >= 16)
    assert log_buckets.any()                      # distances 8 (16) and on take the log


def grid():
    """(buckets, max_distance, bidirectional) with max_distance above max_exact."""
    for buckets in range(2, 67):
        for bidirectional in (True, False):
            exact = (buckets // 2 if bidirectional else buckets) // 2
            for max_distance in [*range(exact + 1, 101), 128, 256, 1000]:
                if exact >= 1:
                    yield buckets, max_distance, bidirectional


@requires_transformers
def test_reference_buckets_are_correctly_rounded_and_transformers_but_at_whole_x_on_a_grid():
    """Every relative position up to past max distance, 10,000+ settings. The reference is T5's
    bucket function with each float32 step correctly rounded, everywhere. transformers floors
    torch's float32 log, whose last bit depends on the CPU: its bucket equals the reference's
    but at a few distances where x is a whole number in exact arithmetic, and there it is one
    higher (10 distances measured, under every ATEN_CPU_CAPABILITY). The same formula in
    float64 floors differently in more settings."""
    import torch

    settings, transformers_off, float64_wrong = 0, [], []
    for setting in grid():
        buckets, max_distance, bidirectional = setting
        rel = np.arange(-max_distance - 3, max_distance + 4)[None, :]
        got, _ = t5_buckets(rel, bidirectional, buckets, max_distance)
        np.testing.assert_array_equal(
            got, correctly_rounded_buckets(rel, bidirectional, buckets, max_distance),
            err_msg=f"{setting}")
        settings += 1
        exp = hf_buckets(rel, bidirectional, buckets, max_distance)
        off = got != exp
        assert (exp[off] - got[off] == 1).all(), (setting, rel[off], got[off], exp[off])
        for d in sorted(set(np.abs(rel[off]).tolist())):
            assert x_is_whole(d, bidirectional, buckets, max_distance), (setting, d)
            transformers_off.append((*setting, d))
        if (float64_buckets(rel, bidirectional, buckets, max_distance) != got).any():
            float64_wrong.append(setting)
    print(f"{settings} settings, {torch.backends.cpu.get_cpu_capability()}: transformers one "
          f"higher at {len(transformers_off)} (buckets, max distance, bidirectional, d): "
          f"{transformers_off}; float64 differs in {len(float64_wrong)}: {float64_wrong[:8]}")
    assert settings > 10_000
    assert len(transformers_off) <= 20       # of 365 distances with x whole on this grid
    assert (19, 25, False) in float64_wrong and (38, 25, True) in float64_wrong
    assert (32, 128, True) not in float64_wrong and (32, 128, False) not in float64_wrong


def test_x_is_whole_finds_the_exact_boundaries():
    """x = ln(d/e)/ln(max_distance/e)·(B' − e): with 19 causal buckets (e = 9, B' − e = 10)
    and max distance 25, x(15) = 10·ln(5/3)/ln(25/9) = 5; 32 bidirectional buckets at 128
    give x(16), x(32), x(64) = 2, 4, 6 and nothing whole between."""
    assert x_is_whole(15, False, 19, 25) and not x_is_whole(14, False, 19, 25)
    whole = [d for d in range(9, 128) if x_is_whole(d, True, 32, 128)]
    assert whole == [16, 32, 64], whole


def test_boundary_distances_of_32_buckets_are_whole_numbers_in_float32():
    """At 32 buckets and max distance 128, x = ln(d/e)/ln(128/e)·(B' − e) is a whole number
    for d = 16, 32, 64 (bidirectional: 2·log2(d/8)) and d = 16, 128 (causal): there float32
    must not land below it. It does not: x is exactly 2, 4, 6 and 0, 16."""
    for bidirectional, whole in ((True, {16: 2, 32: 4, 64: 6}), (False, {16: 0, 128: 16})):
        rel = -np.arange(130)[None, :]
        _, table = t5_buckets(rel, bidirectional, 32, 128)
        exact = 8 if bidirectional else 16
        for d, x in whole.items():
            assert float(table["LOG_BIN"][d - exact]) == x, (bidirectional, d)


@pytest.fixture(scope="module")
def books_at_n40(tmp_path_factory):
    """The two n = 40 workbooks (32 buckets, max distance 128), built once: the `formulas`
    engine's values are stored in them."""
    folder = tmp_path_factory.mktemp("n40")
    return {bidirectional: build(folder, "relative-position", {
        "bias": "t5", "seq_len": 40, "d_model": 1, "heads": 1, "causal": not bidirectional},
        layout="blocks", name=f"t5_{'bi' if bidirectional else 'causal'}.xlsx")
        for bidirectional in (True, False)}


@requires_transformers
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_sheets_buckets_equal_transformers_at_n40(books_at_n40, bidirectional):
    path = books_at_n40[bidirectional]
    got = np.array(block_values(path, "BUCKET"), dtype=float)
    exp = hf_buckets(offsets(40), bidirectional, 32, 128)
    print(f"{(got == exp).sum()} of {got.size} buckets equal")
    np.testing.assert_array_equal(got, exp)
    report = check_built(path)
    assert report.passed, format_report(report)


@requires_transformers
@requires_libreoffice
def test_libreoffice_computes_the_same_buckets_at_n40(books_at_n40, tmp_path):
    paths = [books_at_n40[True], books_at_n40[False]]
    for path, recalculated in zip(paths, convert_many(paths, "xlsx", tmp_path), strict=True):
        bidirectional = path == books_at_n40[True]
        got = np.array(block_values(recalculated, "BUCKET"), dtype=float)
        np.testing.assert_array_equal(got, hf_buckets(offsets(40), bidirectional, 32, 128))
        report = check_workbook(path, "libreoffice", values=read_values(recalculated))
        assert report.passed, format_report(report)


@pytest.mark.parametrize("buckets,max_distance,distance,causal,layout", [
    (19, 25, 15, True, "cells"), (38, 25, 15, False, "blocks"), (17, 27, 12, True, "blocks")])
def test_the_sheet_floors_the_correctly_rounded_float32_where_x_is_whole(
        tmp_path, buckets, max_distance, distance, causal, layout):
    """x = ln(d/e)/ln(max_distance/e)·(B' − e) is a whole number k there
    (10·ln(15/9)/ln(25/9) = 5, 9·ln(12/8)/ln(27/8) = 3), and the correctly rounded float32
    steps land just below it, so the bucket is e + k − 1 where float64 gives e + k
    (transformers gives either, depending on its CPU's float32 log)."""
    n, bidirectional = distance + 1, not causal
    direction = buckets if causal else buckets // 2
    exact = direction // 2
    assert x_is_whole(distance, bidirectional, buckets, max_distance)
    k = round(math.log(distance / exact) / math.log(max_distance / exact) * (direction - exact))
    rel = offsets(n)
    exp = correctly_rounded_buckets(rel, bidirectional, buckets, max_distance)
    assert (float64_buckets(rel, bidirectional, buckets, max_distance) != exp).any()
    path = build(tmp_path, "relative-position", {
        "bias": "t5", "seq_len": n, "d_model": 1, "heads": 1, "buckets": buckets,
        "max_distance": max_distance, "causal": causal}, layout=layout)
    got = np.array(block_values(path, "BUCKET"), dtype=float)
    np.testing.assert_array_equal(got, exp)
    assert got[distance, 0] == exact + k - 1
    log_bin = np.array(block_values(path, "LOG_BIN"), dtype=float)[distance - exact, 0]
    assert log_bin == float(np.nextafter(np.float32(k), np.float32(0))), log_bin  # k − 1 ulp


@requires_transformers
@pytest.mark.parametrize("causal,buckets,max_distance", [(False, 8, 6), (True, 6, 7),
                                                         (False, 32, 128)])
def test_t5_attention_equals_transformers_t5attention(causal, buckets, max_distance):
    """compute_bias looks the buckets up in relative_attention_bias; T5 adds it to Q·Kᵀ
    without the 1/√d_k scale; the decoder (causal) masks future keys."""
    import torch
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    n, d, heads = 9, 4, 2
    p = _params(bias="t5", seq_len=n, d_model=d, heads=heads, buckets=buckets,
                max_distance=max_distance, causal=causal)
    inputs = _inputs(p, seed=buckets)
    config = T5Config(d_model=d, d_kv=d // heads, num_heads=heads, dropout_rate=0.0,
                      relative_attention_num_buckets=buckets,
                      relative_attention_max_distance=max_distance, is_decoder=causal,
                      attn_implementation="eager")
    attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0).double()
    with torch.no_grad():
        for name, w in (("q", "W_Q"), ("k", "W_K"), ("v", "W_V"), ("o", "W_O")):
            getattr(attention, name).weight.copy_(torch.from_numpy(inputs[w].T))  # out × in
        attention.relative_attention_bias.weight.copy_(torch.from_numpy(inputs["BIAS_TABLE"]))
        mask = torch.zeros(1, 1, n, n, dtype=torch.float64)
        if causal:
            mask[..., torch.triu(torch.ones(n, n, dtype=torch.bool), 1)] = -math.inf
        out, position_bias, weights = attention.eval()(torch.from_numpy(inputs["X"])[None],
                                                       mask=mask)
    got = relative_position_ref(inputs, p)
    for h in range(heads):
        np.testing.assert_array_equal(got[f"BIAS_H{h + 1}"], position_bias[0, h].numpy())
        np.testing.assert_allclose(got[f"WEIGHTS_H{h + 1}"], weights[0, h].numpy(), rtol=0,
                                   atol=1e-13)
    error = np.abs(got["OUTPUT"] - out[0].numpy()).max()
    print(f"max |OUTPUT − T5Attention| = {error:.1e}")
    assert error < 1e-12


# -- INT and float32 rounding in both engines ------------------------------------------------

INT_ARGUMENTS = [3, -3, 2.5, -2.5, 0.25, -0.25, 0, 7.9999995, -7.9999995, 1e6 + 0.5,
                 -1e6 - 0.5, 4.999999523162842, 31.999998092651367, -1e-300]
F32_ARGUMENTS = ["LN(5/3)", "0.1", "-0.1", "LN(30/18)/LN(50/18)", "1+2^-24", "1+3*2^-24",
                 "12345.678", "-2.5E-07"]


def _engine_book(path):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "S"
    for i, x in enumerate(INT_ARGUMENTS, start=1):
        ws.cell(i, 1, f"=INT({x!r})")
    for i, y in enumerate(F32_ARGUMENTS, start=1):
        ws.cell(i, 2, "=" + f32(f"({y})"))
    wb.save(path)
    return path


@requires_libreoffice
@requires_gnumeric
def test_int_and_the_float32_rounding_agree_in_every_engine(tmp_path):
    """INT floors (towards −∞, negatives included) alike in the three engines, and the
    Veltkamp split, with its constant read from the engine's own precision (IEEE double in
    `formulas` and LibreOffice, long double in Gnumeric), rounds to float32 exactly: NumPy's
    float32 is the expected value."""
    path = _engine_book(tmp_path / "engines.xlsx")
    values = {"formulas": evaluate_with_formulas(path),
              "libreoffice": evaluate_with_libreoffice(path),
              "gnumeric": read_values(recalculate(path, tmp_path / "gnumeric.xlsx"))}
    for engine, got in values.items():
        for i, x in enumerate(INT_ARGUMENTS, start=1):
            assert got[("S", i, 1)] == math.floor(x), (engine, x, got[("S", i, 1)])
        for i, y in enumerate(F32_ARGUMENTS, start=1):
            exp = float(np.float32(eval(y.replace("LN", "math.log").replace("^", "**"))))
            # LibreOffice writes 15 significant digits into the file it saves
            assert got[("S", i, 2)] == pytest.approx(exp, rel=1e-14, abs=0), (engine, y)


@requires_libreoffice
def test_libreoffice_int_is_an_approximate_floor(tmp_path):
    """Why BUCKET floors a float32 value: within ~1e-15 of a whole number LibreOffice's INT
    rounds to it, while `formulas` (and a true floor) does not. float32 values are whole or
    at least 2^-24 relative away from one, out of reach of that snapping."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "S"
    ws["A1"], ws["A2"] = "=INT(1-2^-53)", "=INT(5-2^-22)"
    path = tmp_path / "snap.xlsx"
    wb.save(path)
    formulas, libreoffice = evaluate_with_formulas(path), evaluate_with_libreoffice(path)
    assert (formulas[("S", 1, 1)], libreoffice[("S", 1, 1)]) == (0, 1)
    assert formulas[("S", 2, 1)] == libreoffice[("S", 2, 1)] == 4


# -- the command line ------------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--bias", "rope"], "invalid choice"),
    (["--heads", "3"], "--heads 3 does not divide --d-model 4"),
    (["--bias", "t5", "--buckets", "3"], "--buckets must be at least 4 for bidirectional"),
    (["--bias", "t5", "--buckets", "1", "--causal"], "--buckets must be at least 2 for causal"),
    (["--bias", "t5", "--max-distance", "8"], "--max-distance must exceed max_exact = 8"),
    (["--bias", "t5", "--max-distance", "0"], "--max-distance must be a positive"),
    (["--seq-len", "0"], "--seq-len must be a positive"),
])
def test_cli_refuses_bad_parameters(tmp_path, args, words):
    assert words in build_refused("relative-position", tmp_path, *args)


def test_a_bias_table_given_by_hand_sets_the_buckets(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text("\n".join(f"{b / 10},{-b / 10}" for b in range(10)))
    out = tmp_path / "t5.xlsx"
    result = cli("build", "relative-position", "-o", out, "--bias", "t5", "--seq-len", "7",
                 "--max-distance", "9", "--inputs", f"BIAS_TABLE={table}")
    assert result.returncode == 0, result.stderr
    assert "buckets=10" in result.stdout
    report = check_workbook(out)
    assert report.passed, format_report(report)
    wrong = cli("build", "relative-position", "-o", tmp_path / "x.xlsx", "--bias", "t5",
                "--heads", "1", "--inputs", f"BIAS_TABLE={table}")
    assert "BIAS_TABLE" in one_line_error(wrong)
