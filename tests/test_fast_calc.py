"""The calculation as a plain loop over the engine's compiled functions
(`thirdparty.OrderedCalculation`, with each formula form compiled once) gives exactly what
the engine's own loader and calculation give, `ExcelModel().loads(file).finish().calculate()`:
same type, same value, Excel errors and text included, for every kind, layout and demo case,
for awkward formulas and for files saved by LibreOffice. What the loop cannot reproduce
(cycles, failing functions, another engine version) takes the engine's own calculation."""

import re

import openpyxl
import pytest
from conftest import KINDS, build, cli, formulas_of, requires_libreoffice
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.formula import ArrayFormula
from test_compile_cache import awkward_workbook

from workbook_builder.engines import thirdparty
from workbook_builder.engines.formulas_engine import FormulasModel, _quiet_numpy, _solution_values
from workbook_builder.engines.libreoffice import convert
from workbook_builder.sheet.refs import parse_range

DEMOS = [(name, label, params, layout) for name, kind in sorted(KINDS.items())
         for label, params in kind.demo_cases for layout in ("cells", "blocks")]


def typed(values):
    """Values compared with their type: 1 and 1.0 differ, so do an error and its text."""
    return {cell: (type(value).__name__, repr(value)) for cell, value in values.items()}


def engines_own_values(path):
    """Every value of the engine's own loader and calculation, as released."""
    with _quiet_numpy():
        engine = thirdparty.formulas_engine(shortcuts=False)
        try:
            return _solution_values(engine.ExcelModel().loads(str(path)).finish().calculate())
        finally:
            thirdparty.formulas_engine()


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
    assert model._ordered_calc is not None, "the plain loop refused this workbook"
    return model, values


def assert_same_as_the_engines_own(path):
    _, fast = fast_model(path)
    own = typed(engines_own_values(path))
    cells = set(formula_cells(path))
    assert cells and cells <= fast.keys() and cells <= own.keys()
    differ = [(c, fast[c], own[c]) for c in sorted(fast.keys() & own.keys())
              if fast[c] != own[c]]
    assert not differ, differ[:5]


@pytest.mark.parametrize("kind_name,label,params,layout", DEMOS,
                         ids=[f"{label}-{layout}" for _, label, _, layout in DEMOS])
def test_plain_loop_equals_the_engines_own_loader_and_calculation(tmp_path, kind_name,
                                                                  label, params, layout):
    assert_same_as_the_engines_own(build(tmp_path, kind_name, params, layout=layout))


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
    assert fast._ordered_calc is not None and own._ordered_calc is None


def test_circular_references_take_the_engines_own_calculation(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["B1"], ws["C1"], ws["D1"] = "=B1+1", "=A1+1", 5, "=C1*2"
    wb.save(tmp_path / "cycle.xlsx")
    model = FormulasModel(tmp_path / "cycle.xlsx")
    values = typed(model.evaluate())
    assert model._ordered_calc is None and model._use_ordered_calc is False
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
        raise thirdparty.CalculationRefused("a formula raised")

    monkeypatch.setattr(thirdparty._Plan, "run", failing_run)
    assert typed(model.evaluate()) == expected
    assert calls


def test_outside_the_known_engine_versions_the_engines_own_calculation_is_taken(
        tmp_path, monkeypatch):
    from workbook_builder.engines import formulas_engine

    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    monkeypatch.setattr(formulas_engine, "FORMULAS_VERSIONS", ("0.1", "0.2"))
    model = FormulasModel(path)
    model.evaluate()
    assert model._ordered_calc is None
    monkeypatch.undo()
    model = FormulasModel(path)
    model.evaluate()
    assert model._ordered_calc is not None
