"""The registry of sheet kinds and the contract every kind fulfils.

A kind is one module in `sheets/` holding a `Kind` subclass, plus one `*_ref` function in
`reference/`. Subclassing registers the kind; nothing else needs editing.
"""

import dataclasses
import importlib
import pkgutil
import zlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.layout import SheetWriter

KINDS: dict[str, type["Kind"]] = {}


class Kind:
    """One family of workbooks (e.g. single-head attention)."""

    name: ClassVar[str]
    summary: ClassVar[str]                     # one line for `attnsheets list`
    Params: ClassVar[type]                     # frozen dataclass; field metadata["help"]
    reference: ClassVar[Callable[..., dict[str, np.ndarray]]]
    sheet_title: ClassVar[str]
    # parameter sets the test suite builds and checks (both layouts); a new kind is tested
    # without being listed anywhere else
    test_cases: ClassVar[list[dict[str, Any]]] = []
    # (file stem, parameters) that `attnsheets demo` builds
    demo_cases: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    # the kind's sheet text in other languages: {"zh": {English as written: translation}},
    # "{name}" slots matching formatted text (workbook_builder/i18n.py)
    translations: ClassVar[dict[str, dict[str, str]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            KINDS[cls.name] = cls

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
    def input_shapes(cls, params) -> dict[str, tuple[int, int]]:
        """Every input block's name and (rows, cols), in sheet order."""
        raise NotImplementedError

    # input name -> (parameter its rows give, parameter its columns give), for inference
    input_dims: ClassVar[dict[str, tuple[str | None, str | None]]] = {}

    @classmethod
    def infer_params(cls, given: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Sizes implied by user-given inputs, used where no flag sets them; inputs that
        disagree on a size are an error."""
        sizes: dict[str, tuple[int, str]] = {}
        for name, fields in cls.input_dims.items():
            if name not in given or np.ndim(given[name]) != 2:
                continue
            for field_name, size in zip(fields, np.shape(given[name]), strict=True):
                if field_name is None:
                    continue
                if field_name in sizes and sizes[field_name][0] != size:
                    first_size, first_input = sizes[field_name]
                    raise UserError(f"inputs disagree on {field_name}: {first_input} gives "
                                    f"{first_size}, {name} gives {size}")
                sizes[field_name] = (size, name)
        return {field_name: size for field_name, (size, _) in sizes.items()}

    @classmethod
    def random_input(cls, name: str, shape: tuple[int, int], params,
                     rng: np.random.Generator) -> np.ndarray:
        """A small random input, rounded to 2 decimals so the sheet is easy to read."""
        return np.round(rng.uniform(-1.0, 1.0, size=shape), 2)

    @classmethod
    def labels(cls, params, tokens: list[str] | None) -> list[str]:
        """Row labels of the sequence (token labels when given)."""
        n = cls.sequence_length(params)
        if tokens is None:
            return [f"t{i + 1}" for i in range(n)]
        if len(tokens) != n:
            raise UserError(f"--tokens gives {len(tokens)} labels but the sequence has {n}")
        return tokens

    tokens_help: ClassVar[str] = 'comma-separated row labels, e.g. "我,爱,AI"'

    @classmethod
    def params_from_tokens(cls, tokens: list[str]) -> dict[str, Any]:
        """Sizes implied by --tokens, used where no flag sets them."""
        names = {f.name for f in dataclasses.fields(cls.Params)}
        return {"seq_len": len(tokens)} if "seq_len" in names else {}

    @classmethod
    def sequence_length(cls, params) -> int:
        return params.seq_len

    @classmethod
    def describe(cls, params) -> str:
        """Parameters as a short line for the sheet subtitle (unset options left out)."""
        return ", ".join(f"{f.name}={getattr(params, f.name)}"
                         for f in dataclasses.fields(params) if getattr(params, f.name) is not None)

    @classmethod
    def demo_note(cls) -> str | None:
        """Text `attnsheets demo` prints after its table (e.g. a measured comparison)."""
        return None

    # -- the sheet -------------------------------------------------------------------------
    @classmethod
    def lay_out(cls, sheet: SheetWriter, params, inputs: dict[str, np.ndarray],
                tokens: list[str]) -> None:
        """Write every input and step block; step names equal the reference's keys."""
        raise NotImplementedError


def load_kinds() -> dict[str, type[Kind]]:
    """Import every module in `sheets/` so each registers its kind."""
    import sheets

    for module in pkgutil.iter_modules(sheets.__path__):
        importlib.import_module(f"sheets.{module.name}")
    return KINDS


def get_kind(name: str) -> type[Kind]:
    kinds = load_kinds()
    if name not in kinds:
        raise UserError(f"unknown kind {name!r}; known kinds: {', '.join(sorted(kinds))}")
    return kinds[name]


def make_params(kind: type[Kind], values: Mapping[str, Any]):
    """Build and validate the kind's Params from a mapping (unknown keys are an error)."""
    names = {f.name for f in dataclasses.fields(kind.Params)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UserError(f"kind {kind.name} has no parameter {unknown[0]!r}")
    try:
        params = kind.Params(**values)
    except TypeError as exc:
        raise UserError(f"bad parameters for {kind.name}: {exc}") from None
    kind.validate(params)
    return params


def seeded_rng(seed: int, input_name: str) -> np.random.Generator:
    """One stream per input, so giving one input by hand leaves the others unchanged."""
    return np.random.default_rng([seed, zlib.crc32(input_name.encode())])


def complete_inputs(kind: type[Kind], params, given: Mapping[str, np.ndarray],
                    seed: int) -> dict[str, np.ndarray]:
    """Check the shapes of user-given inputs and draw the missing ones from the seed."""
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
    return inputs
