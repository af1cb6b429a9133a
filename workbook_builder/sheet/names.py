"""Defined names: giving a block its workbook-level name, and the rectangle each name points
at when read back."""

from dataclasses import dataclass
from pathlib import Path

from openpyxl.workbook.defined_name import DefinedName
from openpyxl.workbook.workbook import Workbook

from workbook_builder.errors import UserError
from workbook_builder.sheet.refs import cell_ref, name_destinations, parse_range


@dataclass(frozen=True)
class NamedRange:
    name: str
    sheet: str
    top: int
    left: int
    bottom: int
    right: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.bottom - self.top + 1, self.right - self.left + 1

    def address(self, i: int, j: int) -> str:
        return f"{self.sheet}!{cell_ref(self.top + i, self.left + j)}"


def find_name(wb: Workbook, name: str, path: Path) -> NamedRange:
    """The single rectangle a workbook-level defined name points at."""
    defined = wb.defined_names.get(name)
    if defined is None:
        raise UserError(f"{path} lacks the defined name {name}; it is not an attnsheets "
                        f"workbook of this kind, or the name was deleted")
    try:
        destinations = name_destinations(defined)
    except Exception:  # openpyxl fails on an empty or unparsable name (TypeError, …)
        destinations = []
    if len(destinations) != 1:
        raise UserError(f"{path}: defined name {name} does not point at one range")
    sheet, ref = destinations[0]
    if sheet not in wb.sheetnames:
        raise UserError(f"{path}: defined name {name} points at a missing sheet {sheet!r}")
    try:
        return NamedRange(name, sheet, *parse_range(ref.replace("$", "")))
    except ValueError:  # a whole column or row ("A:A"), or not a reference at all
        raise UserError(f"{path}: defined name {name} does not point at one range") from None


def find_block(wb: Workbook, name: str, path: Path, shape: tuple[int, int]) -> NamedRange:
    """`find_name`, refusing a name that does not span `shape` cells (the recorded
    parameters' size), before any of its cells is read."""
    where = find_name(wb, name, path)
    if where.shape != tuple(shape):
        raise UserError(f"{path}: {name} spans {where.shape[0]:,}×{where.shape[1]:,} cells "
                        f"but the recorded parameters need {shape[0]}×{shape[1]}")
    return where


def define_name(wb: Workbook, name: str, address: str) -> None:
    """The workbook-level name `name` for the cells at `address` ('Sheet'!$A$1:$B$2)."""
    wb.defined_names[name] = DefinedName(name, attr_text=address)
