"""After `api.check`, a user's own `formulas` model in the same process behaves exactly as
the released library: the same graph (every node and edge, the range assemblies
included), the same value in every node, the same progress bar, and the library's function
and operator registries as released. The user's workbook exercises everything our
changes touch while we calculate: INDEX, ERF over a range and over a computed array, the
operators, the elementwise and reducing functions on plain numbers, and ranges read by
many formulas (the range assembly).

The comparison is with a fresh process that never imported this project. Only the public
API is used, so the test runs against any version of the project."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import openpyxl
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.formula import ArrayFormula

ROOT = Path(__file__).resolve().parents[1]

# a user's workbook: A1:C4 numbers, then formulas reading them
USER_FORMULAS = {
    # INDEX with both indices, over a column and a block, and through a defined name
    "E1": "=INDEX(A1:A4,3,1)", "E2": "=INDEX(A1:C4,2,3)", "E3": "=INDEX(DATA,4,2)*2",
    "E4": "=INDEX(A1:C4,1,1)+INDEX(A1:C4,4,3)",
    # ERF: single values, truth values, text, two arguments, a range, a computed array
    "F1": "=ERF(A1)", "F2": "=ERF(TRUE)", "F3": "=ERF(0.5,TRUE)", "F4": '=ERF("0.5")',
    "F5": "=ERF(A1:A3)", "F6": "=ERF(A2,B2)", "F7": "=ERF({0.5,1})",
    # operators on numbers, truth values and text
    "G1": "=A1+B1-C1*A2/B2", "G2": "=-A3^2", "G3": "=A1>B1", "G4": "=A1<=B1",
    "G5": "=A1=A1", "G6": "=A1<>B1", "G7": '=A1&"x"', "G8": "=TRUE+1", "G9": "=A1/0",
    # functions on plain numbers (our fast path while we calculate) and on ranges
    "H1": "=EXP(A1)", "H2": "=LN(B2)", "H3": "=SQRT(C3)", "H4": "=TANH(A4)",
    "H5": "=POWER(B1,2)", "H6": "=IF(A1>0,B1,C1)", "H7": "=SUM(A1:C4)",
    "H8": "=SUMPRODUCT(A1:A4,B1:B4)", "H9": "=MAX(A1:C4)-MIN(A1:C4)",
    "H10": "=SUM(A2:B3)+SUM(B2:C3)", "H11": "=SUM(DATA)", "H12": "=LN(-1)",
}
ARRAY_FORMULAS = {
    "I1:I3": "=ERF(A1:A3/2)",  # an array ERF computes
    "J1:K2": "=MMULT(A1:B2,B3:C4)",
    "L1:L4": "=A1:A4*B1:B4+C1:C4",
}

# run in a new process: argv[1] the folder, argv[2] "released" or "after-check"
USER_SESSION = r"""
import json, sys
from pathlib import Path

folder = Path(sys.argv[1])
if sys.argv[2] == "after-check":
    from workbook_builder import api

    for name, kind, sizes in [
            ("ours.xlsx", "encoder-block", dict(layout="blocks", activation="gelu",
                                                gelu="exact", seq_len=2, d_model=4,
                                                heads=2, d_ff=4)),
            ("mine.xlsx", "attention", dict(seq_len=3, d_model=2, d_k=2))]:
        api.build(kind, folder / name, **sizes)
        assert api.check(folder / name).passed
else:
    assert not any(name.startswith("workbook_builder") for name in sys.modules)
import formulas
from formulas.functions.operators import OPERATORS



def describe(function, depth=4):
    # what a registry entry runs: each layer's type and where its code is written, down
    # through the functions it wraps (`.func`) and closes over
    code = getattr(function, "__code__", None)
    text = type(function).__qualname__ + (
        f"@{code.co_filename}:{code.co_firstlineno}" if code else "")
    inner = [getattr(function, "func", None)] + [
        cell.cell_contents for cell in getattr(function, "__closure__", None) or ()]
    inner = [f for f in inner if callable(f) and not isinstance(f, type)]
    if depth and inner:
        text += " (" + ", ".join(describe(f, depth - 1) for f in inner) + ")"
    return text


model = formulas.ExcelModel().loads(str(folder / "user.xlsx")).finish()
solution = model.calculate()
functions = formulas.get_functions()
released = {}
for registry, names in ((functions, ("ERF", "_XLFN.ERF", "INDEX", "EXP", "LN", "SQRT", "TANH",
                                     "POWER", "IF", "SUM", "SUMPRODUCT", "MAX", "MIN",
                                     "MMULT")),
                        (OPERATORS, ("+", "-", "*", "/", "U-", "^", "=", "<>", "<", "<=",
                                     ">", ">="))):
    for name in names:
        entry = registry[name]
        function = entry["function"] if isinstance(entry, dict) else entry
        released[name] = describe(function)
print(json.dumps({
    "values": {str(k): repr(getattr(v, "value", v)) for k, v in solution.items()},
    "nodes": sorted(map(str, model.dsp.nodes)),
    "edges": sorted(f"{u} -> {v}" for u, v in model.dsp.dmap.edges),
    "functions": released,
}, sort_keys=True))
"""


def user_session(folder: Path, mode: str) -> tuple[dict, list[str]]:
    """(what the user's model gives, the progress bar's last state) in a new process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TQDM_DISABLE", None)
    done = subprocess.run([sys.executable, "-c", USER_SESSION, str(folder), mode],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # tqdm's bar: "100%|██████████| 12/12 [00:00<00:00, 3456.78it/s]" (the rate varies)
    bars = re.findall(r"\d+%\|[^|\n\r]*\| *\d+/\d+", done.stderr)
    return json.loads(done.stdout.splitlines()[-1]), bars[-1:]


def users_workbook(path: Path) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    numbers = [[0.5, 1.25, -2.0], [3.0, -0.75, 2.5], [-1.5, 4.0, 0.125], [2.0, 0.25, -3.5]]
    for i, row in enumerate(numbers, start=1):
        for j, value in enumerate(row, start=1):
            ws.cell(i, j, value)
    for ref, formula in USER_FORMULAS.items():
        ws[ref] = formula
    for ref, formula in ARRAY_FORMULAS.items():
        ws[ref.split(":")[0]] = ArrayFormula(ref, formula)
    wb.defined_names["DATA"] = DefinedName("DATA", attr_text="Sheet!$A$1:$C$4")
    wb.save(path)


def test_after_check_a_users_own_model_behaves_as_the_released_library(tmp_path):
    users_workbook(tmp_path / "user.xlsx")
    released, released_bar = user_session(tmp_path, "released")
    after_check, after_check_bar = user_session(tmp_path, "after-check")
    values = released["values"]
    print("released:", {k: v for k, v in values.items() if "!" in k and "!A" not in k})
    # the released library's own answers where ours differ while we calculate
    assert "#VALUE!" in values["'[user.xlsx]SHEET'!F2"]  # ERF(TRUE)
    assert "#VALUE!" in values["'[user.xlsx]SHEET'!I1:I3"]  # ERF of a computed array
    for part in ("values", "nodes", "edges", "functions"):
        differ = sorted(set(after_check[part]) ^ set(released[part])) if part != "values" \
            and part != "functions" else \
            [k for k in sorted(set(after_check[part]) | set(released[part]))
             if after_check[part].get(k) != released[part].get(k)]
        assert not differ, f"{part} differ after a check: {differ[:8]}"
    assert released_bar and after_check_bar == released_bar, (released_bar, after_check_bar)
