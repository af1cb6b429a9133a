"""Handouts that fill their pages: the example handouts print on few pages, each page but
the last at least half full, and an exercise's instructions and self-check table print on
page 1."""

import re
import shutil
import subprocess
from pathlib import Path

import openpyxl
import pytest
from helpers.cli import cli
from helpers.page_fill import page_fills
from helpers.requires import requires_libreoffice

from workbook_builder.book.workbook import new_workbook
from workbook_builder.engines.libreoffice import has_chinese_font
from workbook_builder.sheet.printing import (
    PAGE,
    PrintUnit,
    column_pt,
    plan_pages,
    printable,
    set_print_layout,
)

requires_poppler = pytest.mark.skipif(
    shutil.which("pdftotext") is None or shutil.which("pdftoppm") is None,
    reason="pdftotext/pdftoppm are missing (apt-get install poppler-utils)")
LANGS = ["en", "zh"] if has_chinese_font() else ["en"]
def printed(tmp_path: Path, *build_args: str) -> Path:
    book = tmp_path / "book.xlsx"
    assert cli("build", *build_args, "-o", book).returncode == 0
    assert cli("pdf", book, "-q").returncode == 0
    return book.with_suffix(".pdf")


@requires_libreoffice
@requires_poppler
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("args,most_pages", [
    (["multihead", "--example", "hand"], 2),
    (["flash", "--example", "hand"], 3),
    (["gpt"], 12),
])
def test_a_handout_prints_on_few_pages_each_but_the_last_half_full(tmp_path, args,
                                                                    most_pages, lang):
    pdf = printed(tmp_path, *args, "--lang", lang)
    fills = page_fills(pdf, tmp_path)
    print(" ".join(args), lang, len(fills), "pages, fill", [f"{f:.2f}" for f in fills])
    assert len(fills) <= most_pages
    assert all(f >= 0.5 for f in fills[:-1])


@requires_libreoffice
@requires_poppler
@pytest.mark.parametrize("lang", LANGS)
def test_an_exercise_prints_its_instructions_and_self_check_on_page_1(tmp_path, lang):
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name\ns1,Ann\n", encoding="utf-8")
    out = tmp_path / "class"
    assert cli("class", "multihead", "--roster", roster, "--out", out, "--exercise",
               "WEIGHTS_H1,OUTPUT", "--lang", lang).returncode == 0
    book = out / "multihead_s1.xlsx"
    assert cli("pdf", book, "-q").returncode == 0
    pages = subprocess.run(["pdftotext", "-layout", str(book.with_suffix(".pdf")), "-"],
                           capture_output=True, text=True, check=True).stdout.split("\f")
    first = pages[0]
    instructions = {"en": ["Exercise:", "Self-check"], "zh": ["练习", "自我检查"]}[lang]
    assert all(w in first for w in instructions), first[:600]
    # the self-check table: a line per exercise step, its cells correct (0 on the blank
    # exercise) and of how many
    for step in ("WEIGHTS_H1", "OUTPUT"):
        assert re.search(rf"^\s*{step}\s+0\s+\d+\s*$", first, re.M), (step, first[:900])


def _sheet(columns: int, width: float = 9):
    ws = new_workbook().active
    for col in range(1, columns + 1):
        ws.column_dimensions[openpyxl.utils.get_column_letter(col)].width = width
    return ws


def _pages(rows: list[int], last: int) -> list[tuple[int, int]]:
    """(first, last) row of each page, from the rows after which a page ends."""
    return list(zip([1, *(r + 1 for r in rows)], [*rows, last], strict=True))


def _page_rows(orientation: str, scale: int) -> float:
    """How many 15 pt rows a page holds at this scale."""
    return printable(orientation)[1] * 100 / scale / 15


def test_a_block_taller_than_a_page_is_cut_below_its_header_and_fills_the_pages():
    """A 5-row unit, then a block of 81 rows (name row 7, first data row 10): the block
    starts on page 1 rather than leaving it a sixth full, every page holds at most a page
    of rows, and no page ends in the block's header or first two data rows, nor leaves
    fewer than its last two rows to the next page."""
    ws = _sheet(15)
    units = [PrintUnit(1, 5, 15), PrintUnit(7, 90, 15)]
    orientation, scale, rows, _ = plan_pages(ws, units, together=[(7, 11, 90)])
    assert len(rows) >= 2 and rows[0] > 7
    assert not any(7 <= r <= 10 or r == 89 for r in rows), rows
    assert all(last - first + 1 <= _page_rows(orientation, scale)
               for first, last in _pages(rows, 90))


def test_a_page_ends_between_stacked_blocks_never_inside_one_that_fits_a_page():
    """A 10-row unit, then a unit of two blocks one above the other (rows 12-25 and
    27-50) too tall for what is left: page 1 takes the first block whole and ends
    before the second, which prints whole on page 2."""
    ws = _sheet(15)
    units = [PrintUnit(1, 10, 15), PrintUnit(12, 50, 15)]
    _, _, rows, _ = plan_pages(ws, units, together=[(12, 16, 25), (27, 31, 50)])
    assert rows and rows[0] in (25, 26), rows
    assert not any(12 <= r < 25 or 27 <= r < 50 for r in rows), rows
    _, _, whole_units, _ = plan_pages(ws, units)  # without the blocks: between units
    assert whole_units == [10]


def test_a_run_of_blocks_wider_than_a_page_starts_a_row_of_pages_of_its_own():
    """Two 61-column units between narrow ones: their right parts print on pages of
    their own, so the run starts a new page rather than being cut between two rows of
    pages (which would leave each right part a few rows)."""
    ws = _sheet(61)
    units = [PrintUnit(1, 20, 10), PrintUnit(22, 30, 61), PrintUnit(32, 40, 61),
             PrintUnit(42, 50, 10)]
    orientation, scale, rows, cols = plan_pages(ws, units)
    assert cols and 20 < _page_rows(orientation, scale) < 40  # the case is a real one
    assert 20 in rows and not any(21 <= r < 40 for r in rows), rows


def test_a_sheet_a_little_wider_than_a_page_prints_whole_with_narrower_margins():
    """17 columns slightly wider than a landscape page at the 89 % floor with the usual
    margins: narrower side margins hold them, rather than a page for the last column."""
    ws = _sheet(17, 9.3)
    width = sum(column_pt(ws, c) for c in range(1, 18))
    assert width * 0.89 > printable("landscape")[0]  # the case is a real one
    set_print_layout(ws, [PrintUnit(1, 10, 17)], "title", [(1, 17)], blocks=[(1, 3, 10)])
    assert not ws.col_breaks.brk and ws.page_setup.scale >= 89
    margins = ws.page_margins
    assert width * ws.page_setup.scale / 100 <= \
        PAGE[ws.page_setup.orientation][0] - 72 * (margins.left + margins.right)
