"""Both fast calculations give exactly what the engine's own loader and calculation give,
`ExcelModel().loads(file).finish().calculate()`: same type, same value, Excel errors and
text included, for every kind, layout and demo case, for awkward formulas and for files
saved by LibreOffice. The direct calculation (`direct_calc.DirectCalculation`: each formula
shape compiled once, the cells evaluated in dependency order from one grid per sheet, no
graph) gives every value of the plain loop over the engine's graph
(`of_schedula.OrderedCalculation`, each formula form compiled once), which it falls back to;
what the loop cannot reproduce (cycles, failing functions, another engine version) takes
the engine's own calculation."""

import re

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, awkward_workbook, build
from helpers.cli import cli
from helpers.requires import requires_libreoffice
from helpers.sheets import formulas_of
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book.files import open_workbook
from workbook_builder.engines import internals
from workbook_builder.engines.formulas_engine import FormulasModel, _quiet_numpy, _solution_values
from workbook_builder.engines.internals import direct_calc, of_formulas, of_schedula
from workbook_builder.engines.libreoffice import convert
from workbook_builder.sheet import refs
from workbook_builder.sheet.refs import parse_range
from workbook_builder.xlsx import versions

# the default tier: cell formulas (attention) and array formulas and recurrences (blocks);
# the slow tier: every other kind at its largest test case, and every kind at the demo's
# sizes in both layouts
SMALL = [(name, f"{name}-test", KINDS[name].test_cases[-1], layout)
         for name, layout in [("attention", "cells"), ("multihead", "blocks"),
                              ("ssm", "blocks"), ("flash", "blocks")]]
REST = [(name, f"{name}-test", KINDS[name].test_cases[-1], "cells")
         for name in sorted(KINDS) if name != "attention"] + [
    (name, label, params, layout) for name, kind in sorted(KINDS.items())
    for label, params in kind.demo_cases for layout in ("cells", "blocks")]
CASES = SMALL + [pytest.param(*case, marks=pytest.mark.slow) for case in REST]


def typed(values):
    """Values compared with their type: 1 and 1.0 differ, so do an error and its text."""
    return {cell: (type(value).__name__, repr(value)) for cell, value in values.items()}


def engines_own_values(path):
    """Every value of the engine's own loader and calculation, as released."""
    with _quiet_numpy(), of_formulas.formulas_changes(shortcuts=False) as engine:
        return _solution_values(engine.ExcelModel().loads(str(path)).finish().calculate())


def formula_cells(path):
    """(SHEET, row, col) of every cell a formula fills."""
    for where, _, _ in formulas_of(path):
        sheet, _, ref = where.rpartition("!")
        top, left, bottom, right = parse_range(ref)
        yield from ((sheet.strip("'").replace("''", "'").upper(), r, c)
                    for r in range(top, bottom + 1) for c in range(left, right + 1))


def fast_model(path):
    model = FormulasModel(path)
    values = typed(model.evaluate())
    assert model.path == "direct", "the direct calculation refused this workbook"
    return model, values


def graph_model(path):
    model = FormulasModel(path, direct=False)
    values = typed(model.evaluate())
    assert model.path == "ordered", "the plain loop refused this workbook"
    return model, values


def assert_same_as_the_engines_own(path):
    _, fast = fast_model(path)
    _, graph = graph_model(path)
    assert fast == graph  # every cell, and the same cells
    own = typed(engines_own_values(path))
    cells = set(formula_cells(path))
    assert cells and cells <= fast.keys() and cells <= own.keys()
    differ = [(c, fast[c], own[c]) for c in sorted(fast.keys() & own.keys())
              if fast[c] != own[c]]
    assert not differ, differ[:5]


@pytest.mark.parametrize("kind_name,label,params,layout", CASES,
                         ids=[f"{label}-{layout}" for _, label, _, layout in SMALL + REST])
def test_plain_loop_equals_the_engines_own_loader_and_calculation(tmp_path, kind_name,
                                                                  label, params, layout):
    assert_same_as_the_engines_own(build(tmp_path, kind_name, params, layout=layout))


# inputs of at least CONSTANT_BLOCK_CELLS cells, kept as arrays: what a formula reads of
# them is the block's float64 numbers, not an object per cell
# (the engine's own calculation of a gpt this size takes 10 s: those two are slow-tier)
LARGE_BLOCKS = [("multihead", {"seq_len": 3, "d_model": 64, "heads": 4}, "blocks"),
                pytest.param("gpt", {"seq_len": 3, "d_model": 64, "heads": 2, "d_ff": 8,
                                     "layers": 1, "vocab": 64}, "blocks", marks=pytest.mark.slow),
                pytest.param("gpt", {"seq_len": 2, "d_model": 64, "heads": 2, "d_ff": 4,
                                     "layers": 1, "vocab": 64}, "cells", marks=pytest.mark.slow)]


@pytest.mark.parametrize("kind_name,params,layout", LARGE_BLOCKS)
def test_blocks_kept_as_arrays_give_the_engines_own_values(tmp_path, kind_name, params,
                                                            layout):
    path = build(tmp_path, kind_name, params, layout=layout)
    wb = open_workbook(path, array_blocks=True)
    assert any(isinstance(entry, direct_calc.ArrayRows)
               for entry in FormulasModel(wb, path.name)._entries.values())
    assert_same_as_the_engines_own(path)


def test_awkward_formulas_equal_the_engines_own(tmp_path):
    path = awkward_workbook(tmp_path / "awkward.xlsx")
    wb = openpyxl.load_workbook(path)
    ws = wb["Data"]
    for row in range(1, 7):
        ws.cell(row, 24, f'=IF(A{row}>4,1/0,"Data!A{row}")')  # an error or a text
        ws.cell(row, 25, f"=IFERROR(M{row},-1)+ISERROR(M{row})")  # on M2's #DIV/0!
        ws.cell(row, 26, f'=Z{row - 1}&"-"&B{row}' if row > 1 else '="start"')
    wb.save(path)
    assert_same_as_the_engines_own(path)
    values = FormulasModel(path).evaluate()
    assert [values[("DATA", r, 24)] for r in (1, 2)] == ["Data!A1", "Data!A2"]
    assert str(values[("DATA", 3, 24)]) == "#DIV/0!"
    assert values[("DATA", 2, 25)] == -1 + 1  # IFERROR's -1, plus TRUE


def apostrophe_workbook(path):
    """Formulas reading sheets whose names need quoting: an apostrophe, spaces, both."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Bob's data"
    spaced = wb.create_sheet("my sheet")
    results = wb.create_sheet("Results")
    for row in range(1, 5):
        ws.cell(row, 1, row * 2.0)
        spaced.cell(row, 1, row * 10)
        results.cell(row, 1, f"='Bob''s data'!A{row}+'my sheet'!A{row}")
        results.cell(row, 2, f"=SUM('Bob''s data'!$A$1:A{row})")
        results.cell(row, 3, f'="\'Bob\'\'s data\'!A{row}"')  # a text, not a reference
        ws.cell(row, 2, f"=A{row}*3+BOBS_TOTAL")  # on its own sheet, by a defined name
    results["D1"] = ArrayFormula("D1:D4", "='Bob''s data'!A1:A4*2")
    wb.defined_names["BOBS_TOTAL"] = DefinedName("BOBS_TOTAL",
                                                 attr_text="'Bob''s data'!$A$4")
    wb.save(path)
    return path


def test_sheet_names_with_an_apostrophe_are_evaluated(tmp_path):
    path = apostrophe_workbook(tmp_path / "quoted.xlsx")
    fast = FormulasModel(path).evaluate()
    own = FormulasModel(path, share_compiled=False, ordered_calc=False).evaluate()
    assert typed(fast) == typed(own)
    assert [fast[("RESULTS", r, 1)] for r in range(1, 5)] == [12.0, 24.0, 36.0, 48.0]
    assert [fast[("RESULTS", r, 2)] for r in range(1, 5)] == [2.0, 6.0, 12.0, 20.0]
    assert fast[("RESULTS", 2, 3)] == "'Bob''s data'!A2"
    assert [fast[("RESULTS", r, 4)] for r in range(1, 5)] == [4.0, 8.0, 12.0, 16.0]
    assert [fast[("BOB'S DATA", r, 2)] for r in range(1, 3)] == [14.0, 20.0]


def test_check_reads_a_kind_whose_sheet_was_renamed_with_an_apostrophe(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    wb = openpyxl.load_workbook(path)
    ws = wb["Attention"]
    ws.title = "Bob's attention"
    for defined in wb.defined_names.values():
        defined.attr_text = re.sub(r"'?Attention'?!", "'Bob''s attention'!",
                                   defined.attr_text)
    renamed = tmp_path / "renamed.xlsx"
    wb.save(renamed)
    ran = cli("check", renamed)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert "Bob's attention!" in ran.stdout
    before = FormulasModel(path).evaluate()
    after = FormulasModel(renamed).evaluate()
    assert typed({(s.replace("ATTENTION", "BOB'S ATTENTION"), r, c): v
                  for (s, r, c), v in before.items()}) == typed(after)


@requires_libreoffice
def test_files_saved_by_libreoffice_equal_the_engines_own(tmp_path):
    kind = build(tmp_path, "multihead", {"seq_len": 3, "d_model": 4, "heads": 2},
                 name="heads.xlsx")
    for path in (awkward_workbook(tmp_path / "awkward.xlsx"), kind):
        saved = tmp_path / "saved"
        saved.mkdir(exist_ok=True)
        assert_same_as_the_engines_own(convert(path, "xlsx", saved))
    quoted = convert(apostrophe_workbook(tmp_path / "quoted.xlsx"), "xlsx", saved)
    model, values = fast_model(quoted)
    assert values == typed(FormulasModel(quoted, share_compiled=False,
                                         ordered_calc=False).evaluate())


def test_new_inputs_give_what_the_engine_gives(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2,
                                         "causal": True})
    fast = FormulasModel(path)
    own = FormulasModel(path, ordered_calc=False)
    x_block = next(name for name in fast._blocks)
    sheet = x_block.split("]")[1].split("'")[0]
    top, left, _, _ = parse_range(x_block.rpartition("!")[2])
    inputs = {(sheet, top, left): 7.5, (sheet, top + 1, left): -2.0}
    assert typed(fast.evaluate(inputs)) == typed(own.evaluate(inputs))
    assert typed(fast.evaluate(inputs)) != typed(fast.evaluate())
    assert (fast.path, own.path) == ("direct", "engine")
    graph = FormulasModel(path, direct=False)
    assert typed(graph.evaluate(inputs)) == typed(own.evaluate(inputs))
    assert graph.path == "ordered"


def test_circular_references_take_the_engines_own_calculation(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["B1"], ws["C1"], ws["D1"] = "=B1+1", "=A1+1", 5, "=C1*2"
    wb.save(tmp_path / "cycle.xlsx")
    model = FormulasModel(tmp_path / "cycle.xlsx")
    values = typed(model.evaluate())
    assert model.path == "engine"
    assert values == typed(FormulasModel(tmp_path / "cycle.xlsx",
                                         ordered_calc=False).evaluate())
    assert values[("SHEET", 1, 4)][1] in ("10", "10.0")  # the rest is calculated


def test_a_function_that_fails_takes_the_engines_own_calculation(tmp_path, monkeypatch):
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    model = FormulasModel(path)
    expected = typed(model.evaluate())
    calls = []

    def failing_run(self, values):
        calls.append(1)
        raise internals.CalculationRefused("a formula raised")

    monkeypatch.setattr(of_schedula._Plan, "run", failing_run)
    assert typed(model.evaluate()) == expected
    assert calls and model.path == "engine"


def test_outside_the_known_engine_versions_the_engines_own_calculation_is_taken(
        tmp_path, monkeypatch):
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    of_formulas._places()  # the engine's own functions read before the release is changed
    for library in ("formulas", "schedula"):
        monkeypatch.setitem(versions.SUPPORTED, library, ("0.1", "0.2"))
        model = FormulasModel(path)
        model.evaluate()
        assert model.path == "engine"
        with pytest.raises(internals.CalculationRefused):
            direct_calc.DirectCalculation({}, "book.xlsx")
        monkeypatch.undo()
    model = FormulasModel(path)
    model.evaluate()
    assert model.path == "direct"
    model = FormulasModel(path, direct=False)
    model.evaluate()
    assert model.path == "ordered"


def test_formulas_the_direct_calculation_refuses_take_the_engines_path(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    for row in range(1, 5):
        ws.cell(row, 1, row * 1.5)
        ws.cell(row, 3, f"=A{row}*2")
    ws["B1"] = "=OFFSET(A1,1,0)*2"  # not a function of this engine: #NAME?
    ws["B2"] = "=SUM(A1:A3)"
    ws["D1"], ws["D2"] = "A3", "=INDIRECT(D1)+1"  # a reference made at run time
    ws["D3"] = '=INDIRECT("A3")+1'  # made when compiling: a plain reference
    wb.save(tmp_path / "refs.xlsx")
    for refused in ("B1", "D2"):
        wb = openpyxl.load_workbook(tmp_path / "refs.xlsx")
        for other in {"B1", "D2"} - {refused}:
            wb.active[other] = None
        path = tmp_path / f"{refused}.xlsx"
        wb.save(path)
        model = FormulasModel(path)
        assert model.path != "direct"
        values = typed(model.evaluate())
        own = typed(engines_own_values(path))
        assert all(values[c] == own[c] for c in formula_cells(path)), refused
        assert values == typed(FormulasModel(path, direct=False).evaluate())
        assert values[("SHEET", 2, 2)] == ("float", "9.0")
        assert values[("SHEET", 4, 3)] == ("float", "12.0")  # A4 * 2
    wb.active["D2"] = None  # without the two, the same file takes the direct path
    wb.save(tmp_path / "plain.xlsx")
    model, values = fast_model(tmp_path / "plain.xlsx")
    assert values[("SHEET", 3, 4)] == ("float", "5.5")


def test_formula_shapes_are_compiled_once_whatever_the_size(tmp_path):
    """The SCORES cells of a head read their own pair of rows, a form per cell, one
    shape; the number of compiled pipes does not grow with the sequence length."""
    loops, forms = [], []
    for seq_len in (3, 6):
        path = build(tmp_path, "multihead", {"seq_len": seq_len, "d_model": 4, "heads": 2},
                     name=f"heads{seq_len}.xlsx")
        model, _ = fast_model(path)
        loops.append(model.compiled_formulas)
        forms.append(len({refs.formula_form(text, *cell)[0]
                          for text, cell in formula_texts(path) if text.startswith("=")}))
    assert loops[0] == loops[1] and forms[0] < forms[1]
    assert loops[1] < forms[1] / 2


def formula_texts(path):
    wb = openpyxl.load_workbook(path)
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, str):
                    yield cell.value, (cell.row, cell.column)


@pytest.mark.parametrize("sheet,top,left,bottom,right", [
    ("S", 1, 1, 1, 1), ("S", 9, 26, 9, 26), ("MY SHEET", 10, 27, 10, 27),
    ("S", 3, 2, 7, 5), ("S", 1, 16384, 1, 16384), ("S", 1048576, 1, 1048576, 1),
    ("S", 1, 1, 1048576, 16384), ("S", 5, 700, 1000, 702)])
def test_range_descriptions_are_the_engines(sheet, top, left, bottom, right):
    from formulas.ranges import Ranges

    of_formulas.formulas_engine()
    describe = direct_calc._RangeDicts("b.xlsx")
    describe(sheet, 2, 2, 2 + (top != bottom), 2 + (left != right))  # the model of its kind
    made = describe(sheet, top, left, bottom, right)
    ref = refs.column_letters(left) + str(top) + (
        "" if (top, left) == (bottom, right) else
        ":" + refs.column_letters(right) + str(bottom))
    parsed = Ranges().push(f"'[b.xlsx]{sheet}'!{ref}", raise_anchor=False).ranges[0]
    assert made == parsed and list(made) == list(parsed)


def test_empty_results_are_replaced_as_the_engine_replaces_them():
    import schedula as sh
    from formulas.functions import replace_empty

    results = [np.array([[sh.EMPTY]], object), np.array([["empty"]], object),
               np.array([[1.0, sh.EMPTY]], object), np.array([[1.5]]),
               np.array([[np.float64(2)]], object), np.array([[True]], object),
               np.array([["x"]]), np.array([["empty"]]), sh.EMPTY, 1.5, "empty"]
    for result in results:
        got, expected = direct_calc._replace_empty(result, replace_empty), \
            replace_empty(result)
        assert type(got) is type(expected)
        assert repr(got) == repr(expected), result


def test_index_gives_what_the_engines_own_index_gives(tmp_path):
    """INDEX makes only the one-cell reference it picks (`of_formulas._index_by_cell`);
    picked any other way, out of range, over a row, a block or two areas, it gives what
    the released INDEX gives."""
    wb = openpyxl.Workbook()
    ws = wb.active
    for row in range(1, 6):
        ws.cell(row, 1, row * 1.5)
        ws.cell(row, 2, f"t{row}")
        ws.cell(row, 3, -row)
    formulas = ["=INDEX(A1:A5,3,1)", "=INDEX(A1:A5,3)", "=INDEX(A1:A5,9,1)",
                "=INDEX(A1:A5,0,1)", "=SUM(INDEX(A1:C5,0,3))", "=INDEX(A1:C5,2,0)",
                "=INDEX(A1:C5,2,2)", "=INDEX(A1:C1,1,3)", "=INDEX(A1:C1,2)",
                "=INDEX(A1:A5,-1,1)", "=INDEX(A1:A5,A2,1)", '=INDEX(A1:A5,"x",1)',
                "=INDEX(A1:A5,D1)+1", "=INDEX(A1:B5,5,2)", "=INDEX(A1:A5,1.9,1)"]
    for row, formula in enumerate(formulas, start=1):
        ws.cell(row, 5, formula)
    ws["D1"] = 4
    ws["F1"] = ArrayFormula("F1:F3", "=INDEX(A1:A5,{1;3;5},1)")
    path = tmp_path / "index.xlsx"
    wb.save(path)
    assert_same_as_the_engines_own(path)
    values = FormulasModel(path).evaluate()
    assert [values[("SHEET", r, 5)] for r in (1, 2, 7)] == [4.5, 4.5, "t2"]
    # picked by an array of rows, the engine keeps the one-cell references as values
    assert [values[("SHEET", r, 6)].value[0, 0] for r in (1, 2, 3)] == [1.5, 4.5, 7.5]
    ws["G1"] = "=INDEX((A1:A5,C1:C5),2,1,2)"  # two areas: the engine's model takes it
    wb.save(path)
    model = FormulasModel(path)
    values, own = typed(model.evaluate()), typed(engines_own_values(path))
    assert model.path == "ordered"
    assert all(values[c] == own[c] for c in formula_cells(path))


@pytest.mark.parametrize("second", ["'[book.xlsx]SHEET'!B2:C3", "'[book.xlsx]SHEET'!C2",
                                    "'[book.xlsx]SHEET'!A1:D1"])
def test_two_formulas_filling_one_cell_are_refused_and_apart_are_calculated(second):
    """Boxes that share a cell cannot be ordered: the direct calculation refuses them (the
    engine's own then decides); boxes side by side are calculated."""
    first = {"'[book.xlsx]SHEET'!A1": 2, "'[book.xlsx]SHEET'!B1:C2": "={1,2;3,4}+A1"}
    with pytest.raises(internals.CalculationRefused, match="two formulas fill one cell"):
        direct_calc.DirectCalculation({**first, second: "=A1*3"}, "book.xlsx")
    apart = direct_calc.DirectCalculation({**first, "'[book.xlsx]SHEET'!D4": "=A1*3"},
                                          "book.xlsx")
    assert apart.compiled_formulas >= 1


@pytest.mark.parametrize("clash", [{"'[book.xlsx]SHEET'!B1": 5},
                                   {"'[book.xlsx]SHEET'!E1:F2": [[1, 2], [3, 4]]},
                                   {"'[book.xlsx]SHEET'!F2": 7}])
def test_a_value_in_a_cell_a_formula_or_a_block_fills_is_refused(clash):
    block = direct_calc.ArrayRows(np.ones((3, 2)), np.zeros((3, 2), bool))
    entries = {"'[book.xlsx]SHEET'!A1": 2, "'[book.xlsx]SHEET'!B1:C2": "={1,2;3,4}+A1",
               "'[book.xlsx]SHEET'!F1:G3": block}
    direct_calc.DirectCalculation(entries, "book.xlsx")
    with pytest.raises(internals.CalculationRefused, match="two nodes hold one cell"):
        direct_calc.DirectCalculation({**entries, **clash}, "book.xlsx")
