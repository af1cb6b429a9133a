"""The engine tests once more with every library as released (ATTNSHEETS_RELEASED_LIBRARIES=1,
pytest's --released-libraries): each version guard (workbook_builder/xlsx/versions.py)
answers "unsupported", so workbooks are read, saved and calculated by the libraries' public
paths, the way a release outside the tested ones would be. A representative part of the
suite runs that way in separate pytest runs: every kind's first test case checked against
its NumPy reference, the checker's own tests, and an evaluation followed by new inputs.
(Floats are then written by openpyxl's own writer, 16 significant digits: only the
bit-identical read-back test needs our writer, and is left out.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.books import KINDS

from workbook_builder.xlsx import versions

ROOT = Path(__file__).resolve().parent.parent

# every kind's first case in the blocks layout (array formulas: MMULT, ERF over a block,
# the recurrences), the cells layout of the small kinds, the checker's own tests; in three
# groups, so that a parallel run spreads them
KINDS_IN_BLOCKS = [f"tests/test_kinds.py::test_sheet_equals_reference[{kind}-0-blocks]"
                   for kind in sorted(KINDS)]
ENGINE_TESTS = {
    "blocks-first-half": KINDS_IN_BLOCKS[:len(KINDS_IN_BLOCKS) // 2],
    "blocks-second-half": KINDS_IN_BLOCKS[len(KINDS_IN_BLOCKS) // 2:],
    "cells-and-checks": [
        *(f"tests/test_kinds.py::test_sheet_equals_reference[{kind}-0-cells]"
          for kind in ("attention", "cross-attention", "flash", "linear", "ssm")),
        "tests/test_check.py::test_a_changed_formula_fails_its_step_and_the_steps_after",
        "tests/test_check.py::test_a_cell_on_a_reference_cycle_is_a_failure_not_a_silent_pass",
        "tests/test_check.py::test_text_blank_or_error_in_an_input_is_refused",
        "tests/test_evaluate.py::test_a_compiled_model_follows_new_inputs",
        "tests/released_path_check.py",  # collected only when named
    ],
}


@pytest.mark.slow  # the engine tests again, every shortcut off
@pytest.mark.parametrize("group", sorted(ENGINE_TESTS))
def test_engine_tests_pass_with_every_library_as_released(group):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop(versions.RELEASED_LIBRARIES_SWITCH, None)  # set by the option alone
    done = subprocess.run([sys.executable, "-m", "pytest", "-n0", "-q", "-p",
                           "no:cacheprovider", "--released-libraries", *ENGINE_TESTS[group]],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800,
                          check=False)
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    last = done.stdout.splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "deselected" not in last, last
