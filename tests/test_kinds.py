"""Every registered kind: the workbook's formulas, evaluated by the `formulas` engine, equal
the NumPy reference in every named step block, in every layout (the hand layout refuses the
cases beyond its teaching size, and only those); and its declaration, its defined names and
its reference agree on what the steps are."""

import numpy as np
import pytest
from helpers.books import ALL_CASES, KINDS, book_in_memory, build, check_built

from workbook_builder.cli.printing import format_report
from workbook_builder.errors import UserError
from workbook_builder.sheet.hand_layout import HAND_MAX_SIDE
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.layout import LAYOUTS


def beyond_teaching_size(kind, params) -> bool:
    """A block longer or wider than the hand layout takes, from the shapes of the inputs
    and of the reference's steps (not from the layout's own plan)."""
    inputs = complete_inputs(kind, params, {}, 0)
    blocks = [*inputs.values(), *kind.reference(inputs, params).values()]
    return max(max(np.atleast_2d(block).shape) for block in blocks) > HAND_MAX_SIDE


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind_name,index,case", ALL_CASES,
                         ids=[f"{k}-{i}" for k, i, _ in ALL_CASES])
def test_sheet_equals_reference(tmp_path, kind_name, index, case, layout):
    kind = KINDS[kind_name]
    if layout == "hand" and beyond_teaching_size(kind, make_params(kind, case)):
        with pytest.raises(UserError, match=f"at most {HAND_MAX_SIDE} rows and "
                                            f"{HAND_MAX_SIDE} columns per block.*"
                                            f"--layout cells or --layout blocks"):
            build(tmp_path, kind_name, case, layout=layout)
        return
    path = build(tmp_path, kind_name, case, layout=layout, seed=index + 7)
    report = check_built(path)
    print(format_report(report))
    assert report.passed, format_report(report)
    assert [s.name for s in report.steps] == KINDS[kind_name].step_names(
        make_params(KINDS[kind_name], case))


@pytest.mark.parametrize("kind_name,index,case", ALL_CASES,
                         ids=[f"{k}-{i}" for k, i, _ in ALL_CASES])
def test_every_named_block_is_an_input_or_a_declared_step(kind_name, index, case):
    """No block on the sheet escapes the check, no checked step lacks a name, and the
    reference gives exactly the declared steps."""
    kind = KINDS[kind_name]
    params = make_params(kind, case)
    inputs = complete_inputs(kind, params, {}, index)
    wb = book_in_memory(kind, params, inputs, kind.labels(params, None), "cells")
    steps = kind.step_names(params)
    assert len(set(steps)) == len(steps)
    assert set(wb.defined_names) == set(inputs) | set(steps)
    assert not set(inputs) & set(steps)
    reference = kind.reference(inputs, params)
    assert set(reference) == set(steps)
    assert all(np.all(np.isfinite(block)) for block in reference.values())


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_kind_has_test_and_demo_cases(kind_name):
    kind = KINDS[kind_name]
    assert len(kind.test_cases) >= 2 and kind.demo_cases and kind.summary
