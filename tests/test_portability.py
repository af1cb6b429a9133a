"""Every demo workbook (all kinds, both layouts) uses only functions that Excel 2010+,
LibreOffice 7.4 and the `formulas` engine evaluate alike, and carries its values for readers
that do not calculate."""

import math

import numpy as np
import openpyxl
import pytest
from helpers.books import formula_book
from helpers.requires import requires_libreoffice
from helpers.sheets import formulas_of, portability_problems

from workbook_builder.book.workbook import read_spec, spec_request
from workbook_builder.checking.check import read_inputs
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet.names import find_name


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
def demo_books(demo, tutorial):
    """Every workbook `attnsheets demo` builds, plus the tutorial's."""
    return demo.books + tutorial.books


@pytest.mark.slow  # every formula of every demo workbook; the lint itself is tested above
def test_every_demo_formula_is_portable(demo_books):
    problems = []
    for path in demo_books:
        for where, text, is_array in formulas_of(path):
            problems += [f"{path.name} {where} {text}: {p}"
                         for p in portability_problems(text, is_array)]
    assert not problems, "\n".join(problems[:20])


@pytest.mark.slow  # every cell of every demo workbook
def test_fresh_workbooks_carry_their_evaluated_values(demo_books):
    """A reader that does not calculate (openpyxl data_only, pandas, previews) sees numbers
    in every step block, and they are the checked values."""
    for path in demo_books:
        wb = openpyxl.load_workbook(path, data_only=True)
        request = spec_request(read_spec(wb, path))
        kind, params = request.kind, request.params
        expected = kind.reference(read_inputs(wb, kind, params, path, dict), params)
        assert set(expected) == set(kind.step_names(params))
        for name in expected:
            where = find_name(wb, name, path)
            ws = wb[where.sheet]
            got = np.array([[ws.cell(where.top + i, where.left + j).value
                             for j in range(where.shape[1])] for i in range(where.shape[0])],
                           dtype=float)
            np.testing.assert_allclose(got, expected[name], rtol=1e-9, atol=1e-9,
                                       err_msg=f"{path.name} {name}")


INT_ARGUMENTS = [2.5, -2.5, -3, -0.5, 0, 7, 1e-9, -1e-9, 32768 / 3, (32768 + 2) / 3]


@pytest.fixture(scope="module")
def int_book(tmp_path_factory):
    """INT of each argument in column B, the argument in column A, and INT of a formula."""
    path = tmp_path_factory.mktemp("int") / "int.xlsx"
    formula_book("INT", INT_ARGUMENTS, lambda row: f"=INT(A{row})",
                 lambda row: f"=INT(-A{row}/3)").save(path)
    return path


def int_values(values) -> list[tuple[float, float]]:
    return [(values[("INT", row, 2)], values[("INT", row, 3)])
            for row in range(1, len(INT_ARGUMENTS) + 1)]


def test_int_rounds_down_in_the_formulas_engine(int_book):
    """INT is a floor, negative arguments included: INT(-2.5) = -3 (not a truncation)."""
    got = int_values(evaluate_with_formulas(int_book))
    assert got == [(math.floor(x), math.floor(-x / 3)) for x in INT_ARGUMENTS]


@requires_libreoffice
def test_int_agrees_in_libreoffice(int_book):
    got = int_values(evaluate_with_libreoffice(int_book))
    assert got == [(math.floor(x), math.floor(-x / 3)) for x in INT_ARGUMENTS]
