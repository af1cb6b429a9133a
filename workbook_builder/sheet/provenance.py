"""Where each parameter of a build comes from, decided in one place for every kind and every
checkpoint reader: the kind's default, an example, a checkpoint (its config, its head, its
tokenizer, its tensors' shapes, its family's code), the inputs or tokens given, or a flag.

A checkpoint reader says what the checkpoint fixes (`Fixed`: the value and the file and key
that hold it) and which parameters stay the user's (`free`). Every other parameter of the kind
is fixed too, at the value the reader computed the model with (the kind's default): a flag
that differs from a fixed value is refused here, once, naming the flag, the file, the key and
the checkpoint's value; a flag at the checkpoint's own value builds. `Fixed(..., at_most=True)`
is a part of the checkpoint a flag may take less of (the first --layers layers), said on the
sheet. No reader or kind keeps its own list of contradictions."""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import make_params

DEFAULT, EXAMPLE, INPUTS, FLAG = "default", "example", "inputs", "flag"


@dataclass(frozen=True)
class Fixed:
    """A value a checkpoint fixes and what says so: a file and the key in it
    (`…/config.json`, `num_attention_heads`), or without a key a phrase naming the source
    ("the tokens of --text", "MarianMT's code", "the shapes of its tensors")."""

    value: Any
    where: str
    key: str | None = None
    at_most: bool = False  # a flag may take a smaller part (layers 0 … k−1 of the model)
    # fixed at the kind's default, the value the reader computed the model with
    kind_default: bool = False

    def said(self) -> str:
        """"…/config.json: num_attention_heads", or the phrase."""
        return f"{self.where}: {self.key}" if self.key else self.where


def flag_of(name: str) -> str:
    """A parameter's flag: d_model -> --d-model."""
    return "--" + name.replace("_", "-")


def _same(given: Any, fixed: Any) -> bool:
    """A flag at the checkpoint's value (a whole float equals its int; a switch is only
    ever equal to a switch)."""
    if isinstance(given, bool) or isinstance(fixed, bool):
        return isinstance(given, bool) and isinstance(fixed, bool) and given == fixed
    return given == fixed


def refuse_contradicting_flags(fixed: Mapping[str, Fixed], flags: Mapping[str, Any]) -> None:
    """One line, naming the flag, where the checkpoint says otherwise and its value, for the
    first flag that differs from a value the checkpoint fixes (or, `at_most`, exceeds it)."""
    for name, given in flags.items():
        held = fixed.get(name)
        if held is None:
            continue
        if held.at_most:
            if isinstance(given, int) and not isinstance(given, bool) and \
                    1 <= given <= held.value:
                continue
        elif _same(given, held.value):
            continue
        flag = flag_of(name)
        bound = f"at most {held.value}" if held.at_most else str(held.value)
        subject = held.where.split(" (")[0]
        plural = not held.key and subject.endswith("s") and not subject.endswith("'s")
        raise UserError(f"{flag} {given} contradicts the checkpoint ({held.said()} "
                        f"{'give' if plural else 'gives'} {bound}); the sheet computes the "
                        f"model as its checkpoint defines it: leave {flag} out")


@dataclass(frozen=True)
class CheckpointParams:
    """What a checkpoint reader decides of a kind's parameters: `fixed` values with their
    sources, and the parameters left to the user (`free`: the sequence length without
    tokens, the steps decoded, which part of the layers goes on the sheet)."""

    fixed: dict[str, Fixed]
    free: frozenset[str] = frozenset()
    family: str = "the checkpoint"

    def values(self) -> dict[str, Any]:
        return {name: held.value for name, held in self.fixed.items()}


def settle(kind, decided: CheckpointParams, flags: Mapping[str, Any]) -> dict[str, Fixed]:
    """Every parameter of `kind` a checkpoint build may not change by flag: the reader's
    `fixed` values, and each other parameter that is not `free` at the value the reader
    computed the model with (its default); a flag that differs from one is refused."""
    fixed = dict(decided.fixed)
    for field in dataclasses.fields(kind.Params):
        if field.name in fixed or field.name in decided.free or \
                field.default is dataclasses.MISSING:
            continue
        fixed[field.name] = Fixed(field.default, f"{decided.family} as the {kind.name} "
                                  f"sheet reads it", kind_default=True)
    refuse_contradicting_flags(fixed, flags)
    return fixed


def sources(kind, params, *, flags: Mapping[str, Any], fixed: Mapping[str, Fixed] | None,
            example: Mapping[str, Any] | None, inferred: Mapping[str, Any]) -> dict[str, str]:
    """Each parameter's source in words, in the kind's order: "flag", "example",
    "…/config.json: num_attention_heads", "inputs", "default"."""
    said = {}
    for field in dataclasses.fields(kind.Params):
        name = field.name
        if name in flags:
            said[name] = FLAG
        elif fixed and name in fixed and not fixed[name].kind_default:
            said[name] = fixed[name].said()
        elif example and name in example:
            said[name] = EXAMPLE
        elif name in inferred:
            said[name] = INPUTS
        else:
            said[name] = DEFAULT
    return said


def sources_line(params, said: Mapping[str, str]) -> str:
    """"parameters: heads 2 from …/config.json: num_attention_heads, seq_len 3 by flag, …,
    the rest default": one line for the About sheet and the build line."""
    parts, rest = [], []
    for name, source in said.items():
        value = getattr(params, name)
        if source == DEFAULT:
            rest.append(name)
        elif source == FLAG:
            parts.append(f"{name} {value} by flag")
        elif source in (EXAMPLE, INPUTS):
            parts.append(f"{name} {value} from the {source}")
        else:
            parts.append(f"{name} {value} from {source}")
    tail = ["the rest default"] if rest and parts else ["all default"] if rest else []
    return "parameters: " + ", ".join(parts + tail)


def checked_against_sources(make, values: Mapping[str, Any], fixed: Mapping[str, Fixed] | None,
                            flags: Mapping[str, Any]):
    """`make(values)`, with a refusal of a value the checkpoint gave (the kind asking for an
    even --d-model) naming the file and key that hold it, not a flag nobody typed."""
    try:
        return make(values)
    except UserError as exc:
        message = str(exc)
        for name, held in (fixed or {}).items():
            if name not in flags and held.key:
                message = message.replace(flag_of(name), held.said())
        if message == str(exc):
            raise
        raise UserError(message) from None


def checked_params(kind, values: Mapping[str, Any], fixed: Mapping[str, Fixed] | None,
                   flags: Mapping[str, Any]):
    """The kind's parameters made from `values`, a refusal naming the checkpoint's file and
    key for a value it gave (`checked_against_sources`)."""
    return checked_against_sources(lambda given: make_params(kind, given), values, fixed,
                                   flags)
