"""Each formula form compiled once (`of_formulas.model_from_dict`) gives exactly the values of
the engine's own per-cell path (`ExcelModel.from_dict`): same type, same value, errors
included, for every kind, layout and test case, for exercises, for a workbook of awkward
formulas and for files saved by LibreOffice."""

import openpyxl
import pytest
from conftest import ALL_CASES, ATTENTION, build, exercise_book, fill, requires_libreoffice
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.engines.internals import of_formulas
from workbook_builder.engines.libreoffice import convert
from workbook_builder.sheet import refs
from workbook_builder.xlsx import versions


def typed(values):
    """Values compared with their type: 1 and 1.0 differ, so do an error and its text."""
    return {cell: (type(value).__name__, repr(value)) for cell, value in values.items()}


def both_paths(path):
    """(compiled once per form, the engine's per-cell path): the models and their values."""
    shared = FormulasModel(path, share_compiled=True, direct=False)
    own = FormulasModel(path, share_compiled=False)
    return shared, own, typed(shared.evaluate()), typed(own.evaluate())


def assert_same_values(path):
    shared, _, fast, slow = both_paths(path)
    differ = [(cell, fast.get(cell), slow.get(cell)) for cell in sorted(set(fast) | set(slow))
              if fast.get(cell) != slow.get(cell)]
    assert not differ, differ[:5]
    assert len(fast) > 1
    return shared


def shared_functions(model) -> dict[str, int]:
    """Formula text of each compiled function the model's cells share -> cells sharing it."""
    users: dict[int, list] = {}
    for cell in model.engine_model.cells.values():
        if getattr(cell, "func", None) is not None:
            users.setdefault(id(cell.func.func), []).append(cell)
    return {cells[0].func.func.__name__: len(cells) for cells in users.values()
            if len(cells) > 1}


@pytest.mark.slow  # the per-cell path is slow; every kind's own check is in test_kinds.py
@pytest.mark.parametrize("layout", ["cells", "blocks"])
@pytest.mark.parametrize("kind_name,index,case", ALL_CASES,
                         ids=[f"{k}-{i}" for k, i, _ in ALL_CASES])
def test_compiled_once_per_form_equals_the_engines_per_cell_path(tmp_path, kind_name, index,
                                                                  case, layout):
    path = build(tmp_path, kind_name, case, layout=layout)
    shared = assert_same_values(path)
    if layout == "cells" and repeated_forms(path):  # a form held by two cells is compiled once
        assert shared_functions(shared)


def repeated_forms(path) -> bool:
    """Whether two formula cells of the workbook have one relative (R1C1) form."""
    seen = set()
    for ws in openpyxl.load_workbook(path).worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, str) and cell.value.startswith("="):
                    form = refs.formula_form(cell.value, cell.row, cell.column)
                    key = None if form is None else (ws.title, str(form[0]))
                    if key in seen:
                        return True
                    if key is not None:
                        seen.add(key)
    return False


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_exercises_unfilled_and_filled_give_the_same_values(tmp_path, layout):
    steps = ["WEIGHTS", "OUTPUT"]
    path, answers = exercise_book(tmp_path, "attention", ATTENTION, steps, layout)
    assert_same_values(path)  # unfilled answer cells hold #N/A
    assert_same_values(fill(path, answers, ["WEIGHTS"], tmp_path / "half.xlsx"))


def awkward_workbook(path):
    """Formulas filled down and across that a compile cache could get wrong."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Data"
    other = wb.create_sheet("my sheet")
    for row in range(1, 7):
        ws.cell(row, 1, row * 1.5)
        ws.cell(row, 2, 10 - row)
        other.cell(row, 1, row * 100)
        r = row
        fills = {
            3: f"=A{r}*2+B{r}",
            4: f"=ROW()*A{r}+COLUMN()",  # depends on the cell's own position
            5: f"=A{r}+$A$1",  # A1 and $A$1: the same cell in row 1
            6: f"='my sheet'!A{r}+A{r}",
            7: f"=SUM(NUMS)+FIRST+A{r}",  # defined names
            8: f'="A{r}"&B{r}&LEN("B2:C3")',  # strings that look like references
            9: f"=I{r - 1}+A{r}" if row > 1 else "=A1",  # a chain down the column
            10: f"=$A{r}*B$1",
            11: f"=SUM(A$1:A{r})",  # a range that grows down the column
            12: f'=IF(A{r}>4,"big",A{r})',
            13: f"=1/(A{r}-3)",  # #DIV/0! in row 2
            14: f"=data!A{r}+Data!B{r}",
            15: f"=SUMPRODUCT(A{r}:B{r},A$1:B$1)",
            16: f"=B{7 - r}-A{r}",
            17: f"=$A$1:A{r}",  # a range whose corners swap above row 1? never: A1 is top
            18: f"=O{r}*2",
            22: f"=A{r + 1}+$A$3",  # in row 2 both are A3: that cell takes its own path
            23: f"=A{r}-A{r + 5}",  # 'A5' < 'A6' but 'A10' < 'A5': inputs sort differently
        }
        for col, formula in fills.items():
            ws.cell(row, col, formula)
        ws.cell(7, row, f"={chr(64 + row)}1+{chr(64 + row)}$2")  # across a row
    ws["S1"] = ArrayFormula("S1:S2", "=A1:A2*2")
    ws["S3"] = ArrayFormula("S3:S4", "=A3:A4*2")
    ws["T1"] = ArrayFormula("T1:U1", "=TRANSPOSE(A1:A2)")
    ws["T2"] = ArrayFormula("T2:U2", "=TRANSPOSE(A2:A3)")
    wb.defined_names["NUMS"] = DefinedName("NUMS", attr_text="Data!$A$1:$A$6")
    wb.defined_names["FIRST"] = DefinedName("FIRST", attr_text="Data!$B$1")
    wb.save(path)
    return path


def test_awkward_formulas_give_the_same_values(tmp_path):
    path = awkward_workbook(tmp_path / "awkward.xlsx")
    shared = assert_same_values(path)
    sharing = shared_functions(shared)
    assert any("'[AWKWARD.XLSX]DATA'!A1 * 2" in text or "* 2" in text for text in sharing)
    assert not any("ROW" in text for text in sharing)  # its own path, cell by cell
    values = shared.evaluate()
    assert [values[("DATA", r, 4)] for r in (1, 2)] == [1 * 1.5 + 4, 2 * 3.0 + 4]
    assert [values[("DATA", r, 9)] for r in (1, 2, 3)] == [1.5, 4.5, 9.0]
    assert [values[("DATA", r, 5)] for r in (1, 2)] == [3.0, 4.5]
    assert [values[("DATA", r, 22)] for r in (1, 2, 3)] == [3.0 + 4.5, 4.5 + 4.5, 6.0 + 4.5]


@requires_libreoffice
def test_files_saved_by_libreoffice_give_the_same_values(tmp_path):
    awkward = awkward_workbook(tmp_path / "awkward.xlsx")
    kind = build(tmp_path, "multihead", {"seq_len": 3, "d_model": 4, "heads": 2},
                 name="heads.xlsx")
    for path in (awkward, kind):
        saved = tmp_path / "saved"
        saved.mkdir(exist_ok=True)
        assert_same_values(convert(path, "xlsx", saved))


def test_outside_the_known_engine_versions_the_engines_own_path_is_taken(tmp_path,
                                                                       monkeypatch):
    path = build(tmp_path, "attention", ATTENTION)
    of_formulas._places()  # the engine's own functions read before the release is changed
    monkeypatch.setitem(versions.SUPPORTED, "formulas", ("0.1", "0.2"))
    assert not shared_functions(FormulasModel(path, direct=False))
    monkeypatch.undo()
    assert shared_functions(FormulasModel(path, direct=False))
