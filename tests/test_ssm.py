"""Kind `ssm`: the float64 selective scan against independent formulations, the sheet against
the reference (LN, not LOG), the gate, the blocks layout, bad input, and linear growth."""

import re

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, build, write_book
from helpers.cli import cli
from helpers.requires import requires_torch
from openpyxl.worksheet.formula import ArrayFormula

from reference.ssm import selective_scan_ref, softplus, ssm_ref
from sheets.ssm import formula_cell_growth
from workbook_builder.book.files import resolve_params
from workbook_builder.checking.check import check_workbook, read_inputs
from workbook_builder.cli.app import main
from workbook_builder.cli.printing import format_report
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import make_params

SSM = KINDS["ssm"]
SHAPES = [(1, 1, 1), (2, 1, 3), (3, 2, 2), (5, 3, 4), (8, 1, 16), (12, 4, 3), (40, 2, 2),
          (7, 5, 1)]
DOWNSTREAM_OF_DELTA = {"DELTA", "A_BAR", "DELTA_B_U", "H", "Y", "OUTPUT"}


def random_inputs(L, D, N, seed, gate=True, bias_range=(-3.0, 3.0)):
    """Wider ranges than the sheet's own inputs, to stress the scan."""
    rng = np.random.default_rng(seed)
    inputs = {"U": rng.normal(size=(L, D)), "W_DELTA": rng.normal(size=(D, D)),
              "DELTA_BIAS": rng.uniform(*bias_range, size=(1, D)),
              "W_B": rng.normal(size=(D, N)), "W_C": rng.normal(size=(D, N)),
              "A_LOG": rng.normal(size=(D, N)), "D": rng.normal(size=(1, D))}
    if gate:
        inputs["Z"] = rng.normal(scale=3.0, size=(L, D))
    return inputs


def params(L, D, N, gate=True):
    return make_params(SSM, {"seq_len": L, "d_model": D, "d_state": N, "gate": gate})


# -- the reference against independent formulations --------------------------------------

def unrolled(inputs):
    """y_t = Σ_{s≤t} C_t·(Π_{r=s+1..t} Ā_r)·B̄_s u_s + D⊙u_t, summed term by term."""
    u = inputs["U"]
    L, D = u.shape
    N = inputs["A_LOG"].shape[1]
    x = u @ inputs["W_DELTA"] + inputs["DELTA_BIAS"]
    delta = np.logaddexp(0.0, x)                       # softplus; inputs stay below 20
    a = -np.exp(inputs["A_LOG"])
    b, c = u @ inputs["W_B"], u @ inputs["W_C"]
    h = np.zeros((L, D, N))
    for t in range(L):
        for d in range(D):
            for n in range(N):
                for s in range(t + 1):
                    decay = np.prod([np.exp(delta[r, d] * a[d, n]) for r in range(s + 1, t + 1)])
                    h[t, d, n] += decay * delta[s, d] * b[s, n] * u[s, d]
    y = np.einsum("tdn,tn->td", h, c) + inputs["D"] * u
    return h.reshape(L, D * N), y


def quadratic(inputs):
    """The 'attention' form: y = (M ∘ C·Bᵀ)·(Δ⊙u) with M[t,s] = exp(A·Σ_{s<r≤t} Δ_r), s ≤ t."""
    u = inputs["U"]
    L = u.shape[0]
    delta = np.logaddexp(0.0, u @ inputs["W_DELTA"] + inputs["DELTA_BIAS"])
    a = -np.exp(inputs["A_LOG"])
    b, c = u @ inputs["W_B"], u @ inputs["W_C"]
    cum = np.cumsum(delta, axis=0)                                 # (L, D)
    seg = cum[:, None, :] - cum[None, :, :]                        # Σ_{s<r≤t} Δ_r, (t, s, D)
    causal = np.tril(np.ones((L, L), dtype=bool))[:, :, None]
    seg = np.where(causal, seg, 0.0)                               # s > t: masked below
    m = np.where(causal[..., None], np.exp(seg[..., None] * a), 0.0)  # (t, s, D, N)
    y = np.einsum("tn,tsdn,sn,sd->td", c, m, b, delta * u)
    return y + inputs["D"] * u


@pytest.mark.parametrize("L,D,N", SHAPES)
def test_reference_equals_unrolled_sum_and_quadratic_form(L, D, N):
    inputs = random_inputs(L, D, N, seed=L * 100 + D * 10 + N, gate=False)
    got = ssm_ref(inputs, params(L, D, N, gate=False))
    exp_h, exp_y = unrolled(inputs)
    tol = 1e-12 * max(1.0, np.abs(exp_y).max())
    print(f"L={L} D={D} N={N}: |H−unrolled| {np.abs(got['H'] - exp_h).max():.1e}, "
          f"|Y−unrolled| {np.abs(got['Y'] - exp_y).max():.1e}, tolerance {tol:.0e}")
    np.testing.assert_allclose(got["H"], exp_h, rtol=0, atol=tol)
    np.testing.assert_allclose(got["Y"], exp_y, rtol=0, atol=tol)
    np.testing.assert_allclose(got["Y"], quadratic(inputs), rtol=0, atol=tol)


@requires_torch
@pytest.mark.parametrize("L,D,N", SHAPES)
def test_reference_equals_upstream_semantics_in_torch(L, D, N):
    """mamba's selective_scan_ref, rewritten in float64 with its (batch, D, L) shapes and
    torch's own softplus (threshold 20) and silu. Some Δ are pushed above 20."""
    import torch
    import torch.nn.functional as F

    inputs = random_inputs(L, D, N, seed=7 + L + D + N, bias_range=(-3.0, 25.0))
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in inputs.items()}
    u = t["U"].T[None]                                              # (1, D, L)
    delta = (t["U"] @ t["W_DELTA"]).T[None]
    B, C = (t["U"] @ t["W_B"]).T[None], (t["U"] @ t["W_C"]).T[None]  # (1, N, L)
    A = -torch.exp(t["A_LOG"])
    delta = F.softplus(delta + t["DELTA_BIAS"][0][..., None])
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    x = A.new_zeros((1, D, N))
    ys = []
    for i in range(L):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]))
    out = torch.stack(ys, dim=2) + u * t["D"][0][..., None]
    out = out * F.silu(t["Z"].T[None])

    got = ssm_ref(inputs, params(L, D, N))
    exp_out = out[0].T.numpy()
    tol = 1e-12 * max(1.0, np.abs(exp_out).max())
    print(f"max Δ {got['DELTA'].max():.1f}; |OUTPUT−torch| "
          f"{np.abs(got['OUTPUT'] - exp_out).max():.1e}, tolerance {tol:.0e}")
    np.testing.assert_allclose(got["DELTA"], delta[0].T.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["OUTPUT"], exp_out, rtol=0, atol=tol)
    np.testing.assert_allclose(got["H"][-1].reshape(D, N), x[0].numpy(), rtol=0, atol=tol)


def test_softplus_is_torchs():
    """x itself above 20 (not ln(1+eˣ) = x + 2e-9), natural log below."""
    assert softplus(np.array(20.5)) == 20.5
    assert softplus(np.array(20.0)) == np.log1p(np.exp(20.0)) != 20.0
    assert softplus(np.array(0.4)) == pytest.approx(0.91302, abs=1e-5)  # base-10 LOG: 0.39652


def test_selective_scan_ref_without_d_z_or_softplus():
    """Upstream's optional arguments: Δ used as given, no skip, no gate."""
    rng = np.random.default_rng(3)
    u, delta = rng.normal(size=(4, 2)), rng.uniform(0.1, 1.0, size=(4, 2))
    A, B, C = -rng.uniform(0.5, 2, size=(2, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    got = selective_scan_ref(u, delta, A, B, C)
    assert set(got) == {"DELTA", "A_BAR", "DELTA_B_U", "H", "Y"}
    np.testing.assert_array_equal(got["DELTA"], delta)
    np.testing.assert_allclose(got["H"][0], (delta[0][:, None] * B[0] * u[0][:, None]).ravel())


# -- the workbook -------------------------------------------------------------------------

def failed_and_passed(path):
    report = check_workbook(path)
    print(format_report(report))
    return ({s.name for s in report.steps if not s.passed},
            {s.name for s in report.steps if s.passed})


# the cost table: sizes and lengths only, independent of every input
COST = {"COST_SIZES", "COST_N", "COST_HELD", "COST_MACS"}


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_log_instead_of_ln_breaks_delta_and_everything_downstream(tmp_path, layout):
    """The circulating Mamba sheet's bug: base-10 LOG in softplus. Upstream blocks still pass."""
    path = build(tmp_path, "ssm", {"seq_len": 4, "d_model": 2, "d_state": 2, "gate": True},
                 layout=layout)
    assert failed_and_passed(path)[0] == set()
    wb = openpyxl.load_workbook(path)
    ws = wb["SSM"]
    swapped = 0
    for row in ws.iter_rows():
        for cell in row:
            value = cell.value
            text = value.text if isinstance(value, ArrayFormula) else value
            if isinstance(text, str) and text.startswith("=") and "LN(" in text:
                assert text.startswith("=IF(") and ">20," in text   # only softplus uses LN
                if isinstance(value, ArrayFormula):
                    value.text = text.replace("LN(", "LOG(")
                else:
                    cell.value = text.replace("LN(", "LOG(")
                swapped += 1
    assert swapped == (8 if layout == "cells" else 1)
    wb.save(path)
    failed, passed = failed_and_passed(path)
    assert failed == DOWNSTREAM_OF_DELTA
    assert passed == {"DELTA_PRE", "A", "B_SEL", "C_SEL", "SILU_Z"} | COST


def test_softplus_branches_in_the_sheet(tmp_path):
    """Δ_pre above 20 takes IF's x branch; far below 0 LN(1+EXP(x)) is ~0 and still passes."""
    given = {"DELTA_BIAS": np.array([[25.0, -40.0]])}
    path = build(tmp_path, "ssm", {"seq_len": 3, "d_model": 2, "d_state": 2}, given=given)
    report = check_workbook(path)
    assert report.passed, format_report(report)
    wb = openpyxl.load_workbook(path)
    kind_params = params(3, 2, 2, gate=False)

    pre = ssm_ref(read_inputs(wb, SSM, kind_params, path, dict), kind_params)["DELTA_PRE"]
    assert (pre[:, 0] > 20).all() and (pre[:, 1] < -37).all()


def test_gate_adds_z_silu_and_output(tmp_path):
    for gate, extra in ((False, set()), (True, {"Z", "SILU_Z", "OUTPUT"})):
        path = build(tmp_path, "ssm", {"seq_len": 3, "d_model": 2, "d_state": 2, "gate": gate},
                     name=f"gate_{gate}.xlsx")
        names = set(openpyxl.load_workbook(path).defined_names)
        base = {"U", "W_DELTA", "DELTA_BIAS", "A_LOG", "W_B", "W_C", "D", "DELTA_PRE", "DELTA",
                "A", "B_SEL", "C_SEL", "A_BAR", "DELTA_B_U", "H", "Y"}
        assert names == base | COST | extra
    # Z given by hand turns the gate on and sets the sizes; disagreeing inputs are refused
    inferred = resolve_params(SSM, {}, {"Z": np.zeros((3, 2)), "A_LOG": np.zeros((2, 5))},
                              None)
    assert (inferred.gate, inferred.seq_len, inferred.d_model, inferred.d_state) == \
        (True, 3, 2, 5)
    with pytest.raises(UserError, match="inputs disagree on d_model"):
        resolve_params(SSM, {}, {"U": np.zeros((3, 2)), "W_B": np.zeros((4, 1))}, None)
    # silu(z) without overflow: z = −800 gives −0, not #NUM!
    path = build(tmp_path, "ssm", {"seq_len": 2, "d_model": 1, "d_state": 1, "gate": True},
                 given={"Z": np.array([[-800.0], [3.0]])}, name="silu.xlsx")
    assert check_workbook(path).passed


def test_names_are_safe_for_excel(tmp_path):
    """Excel refuses "C", "R" and anything that reads as a cell reference."""
    path = build(tmp_path, "ssm", {"seq_len": 2, "d_model": 1, "d_state": 1, "gate": True})
    for name in openpyxl.load_workbook(path).defined_names:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name)
        assert name not in {"C", "R"} and not re.fullmatch(r"[A-Z]{1,3}\d+|[RC]\d*", name)


PORTABLE = {"SUMPRODUCT", "MMULT", "TRANSPOSE", "EXP", "LN", "SQRT", "MAX", "MIN", "SUM", "IF",
            "AND", "OR", "ABS", "TANH", "POWER", "INDEX"}


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_formulas_are_portable(tmp_path, layout):
    path = build(tmp_path, "ssm", {"seq_len": 3, "d_model": 2, "d_state": 2, "gate": True},
                 layout=layout)
    ws = openpyxl.load_workbook(path)["SSM"]
    arrays = 0
    for row in ws.iter_rows():
        for cell in row:
            text = cell.value.text if isinstance(cell.value, ArrayFormula) else cell.value
            arrays += isinstance(cell.value, ArrayFormula)
            if isinstance(text, str) and text.startswith("="):
                assert set(re.findall(r"([A-Z]+)\(", text)) <= PORTABLE, text
                assert not re.search(r"\d[eE]\d", text), text
    # blocks: whole-block arrays, one per channel for Ā and B̄u, one per row for H; Y per cell
    assert arrays == (0 if layout == "cells" else 7 + 2 * 2 + 3)


def test_cli_build_check_and_bad_input(tmp_path):
    out = tmp_path / "s.xlsx"
    done = cli("build", "ssm", "--seq-len", 5, "--d-model", 2, "--d-state", 3, "--gate",
               "--layout", "blocks", "-o", out)
    assert done.returncode == 0, done.stderr
    done = cli("check", out)
    assert done.returncode == 0 and "all 15 steps pass" in done.stdout, done.stdout
    bad_csv = tmp_path / "a.csv"
    bad_csv.write_text("0.1,0.2\n0.3,0.4\n")
    for args, message in (
            (["--d-state", 0], "--d-state must be a positive whole number, got 0"),
            (["--inputs", f"A_LOG={bad_csv}", "--d-state", 3], "input A_LOG is 2×2 but")):
        done = cli("build", "ssm", *args, "-o", tmp_path / "x.xlsx")
        print(done.stderr)
        assert done.returncode == 2 and message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "x.xlsx").exists()


@pytest.mark.parametrize("args", [["--seq-len", "-2"], ["--d-model", "two"]])
def test_cli_bad_sizes_in_process(tmp_path, capsys, args):
    code = main(["build", "ssm", *args, "-o", str(tmp_path / "x.xlsx")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_cells_grow_linearly_while_attention_grows_quadratically():
    table = formula_cell_growth(KINDS["attention"], [8, 16, 32])
    for row in table:
        print(row)
    ssm = np.array([r["ssm"] for r in table])
    attention = np.array([r["attention"] for r in table])
    lengths = np.array([r["seq_len"] for r in table])
    slope = np.diff(ssm) / np.diff(lengths)
    assert np.all(slope == slope[0])                       # exactly a·L + b
    assert np.all(np.diff(attention, 2) > 0)               # convex: the L² scores
    assert attention[-1] > 2 * ssm[-1]


def test_growth_counts_equal_the_formula_cells_build_writes(tmp_path):
    """The table counts step-block cells on a bare sheet; `build` counts formula cells in the
    saved workbook. They agree."""
    row = formula_cell_growth(KINDS["attention"], [8])[0]
    for name, values in (("ssm", {"seq_len": 8, "d_model": 4, "d_state": 4}),
                         ("attention", {"seq_len": 8, "d_model": 4, "d_k": 4})):
        kind = KINDS[name]
        written = write_book(kind, make_params(kind, values), tmp_path / f"{name}.xlsx")
        assert row[name] == written.formula_cells
