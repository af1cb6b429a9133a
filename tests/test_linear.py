"""`linear`: the reference's two forms (summary KV and running state) against an explicit
quadratic form, and against each other; with --features favor, the random features against
the exact softmax kernel (bias and variance), the estimate against PyTorch's softmax
attention, and the sheet's error table against sheets with fewer features."""

import numpy as np
import pytest
from helpers.books import block_values, build
from helpers.cli import build_refused, cli, one_line_error
from helpers.requires import requires_torch

from reference.linear import EPS, elu_plus_one, linear_ref
from sheets.linear import Linear, LinearParams
from workbook_builder.sheet.kind import complete_inputs, make_params


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


# -- --features favor: Performer's positive random features --------------------------------
def _favor_case(m, seed=0, causal=False, n=4, d_model=3, d_k=3, d_v=2, scale=0.3, draw=0):
    """Inputs with q, k of moderate length (the estimator's variance grows like
    exp(|q'+k'|²)), and Ω with m plain N(0, 1) columns, drawn from (seed, m, draw): the
    same X and W for every m and draw, a new Ω for each."""
    rng = np.random.default_rng(seed)
    inputs = {"X": rng.normal(size=(n, d_model)) * scale,
              "W_Q": rng.normal(size=(d_model, d_k)), "W_K": rng.normal(size=(d_model, d_k)),
              "W_V": rng.normal(size=(d_model, d_v)),
              "OMEGA": np.random.default_rng([seed, m, draw]).normal(size=(d_k, m))}
    params = LinearParams(seq_len=n, d_model=d_model, d_k=d_k, d_v=d_v, causal=causal,
                          features="favor", n_features=m)
    return inputs, params


def _softmax_kernel(inputs):
    """exp(q·k/√d_k) for every query/key pair, and the variance of one random feature's
    estimate of it, exp(2q'·k')·(exp(|q'+k'|²) − 1) (Performer, Lemma 2), q' = q/d_k^¼."""
    q, k = inputs["X"] @ inputs["W_Q"], inputs["X"] @ inputs["W_K"]
    d_k = q.shape[1]
    kernel = np.exp(q @ k.T / np.sqrt(d_k))
    qs, ks = q / d_k ** 0.25, k / d_k ** 0.25
    sum_sq = ((qs[:, None, :] + ks[None, :, :]) ** 2).sum(axis=2)
    return kernel, kernel ** 2 * np.expm1(sum_sq)


def test_favor_features_estimate_the_softmax_kernel_without_bias():
    """φ(q')·φ(k') averages to exp(q·k/√d_k): with m = 400 000 features every entry lies
    within a few standard errors of the exact kernel, the standard error taken from the
    paper's variance formula, not from the features."""
    inputs, params = _favor_case(400_000, seed=1)
    got = linear_ref(inputs, params)
    estimate = got["PHI_Q"] @ got["PHI_K"].T
    kernel, variance = _softmax_kernel(inputs)
    z = (estimate - kernel) / np.sqrt(variance / params.n_features)
    print(f"kernel {kernel.min():.3f}…{kernel.max():.3f}; max |z| = {np.abs(z).max():.2f}, "
          f"rms z = {np.sqrt((z ** 2).mean()):.2f}")
    assert np.abs(z).max() < 4.5
    assert 0.4 < np.sqrt((z ** 2).mean()) < 1.8  # the errors are the predicted size


def test_favor_kernel_error_shrinks_like_one_over_sqrt_m():
    """×64 the features, ÷8 the error: at each m the rms error over the kernel entries of
    four draws of Ω, divided by the predicted standard error √(variance/m), stays near 1."""
    kernel, variance = _softmax_kernel(_favor_case(1, seed=2)[0])
    errors = []
    for m in (16, 1024, 65536):
        squares = []
        for draw in range(4):  # the same X and W, a new Ω each time
            inputs, params = _favor_case(m, seed=2, draw=draw)
            got = linear_ref(inputs, params)
            squares.append((got["PHI_Q"] @ got["PHI_K"].T - kernel) ** 2)
        rms, predicted = np.sqrt(np.mean(squares)), np.sqrt(variance.mean() / m)
        print(f"m = {m:>6}: rms error {rms:.2e}, predicted {predicted:.2e}")
        errors.append(rms)
        assert 0.5 < rms / predicted < 2
    assert errors[0] > errors[1] > errors[2]


@requires_torch
@pytest.mark.parametrize("causal", [False, True])
def test_favor_output_approaches_torch_softmax_attention(causal):
    """OUTPUT_SOFTMAX is torch's scaled_dot_product_attention to rounding; the favor
    OUTPUT, with m = 200 000, is as close to it as the kernel's variance predicts: kernel
    entries off by at most ε relative move a weighted average of V by at most
    ε·2·max|V|, and ε is taken as 5 standard errors."""
    import torch

    m = 200_000
    inputs, params = _favor_case(m, seed=0, causal=causal)
    got = linear_ref(inputs, params)
    q, k, v = (torch.from_numpy(got[name]) for name in ("Q", "K", "V"))  # float64
    exp = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).numpy()
    kernel, variance = _softmax_kernel(inputs)
    tol = 5 * (np.sqrt(variance / m) / kernel).max() * 2 * np.abs(got["V"]).max()
    exact_error = np.abs(got["OUTPUT_SOFTMAX"] - exp).max()
    favor_error = np.abs(got["OUTPUT"] - exp).max()
    print(f"causal={causal}: |softmax − torch| {exact_error:.1e}, |favor − torch| "
          f"{favor_error:.1e} (tol {tol:.1e}), MAX_ABS_ERR {got['MAX_ABS_ERR'][0, 0]:.1e}")
    assert exact_error < 1e-14
    assert favor_error < tol < 0.1
    assert got["MAX_ABS_ERR"][0, 0] == pytest.approx(favor_error, rel=1e-9)
    assert got["ERR_BY_M"][-1, 0] == got["MAX_ABS_ERR"][0, 0]


def test_favor_features_cannot_overflow():
    """exp(x·ω − |x|²/2) ≤ exp(|ω|²/2) for any x (since a·b − a²/2 ≤ b²/2): inputs 100
    times larger leave every feature finite and under that bound (most underflow to 0)."""
    inputs, params = _favor_case(64, seed=4, scale=100.0)
    got = linear_ref(inputs, params)
    bound = np.exp((inputs["OMEGA"] ** 2).sum(axis=0) / 2) / np.sqrt(64)
    for name in ("PHI_Q", "PHI_K"):
        assert np.all(np.isfinite(got[name])) and np.all(got[name] <= bound * (1 + 1e-12))
    assert all(np.all(np.isfinite(block)) for block in got.values())


@pytest.mark.parametrize("layout,causal", [("blocks", False), ("cells", True)])
def test_sheet_error_table_equals_sheets_with_fewer_features(tmp_path, layout, causal):
    """OUTPUT_M4 of a 16-feature sheet (its first 4 columns of Ω, rescaled by 16/4) is the
    OUTPUT of a 4-feature sheet given those 4 columns, and ERR_BY_M lists both sheets'
    MAX_ABS_ERR: the sheet's two formulations agree, evaluated by the `formulas` engine.
    The same seed gives both sheets the same X and weights."""
    sizes = {"seq_len": 4, "d_model": 3, "d_k": 2, "causal": causal, "features": "favor"}
    wide = build(tmp_path, "linear", {**sizes, "n_features": 16}, layout, seed=5,
                 name="m16.xlsx")
    omega = np.array(block_values(wide, "OMEGA"))
    narrow = build(tmp_path, "linear", {**sizes, "n_features": 4}, layout, seed=5,
                   given={"OMEGA": omega[:, :4]}, name="m4.xlsx")
    for name in ("X", "W_Q", "W_K", "W_V"):
        assert block_values(wide, name) == block_values(narrow, name)
    fewer = np.array(block_values(wide, "OUTPUT_M4"))
    direct = np.array(block_values(narrow, "OUTPUT"))
    table = np.array(block_values(wide, "ERR_BY_M"))[:, 0]
    print(f"{layout} causal={causal}: |OUTPUT_M4 − OUTPUT(m=4)| "
          f"{np.abs(fewer - direct).max():.1e}; ERR_BY_M {table}")
    np.testing.assert_allclose(fewer, direct, rtol=1e-12, atol=1e-15)
    assert table[0] == pytest.approx(block_values(narrow, "MAX_ABS_ERR")[0][0], rel=1e-12)
    assert table[1] == block_values(wide, "MAX_ABS_ERR")[0][0]


def test_demo_sheet_error_shrinks_for_m_4_16_64(tmp_path):
    """The issue's table: the linear_favor demo (n = 5, d_k = 4, m = 64, seed 0), as the
    `formulas` engine evaluates it, shows max |favor − softmax| falling at m' = 4, 16, 64."""
    demo = dict(Linear.demo_cases)["linear_favor"]
    path = build(tmp_path, "linear", demo, "blocks", seed=0)
    table = [row[0] for row in block_values(path, "ERR_BY_M")]
    print("seed 0: " + ", ".join(f"m={m}: {e:.4f}" for m, e in zip((4, 16, 64), table,
                                                                    strict=True)))
    assert table[0] > table[1] > table[2]
    assert table[2] == block_values(path, "MAX_ABS_ERR")[0][0]


def test_error_falls_with_m_over_many_draws():
    """Over 200 seeds (inputs and Ω drawn as the sheet draws them, demo sizes), the median
    max |favor − softmax| falls at every ×4 in features; a single draw need not."""
    kind = Linear
    params = make_params(kind, {**dict(kind.demo_cases)["linear_favor"], "n_features": 256})
    table = np.array([kind.reference(complete_inputs(kind, params, {}, seed), params)
                      ["ERR_BY_M"][:, 0] for seed in range(200)])
    median = np.median(table, axis=0)
    monotone = np.mean(np.all(np.diff(table[:, :3], axis=1) < 0, axis=1))
    print("median max |Δ| at m' = 4, 16, 64, 256: " + ", ".join(f"{e:.4f}" for e in median)
          + f"; 4 > 16 > 64 in {monotone:.0%} of draws")
    assert np.all(median[:-1] / median[1:] > 1.3)


def test_omega_given_by_hand_switches_favor_on(tmp_path):
    omega = tmp_path / "omega.csv"
    omega.write_text("1,0,-1,0.5,2\n0,1,0.2,-0.5,1\n0.1,0.2,0.3,0.4,0.5\n", encoding="utf-8")
    path = tmp_path / "o.xlsx"
    result = cli("build", "linear", "-o", path, "--inputs", f"OMEGA={omega}")
    assert result.returncode == 0, result.stderr
    assert "features=favor, n_features=5" in result.stdout
    assert block_values(path, "OMEGA")[2] == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert len(block_values(path, "ERR_BY_M")) == 2  # m' = 4 and m = 5


@pytest.mark.parametrize("args,message", [
    (["--n-features", "8"], "--n-features (or an OMEGA input) needs --features favor"),
    (["--features", "softmax"], "invalid choice: 'softmax'"),
    (["--features", "favor", "--n-features", "0"], "--n-features must be a positive"),
    (["--features", "favor", "--n-features", "1001"], "--n-features must be at most 1000"),
])
def test_bad_favor_options_exit_2_with_one_line(tmp_path, args, message):
    assert message in build_refused("linear", tmp_path, *args)
