"""Every registered kind: the workbook's formulas, evaluated by the `formulas` engine, equal
the NumPy reference in every named step block, in both layouts."""

import openpyxl
import pytest
from conftest import ALL_CASES, KINDS, build

from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.sheet.layout import LAYOUTS


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind_name,index,case", ALL_CASES,
                         ids=[f"{k}-{i}" for k, i, _ in ALL_CASES])
def test_sheet_equals_reference(tmp_path, kind_name, index, case, layout):
    path = build(tmp_path, kind_name, case, layout=layout, seed=index + 7)
    report = check_workbook(path)
    print(format_report(report))
    assert report.passed, format_report(report)


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_every_named_block_is_an_input_or_a_checked_step(tmp_path, kind_name):
    """No step on the sheet escapes the check, and no checked step is missing a name."""
    kind = KINDS[kind_name]
    case = kind.test_cases[-1]
    path = build(tmp_path, kind_name, case)
    wb = openpyxl.load_workbook(path)
    report = check_workbook(path)
    from workbook_builder.sheet.kind import make_params

    inputs = set(kind.input_shapes(make_params(kind, case)))
    steps = {step.name for step in report.steps}
    assert set(wb.defined_names) == inputs | steps
    assert not inputs & steps


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_kind_has_test_and_demo_cases(kind_name):
    kind = KINDS[kind_name]
    assert len(kind.test_cases) >= 2 and kind.demo_cases and kind.summary
