"""Every demo workbook (all kinds, both layouts) uses only functions that Excel 2010+,
LibreOffice 7.4 and the `formulas` engine evaluate alike, and carries its values for readers
that do not calculate."""

import re

import numpy as np
import openpyxl
import pytest
from conftest import run_cli
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book.files import write_workbook
from workbook_builder.checking.check import check_workbook
from workbook_builder.checking.names import find_name
from workbook_builder.demo import demo_plan
from workbook_builder.sheet.kind import make_params

# ../shared/DESIGN.md, "Formula style": the portable set
ALLOWED = {"SUMPRODUCT", "MMULT", "TRANSPOSE", "EXP", "LN", "SQRT", "MAX", "MIN", "SUM", "IF",
           "AND", "OR", "ABS", "TANH", "SIN", "COS", "PI", "POWER", "INDEX",
           # exercise self-checks: in every Excel since 2.0, LibreOffice and `formulas`; the
           # only way to count a student's text or #DIV/0! as wrong instead of erroring
           "ISNUMBER"}
_STRING = re.compile(r'"[^"]*"')
_FUNCTION = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\(")
_SPILL = re.compile(r"[A-Z]+\$?\d+#")
_UNSIGNED_EXPONENT = re.compile(r"(?<![A-Za-z_$])\d+(?:\.\d*)?[eE]\d")
_INDEX = re.compile(r"INDEX\(([^()]*)\)")


def formulas_of(path):
    """(sheet!cell, formula text, is an array formula) for every formula cell."""
    wb = openpyxl.load_workbook(path)
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, ArrayFormula):
                    yield f"{ws.title}!{cell.coordinate}", cell.value.text, True
                elif isinstance(cell.value, str) and cell.value.startswith("="):
                    yield f"{ws.title}!{cell.coordinate}", cell.value, False


def portability_problems(text: str, is_array: bool) -> list[str]:
    bare = _STRING.sub('""', text)
    problems = [f"function {name} is not in the portable set"
                for name in _FUNCTION.findall(bare) if name.upper() not in ALLOWED]
    if "TRANSPOSE(" in bare.upper() and not is_array:
        problems.append("TRANSPOSE outside an array formula needs Ctrl+Shift+Enter in old Excel")
    if _SPILL.search(bare):
        problems.append("spilled range reference")
    if _UNSIGNED_EXPONENT.search(bare):
        problems.append("exponent literal without a sign (write 1E+30)")
    for args in _INDEX.findall(bare):
        parts = [a.strip() for a in args.split(",")]
        if len(parts) != 3 or "0" in parts[1:]:
            problems.append("INDEX needs both a row and a column index")
    return problems


@pytest.mark.parametrize("text,array,bad", [
    ("=MMULT($B8:$C8,F$8:F$9)", False, False),
    ("=SUMPRODUCT(A1:B1,TRANSPOSE(C1:C2))", False, True),
    ("=MMULT(A1:B2,TRANSPOSE(C1:D2))", True, False),
    ("=IF(A1>0,-1E+30,A1)", False, False),
    ("=IF(A1>0,-1E30,A1)", False, True),
    ("=SUM(A1#)", False, True),
    ('=_xlfn.LET(_xlpm.x,1,x)', False, True),
    ("=OFFSET(A1,1,1)", False, True),
    ("=INDEX(A1:B3,2,0)", False, True),
    ("=INDEX(A1:B3,2,1)", False, False),
    ('=IF(ABS(E6-D6)<=0.0005,"agree","DIFFERS(")', False, False),
])
def test_the_lint_itself(text, array, bad):
    assert bool(portability_problems(text, array)) == bad


@pytest.fixture(scope="module")
def demo_books(tmp_path_factory):
    """Every workbook `attnsheets demo` builds, plus the tutorial's."""
    out = tmp_path_factory.mktemp("demo")
    paths = []
    for name, kind, values, layout in demo_plan():
        write_workbook(kind, make_params(kind, values), out / name, layout=layout)
        paths.append(out / name)
    assert run_cli("reproduce", "wo-ai-ai", "--out", out).returncode == 0
    paths += sorted(out.glob("wo-ai-ai_*.xlsx"))
    return paths


def test_every_demo_formula_is_portable(demo_books):
    problems = []
    for path in demo_books:
        for where, text, is_array in formulas_of(path):
            problems += [f"{path.name} {where} {text}: {p}"
                         for p in portability_problems(text, is_array)]
    assert not problems, "\n".join(problems[:20])


def test_fresh_workbooks_carry_their_evaluated_values(demo_books):
    """A reader that does not calculate (openpyxl data_only, pandas, previews) sees numbers
    in every step block, and they are the checked values."""
    for path in demo_books:
        report = check_workbook(path)
        wb = openpyxl.load_workbook(path, data_only=True)
        from workbook_builder.book.workbook import read_spec, spec_kind_params
        from workbook_builder.checking.check import read_inputs

        kind, params = spec_kind_params(read_spec(wb, path))
        expected = kind.reference(read_inputs(wb, kind, params, path, dict), params)
        for step in report.steps:
            where = find_name(wb, step.name, path)
            ws = wb[where.sheet]
            got = np.array([[ws.cell(where.top + i, where.left + j).value
                             for j in range(where.shape[1])] for i in range(where.shape[0])],
                           dtype=float)
            np.testing.assert_allclose(got, expected[step.name], rtol=1e-9, atol=1e-9,
                                       err_msg=f"{path.name} {step.name}")
