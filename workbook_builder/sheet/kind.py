"""The contract every sheet kind fulfils, and what follows from its declaration.

A kind is one module in `sheets/` holding a `Kind` subclass, plus one `*_ref` function in
`reference/`. It declares its parameters (a frozen dataclass), its inputs once (`inputs`),
and its sheet as sections of blocks for given parameters (`sections`). Size inference, the
input shapes, the ordered step list, random inputs and the layout all follow from that.
"""

import dataclasses
import functools
import numbers
import types
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.sheet.cells import check_cell_text
from workbook_builder.sheet.declare import (
    Input,
    Section,
    Step,
    checked_sections,
    size_name,
    size_of,
)

KINDS: dict[str, type["Kind"]] = {}


@dataclass(frozen=True)
class Example:
    """A preset for `--example NAME`: sizes, every input, row labels, and a line saying
    where the numbers come from (written under the sheet's title and printed by `build`)."""

    params: dict[str, Any]
    inputs: dict[str, Any]
    tokens: list[str] | None = None
    note: str | None = None


@dataclass(frozen=True)
class ModelExample:
    """A preset whose numbers come from a real model when its package is installed:
    declared by the kind, made where models are read (`make_example` in
    workbook_builder/models/examples.py, which knows each `source` by name) from the kind's
    `options`."""

    source: str
    options: dict[str, Any]


class Kind:
    """One family of workbooks (e.g. single-head attention)."""

    name: ClassVar[str]
    summary: ClassVar[str]                     # one line for `attnsheets list`
    Params: ClassVar[type]                     # frozen dataclass; field metadata["help"]
    reference: ClassVar[Callable[..., dict[str, np.ndarray]]]
    sheet_title: ClassVar[str]
    inputs: ClassVar[Sequence[Input]] = ()     # every input the kind may have, in sheet order
    # whole-number parameters that repeat sections of the sheet, each repeat the same cells
    # (train's steps): a count no sheet holds is refused from the plans of 1 and 2 repeats
    repeated_by: ClassVar[tuple[str, ...]] = ()
    # parameter sets the test suite builds and checks (both layouts); a new kind is tested
    # without being listed anywhere else
    test_cases: ClassVar[list[dict[str, Any]]] = []
    # (file stem, parameters) that `attnsheets demo` builds
    demo_cases: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    tokens_help: ClassVar[str] = 'comma-separated row labels, e.g. "我,爱,AI"'
    # `--example NAME` presets, each made when asked (`make_example`): a function giving
    # the Example, or a ModelExample, made where models are read
    examples: ClassVar[dict[str, Callable[[], Example] | ModelExample]] = {}
    # the examples `attnsheets demo` builds besides demo_cases
    demo_examples: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            KINDS[cls.name] = cls
        if "sections" in cls.__dict__:  # checked wherever they are read, before any writing
            cls.sections = classmethod(_checked(cls.__dict__["sections"].__func__))

    # -- the declaration -------------------------------------------------------------------
    @classmethod
    def sections(cls, p) -> Iterable[Section]:
        """The sheet, top to bottom; step names equal the reference's keys. A list, or a
        generator where the sheet repeats a section many times (`check_fits` then stops
        declaring at the first block beyond a limit)."""
        raise NotImplementedError

    @classmethod
    def steps(cls, p) -> list[Step]:
        """Every step block, in sheet order."""
        return [item for sec in cls.sections(p) for band in sec.bands for item in band
                if isinstance(item, Step)]

    @classmethod
    def step_names(cls, p) -> list[str]:
        return [step.name for step in cls.steps(p)]

    @classmethod
    def input_shapes(cls, p) -> dict[str, tuple[int, int]]:
        """Every input block present with these parameters, and its (rows, cols)."""
        return {i.name: (size_of(i.rows, p), size_of(i.cols, p)) for i in cls.inputs
                if i.present(p)}

    # -- parameters and inputs -------------------------------------------------------------
    @classmethod
    def validate(cls, params) -> None:
        """Raise UserError on impossible parameters; sizes must be positive by default."""
        for f in dataclasses.fields(params):
            value = getattr(params, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
                raise UserError(f"--{f.name.replace('_', '-')} must be a positive whole "
                                f"number, got {value}")

    @classmethod
    def infer_params(cls, given: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Sizes implied by user-given inputs, used where no flag sets them; inputs that
        disagree on a size are an error. A switched input given by hand turns its switch
        on."""
        sizes: dict[str, tuple[int, str]] = {}
        switches: dict[str, bool] = {}
        for item in cls.inputs:
            if item.name not in given or np.ndim(given[item.name]) != 2:
                continue
            if isinstance(item.when, str):
                switches[item.when] = True
            for size, got in zip((item.rows, item.cols), np.shape(given[item.name]),
                                 strict=True):
                field_name = size_name(size)
                if field_name is None:
                    continue
                if field_name in sizes and sizes[field_name][0] != got:
                    first_size, first_input = sizes[field_name]
                    raise UserError(f"inputs disagree on {field_name}: {first_input} gives "
                                    f"{first_size}, {item.name} gives {got}")
                sizes[field_name] = (got, item.name)
        return {**switches, **{name: size for name, (size, _) in sizes.items()}}

    @classmethod
    def random_input(cls, name: str, shape: tuple[int, int], params,
                     rng: "np.random.Generator") -> np.ndarray:
        """A small random input, rounded to 2 decimals so the sheet is easy to read; an
        input declared with a rule (`Input.values`) drawn from what the rule allows."""
        rule = next((item.values for item in cls.inputs if item.name == name), None)
        if rule is not None:
            return rule.draw(shape, params, rng)
        return np.round(rng.uniform(-1.0, 1.0, size=shape), 2)

    @classmethod
    def labels(cls, params, tokens: list[str] | None) -> list[str]:
        """Row labels of the sequence (token labels when given)."""
        n = cls.sequence_length(params)
        if tokens is None:
            return [f"t{i + 1}" for i in range(n)]
        if len(tokens) != n:
            raise UserError(f"--tokens gives {len(tokens)} labels but the sequence has {n}")
        for token in tokens:
            check_cell_text(str(token), "token")
        return tokens

    @classmethod
    def label_sets(cls, params, labels: list[str]) -> dict[str, list]:
        """Named label lists the declaration refers to ("tokens", …)."""
        return {"tokens": labels}

    @classmethod
    def params_from_tokens(cls, tokens: list[str]) -> dict[str, Any]:
        """Sizes implied by --tokens, used where no flag sets them."""
        names = {f.name for f in dataclasses.fields(cls.Params)}
        return {"seq_len": len(tokens)} if "seq_len" in names else {}

    @classmethod
    def resolve_tokens(cls, values: dict[str, Any], tokens: list[str] | None) -> dict[str, Any]:
        """Parameter values with any that names a token (`encoder --focus it`) made the
        number the sheet needs, before the parameters are made."""
        return values

    @classmethod
    def sequence_length(cls, params) -> int:
        return params.seq_len

    @classmethod
    def describe(cls, params) -> str:
        """Parameters as a short line for the sheet subtitle (unset options left out)."""
        return ", ".join(f"{f.name}={getattr(params, f.name)}"
                         for f in dataclasses.fields(params) if getattr(params, f.name) is not None)

    @classmethod
    def demo_note(cls, kinds: Mapping[str, type["Kind"]]) -> str | None:
        """Text `attnsheets demo` prints after its table (e.g. a measured comparison with
        another kind, found in `kinds`, the registered kinds by name)."""
        return None


def _checked(declare: Callable) -> Callable:
    """A kind's `sections` whose templates are checked as they are drawn
    (`declare.checked_sections`): a list is checked whole, a lazy declaration section by
    section."""
    @functools.wraps(declare)
    def sections(kind: type[Kind], p) -> Iterable[Section]:
        declared = declare(kind, p)
        if isinstance(declared, list | tuple):
            return list(checked_sections(kind.name, declared, p))
        return checked_sections(kind.name, declared, p)

    return sections


def make_params(kind: type[Kind], values: Mapping[str, Any]):
    """Build and validate the kind's Params from a mapping (unknown keys are an error)."""
    names = {f.name for f in dataclasses.fields(kind.Params)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UserError(f"kind {kind.name} has no parameter {unknown[0]!r}")
    values = {f.name: _typed(kind, f, values[f.name]) for f in dataclasses.fields(kind.Params)
              if f.name in values}
    try:
        params = kind.Params(**values)
    except TypeError as exc:
        raise UserError(f"bad parameters for {kind.name}: {exc}") from None
    kind.validate(params)
    return params


_TYPE_WORDS = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}


def _typed(kind: type[Kind], f: dataclasses.Field, value: Any) -> Any:
    """A parameter of its declared type (a size 4.0 or "4", as a hand-edited About sheet
    may hold, is refused rather than half-used; a NumPy integer becomes an int)."""
    allowed = f.type.__args__ if isinstance(f.type, types.UnionType) else (f.type,)
    allowed = tuple(t for t in allowed if t is not type(None))
    if value is None and len(allowed) < len(getattr(f.type, "__args__", (f.type,))):
        return value
    if any(t not in _TYPE_WORDS for t in allowed):  # a type declared otherwise: the kind's
        return value
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if int in allowed and number and isinstance(value, numbers.Integral):
        return int(value)
    if float in allowed and number:
        return float(value)
    if any(type(value) is t for t in allowed):
        return value
    wanted = " or ".join(_TYPE_WORDS[t] for t in allowed)
    raise UserError(f"bad parameters for {kind.name}: {f.name} must be {wanted}, got "
                    f"{value!r}")


# the annotation quoted: numpy.random is imported on first use (a check draws no inputs)
def seeded_rng(seed: int, input_name: str) -> "np.random.Generator":
    """One stream per input, so giving one input by hand leaves the others unchanged."""
    return np.random.default_rng([seed, zlib.crc32(input_name.encode())])


def complete_inputs(kind: type[Kind], params, given: Mapping[str, np.ndarray],
                    seed: int) -> dict[str, np.ndarray]:
    """Check the shapes of user-given inputs and draw the missing ones from the seed."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise UserError(f"--seed must be a whole number, 0 or more; got {seed}")
    shapes = kind.input_shapes(params)
    unknown = sorted(set(given) - set(shapes))
    if unknown:
        raise UserError(f"kind {kind.name} has no input {unknown[0]!r}; its inputs are "
                        f"{', '.join(shapes)}")
    inputs = {}
    for name, shape in shapes.items():
        if name in given:
            value = np.asarray(given[name], dtype=float)
            if value.shape != shape:
                got = "×".join(map(str, value.shape))
                raise UserError(f"input {name} is {got} but these parameters need "
                                f"{shape[0]}×{shape[1]}")
            if not np.all(np.isfinite(value)):
                raise UserError(f"input {name} holds a value that is not a finite number")
            inputs[name] = value
        else:
            inputs[name] = kind.random_input(name, shape, params, seeded_rng(seed, name))
    check_input_rules(kind, params, inputs)
    return inputs


def check_input_rules(kind: type[Kind], params, inputs: Mapping[str, np.ndarray],
                      where: Callable[[str, int, int], str] | None = None) -> None:
    """Every input declared with a rule (`Input.values`) follows it, or a UserError names
    the input, the entry (`where(name, i, j)`, e.g. a file's cell; else its row, and
    column) and the rule."""
    for item in kind.inputs:
        refused = item.refused(inputs[item.name], params) if item.name in inputs else None
        if refused is None:
            continue
        i, j, why = refused
        block = np.asarray(inputs[item.name])
        column = f", column {j + 1}" if block.shape[1] > 1 else ""
        at = where(item.name, i, j) if where is not None else \
            f"input {item.name} row {i + 1}{column}"
        raise UserError(f"{at} holds {block[i, j]:g}: {why}")
