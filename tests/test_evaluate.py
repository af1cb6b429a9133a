"""The fast loader (the workbook handed to `formulas` through `ExcelModel.from_dict`, input
blocks as one range each, a cheaper range intersection): a compiled model follows new
inputs, floats read back bit-identical, and every shortcut through a library's internals
gives what the library's public path gives. That it gives exactly the values of the
engine's own loader and calculation, for every kind: tests/test_fast_calc.py."""

from importlib.metadata import version

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, build
from helpers.sheets import formulas_of

from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.engines.internals import of_formulas
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.refs import parse_range
from workbook_builder.xlsx import of_openpyxl, versions


def formula_cells(path):
    """(SHEET, row, col) of every cell a formula fills."""
    for where, _, _ in formulas_of(path):
        sheet, _, ref = where.partition("!")
        top, left, bottom, right = parse_range(ref)
        yield from ((sheet.upper(), r, c) for r in range(top, bottom + 1)
                    for c in range(left, right + 1))


def test_a_compiled_model_follows_new_inputs(tmp_path):
    """One parse, many input sets: overriding the inputs gives what a rebuilt file gives."""
    params = {"seq_len": 3, "d_model": 2, "d_k": 2, "causal": True}
    first = build(tmp_path, "attention", params, seed=1, name="one.xlsx")
    second = build(tmp_path, "attention", params, seed=2, name="two.xlsx")
    wb = openpyxl.load_workbook(second)
    inputs = {}
    for name in ("X", "W_Q", "W_K", "W_V"):
        where = find_name(wb, name, second)
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                inputs[(where.sheet, where.top + i, where.left + j)] = \
                    wb[where.sheet].cell(where.top + i, where.left + j).value
    reused = FormulasModel(first).evaluate(inputs)
    fresh = FormulasModel(second).evaluate()
    for cell in formula_cells(second):
        assert reused[cell] == pytest.approx(fresh[cell], rel=1e-15, abs=1e-15)


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_every_shortcut_equals_the_public_path(tmp_path, layout):
    """openpyxl's stored cells and style records, and the engine's range assembly: with the
    shortcuts and without them, the same workbook and the same values."""
    path = build(tmp_path, "multihead", KINDS["multihead"].test_cases[-1], layout=layout)
    wb = openpyxl.load_workbook(path)
    for ws in wb.worksheets:
        fast, public = ({c.coordinate: c.value for c in of_openpyxl.stored_cells(ws, shortcuts=s)
                         if c.value is not None} for s in (True, False))
        assert fast == public and fast
    ws = wb.worksheets[0]
    source = ws.cell(9, 2)
    for shortcuts, target in ((True, ws.cell(60, 60)), (False, ws.cell(61, 61))):
        of_openpyxl.copy_style(source, target, shortcuts=shortcuts)
        assert [repr(getattr(target, a)) for a in ("fill", "font", "border", "number_format")] \
            == [repr(getattr(source, a)) for a in ("fill", "font", "border", "number_format")]
    fast = FormulasModel(path).evaluate()
    with of_formulas.formulas_changes(shortcuts=False):
        public = FormulasModel(path).evaluate()
    assert fast == public


def test_a_merged_row_reads_back_as_the_public_path_merges_it(tmp_path):
    """`merge_row` with the shortcut (the merge only) and without (openpyxl's merge_cells,
    a MergedCell per covered cell): the saved files load with the same merges, the same
    cells and values, and a bordered first cell gives the covered edge cells its border."""
    from openpyxl.styles import Border, Side

    loaded = []
    for shortcuts in (True, False):
        wb = openpyxl.Workbook()
        ws = wb.active
        ws.cell(2, 2).value = "a title over a block"
        ws.cell(4, 1).value = "bordered"
        ws.cell(4, 1).border = Border(top=Side(style="thin"))
        of_openpyxl.merge_row(ws, 2, 2, 40, shortcuts=shortcuts)
        of_openpyxl.merge_row(ws, 4, 1, 5, shortcuts=shortcuts)
        wb.save(tmp_path / f"{shortcuts}.xlsx")
        loaded.append(openpyxl.load_workbook(tmp_path / f"{shortcuts}.xlsx").active)
    fast, public = loaded
    assert sorted(map(str, fast.merged_cells.ranges)) == \
        sorted(map(str, public.merged_cells.ranges)) == ["A4:E4", "B2:AN2"]
    cells = [{(c.row, c.column): (type(c).__name__, c.value, c.border.top.style)
              for row in ws.iter_rows() for c in row} for ws in loaded]
    assert cells[0] == cells[1]
    assert cells[0][4, 3] == ("MergedCell", None, "thin")


def test_shortcuts_are_taken_only_for_the_versions_they_were_written_for():
    assert of_openpyxl.openpyxl_shortcuts() == version("openpyxl").startswith("3.1.")
    assert versions.within(version("formulas"), *versions.SUPPORTED["formulas"]) == \
        version("formulas").startswith("1.3.")
    assert not versions.within("1.4.0", "1.3.4", "1.4")
    assert not versions.within("1.3.3", "1.3.4", "1.4")
    assert versions.within("1.3.10", "1.3.4", "1.4")


def test_the_engines_statistics_still_work_with_scipy_loaded_on_first_use():
    """scipy.stats, scipy.linalg and interp1d reach the engine's statistics module only
    when a statistical function runs; those functions still give scipy's numbers."""
    import statistics

    from scipy.stats import norm

    engine = of_formulas.formulas_engine()
    compiled = engine.Parser().ast("=NORM.S.DIST(0.5,TRUE)+STDEV.S(1,2,4)")[1].compile()
    assert compiled() == pytest.approx(norm.cdf(0.5) + statistics.stdev([1, 2, 4]),
                                       rel=1e-15)
    # FORECAST.LINEAR(x, known y's, known x's): y = x / 2 on these points
    forecast = engine.Parser().ast("=FORECAST.LINEAR(3,{1,2,3},{2,4,6})")[1].compile()
    assert float(forecast()) == pytest.approx(1.5)


def test_float_inputs_read_back_bit_identical(tmp_path):
    """Inputs are written with repr's up to 17 digits: random doubles come back exactly,
    where openpyxl's own "%.16g" moves some of them by one unit in the last place."""
    rng = np.random.default_rng(7)
    given = {"X": rng.normal(size=(6, 5)), "W_Q": rng.normal(size=(5, 4)) * 1e-7,
             "W_K": rng.normal(size=(5, 4)) * 1e7, "W_V": rng.uniform(-1, 1, size=(5, 4))}
    path = build(tmp_path, "attention", {"seq_len": 6, "d_model": 5, "d_k": 4}, given=given,
                 layout="blocks")
    wb = openpyxl.load_workbook(path)
    for name, exp in given.items():
        where = find_name(wb, name, path)
        got = np.array([[wb[where.sheet].cell(where.top + i, where.left + j).value
                         for j in range(exp.shape[1])] for i in range(exp.shape[0])])
        assert np.array_equal(got, exp), name
    # the public path (the library as released) does lose bits on these numbers
    released = openpyxl.Workbook()
    values = [float(x) for x in given["X"].ravel()]
    for i, x in enumerate(values, start=1):
        released.active.cell(i, 1, x)
    of_openpyxl.save_workbook(released, tmp_path / "released.xlsx", shortcuts=False)
    back = [c.value for c in openpyxl.load_workbook(tmp_path / "released.xlsx").active["A"]]
    assert back != values
