"""Each formula form compiled once (`of_formulas.model_from_dict`) gives exactly the values of
the engine's own per-cell path (`ExcelModel.from_dict`): same type, same value, errors
included, for every kind, layout and test case, for exercises, for a workbook of awkward
formulas and for files saved by LibreOffice."""

import openpyxl
import pytest
from helpers.books import ALL_CASES, ATTENTION, awkward_workbook, build, exercise_book, fill
from helpers.requires import requires_libreoffice

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
