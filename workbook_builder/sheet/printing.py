"""How a sheet prints: page breaks only between print units (a band line with the section
title above it), a fixed scale that keeps every printed digit at 8 pt or more, landscape or
portrait by the sheet's shape, thin borders on the blocks instead of gridlines.

LibreOffice and Excel both honour what is set here (manual row/column breaks, print area,
scale), so `attnsheets pdf` and File ▸ Print give the same pages.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from openpyxl.worksheet.pagebreak import Break, ColBreak, RowBreak
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.refs import cell_ref

# Arial: Excel has it everywhere and LibreOffice draws it with the metric-compatible
# Liberation Sans, whose glyphs include ᵀ (Calibri falls back to a serif there, where Kᵀ
# looks like Kˢ). Cells without a font of their own use the workbook default, set alike.
FONT_NAME = "Arial"
FONT_PT = 10
EXPLANATION_PT = 9
MIN_PRINTED_PT = 8.0
MIN_SCALE = int(-(-100 * MIN_PRINTED_PT // EXPLANATION_PT))  # 89 %: 9 pt prints at 8 pt
COMPACT_MIN_SCALE = int(-(-100 * MIN_PRINTED_PT // FONT_PT))  # 80 %: 10 pt prints at 8 pt
ROW_PT = 15.0  # a row of default height, as the file records it

# A4 in points, with the margins set below (inches, as the file stores them)
PAGE = {"landscape": (842.0, 595.0), "portrait": (595.0, 842.0)}
SIDE_IN, TOP_IN, HEADER_IN = 0.4, 0.6, 0.3
PAGE_FOOTER = "page &P of &N"


@dataclass(frozen=True)
class PrintUnit:
    """Rows top…bottom (and columns 1…right) printed on one page, never split."""

    top: int
    bottom: int
    right: int


def column_pt(ws: Worksheet, col: int) -> float:
    """A column's printed width at 100 %: width in digits of the 10 pt font (7 px each,
    5 px padding), 96 px to the inch."""
    width = ws.column_dimensions[cell_ref(1, col)[:-1]].width or 8.43
    return (width * 7 + 5) * 0.75


def row_pt(ws: Worksheet, row: int) -> float:
    return ws.row_dimensions[row].height or ROW_PT


def printable(orientation: str) -> tuple[float, float]:
    """Width and height inside the margins, in points at 100 %."""
    width, height = PAGE[orientation]
    return width - 2 * 72 * SIDE_IN, height - 2 * 72 * TOP_IN


def plan_pages(ws: Worksheet, units: list[PrintUnit],
               spans: Sequence[tuple[int, int]] = (),
               min_scale: int = MIN_SCALE) -> tuple[str, int, list[int], list[int]]:
    """(orientation, scale %, rows after which a page ends, columns after which a page
    ends) for `units`: as large as fits one page width, or the whole sheet on one page
    where that takes a scale still at MIN_SCALE or more, never under MIN_SCALE; row breaks
    packed greedily between units; column breaks only where a unit is wider than a page
    even at MIN_SCALE, never inside a block's column span (first, last) that fits a page
    where another column will do. A sheet printing no text under FONT_PT (a compact one:
    its explanations are notes) may go down to `min_scale` = COMPACT_MIN_SCALE instead."""
    right = max((u.right for u in units), default=1)
    widths = [column_pt(ws, c) for c in range(1, right + 1)]
    content = sum(widths)
    portrait_w, _ = printable("portrait")
    tall = sum(row_pt(ws, r) for u in units for r in range(u.top, u.bottom + 1)) > content
    orientation = "portrait" if content <= portrait_w and tall else "landscape"
    page_w, page_h = printable(orientation)
    scale = max(min_scale, min(100, int(100 * page_w / content)))
    height = sum(row_pt(ws, r) for r in range(1, units[-1].bottom + 1)) if units else 0.0
    if height * scale / 100 > page_h * 0.95 >= height * min_scale / 100:
        scale = int(100 * page_h * 0.95 / height)  # smaller, to print on one page
    # sheet points per page; a row's drawn height varies a little between applications
    fit_w, fit_h = page_w * 100 / scale, page_h * 100 / scale * 0.95
    rows, used, above = [], 0.0, 0
    for unit in units:
        height = sum(row_pt(ws, r) for r in range(unit.top, unit.bottom + 1))
        gap = sum(row_pt(ws, r) for r in range(above + 1, unit.top))
        if used and used + gap + height > fit_h:
            rows.append(above)  # the blank rows above the unit start the next page
            used = gap + height
        else:
            used += gap + height
        above = unit.bottom
    cols = _column_breaks(widths, fit_w, _unsafe_columns(spans, widths, fit_w))
    return orientation, scale, rows, cols


def _unsafe_columns(spans: Sequence[tuple[int, int]], widths: list[float],
                    fit_w: float) -> set[int]:
    """Columns after which a page must not end: inside a block that fits a page (a wider
    one is cut wherever its page ends)."""
    unsafe = set()
    for first, last in spans:
        if sum(widths[first - 1:last]) <= fit_w:
            unsafe.update(range(first, last))
    return unsafe


def _column_breaks(widths: list[float], fit_w: float, unsafe: set[int]) -> list[int]:
    breaks, start, width = [], 0, 0.0
    for col, w in enumerate(widths, start=1):
        if width + w > fit_w and col - 1 > start:
            cut = max((c for c in range(start + 1, col) if c not in unsafe), default=col - 1)
            breaks.append(cut)
            start, width = cut, sum(widths[cut:col])
        width += w
    return breaks


def set_print_layout(ws: Worksheet, units: list[PrintUnit], title: str,
                     spans: Sequence[tuple[int, int]] = (),
                     footer: str = PAGE_FOOTER, min_scale: int = MIN_SCALE) -> None:
    """Print setup of a block sheet: its print area, breaks and scale (`plan_pages`),
    the title in the header and page numbers in the footer, no gridlines or headings."""
    base_setup(ws, title, footer)
    if not units:
        return
    orientation, scale, rows, cols = plan_pages(ws, units, spans, min_scale)
    ws.page_setup.orientation = orientation
    ws.page_setup.scale = scale
    for row in rows:
        ws.row_breaks.append(Break(id=row))
    for col in cols:
        ws.col_breaks.append(Break(id=col))
    if cols:  # a block's right part on the page after its left part
        ws.page_setup.pageOrder = "overThenDown"
    right = max(u.right for u in units)
    ws.print_area = f"A1:{cell_ref(max(u.bottom for u in units), right)}"


def base_setup(ws: Worksheet, title: str, footer: str = PAGE_FOOTER) -> None:
    """A4, margins, header and footer (`&P` the page, `&N` the pages), no printed gridlines
    or row/column headings."""
    ws.page_setup.paperSize = ws.PAPERSIZE_A4
    ws.sheet_properties.pageSetUpPr.fitToPage = False
    ws.row_breaks, ws.col_breaks = RowBreak(), ColBreak()
    ws.page_margins.left = ws.page_margins.right = SIDE_IN
    ws.page_margins.top = ws.page_margins.bottom = TOP_IN
    ws.page_margins.header = ws.page_margins.footer = HEADER_IN
    ws.print_options.gridLines = False
    ws.print_options.headings = False
    ws.oddHeader.center.text = title
    ws.oddFooter.center.text = footer
