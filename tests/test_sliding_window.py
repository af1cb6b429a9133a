"""`sliding-window`: the band + global mask, BigBird's random keys (seeded picks, edited
picks, bad picks), the reference against PyTorch SDPA with a boolean mask and against a
mask built from Python sets, and bad parameters on the command line."""

import json

import numpy as np
import openpyxl
import pytest
from helpers.books import BUILT, KINDS, block_values, build, cell_of, evaluated_blocks
from helpers.cli import build_refused, cli, one_line_error
from helpers.requires import requires_libreoffice, requires_torch

from reference.attention import attention_ref
from reference.sliding_window import sliding_window_ref, window_allowed
from sheets.sliding_window import SlidingWindowParams
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.sheet.kind import complete_inputs, make_params


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


def assert_reference_equals_sdpa(inputs, params, what: str) -> None:
    """The reference against PyTorch SDPA with a mask built again in torch, True = may
    attend (SDPA's boolean convention): the band, global rows and columns, and each query
    block's random picks scattered into its query rows."""
    import torch
    import torch.nn.functional as F

    got = sliding_window_ref(inputs, params)
    pos = torch.arange(params.seq_len)
    mask = (pos[None, :] - pos[:, None]).abs() <= params.window
    for g in [int(t) for t in params.global_tokens.split(",") if t]:
        mask[g, :] = True
        mask[:, g] = True
    if params.random:
        keys = torch.tensor(inputs["RANDOM_KEYS"]).long()
        mask[pos[:, None], keys[pos // params.block_size]] = True
    x = torch.tensor(inputs["X"])
    q, k, v = (x @ torch.tensor(inputs[w]) for w in ("W_Q", "W_K", "W_V"))
    exp = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]
    error = np.abs(got["OUTPUT"] - exp.numpy()).max()
    print(f"{what}: max |ref − SDPA| = {error:.1e}")
    assert error < 1e-12
    np.testing.assert_array_equal(got["MASK"], mask.numpy().astype(float))


@requires_torch
@pytest.mark.parametrize("window,global_tokens", [(0, ""), (1, ""), (2, "0"), (1, "0,5"),
                                                  (0, "3,6")])
def test_reference_equals_torch_sdpa(window, global_tokens):
    n, d_model, d_k = 7, 4, 3
    inputs = _inputs(n, d_model, d_k, seed=window + len(global_tokens))
    params = SlidingWindowParams(seq_len=n, d_model=d_model, d_k=d_k, window=window,
                                 global_tokens=global_tokens)
    assert_reference_equals_sdpa(inputs, params, f"w={window} global={global_tokens!r}")


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
    (["--random", "-1"], "--random must be 0 or more"),
    (["--random", "7"], "--random 7 is more than the 6 keys"),
    (["--random", "1", "--block-size", "7"], "--block-size 7 is larger than --seq-len 6"),
    (["--random", "1", "--block-size", "0"], "--block-size must be a positive"),
    # n = 6, w = 1, b = 2: queries 2–3 see keys 1 … 4, leaving only 0 and 5 to draw
    (["--random", "3"], "queries 2–3 have only 2 keys outside their window"),
    (["--random", "1", "--global", "0,5"], "queries 2–3 have only 0 keys"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
    assert message in build_refused("sliding-window", tmp_path, *args)


# -- BigBird: random keys per query block ----------------------------------------------------

BIGBIRD = {"seq_len": 8, "d_model": 3, "d_k": 2, "window": 1, "global_tokens": "0",
           "random": 2, "block_size": 2}
RANDOM_CASES = [case for case in KINDS["sliding-window"].test_cases if case.get("random")] + \
    [values for _, values in KINDS["sliding-window"].demo_cases if values.get("random")]


def allowed_by_sets(n, window, global_positions, keys, block_size) -> np.ndarray:
    """The keys each query may see, as a Python set: its window, everything for a global
    query, the global keys, and the picks of its query block (row ⌊i/b⌋ of the keys)."""
    rows = []
    for i in range(n):
        seen = {j for j in range(i - window, i + window + 1) if 0 <= j < n}
        seen |= set(range(n)) if i in global_positions else set(global_positions)
        seen |= {int(k) for k in keys[i // block_size]}
        rows.append([j in seen for j in range(n)])
    return np.array(rows)


def _params(values):
    return make_params(KINDS["sliding-window"], values)


def test_random_mask_by_hand():
    """n=5, w=0, b=2: blocks {0,1}, {2,3}, {4} picked keys 3, 0 (twice: a repeat adds
    nothing) and 2; the diagonal plus each block's picks."""
    keys = np.array([[3, 3], [0, 0], [2, 2]], dtype=float)
    exp = np.array([[1, 0, 0, 1, 0],
                    [0, 1, 0, 1, 0],
                    [1, 0, 1, 0, 0],
                    [1, 0, 0, 1, 0],
                    [0, 0, 1, 0, 1]], dtype=float)
    inputs = {**_inputs(5, 2, 2, seed=0), "RANDOM_KEYS": keys}
    got = sliding_window_ref(inputs, SlidingWindowParams(seq_len=5, d_model=2, d_k=2,
                                                          window=0, random=2))
    np.testing.assert_array_equal(got["MASK"], exp)
    np.testing.assert_array_equal(got["RANDOM"], [[0, 0, 0, 1, 0], [1, 0, 0, 0, 0],
                                                  [0, 0, 1, 0, 0]])


@pytest.mark.parametrize("case", RANDOM_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reference_mask_equals_sets_and_seeded_picks_follow_bigbird(case, seed):
    """Seeded picks are whole keys, different within a row, none already seen by its block
    (window or global); the reference's mask is the one built from sets."""
    kind, params = KINDS["sliding-window"], _params(case)
    inputs = complete_inputs(kind, params, {}, seed)
    keys = inputs["RANDOM_KEYS"]
    n, b, w, g = params.seq_len, params.block_size, params.window, params.global_positions
    assert keys.shape == (-(-n // b), params.random)
    for k, row in enumerate(keys):
        assert all(key.is_integer() for key in row) and len(set(row)) == len(row), row
        queries = range(k * b, min(k * b + b, n))
        assert not {int(key) for key in row} & set(g), (k, row)
        assert all(abs(int(key) - i) > w for key in row for i in queries), (k, row)
    got = kind.reference(inputs, params)
    exp = allowed_by_sets(n, w, g, keys, b)
    np.testing.assert_array_equal(got["MASK"], exp.astype(float))
    # and the random part alone: the picks and nothing more
    assert got["RANDOM"].sum(axis=1).tolist() == [params.random] * len(keys)


def test_seeded_picks_follow_the_seed_and_their_own_stream():
    kind, params = KINDS["sliding-window"], _params(BIGBIRD)
    draw = [complete_inputs(kind, params, {}, seed)["RANDOM_KEYS"] for seed in range(6)]
    np.testing.assert_array_equal(draw[0], complete_inputs(kind, params, {}, 0)["RANDOM_KEYS"])
    assert any((d != draw[0]).any() for d in draw[1:])
    given_x = complete_inputs(kind, params, {"X": np.ones((8, 3))}, 0)
    np.testing.assert_array_equal(given_x["RANDOM_KEYS"], draw[0])


@requires_torch
@pytest.mark.parametrize("case", RANDOM_CASES)
def test_random_reference_equals_torch_sdpa(case):
    params = _params(case)
    assert_reference_equals_sdpa(complete_inputs(KINDS["sliding-window"], params, {}, 4),
                                 params, str(case))


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_an_edited_pick_moves_the_mask_and_check_still_passes(tmp_path, layout):
    path = build(tmp_path, "sliding-window", BIGBIRD, layout=layout, seed=3)
    before = evaluated_blocks(path, BUILT[path].values, ["MASK"])["MASK"]
    wb = openpyxl.load_workbook(path)
    picks = [cell_of(wb, "RANDOM_KEYS", 1, r) for r in range(2)]   # queries 2–3
    old = int(picks[0].value)
    # queries 2–3 see keys 0 (global) and 1 … 4 (window): two of 5, 6, 7 are picked
    new = next(j for j in (5, 6, 7) if j not in {p.value for p in picks})
    picks[0].value = new
    wb.save(path)
    values = evaluate_with_formulas(path)
    after = evaluated_blocks(path, values, ["MASK"])["MASK"]
    assert before[2, new] == before[3, new] == 0 and after[2, new] == after[3, new] == 1
    assert before[2, old] == before[3, old] == 1 and after[2, old] == after[3, old] == 0
    changed = np.argwhere(after != before).tolist()
    assert sorted(changed) == sorted([[2, old], [3, old], [2, new], [3, new]]), changed
    report = check_workbook(path, values=values)
    assert report.passed, format_report(report)


@requires_libreoffice
@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_an_edited_pick_checks_in_libreoffice_too(tmp_path, layout):
    path = build(tmp_path, "sliding-window", BIGBIRD, layout=layout, seed=3)
    wb = openpyxl.load_workbook(path)
    cell_of(wb, "RANDOM_KEYS", 3, 1).value = 2  # queries 6–7 see key 2 (twice: no harm)
    cell_of(wb, "RANDOM_KEYS", 3, 0).value = 2
    wb.save(path)
    ran = cli("check", path, "--engine", "all")
    assert ran.returncode == 0, ran.stdout


@pytest.mark.parametrize("value,shown", [(8, "holds 8"), (-1, "holds -1"),
                                         (2.5, "holds 2.5")])
def test_a_pick_that_is_not_a_key_is_one_line_on_check(tmp_path, value, shown):
    path = build(tmp_path, "sliding-window", BIGBIRD)
    wb = openpyxl.load_workbook(path)
    pick = cell_of(wb, "RANDOM_KEYS", 2, 1)  # queries 4–5, pick r2
    pick.value = value
    wb.save(path)
    line = one_line_error(cli("check", path))
    assert f"input RANDOM_KEYS cell {pick.parent.title}!{pick.coordinate} {shown}: a " \
           f"random key is a whole number 0 … 7" in line


def test_picks_given_by_hand_set_random_and_are_checked(tmp_path):
    """RANDOM_KEYS given with --inputs sets --random from its width; any whole key counts,
    even one in the window; a bad one is refused at build, and no file is written."""
    picks = tmp_path / "picks.json"
    picks.write_text(json.dumps({"RANDOM_KEYS": [[5], [0], [1]]}))
    out = tmp_path / "bb.xlsx"
    ran = cli("build", "sliding-window", "-o", out, "--inputs", picks)
    assert ran.returncode == 0, ran.stderr
    assert "random=1, block_size=2" in ran.stdout
    assert block_values(out, "RANDOM_KEYS") == [[5], [0], [1]]
    values = evaluate_with_formulas(out)
    report = check_workbook(out, values=values)
    assert report.passed, format_report(report)
    mask = evaluated_blocks(out, values, ["MASK"])["MASK"]
    np.testing.assert_array_equal(mask, allowed_by_sets(6, 1, [], [[5], [0], [1]], 2))
    picks.write_text(json.dumps({"RANDOM_KEYS": [[5], [0], [6]]}))
    bad = cli("build", "sliding-window", "-o", tmp_path / "bad.xlsx", "--inputs", picks)
    assert "input RANDOM_KEYS row 3 holds 6: a random key is a whole number 0 … 5" in \
        one_line_error(bad)
    assert not (tmp_path / "bad.xlsx").exists()


def test_without_random_the_sheet_says_nothing_of_it(tmp_path):
    ran = cli("build", "sliding-window", "-o", tmp_path / "sw.xlsx", "--block-size", "3")
    assert ran.returncode == 0, ran.stderr
    assert "random=" not in ran.stdout and "block_size=" not in ran.stdout
    names = set(openpyxl.load_workbook(tmp_path / "sw.xlsx").defined_names)
    assert "MASK" in names and not names & {"RANDOM", "RANDOM_KEYS"}
