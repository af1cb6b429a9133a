"""The `formulas` engine's arithmetic, elementwise functions and a few reductions, on plain
numbers, without its per-element bookkeeping.

The engine applies an operator or a function such as EXP to an array one element at a time
(numpy.vectorize over object arrays), looking for Excel errors in every element's arguments
on the way: ~10 µs an element, most of a big block's calculation. Here, when every operand
is a plain number (int or float: no text, truth value, error or empty cell), the same
result is computed without that bookkeeping:
- + − × ÷ and comparisons as float64 array operations, which IEEE 754 rounds exactly as
  Python's float operations the engine uses (no fused multiply-add: one NumPy call each);
- EXP, LN, SQRT, TANH, POWER and ^ by the engine's own per-element call (np.exp(float),
  x ** y, …) on the same Python floats: vectorised transcendental functions may take SIMD
  paths that differ from the per-element call in the last bit, so they are not used;
- IF by picking each element from its branches as the engine does;
- SUM, SUMPRODUCT, MAX, MIN and MMULT by the engine's own NumPy reductions on the same
  float64 values, in the same order (MMULT of object arrays sums its products one by one,
  so the product does the same, never a BLAS call, which would round differently).
Anything else, and any result the engine would turn into an Excel error (division by zero,
overflow, a domain error: a result that is not a finite float), takes the engine's own
function: the fast path refuses, it never approximates. Written for the formulas releases
of `versions.SUPPORTED`, and in place only there and only while we calculate
(of_formulas.formulas_changes); tests/test_fast_functions.py shows each function gives
what the engine's own gives, type and bits.
"""

import functools
from collections.abc import Callable

import numpy as np

# the types of a plain number (bool, a subclass of int, is a truth value and excluded)
_NUMBER_TYPES = frozenset({float, int, np.float64})
# integers up to this are exact as floats; comparisons and products beyond may differ
_EXACT_INTEGERS = 2.0 ** 53


@functools.cache
def _block_numbers_type() -> type:
    from formulas.functions import Array

    class BlockNumbers(Array):
        """A block of numbers kept as an array, as float64 where the engine's node would
        hold an object array of Python floats: the same numbers without a Python object
        each (a model's 50,257 × 768 table is 0.3 GB so, 1.2 GB as objects). An engine
        Array, so a range node takes it as it is; a product over it adds in order, as the
        engine's dot does over objects (`_fast_mmult`)."""

    return BlockNumbers


def block_numbers(values: np.ndarray) -> np.ndarray:
    """A float64 block's numbers as the engine's node holds them (see BlockNumbers)."""
    return values.view(_block_numbers_type())


def _is_block_numbers(value) -> bool:
    return isinstance(value, _block_numbers_type())


class _Refused(Exception):
    """The fast path does not reproduce this call: the engine's own function takes it."""


def _value(argument):
    """A function's argument as the engine's functions see it (a range's values)."""
    from formulas.functions import parse_ranges

    return parse_ranges(argument)[0][0]


def _numbers(argument) -> np.ndarray:
    """The argument's values as float64 (0-d for a scalar), when every one is a plain
    number; int elements only within the exactly representable integers."""
    value = _value(argument)
    if type(value) in _NUMBER_TYPES:
        elements = [value]
    elif isinstance(value, np.ndarray) and value.dtype == np.float64:
        return np.asarray(value)
    elif isinstance(value, np.ndarray) and value.dtype == object and value.size:
        elements = value.ravel().tolist()
    else:
        raise _Refused
    types = set(map(type, elements))
    if not types <= _NUMBER_TYPES or int in types and \
            max(abs(v) for v in elements if type(v) is int) > _EXACT_INTEGERS:
        raise _Refused
    return np.asarray(value, dtype=np.float64)


def _finite_numbers(argument) -> np.ndarray:
    numbers = _numbers(argument)
    if not np.isfinite(numbers).all():
        raise _Refused
    return numbers


def _as_engine_array(objects: np.ndarray):
    """An object array as the engine's elementwise functions return it: an Array (0-d
    when every operand was a scalar, as numpy.vectorize gives)."""
    from formulas.functions import Array

    return objects.view(Array)


def _finite_floats(result: np.ndarray) -> np.ndarray:
    if not np.isfinite(result).all():
        raise _Refused  # the engine gives an Excel error (#NUM!, #DIV/0!) there
    return result


def _arithmetic(ufunc, nonzero_divisor: bool = False) -> Callable:
    """+, −, ×, ÷, unary minus: one float64 array operation, Python floats out."""

    def fast(*arguments):
        operands = [_numbers(a) for a in arguments]
        if nonzero_divisor and not np.all(operands[1] != 0):
            raise _Refused  # the engine's "/" gives #DIV/0! for a zero divisor
        with np.errstate(all="ignore"):
            result = _finite_floats(ufunc(*operands))
        return _as_engine_array(np.asarray(result).astype(object))

    return fast


def _comparison(ufunc, ordering: bool) -> Callable:
    """=, <>, <, <=, >, >= between numbers. The engine compares (type, value) pairs: a
    pair's `=` and `<>` give Python bools, its orderings give the values' own comparison
    where they differ — a NumPy bool if either is an np.float64 element — and a Python
    bool where they are equal."""

    def fast(left, right):
        x, y = _finite_numbers(left), _finite_numbers(right)
        result = np.asarray(ufunc(x, y))
        objects = result.astype(object)
        if ordering:
            numpy_scalars = np.asarray((_numpy_elements(left) | _numpy_elements(right)) &
                                       (x != y))
            for index in np.flatnonzero(numpy_scalars):
                objects.flat[index] = np.bool_(result.flat[index])
        return _as_engine_array(objects)

    return fast


def _numpy_elements(argument) -> np.ndarray:
    """Where the argument's elements reach the engine's per-element function as
    np.float64 (only an object array holds them: numpy.vectorize turns a float64 array's
    elements and a scalar into Python floats)."""
    value = _value(argument)
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.asarray(np.frompyfunc(lambda v: type(v) is np.float64, 1, 1)(value),
                          dtype=bool)
    return np.asarray(False)


def _per_element(function) -> Callable:
    """The engine's own per-element call on Python floats, without its error lookups;
    results must be finite floats (else the engine makes an Excel error of them)."""

    def fast(*arguments):
        operands = np.broadcast_arrays(*(_numbers(a) for a in arguments))
        with np.errstate(all="ignore"):
            results = list(map(function, *(o.ravel().tolist() for o in operands)))
        if not all(type(r) in (float, np.float64) for r in results) or \
                not np.isfinite(np.asarray(results, dtype=np.float64)).all():
            raise _Refused
        objects = np.empty(len(results), dtype=object)
        objects[:] = results
        return _as_engine_array(objects.reshape(operands[0].shape))

    return fast


def _power(x: float, y: float):
    return x ** y  # the engine's "^" on two floats (a complex result is refused)


def _branch(argument) -> np.ndarray:
    """An IF branch as numpy.vectorize hands its elements to the engine's IF: an object
    array (a float64 array's elements become Python floats)."""
    from formulas.functions import replace_empty

    value = replace_empty(_value(argument))
    if isinstance(value, np.ndarray) and value.dtype.kind in "fbiO":
        return np.asarray(value).astype(object)
    if type(value) in (*_NUMBER_TYPES, bool):
        return np.asarray(np.asanyarray(value)).astype(object)
    raise _Refused


def _fast_if(condition, when_true, when_false=False):
    """IF(condition, x, y) element by element, every condition a number or truth value:
    x's element where it is true (nonzero), y's where it is false."""
    conditions = _branch(condition)
    if not set(map(type, conditions.ravel().tolist())) <= _NUMBER_TYPES | {bool, np.bool_}:
        raise _Refused
    truth = np.frompyfunc(bool, 1, 1)(conditions).astype(bool)
    return _as_engine_array(np.where(truth, _branch(when_true), _branch(when_false)))


def _fast_sum(*arguments):
    """SUM: the engine's np.sum over the same float64 values, in the same order."""
    values = np.concatenate([_finite_numbers(a).reshape(-1) for a in arguments])
    if not values.size:
        raise _Refused
    return np.sum(values)


def _fast_sumproduct(*arguments):
    """SUMPRODUCT: the engine's np.sum(np.prod(rows, axis=0)) on the same rows."""
    operands = [_finite_numbers(a) for a in arguments]
    if len({o.shape for o in operands}) != 1 or not operands[0].size:
        raise _Refused  # arrays of different sizes: the engine's #VALUE!
    return np.sum(np.prod(np.stack([o.reshape(-1) for o in operands]), axis=0))


def _first_extreme(pick) -> Callable:
    """MAX/MIN: the engine takes Python's max/min of the elements, which gives the first
    element of the extreme value (0.0 and -0.0 are equal), as that element's object."""

    def fast(*arguments):
        values, elements = [], []
        for argument in arguments:
            value = _value(argument)
            numbers = _finite_numbers(value)
            values.append(numbers.reshape(-1))
            # what the engine's flatten yields: a float64 array's elements as np.float64
            elements.append(value.reshape(-1) if isinstance(value, np.ndarray) else [value])
        flat = np.concatenate(values)
        if not flat.size:
            raise _Refused
        index = int(np.argmax(flat == pick(flat)))
        for numbers, objects in zip(values, elements, strict=True):
            if index < numbers.size:
                return objects[index]
            index -= numbers.size
        raise _Refused

    return fast


def _fast_mmult(left, right):
    """MMULT. The engine's np.dot on object arrays adds the products one by one in order;
    on two float64 arrays it is NumPy's own float64 product, called here alike."""
    from formulas.functions import Array

    x, y = _value(left), _value(right)
    a, b = _finite_numbers(x), _finite_numbers(y)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or not a.size or not b.size:
        raise _Refused
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and \
            x.dtype == y.dtype == np.float64 and \
            not _is_block_numbers(x) and not _is_block_numbers(y):
        return np.dot(x, y).astype(float).view(Array)
    # int × int stays an exact Python int, as do sums of such products: the same as
    # float64 while they stay within the exactly representable integers
    if a.shape[1] * _largest_int(x) * _largest_int(y) >= _EXACT_INTEGERS:
        raise _Refused
    total = a[:, 0:1] * b[0:1, :]
    for k in range(1, a.shape[1]):
        total = total + a[:, k:k + 1] * b[k:k + 1, :]
    return total.view(Array)


def _largest_int(value) -> float:
    """The largest magnitude of the value's int elements (0.0 without any)."""
    elements = value.ravel().tolist() if isinstance(value, np.ndarray) and \
        value.dtype == object else [value]
    return float(max((abs(v) for v in elements if type(v) is int), default=0))


def _operators() -> dict[str, Callable]:
    return {
        "+": _arithmetic(np.add), "-": _arithmetic(np.subtract),
        "*": _arithmetic(np.multiply), "/": _arithmetic(np.true_divide, nonzero_divisor=True),
        "U-": _arithmetic(np.negative), "^": _per_element(_power),
        "=": _comparison(np.equal, False), "<>": _comparison(np.not_equal, False),
        "<": _comparison(np.less, True), "<=": _comparison(np.less_equal, True),
        ">": _comparison(np.greater, True), ">=": _comparison(np.greater_equal, True),
    }


def _functions() -> dict[str, Callable]:
    from formulas.functions.math import xpower

    return {
        "EXP": _per_element(np.exp), "LN": _per_element(np.log),
        "SQRT": _per_element(np.sqrt), "TANH": _per_element(np.tanh),
        "POWER": _per_element(xpower), "IF": _fast_if, "SUM": _fast_sum,
        "SUMPRODUCT": _fast_sumproduct, "MAX": _first_extreme(np.max),
        "MIN": _first_extreme(np.min), "MMULT": _fast_mmult,
    }


def _guarded(fast: Callable, engine_function: Callable) -> Callable:
    """`fast`, or the engine's own function wherever `fast` refuses (or fails)."""

    def function(*args, **kwargs):
        if not kwargs:
            try:
                return fast(*args)
            except Exception:  # _Refused, or anything unforeseen: the engine decides
                pass
        return engine_function(*args, **kwargs)

    function = functools.update_wrapper(function, engine_function)
    function.engine_function = engine_function
    return function


def replacements(functions: dict, operators: dict) -> list[tuple[dict, str, object]]:
    """(registry, name, entry) for each fast function: the engine's own (from `functions`,
    its function registry, and `operators`) behind the fast path, in the form the registry
    holds it (IF as a dict holding its function). of_formulas.formulas_changes puts them in
    place while we calculate, and the engine's own back afterwards."""
    found = []
    for registry, table in ((operators, _operators()), (functions, _functions())):
        for name, fast in table.items():
            entry = registry[name]
            if isinstance(entry, dict):
                found.append((registry, name, {**entry,
                                               "function": _guarded(fast, entry["function"])}))
            else:
                found.append((registry, name, _guarded(fast, entry)))
    return found
