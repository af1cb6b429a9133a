"""One sheet, from its declaration to its cells. This package's names are the vocabulary kinds are
declared in; importing it imports no writer (sheet/layout.py and the modules beside it)."""

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
