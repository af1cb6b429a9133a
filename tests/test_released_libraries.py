"""The engine tests once more with every library as released (ATTNSHEETS_RELEASED_LIBRARIES=1,
pytest's --released-libraries): each version guard of workbook_builder/engines/internals
answers "unsupported", so workbooks are read, saved and calculated by the libraries' public
paths, the way a release outside the tested ones would be. A representative part of the
suite runs that way in a separate pytest: every kind's first test case in the cells and
blocks layouts checked against its NumPy reference, the checker's own tests, and an
evaluation followed by new inputs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KINDS, build

from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.engines.internals import of_formulas, of_openpyxl, versions

ROOT = Path(__file__).resolve().parent.parent

ENGINE_TESTS = [
    *(f"tests/test_kinds.py::test_sheet_equals_reference[{kind}-0-{layout}]"
      for kind in sorted(KINDS) for layout in ("cells", "blocks")),
    "tests/test_check.py",
    "tests/test_evaluate.py::test_a_compiled_model_follows_new_inputs",
    "tests/test_evaluate.py::test_float_inputs_read_back_bit_identical",
    "tests/test_released_libraries.py::test_this_run_takes_every_released_path",
]


def test_engine_tests_pass_with_every_library_as_released():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop(versions.RELEASED_LIBRARIES_SWITCH, None)  # set by the option alone
    done = subprocess.run([sys.executable, "-m", "pytest", "-n0", "-q", "-p",
                           "no:cacheprovider", "--released-libraries", *ENGINE_TESTS],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800,
                          check=False)
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1] and "skipped" not in \
        done.stdout.splitlines()[-1], done.stdout.splitlines()[-1]


def test_this_run_takes_every_released_path(request, tmp_path):
    """Run only with --released-libraries: no guard lets a shortcut through."""
    if not request.config.getoption("--released-libraries"):
        pytest.skip("runs inside test_engine_tests_pass_with_every_library_as_released")
    assert versions.released_libraries_forced()
    assert not any(versions.supported(library) for library in versions.SUPPORTED)
    assert not of_openpyxl.openpyxl_shortcuts() and not of_formulas.formula_shortcuts()
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    model = FormulasModel(path)
    model.evaluate()
    assert model.path == "engine" and model.engine_model is not None
