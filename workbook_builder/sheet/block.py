"""A placed block: a named rectangle of data cells and the references formulas make to it."""

from dataclasses import dataclass

from workbook_builder.sheet.refs import cell_ref, quote_sheet, range_ref


@dataclass(frozen=True)
class Area:
    """A named rectangle of a sheet; `top`/`left` is its first cell (1-based)."""

    name: str
    sheet: str
    top: int
    left: int
    rows: int
    cols: int


@dataclass(frozen=True)
class Block(Area):
    """A placed rectangle of data cells; `top`/`left` is its first data cell (1-based)."""

    @property
    def bottom(self) -> int:
        return self.top + self.rows - 1

    @property
    def right(self) -> int:
        return self.left + self.cols - 1

    def cell(self, i: int, j: int) -> str:
        """Data cell (i, j), 0-based, as a relative reference."""
        return cell_ref(self.top + i, self.left + j)

    def fixed(self, i: int, j: int) -> str:
        """Data cell (i, j) with both anchors, for constants shared by many formulas."""
        return cell_ref(self.top + i, self.left + j, fix_row=True, fix_col=True)

    def row(self, i: int, first: int = 0, last: int | None = None) -> str:
        """Row i, columns first..last (inclusive), e.g. '$C5:$F5'."""
        last = self.cols - 1 if last is None else last
        return range_ref(self.top + i, self.left + first, self.top + i, self.left + last,
                         fix_col=True)

    def col(self, j: int, first: int = 0, last: int | None = None) -> str:
        """Column j, rows first..last (inclusive), e.g. 'G$5:G$8'."""
        last = self.rows - 1 if last is None else last
        return range_ref(self.top + first, self.left + j, self.top + last, self.left + j,
                         fix_row=True)

    def cols_range(self, first: int, last: int) -> str:
        """All rows of columns first..last (a column slice, e.g. one head)."""
        return range_ref(self.top, self.left + first, self.bottom, self.left + last,
                         fix_row=True, fix_col=True)

    def whole(self) -> str:
        return range_ref(self.top, self.left, self.bottom, self.right, fix_row=True, fix_col=True)

    def row_label(self, i: int) -> str:
        """The label cell left of row i (anchored column)."""
        return cell_ref(self.top + i, self.left - 1, fix_col=True)

    def col_label(self, j: int) -> str:
        """The label cell above column j (anchored row)."""
        return cell_ref(self.top - 1, self.left + j, fix_row=True)

    def col_labels(self) -> str:
        return range_ref(self.top - 1, self.left, self.top - 1, self.right, fix_row=True,
                         fix_col=True)

    def row_labels(self) -> str:
        return range_ref(self.top, self.left - 1, self.bottom, self.left - 1, fix_row=True,
                         fix_col=True)

    def address(self) -> str:
        """Workbook-level address, as a defined name holds it."""
        return f"{quote_sheet(self.sheet)}!{self.whole()}"
