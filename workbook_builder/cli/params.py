"""A kind's parameters as command-line flags, and back."""

import argparse
import dataclasses
import types
from typing import Any

from workbook_builder.api import Kind


def add_param_flags(parser: argparse.ArgumentParser, params_class) -> None:
    """One flag per Params field: seq_len -> --seq-len; bools are switches."""
    for f in dataclasses.fields(params_class):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        help_text = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.type is bool:
            parser.add_argument(flag, dest=f.name, action="store_true",
                                default=argparse.SUPPRESS, help=help_text)
            continue
        base = f.type
        if isinstance(base, types.UnionType):  # e.g. int | None
            base = next(t for t in base.__args__ if t is not type(None))
        choices = f.metadata.get("choices")
        parser.add_argument(flag, dest=f.name, type=base, choices=choices,
                            default=argparse.SUPPRESS, metavar=f.metadata.get("metavar"),
                            help=f"{help_text} (default {default})")


def explicit_params(kind: type[Kind], namespace) -> dict[str, Any]:
    """The kind's parameters a user set by flag (unset flags are absent from the namespace)."""
    return {f.name: getattr(namespace, f.name) for f in dataclasses.fields(kind.Params)
            if hasattr(namespace, f.name)}
