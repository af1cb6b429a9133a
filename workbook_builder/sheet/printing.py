"""How a sheet prints: page breaks only between print units (a band line with the section
title above it), a fixed scale that keeps every printed digit at 8 pt or more, landscape or
portrait by the sheet's shape, thin borders on the blocks instead of gridlines.

LibreOffice and Excel both honour what is set here (manual row/column breaks, print area,
scale), so `attnsheets pdf` and File ▸ Print give the same pages.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from openpyxl.worksheet.pagebreak import Break, ColBreak, RowBreak
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.refs import cell_ref
from workbook_builder.xlsx.of_openpyxl import chart_rows

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
# the side margins of a sheet wider than a page: a block a little wider than the page
# then prints whole, not with its last column alone on the next page
NARROW_SIDE_IN = 0.25
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
    """A row's printed height (asked without making a row record for it: the sheet's
    record of dimensions makes one for every row it is asked of, hundreds of thousands
    beside a model's blocks, each written into the file as an empty row)."""
    found = ws.row_dimensions.get(row)
    return (found.height if found is not None else None) or ROW_PT


def printable(orientation: str, side_in: float = SIDE_IN) -> tuple[float, float]:
    """Width and height inside the margins, in points at 100 %."""
    width, height = PAGE[orientation]
    return width - 2 * 72 * side_in, height - 2 * 72 * TOP_IN


# A page whose units fill less than this share of it takes the first rows of the unit
# that does not fit (cut between two of its blocks stacked one above the other, or inside
# a block taller than a page) rather than ending early: whole units alone leave pages a
# third full. Ink covers about two thirds of the rows blocks take, so a page must hold
# about 3/4 of its height in rows to look half full.
SPLIT_BELOW = 0.75
HEAD_ROWS = 2  # the data rows a block taller than a page keeps with its header, and at its end


def plan_pages(ws: Worksheet, units: list[PrintUnit],
               spans: Sequence[tuple[int, int]] = (),
               min_scale: int = MIN_SCALE,
               together: Sequence[tuple[int, int, int]] | None = None,
               side_in: float = SIDE_IN) -> tuple[str, int, list[int], list[int]]:
    """(orientation, scale %, rows after which a page ends, columns after which a page
    ends) for `units`: as large as fits one page width, or the whole sheet on one page
    where that takes a scale still at MIN_SCALE or more, never under MIN_SCALE; row breaks
    packed greedily between units; column breaks only where a unit is wider than a page
    even at MIN_SCALE, never inside a block's column span (first, last) that fits a page
    where another column will do. A sheet printing no text under FONT_PT (a compact one:
    its explanations are notes) may go down to `min_scale` = COMPACT_MIN_SCALE instead.
    With `together` (first, head, last) for each block and chart: rows first…last printed
    on one page where they fit one, else first…head and the last HEAD_ROWS (a block's
    header and first rows, its last rows), a unit that does not fit a page under
    SPLIT_BELOW full, or any page, is split between rows outside those ranges.
    `side_in`: the left and right margins, in inches."""
    right = max((u.right for u in units), default=1)
    widths = [column_pt(ws, c) for c in range(1, right + 1)]
    content = sum(widths)
    portrait_w, _ = printable("portrait", side_in)
    tall = sum(row_pt(ws, r) for u in units for r in range(u.top, u.bottom + 1)) > content
    orientation = "portrait" if content <= portrait_w and tall else "landscape"
    page_w, page_h = printable(orientation, side_in)
    scale = max(min_scale, min(100, int(100 * page_w / content)))
    height = sum(row_pt(ws, r) for r in range(1, units[-1].bottom + 1)) if units else 0.0
    if height * scale / 100 > page_h * 0.95 >= height * min_scale / 100:
        scale = int(100 * page_h * 0.95 / height)  # smaller, to print on one page
    # sheet points per page; a row's drawn height varies a little between applications
    fit_w, fit_h = page_w * 100 / scale, page_h * 100 / scale * 0.95
    cols = _column_breaks(widths, fit_w, _unsafe_columns(spans, widths, fit_w))
    rows = _row_breaks(ws, units, fit_h, together, cols[0] if cols else right)
    return orientation, scale, rows, cols


def _row_breaks(ws: Worksheet, units: list[PrintUnit], fit_h: float,
                together: Sequence[tuple[int, int, int]] | None, first_page_right: int
                ) -> list[int]:
    """Rows after which a page ends: whole units packed greedily, the blank rows above a
    unit starting its page; with `together`, a unit split (`_cut_row`) where the page
    would stay under SPLIT_BELOW full or the unit is taller than a page.
    A run of units wider than the first page (right of column `first_page_right`) prints
    its right parts on pages of their own, holding only those units' rows: the run
    starts a page where that keeps it on one row of pages, and is split only when it
    is taller than a page."""
    # tall(first, last) from running totals: a model's block of 100,000 rows is cut into
    # thousands of pages, and summing its rows for each cut would take minutes
    bottom = max([u.bottom for u in units] + [last for *_, last in together or ()],
                 default=0)
    below = list(accumulate((row_pt(ws, r) for r in range(1, bottom + 1)), initial=0.0))

    def tall(first: int, last: int) -> float:
        return below[last] - below[first - 1] if last >= first else 0.0

    kept: set[int] = set()  # rows a page must not end after
    for first, head, last in together or ():
        if tall(first, last) <= fit_h:
            kept.update(range(first, last))
        else:
            kept.update(range(first, head))
            kept.update(range(max(first, last - HEAD_ROWS + 1), last))
    kept.update(u.top for u in units)  # a section title stays with its blocks
    wide = [u.right > first_page_right for u in units]
    run_top, run_end = {}, {}  # a wide unit's run: its first row, its last unit's bottom
    for n in reversed(range(len(units))):
        if wide[n]:
            run_end[n] = run_end.get(n + 1, units[n].bottom)
    for n in range(len(units)):
        if wide[n]:
            run_top[n] = run_top.get(n - 1, units[n].top)
    breaks, used, last = [], 0.0, 0
    for n, unit in enumerate(units):
        start, gap = unit.top, tall(last + 1, unit.top - 1)
        first_of_run = wide[n] and run_top[n] == unit.top
        run = run_end[n] if first_of_run else unit.bottom
        whole_run = wide[n] and tall(run_top[n], run_end[n]) <= fit_h
        while True:
            rest, room = tall(start, unit.bottom), fit_h - used - gap
            if run > unit.bottom and used and tall(start, run) > room and whole_run:
                breaks.append(last)  # the run whole on the next row of pages
                used = 0.0
                continue
            if rest <= room or (not used and together is None):
                used += gap + rest
                break
            cut = None
            if together is not None and used < SPLIT_BELOW * fit_h and \
                    not (wide[n] and whole_run):
                cut = _cut_row(ws, start, unit.bottom, room, kept)
            if cut is not None:
                breaks.append(cut)
                start, gap, used = cut + 1, 0.0, 0.0
            elif used:
                breaks.append(last)  # the blank rows above the unit start the next page
                used = 0.0
            else:  # taller than a page and nowhere to cut: the application breaks it
                used += gap + rest
                break
        last = unit.bottom
    return breaks


def _cut_row(ws: Worksheet, first: int, last: int, room: float,
             kept: set[int]) -> int | None:
    """The lowest row of first…last-1 after which a page may end with rows first…row
    in `room` points (None: none)."""
    cut, used = None, 0.0
    for row in range(first, last):
        used += row_pt(ws, row)
        if used > room:
            break
        if row not in kept:
            cut = row
    return cut


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
                     footer: str = PAGE_FOOTER, min_scale: int = MIN_SCALE,
                     blocks: Sequence[tuple[int, int, int]] | None = None) -> None:
    """Print setup of a block sheet: its print area, breaks and scale (`plan_pages`),
    the title in the header and page numbers in the footer, no gridlines or headings.
    `blocks` (name row, first data row, last row of each block) lets a page end inside a
    unit: between blocks, or inside a block taller than a page, never inside a chart."""
    base_setup(ws, title, footer)
    if not units:
        return
    together = None if blocks is None else keep_together(ws, blocks)
    orientation, scale, rows, cols = plan_pages(ws, units, spans, min_scale, together)
    if cols:  # wider than a page: narrower side margins leave fewer columns over
        orientation, scale, rows, cols = plan_pages(ws, units, spans, min_scale, together,
                                                    NARROW_SIDE_IN)
        ws.page_margins.left = ws.page_margins.right = NARROW_SIDE_IN
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


def keep_together(ws: Worksheet,
                  blocks: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """(first, head, last) rows of what prints on one page (`plan_pages`): each block
    from its name to its last row, its head its first HEAD_ROWS data rows; each chart's
    rows (anchored corner to corner to its cells), whole."""
    ranges = [(name_row, min(top + HEAD_ROWS - 1, bottom), bottom)
              for name_row, top, bottom in blocks]
    ranges += [(first, last, last) for first, last in chart_rows(ws)]
    return ranges


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
