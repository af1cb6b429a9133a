"""Writing sheets: the vocabulary kinds are declared in, and the writer that lays them out."""

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.declare import (
    BROADCAST,
    ByRow,
    Cell,
    Chart,
    Custom,
    Dim,
    Env,
    Input,
    Map,
    MatMul,
    MaxAbsDiff,
    Reduce,
    Rows,
    Scan,
    Section,
    Series,
    Step,
    Table,
    WholeNumbers,
    dims,
    row_or_cell,
    rows_of,
    section,
)
from workbook_builder.sheet.kind import Example, Kind

__all__ = ["BROADCAST", "Block", "ByRow", "Cell", "Chart", "Custom", "Dim", "Env", "Example",
           "Input", "Kind", "Map", "MatMul", "MaxAbsDiff", "Reduce", "Rows", "Scan",
           "Section", "Series", "Step", "Table", "WholeNumbers", "dims", "row_or_cell",
           "rows_of", "section"]
