"""Our changes to the `formulas` engine (of_formulas.formulas_changes) are in place only while
we calculate (a user's own model after `api.check`: tests/test_users_formulas.py); inside
our calculation, ERF of any single value is the released ERF; every place changed holds its
own value again after a block, nested blocks and exceptions included."""


import numpy as np
import pytest

from workbook_builder.engines.internals import of_formulas


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
