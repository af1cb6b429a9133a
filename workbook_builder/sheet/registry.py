"""Finding the kinds: every module in the `sheets` package defines one."""

import importlib
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


def get_kind(name: str) -> type[Kind]:
    kinds = load_kinds()
    if name not in kinds:
        raise UserError(f"unknown kind {name!r}; known kinds: {', '.join(sorted(kinds))}")
    return kinds[name]
