"""The fast functions on plain numbers (engines/internals/fast_functions.py) give exactly what the
`formulas` engine's own functions give — same shape, same element types, same bits — for
random arrays and edge values (0, −0, negatives, huge, subnormal, overflowing, inf- and
error-producing), and take the fast path only where every operand is a plain number; they
are in place only inside `of_formulas.formulas_changes` with the shortcuts on, and the
engine's own functions are back afterwards."""

import numpy as np
import pytest
import schedula as sh

from workbook_builder.engines.formulas_engine import _quiet_numpy
from workbook_builder.engines.internals import fast_functions, of_formulas

formulas = of_formulas.formulas_engine()
from formulas.functions import Array, Error  # noqa: E402  (after the engine is set up)
from formulas.functions.operators import OPERATORS  # noqa: E402

EDGES = [0.0, -0.0, 1.0, -1.0, 2.5, -3.75, 1e-310, 5e-324, 1e300, -1e300, 709.0, 710.0,
         -745.0, -746.0, 1e-5, 3, -2, 0, 0.5, 1e16 + 1]
ELEMENTWISE = ["+", "-", "*", "/", "U-", "^", "=", "<>", "<", "<=", ">", ">="]
FUNCTIONS = ["EXP", "LN", "SQRT", "TANH", "POWER"]


def engine_array(values, shape) -> Array:
    """Values as the engine holds a range's values: an object Array."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array.reshape(shape).view(Array)


def random_values(rng, size, scale=10.0) -> list:
    """Random floats of many magnitudes, with every edge value, some ints and np.float64."""
    values = list(rng.normal(0, scale, size) * 10.0 ** rng.integers(-8, 8, size))
    values[:len(EDGES)] = EDGES
    values = [np.float64(v) if i % 7 == 3 else v for i, v in enumerate(values)]
    order = rng.permutation(size)
    return [values[i] for i in order]


def typed(result):
    """A result as comparable data: shape and dtype, then each element's type and bits."""
    if not isinstance(result, np.ndarray):
        return type(result).__name__, repr(result)
    if result.dtype != object:
        return type(result).__name__, result.shape, result.dtype.str, result.tobytes()
    return type(result).__name__, result.shape, [(type(v).__name__, repr(v)) for v in
                                                 result.ravel().tolist()]


def registry(name):
    return OPERATORS if name in ELEMENTWISE else formulas.get_functions()


def installed_function(name):
    """The function `formulas_changes` puts in the engine's registry for `name`."""
    with of_formulas.formulas_changes(shortcuts=True):
        return registry(name)[name]


def both(name, *args):
    """(the installed function's result, the engine's own function's result)."""
    installed = installed_function(name)
    if isinstance(installed, dict):
        installed = installed["function"]
    with _quiet_numpy():
        return installed(*args), installed.engine_function(*args)


def arity(name):
    return 1 if name in ("U-", "EXP", "LN", "SQRT", "TANH") else 2


def fast_of(name):
    return {**fast_functions._operators(), **fast_functions._functions()}[name]


@pytest.mark.parametrize("name", ELEMENTWISE + FUNCTIONS)
def test_elementwise_on_random_arrays_and_edge_values(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    size = 400
    args = [engine_array(random_values(rng, size, scale), (20, 20))
            for scale in (3.0, 1.5)[:arity(name)]]
    if name in ("^", "POWER"):  # bases of every sign, exponents that stay in range
        args[1] = engine_array([float(v) for v in rng.integers(-3, 4, size)] + [], (20, 20))
        args[1][0, :5] = [0.5, -0.5, 1 / 3, 0.0, 2.5]
    fast, own = both(name, *args)
    assert typed(fast) == typed(own)


@pytest.mark.parametrize("name", ELEMENTWISE + FUNCTIONS)
def test_elementwise_broadcast_scalars_and_float_arrays(name):
    rng = np.random.default_rng(7)
    column = engine_array(list(rng.uniform(0.1, 5, 6)), (6, 1))
    row = rng.uniform(0.1, 3, (1, 4)).view(Array)  # a float64 array, as MMULT gives
    args = [column, row, 2][:arity(name)] if arity(name) == 2 else [row]
    for call in (args, [3.5, 2][:arity(name)], [column, 2.0][:arity(name)]):
        fast, own = both(name, *call)
        assert typed(fast) == typed(own)
        fast_of(name)(*call)  # plain numbers: the fast path answers, it does not refuse


@pytest.mark.parametrize("name,args", [
    ("/", (engine_array([1.0, 2.0], (1, 2)), engine_array([0.0, -0.0], (1, 2)))),
    ("EXP", (engine_array([800.0, 1.0], (1, 2)),)),
    ("LN", (engine_array([0.0, -1.0], (1, 2)),)),
    ("SQRT", (engine_array([-4.0], (1, 1)),)),
    ("^", (engine_array([-8.0, 0.0], (1, 2)), engine_array([1 / 3, -1.0], (1, 2)))),
    ("^", (engine_array([1e300], (1, 1)), 2.0)),
    ("POWER", (engine_array([0.0, -8.0], (1, 2)), engine_array([0.0, 0.5], (1, 2)))),
    ("*", (engine_array([1e300], (1, 1)), 1e300)),
    ("+", (engine_array(["1", True], (1, 2)), 1.0)),
    ("+", (engine_array([Error.errors["#N/A"], sh.EMPTY], (1, 2)), 1.0)),
    ("=", (engine_array([float("nan"), 1.0], (1, 2)), 1.0)),
    ("<", (engine_array([2 ** 60, 1.0], (1, 2)), float(2 ** 60))),
    ("SUM", (engine_array([1.0, "2", True, sh.EMPTY], (2, 2)),)),
    ("MAX", (engine_array([1.0, Error.errors["#DIV/0!"]], (1, 2)),)),
    ("MMULT", (engine_array([1.0, "x"], (1, 2)), engine_array([1.0, 2.0], (2, 1)))),
    ("MMULT", (engine_array([2 ** 40, 1], (1, 2)), engine_array([2 ** 40, 3], (2, 1)))),
])
def test_what_the_engine_turns_into_errors_or_text_takes_the_engines_path(name, args):
    with pytest.raises(Exception):  # noqa: B017  (refused, whatever the reason)
        fast_of(name)(*args)
    fast, own = both(name, *args)
    assert typed(fast) == typed(own)


def test_if_picks_each_element_as_the_engine_does():
    rng = np.random.default_rng(3)
    values = random_values(rng, 24)
    condition = engine_array([v > 0 for v in values[:12]] + [0, 1.5, -0.0, 2] * 3, (4, 6))
    text = engine_array(["a", Error.errors["#NUM!"], sh.EMPTY, 1.0] * 6, (4, 6))
    for args in ((condition, engine_array(values, (4, 6)), text), (condition, 1, 0),
                 (condition, text), (engine_array([True, False], (2, 1)),
                                     rng.normal(size=(1, 3)).view(Array), -1.5)):
        fast, own = both("IF", *args)
        assert typed(fast) == typed(own)
        fast_of("IF")(*args)


@pytest.mark.parametrize("name", ["SUM", "SUMPRODUCT", "MAX", "MIN"])
def test_reductions_on_random_arrays(name):
    rng = np.random.default_rng(11)
    for size in (1, 7, 129, 1000):
        args = [engine_array(random_values(rng, size), (1, size)),
                engine_array(random_values(rng, size), (1, size)),
                rng.normal(size=(1, size)).view(Array)]
        for call in (args[:1], args[:2], args, args[2:]):
            fast, own = both(name, *call)
            assert typed(fast) == typed(own)
            fast_of(name)(*call)


@pytest.mark.parametrize("name,pick", [("MAX", 0.0), ("MIN", -0.0)])
def test_max_and_min_give_the_first_of_equal_extremes_as_the_engine(name, pick):
    ties = engine_array([-0.0, 0.0, np.float64(0.0), -1.0 if name == "MAX" else 1.0], (1, 4))
    for args in ((ties,), (ties[:, ::-1],), (engine_array([0, 0.0], (1, 2)), -0.0)):
        fast, own = both(name, *args)
        assert typed(fast) == typed(own)


def test_mmult_adds_the_products_in_the_engines_order():
    rng = np.random.default_rng(5)
    left = engine_array(random_values(rng, 37 * 29, 1.0), (37, 29))
    right = engine_array(random_values(rng, 29 * 23, 1.0), (29, 23))
    left[left == 1e300], right[right == -1e300] = 2.0, 3.0  # keep the products finite
    left[left == 1e16 + 1] = 1.0
    floats = rng.normal(size=(29, 23)).view(Array)
    ones = engine_array([int(v) for v in rng.integers(0, 2, 37 * 29)], (37, 29))
    for args in ((left, right), (left, floats), (rng.normal(size=(37, 29)).view(Array),
                                                 floats), (ones, right), (ones, floats)):
        fast, own = both("MMULT", *args)
        assert typed(fast) == typed(own)
        fast_of("MMULT")(*args)


def test_the_engines_own_functions_are_back_outside_our_calculation_and_with_shortcuts_off():
    def current():
        return [formulas.get_functions()["EXP"], formulas.get_functions()["IF"]["function"],
                OPERATORS["+"]]

    own = current()
    assert not any(hasattr(f, "engine_function") for f in own)
    with of_formulas.formulas_changes(shortcuts=True):
        installed = current()
        with of_formulas.formulas_changes(shortcuts=False):
            assert current() == own
        assert current() == installed
    assert current() == own
    assert [f.engine_function for f in installed] == own
