"""Writing sheets: the vocabulary kinds are declared in, and the writer that lays them out."""

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.declare import (
    Cell,
    Chart,
    Custom,
    Dim,
    Env,
    Input,
    Map,
    MatMul,
    MatMulT,
    Rows,
    Section,
    Series,
    Step,
    Table,
    dims,
    rows_of,
    section,
)
from workbook_builder.sheet.kind import Example, Kind

__all__ = ["Block", "Cell", "Chart", "Custom", "Dim", "Env", "Example", "Input",
           "Kind", "Map", "MatMul",
           "MatMulT", "Rows", "Section", "Series", "Step", "Table", "dims", "rows_of", "section"]
