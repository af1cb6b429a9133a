"""`train`: every gradient block of every step equals PyTorch's autograd, and the losses,
weights and Adam moments equal a PyTorch training loop (torch.optim.SGD / Adam) from the
same start — for the NumPy reference and for the sheet as the `formulas` engine, LibreOffice
and Gnumeric calculate it; the loss falls over the default steps; exercises on backward
blocks; bad flags and inputs."""

import math

import numpy as np
import pytest
from helpers.books import (
    BUILT,
    KINDS,
    build,
    check_built,
    evaluated_blocks,
    exercise_book,
    fill,
    self_check,
)
from helpers.cli import build_refused, cli, one_line_error
from helpers.requires import requires_gnumeric, requires_libreoffice, requires_torch
from helpers.sheets import chart_series

from reference.train import WEIGHTS, train_ref
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.gnumeric import evaluate_with_gnumeric
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet.kind import complete_inputs, make_params

TRAIN = KINDS["train"]
RELATIVE = 1e-12
# dL/d(block) as autograd gives them, under the sheet's names
GRADIENTS = ("D_LOGITS", "D_W_OUT", "D_OUTPUT", "D_WEIGHTS", "D_V", "D_SCALED", "D_SCORES",
             "D_Q", "D_K", "D_W_Q", "D_W_K", "D_W_V")


def torch_training(inputs: dict[str, np.ndarray], p, scaled: bool) -> list[dict]:
    """A PyTorch training loop from the same data and initial weights, written from the
    task's description: per step, autograd's gradient of every block (retain_grad), the
    loss, the optimizer's moments (Adam) and the weights after the step."""
    import torch
    import torch.nn.functional as F

    tokens = torch.tensor(inputs["TOKEN_IDS"][:, 0]).long()
    look = torch.tensor(inputs["LOOK_AT"][:, 0]).long() - 1
    n = len(tokens)
    x = torch.cat([F.one_hot(tokens, p.vocab), torch.eye(n, dtype=torch.long),
                   F.one_hot(look, n)], dim=1).double()
    target = tokens[look]
    w = {name: torch.tensor(inputs[name], dtype=torch.float64, requires_grad=True)
         for name in WEIGHTS}
    optimizer = (torch.optim.SGD if p.optimizer == "sgd" else torch.optim.Adam)(
        list(w.values()), lr=p.lr)
    later = torch.ones(n, n, dtype=torch.bool).triu(1)
    record = []
    for _ in range(p.steps):
        optimizer.zero_grad()
        q, k, v = x @ w["W_Q"], x @ w["W_K"], x @ w["W_V"]
        s = q @ k.T
        s_hat = s / math.sqrt(p.d_k) if scaled else s
        a = torch.softmax(s_hat.masked_fill(later, -math.inf) if p.causal else s_hat, dim=1)
        o = a @ v
        z = o @ w["W_OUT"]
        kept = {"D_Q": q, "D_K": k, "D_V": v, "D_SCORES": s, "D_WEIGHTS": a, "D_OUTPUT": o,
                "D_LOGITS": z, **({"D_SCALED": s_hat} if scaled else {})}
        for tensor in kept.values():
            tensor.retain_grad()
        loss = F.cross_entropy(z, target)
        loss.backward()
        got = {name: t.grad.numpy().copy() for name, t in kept.items()}
        got["WEIGHTS"] = a.detach().numpy().copy()
        got |= {f"D_{name}": w[name].grad.numpy().copy() for name in WEIGHTS}
        got["LOSS"] = np.array([[loss.item()]])
        optimizer.step()
        got |= {name: w[name].detach().numpy().copy() for name in WEIGHTS}
        if p.optimizer == "adam":
            for name in WEIGHTS:
                state = optimizer.state[w[name]]
                got[f"ADAM_M_{name}"] = state["exp_avg"].numpy().copy()
                got[f"ADAM_V_{name}"] = state["exp_avg_sq"].numpy().copy()
        record.append(got)
    return record


def relative_error(got: np.ndarray, exp: np.ndarray) -> float:
    """max |got − exp| over the block, relative to the block's largest |exp|."""
    scale = np.abs(exp).max()
    return float(np.abs(got - exp).max() / (scale if scale > 0 else 1.0))


# the blocks computed from the softmax backward dŜ = A ⊙ (dA − r): where a row of A is nearly
# one-hot, dA_ij − r_i subtracts two nearly equal numbers, and any float64 evaluation of it
# (PyTorch's, which computes the same formula, included) is uncertain by about
# u/(1 − max A) relative, u = 2⁻⁵³
CANCELLING = ("D_SCALED", "D_SCORES", "D_Q", "D_K", "D_W_Q", "D_W_K")
UNIT_ROUNDOFF = 2.0 ** -53


def tolerance(name: str, saturation: float) -> float:
    """1e-12 relative, or for a block computed through the softmax backward of rows whose
    largest weight is 1 − `saturation`, the rounding bound 16·u/saturation if that is
    larger."""
    if name in CANCELLING:
        return max(RELATIVE, 16 * UNIT_ROUNDOFF / saturation)
    return RELATIVE


def compare_runs(blocks: dict[str, np.ndarray], p, inputs, where: str,
                 derived: bool = False) -> None:
    """Every per-step block `blocks` holds for each run against the torch loop's, to 1e-12
    relative (`derived`: to the rounding bound of a saturated softmax where it is wider)."""
    runs = [("", True), ("_RAW", False)] if p.compare_scale else [("", not p.no_scale)]
    for suffix, scaled in runs:
        torch_steps = torch_training(inputs, p, scaled)
        worst = (0.0, "", 0.0)
        for t, exp in enumerate(torch_steps, start=1):
            assert {f"{name}{suffix}_T{t}" for name in exp} <= set(blocks), \
                sorted(set(exp) - {n.removesuffix(f"{suffix}_T{t}") for n in blocks})
            saturation = float((1 - exp["WEIGHTS"].max(axis=1)).min())
            for name, value in exp.items():
                error = relative_error(blocks[f"{name}{suffix}_T{t}"], value)
                allowed = tolerance(name, saturation) if derived else RELATIVE
                worst = max(worst, (error / allowed, f"{name}{suffix}_T{t}", error))
        losses = np.array([[s["LOSS"][0, 0]] for s in torch_steps])
        error = relative_error(blocks[f"LOSS{suffix}"], losses)
        worst = max(worst, (error / RELATIVE, f"LOSS{suffix}", error))
        print(f"{where}, run {'with' if scaled else 'without'} 1/√d_k: largest relative "
              f"error against torch {worst[2]:.1e} ({worst[1]}), {worst[0]:.2g} of the "
              f"tolerance")
        assert worst[0] <= 1, worst


CASES = [{}, {"no_scale": True}, {"causal": True}, {"d_k": 16, "compare_scale": True},
         {"optimizer": "adam", "lr": 0.05, "causal": True},
         {"seq_len": 5, "vocab": 3, "d_k": 6, "steps": 6, "lr": 1.5},
         {"d_k": 64, "no_scale": True, "steps": 4}]


@requires_torch
@pytest.mark.parametrize("values", CASES, ids=[str(c) or "defaults" for c in CASES])
@pytest.mark.parametrize("seed", [0, 3])
def test_reference_equals_torch_autograd_and_its_training_loop(values, seed):
    p = make_params(TRAIN, values)
    inputs = complete_inputs(TRAIN, p, {}, seed)
    compare_runs(train_ref(inputs, p), p, inputs, f"reference {values} seed {seed}")


@requires_torch
def test_a_wrong_gradient_is_caught_by_the_torch_comparison():
    """The comparison can fail: dŜ without the softmax's row term r (a common slip)."""
    p = make_params(TRAIN, {"steps": 2})
    inputs = complete_inputs(TRAIN, p, {}, 0)
    blocks = train_ref(inputs, p)
    wrong = dict(blocks)
    wrong["D_SCALED_T1"] = blocks["WEIGHTS_T1"] * blocks["D_WEIGHTS_T1"]
    with pytest.raises(AssertionError):
        compare_runs(wrong, p, inputs, "a slip in dŜ")


# -- the sheet in three engines --------------------------------------------------------------
# the default sizes, and d_k = 16 where the run without 1/√d_k saturates its softmax
# (1 − max A = 2e-12 from step 2 on, seed 0)
ENGINE_BOOKS = {"compare": {"compare_scale": True, "steps": 5},
                "saturated": {"compare_scale": True, "d_k": 16, "steps": 5},
                "adam-causal": {"optimizer": "adam", "lr": 0.05, "causal": True, "steps": 4,
                                "d_k": 3}}


@pytest.fixture(scope="module")
def engine_books(tmp_path_factory):
    folder = tmp_path_factory.mktemp("train")
    return {name: build(folder, "train", values, name=f"{name}.xlsx")
            for name, values in ENGINE_BOOKS.items()}


@requires_torch
@pytest.mark.parametrize("engine", [
    evaluate_with_formulas,
    pytest.param(evaluate_with_libreoffice, marks=requires_libreoffice),
    pytest.param(evaluate_with_gnumeric, marks=requires_gnumeric)],
    ids=["formulas", "libreoffice", "gnumeric"])
@pytest.mark.parametrize("book", list(ENGINE_BOOKS))
def test_the_sheet_equals_torch_in_every_engine(engine_books, book, engine):
    """1e-12 relative; in the saturated run, the blocks after the softmax backward to the
    rounding bound of its cancellation instead (the engines sum in other orders than PyTorch
    and NumPy, which agree with each other there to 1e-14)."""
    path = engine_books[book]
    p = make_params(TRAIN, ENGINE_BOOKS[book])
    inputs = complete_inputs(TRAIN, p, {}, 0)
    values = engine(path)
    blocks = evaluated_blocks(path, values, TRAIN.step_names(p))
    compare_runs(blocks, p, inputs, f"{book} in {engine.__name__}",
                 derived=book == "saturated")


@pytest.fixture(scope="module")
def default_book(tmp_path_factory):
    return build(tmp_path_factory.mktemp("default"), "train", {})


def test_the_loss_falls_over_the_default_steps(default_book):
    """The default sheet (seed 0) as the `formulas` engine calculated it at build time."""
    report = check_built(default_book)
    assert report.passed, format_report(report)
    p = make_params(TRAIN, {})
    loss = evaluated_blocks(default_book, BUILT[default_book].values, ["LOSS"])["LOSS"][:, 0]
    print("LOSS:", np.round(loss, 4))
    assert len(loss) == p.steps
    assert np.all(np.diff(loss) < 0)  # every step lowers it


def test_curves_chart_the_live_loss_and_gradient_norm_blocks(tmp_path):
    path = build(tmp_path, "train", {"steps": 3, "compare_scale": True})
    charts = chart_series(path)
    assert len(charts) == 2
    wb_names = BUILT[path].workbook.defined_names
    for series, name in zip(charts, ["LOSS", "LOSS_RAW"], strict=True):
        assert series["y"] == wb_names[name].attr_text
    p = make_params(TRAIN, {"steps": 3, "compare_scale": True})
    names = TRAIN.step_names(p)
    assert "SCALED_T1" in names and "SCALED_RAW_T1" not in names
    assert "D_SCALED_T3" in names and "D_SCALED_RAW_T3" not in names
    assert names[-4:] == ["LOSS", "GRAD_NORM", "LOSS_RAW", "GRAD_NORM_RAW"]


def test_the_task_needs_the_look_at_position(tmp_path):
    """TARGET reads the token at LOOK_AT; X holds one token, one position and one look-at
    column per row."""
    p = make_params(TRAIN, {})
    inputs = complete_inputs(TRAIN, p, {}, 0)
    blocks = train_ref(inputs, p)
    tokens, look = inputs["TOKEN_IDS"][:, 0], inputs["LOOK_AT"][:, 0].astype(int)
    np.testing.assert_array_equal(blocks["TARGET"][:, 0], tokens[look - 1])
    np.testing.assert_array_equal(blocks["X"].sum(axis=1), 3)
    causal = make_params(TRAIN, {"causal": True, "seq_len": 6})  # 6 draws per seed
    for seed in range(5):  # a causal position can look only at itself or earlier
        drawn = complete_inputs(TRAIN, causal, {}, seed)["LOOK_AT"][:, 0]
        assert np.all(drawn <= np.arange(1, 7)) and np.all(drawn >= 1)


# -- exercises ------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_exercises_on_backward_blocks_self_check_and_carry_forward(tmp_path, layout):
    steps = ["D_W_V_T1", "D_SCALED_T2"]
    values = {"seq_len": 3, "vocab": 2, "d_k": 2, "steps": 2}
    path, answers = exercise_book(tmp_path, "train", values, steps, layout)
    assert check_workbook(path).passed
    right = fill(path, answers, steps, tmp_path / "right.xlsx")
    got = self_check(right, evaluate_with_formulas(right), steps)
    for step in steps:
        assert got[step] == (answers[step].size, ["✓"] * answers[step].shape[0])
    wrong = fill(path, answers, steps, tmp_path / "wrong.xlsx",
                 lambda s, i, j, v: v + 0.5 if (s, i, j) == ("D_W_V_T1", 0, 0) else v)
    got = self_check(wrong, evaluate_with_formulas(wrong), steps)
    assert got["D_W_V_T1"][0] == answers["D_W_V_T1"].size - 1
    assert got["D_W_V_T1"][1][0] == "✗"


def test_class_and_grade_take_the_kind(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("id\ns1\ns2\n", encoding="utf-8")
    out = tmp_path / "class"
    made = cli("class", "train", "--roster", roster, "--out", out, "--steps", "2",
               "--seq-len", "3", "--vocab", "2", "--d-k", "2", "--exercise", "D_W_Q_T1,D_K_T2")
    assert made.returncode == 0, made.stdout + made.stderr
    graded = cli("grade", out, "--out", tmp_path / "grades.csv")
    assert "graded 2 of 2 files" in graded.stdout, graded.stdout + graded.stderr
    rows = (tmp_path / "grades.csv").read_text(encoding="utf-8")
    assert "D_W_Q_T1" in rows and "D_K_T2" in rows


# -- bad flags and inputs -------------------------------------------------------------------
@pytest.mark.parametrize("args,message", [
    (["--lr", "0"], "--lr must be a positive number, got 0.0"),
    (["--lr", "nan"], "--lr must be a positive number"),
    (["--optimizer", "rmsprop"], "invalid choice: 'rmsprop'"),
    (["--no-scale", "--compare-scale"], "leave out --no-scale"),
    (["--steps", "0"], "--steps must be a positive whole number"),
    (["--tokens", "a,b,c,d"], "--tokens does not apply"),
])
def test_bad_flags_exit_2_with_one_line(tmp_path, args, message):
    assert message in build_refused("train", tmp_path, *args)


@pytest.mark.parametrize("block,value,message", [
    ("TOKEN_IDS", [[0], [1], [3]], "input TOKEN_IDS row 3 holds 3: a token id is a whole "
                                   "number 0 … 2"),
    ("LOOK_AT", [[1], [2], [0]], "input LOOK_AT row 3 holds 0: a position to look at is a "
                                 "whole number 1 … 3"),
    ("LOOK_AT", [[1], [2.5], [1]], "LOOK_AT row 2 holds 2.5"),
])
def test_bad_ids_in_inputs_exit_2_with_one_line(tmp_path, block, value, message):
    import json

    given = tmp_path / "in.json"
    given.write_text(json.dumps({block: value}))
    result = cli("build", "train", "-o", tmp_path / "t.xlsx", "--inputs", given)
    assert message in one_line_error(result)
