"""Run by tests/test_released_libraries.py with --released-libraries (not collected by
itself): in that run no guard lets a shortcut through, and a workbook is calculated by the
engine's own path."""

from helpers.books import build

from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.engines.internals import of_formulas
from workbook_builder.xlsx import of_openpyxl, versions


def test_this_run_takes_every_released_path(tmp_path):
    assert versions.released_libraries_forced()
    assert not any(versions.supported(library) for library in versions.SUPPORTED)
    assert not of_openpyxl.openpyxl_shortcuts() and not of_formulas.formula_shortcuts()
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    model = FormulasModel(path)
    model.evaluate()
    assert model.path == "engine" and model.engine_model is not None
