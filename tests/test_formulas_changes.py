"""Our changes to the `formulas` engine (of_formulas.formulas_changes) are in place only while
we calculate: after `api.check`, a user's own `formulas` model in the same process calculates
exactly as the released library does, progress bar included; inside our calculation, ERF of
any single value is the released ERF; every place changed holds its own value again after a
block, nested blocks and exceptions included."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.engines.internals import of_formulas

ROOT = Path(__file__).resolve().parents[1]

# a user's own workbook: ERF of truth values, two-argument ERF, ERF of arrays and ranges,
# INDEX and the arithmetic our shortcuts take
USER_FORMULAS = {
    "B1": "=ERF(TRUE)", "B2": "=ERF(FALSE)", "B3": "=ERF(0.5,TRUE)", "B4": "=ERF(TRUE,0.5)",
    "B5": "=ERF({0.5,1})", "B6": "=ERF(A1:A3)", "B7": "=ERF(A1/2)", "B8": '=ERF("0.5")',
    "B9": "=INDEX(A1:A3,2,1)", "B10": "=SUM(A1:A3)*EXP(A1)-A2/A3",
}

# run in a new process: argv[1] the folder, argv[2] "released" or "after-check"
USER_SESSION = r"""
import json, sys
from pathlib import Path

folder = Path(sys.argv[1])
if sys.argv[2] == "after-check":
    from workbook_builder import api

    ours = folder / "ours.xlsx"
    api.build("encoder-block", ours, layout="blocks", activation="gelu", gelu="exact",
              seq_len=2, d_model=4, heads=2, d_ff=4)
    assert api.check(ours).passed
import formulas

solution = formulas.ExcelModel().loads(str(folder / "user.xlsx")).finish().calculate()
print(json.dumps({key: repr(getattr(value, "value", value)) for key, value in
                  solution.items()}, sort_keys=True))
"""


def user_session(folder: Path, mode: str) -> tuple[dict, list[str]]:
    """(every node's value as text, the progress bar's last state) of the user's model."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TQDM_DISABLE", None)
    done = subprocess.run([sys.executable, "-c", USER_SESSION, str(folder), mode],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # tqdm's bar: "100%|██████████| 12/12 [00:00<00:00, 3456.78it/s]" (the rate varies)
    bars = re.findall(r"\d+%\|[^|\n\r]*\| *\d+/\d+", done.stderr)
    return json.loads(done.stdout.splitlines()[-1]), bars[-1:]


def test_after_check_a_users_own_model_calculates_as_released(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    for row, value in enumerate([0.5, 1.25, -2], start=1):
        ws.cell(row, 1, value)
    for ref, formula in USER_FORMULAS.items():
        ws[ref] = formula
    ws["C1"] = ArrayFormula("C1:C3", "=ERF(A1:A3/2)")  # an array ERF computes: ours elementwise
    wb.save(tmp_path / "user.xlsx")
    released, released_bar = user_session(tmp_path, "released")
    after_check, after_check_bar = user_session(tmp_path, "after-check")
    print("released:", {k: v for k, v in released.items() if "!B" in k or "!C" in k})
    assert any("#VALUE!" in v for k, v in released.items() if k.endswith("!B1"))
    assert after_check == released
    assert released_bar and after_check_bar == released_bar, (released_bar, after_check_bar)


def compiled(formula: str):
    return of_formulas.formulas_engine().Parser().ast(formula)[1].compile()


def text(value) -> str:
    return repr(np.asarray(value, dtype=object).tolist())


# single values of every kind ERF reads: numbers, truth values, text, errors, empty
SINGLE_VALUES = ["0.5", "-1.25", "0", "TRUE", "FALSE", '"0.5"', '"x"', '""', "#N/A",
                 "#DIV/0!", "1E+300", "-7.5"]


def test_inside_our_calculation_erf_of_single_values_is_the_released_erf():
    formulas = [f"=ERF({x})" for x in SINGLE_VALUES] + \
        [f"=ERF({x},{y})" for x in SINGLE_VALUES for y in SINGLE_VALUES] + \
        ["=ERF(1,)", "=ERF({0.5})", "=ERF({1,2},{1,2,3})"]
    released = [text(compiled(f)()) for f in formulas]
    with of_formulas.formulas_changes():
        inside = [text(compiled(f)()) for f in formulas]
    assert inside == released


def test_inside_our_calculation_erf_of_a_computed_array_is_erf_of_each_element():
    elements = [0.5, True, '"x"', "#N/A", -2, -2.5, "1E-9", "7.5"]
    row = "{" + ",".join(str(e) for e in elements) + "}"
    released_each = [compiled(f"=ERF({e})")() for e in elements]
    released_pairs = [compiled(f"=ERF({e},0.25)")() for e in elements]
    with of_formulas.formulas_changes():
        each, pairs = compiled(f"=ERF({row})")(), compiled(f"=ERF({row},0.25)")()
    assert text(each) == text([[np.asarray(v, object).item() for v in released_each]])
    assert text(pairs) == text([[np.asarray(v, object).item() for v in released_pairs]])
    from formulas.functions import Error

    outside = compiled(f"=ERF({row})")()  # released: one #VALUE!
    assert text(outside) == text([[Error.errors["#VALUE!"]]])


def places() -> list:
    """What every place we change holds now."""
    return [of_formulas._read(place) for place, _, _, _ in of_formulas._places()]


def test_every_place_holds_its_own_value_again_after_blocks_nested_or_failing():
    with of_formulas.formulas_changes():
        pass
    own = places()
    assert own == [own_value for _, own_value, _, _ in of_formulas._places()]
    with pytest.raises(ZeroDivisionError):
        with of_formulas.formulas_changes(shortcuts=True):
            ours = places()
            assert ours != own
            with of_formulas.formulas_changes():  # our own nested call: as the enclosing block
                assert places() == ours
            with of_formulas.formulas_changes(shortcuts=False):
                inner = places()
                assert inner != own and inner != ours  # ERF and the quiet bar only
            assert places() == ours
            1 / 0  # noqa: B018
    assert places() == own
