"""Finding the kinds: every module in the `sheets` package defines one."""

import importlib
import importlib.util
import pkgutil

import sheets
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import KINDS, Kind


def load_kinds() -> dict[str, type[Kind]]:
    """Import every module in `sheets/` so each registers its kind (modules whose names
    start with an underscore hold shared bands, not kinds)."""
    for module in pkgutil.iter_modules(sheets.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"sheets.{module.name}")
    return KINDS


def _import_module_named_for(name: str) -> None:
    """Import the module a kind's name suggests ("cross-attention" -> sheets.cross_attention)
    when there is one: a command on one kind's workbook needs no other kind (importing all
    of them costs a tenth of a second)."""
    module = name.replace("-", "_")
    if module.isidentifier() and not module.startswith("_") and \
            importlib.util.find_spec(f"sheets.{module}") is not None:
        importlib.import_module(f"sheets.{module}")


def get_kind(name: str) -> type[Kind]:
    if name not in KINDS and isinstance(name, str):
        _import_module_named_for(name)
    if name in KINDS:
        return KINDS[name]
    kinds = load_kinds()  # a kind in a module of another name, or none
    if name not in kinds:
        raise UserError(f"unknown kind {name!r}; known kinds: {', '.join(sorted(kinds))}")
    return kinds[name]
