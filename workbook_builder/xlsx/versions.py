"""The version guards: each shortcut into a library's internals is written for a known
range of its releases and taken only when the installed release is inside it; outside,
the library's public path is taken, slower but as released.

Setting RELEASED_LIBRARIES_SWITCH (ATTNSHEETS_RELEASED_LIBRARIES=1) in the environment makes
every guard answer "unsupported", so a whole run takes the public path everywhere: the
suite's engine tests run once that way (tests/conftest.py, `--released-libraries`).
"""

import functools
import importlib
import os

RELEASED_LIBRARIES_SWITCH = "ATTNSHEETS_RELEASED_LIBRARIES"

# [lowest, first release not covered): what each library's shortcuts were written for
# - openpyxl 3.1: `Worksheet._cells` holds only the cells the sheet has, `Cell._style` is
#   the cell's style record, the cell writer's `safe_string`, the reader's `_cast_number`
#   and the workbook's `_date_formats`, the font's element order
# - formulas 1.3: `RangesAssembler.push`, INDEX (`look.xindex`), the functions' and
#   operators' registries, the compiled formula's pipe and its inputs
# - schedula 1.6: a dispatcher's node records (`type`, `inputs`, `outputs`, `filters`,
#   `inv-data`, ...), the SELF/START/NONE tokens, which the plain-loop calculation
#   reproduces
SUPPORTED = {
    "openpyxl": ("3.1", "3.2"),
    "formulas": ("1.3.4", "1.4"),
    "schedula": ("1.6", "1.7"),
}


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


@functools.lru_cache(maxsize=64)
def within(installed: str, low: str, high: str) -> bool:
    """low <= installed < high, comparing release numbers (asked once per cell by some
    loops: cached)."""
    return _version_tuple(low) <= _version_tuple(installed) < _version_tuple(high)


def released_libraries_forced() -> bool:
    """Whether the environment asks for every library exactly as released."""
    return os.environ.get(RELEASED_LIBRARIES_SWITCH, "").strip() not in ("", "0")


@functools.cache
def installed(library: str) -> str:
    """The library's release, from the module itself (formulas imports its engine only on
    first use, so this is cheap)."""
    return importlib.import_module(library).__version__


def supported(library: str, installed_version: str | None = None) -> bool:
    """Whether our shortcuts into `library` may be taken: its installed release (or
    `installed_version`) is inside SUPPORTED, and the environment does not force the
    released path."""
    if released_libraries_forced():
        return False
    return within(installed_version or installed(library), *SUPPORTED[library])
