"""The handouts as a student receives them: every demo workbook (and reproduce's) printed
to PDF by LibreOffice, in English and in Chinese, then read back with pdftotext -bbox.

Every page must have its smallest digit at 8 pt or more, at least 5 lines of content
unless it is the last page, and no block may be split across pages. To find a block in
the PDF, the test copy puts a unique marker in three of its cells (its name cell, the
label of its last row and the label of its last column); the block is whole when the
three markers print on one page.
"""

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import openpyxl
import pytest
from helpers.books import build, evaluated_blocks, placement_of
from helpers.page_fill import page_fills
from helpers.requires import requires_libreoffice
from helpers.runs import once_per_run

from workbook_builder import api
from workbook_builder.book.files import handout_copy
from workbook_builder.book.workbook import new_workbook
from workbook_builder.demo import demo_plan, write_demo
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import convert_many, has_chinese_font
from workbook_builder.registry import KINDS
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.printing import PrintUnit, plan_pages

requires_pdftotext = pytest.mark.skipif(
    shutil.which("pdftotext") is None, reason="pdftotext is missing (apt-get install "
                                               "poppler-utils)")

MIN_DIGIT_PT = 8.0
MIN_LINES = 5
A4_PT = {"landscape": (842, 595), "portrait": (595, 842)}
NUMBER = re.compile(r"^[−\-+]?\d[\d.,]*(E[+\-]\d+)?%?$")
WORD = re.compile(r'<word xMin="([^"]+)" yMin="([^"]+)" xMax="([^"]+)" yMax="([^"]+)">'
                  r'([^<]*)</word>')
PAGE = re.compile(r'<page width="([^"]+)" height="([^"]+)">(.*?)</page>', re.S)
LANGS = ["en", "zh"] if has_chinese_font() else ["en"]
CALIBRATION_PT = 10  # the calibration sheet's digits, printed at 100 %


@dataclass(frozen=True)
class Word:
    page: int
    top: float
    bottom: float
    text: str


def words_of(pdf: Path) -> tuple[list[Word], list[float]]:
    """Every word with its page, and each page's height."""
    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True,
                         text=True, check=True).stdout
    words, heights = [], []
    for number, page in enumerate(PAGE.finditer(out)):
        heights.append(float(page.group(2)))
        words += [Word(number, float(m.group(2)), float(m.group(4)), m.group(5))
                  for m in WORD.finditer(page.group(3))]
    return words, heights


def marked_copy(book: Path, target: Path) -> dict[str, tuple[str, str, str]]:
    """A copy whose every block on a printed sheet has markers in its name cell, last row
    label and last column label; {block: (name marker, row marker, column marker)}, for
    blocks small enough to fit a page at the sheet's scale (a larger one cannot help being
    split)."""
    wb = openpyxl.load_workbook(book)
    marks = {}
    for n, name in enumerate(sorted(wb.defined_names)):
        if name.startswith("_xlnm"):
            continue
        where = find_name(wb, name, book)
        ws = wb[where.sheet]
        if ws.sheet_state != "visible" or ws.title == "About":
            continue
        if not fits_a_page(ws, where):
            continue
        marks[where.name] = (f"mk{n}a", f"mk{n}r", f"mk{n}c")
        ws.cell(*name_cell(ws, where)).value = marks[where.name][0]
        ws.cell(where.bottom, where.left - 1).value = marks[where.name][1]
        ws.cell(where.top - 1, where.right).value = marks[where.name][2]
    wb.save(target)
    return marks


def name_cell(ws, where) -> tuple[int, int]:
    """(row, column) of the cell holding the block's name: above its data, left of its
    first column (further left in the hand layout, where the left operand sits)."""
    for row in range(where.top - 1, max(0, where.top - 40), -1):
        for col in range(where.left - 1, max(0, where.left - 20), -1):
            if ws.cell(row, col).value == where.name:
                return row, col
    raise AssertionError(f"no name cell above block {where.name}")


def fits_a_page(ws, where) -> bool:
    """Whether the block with its header fits inside the margins of one page, at the
    sheet's orientation and scale."""
    page_w, page_h = A4_PT[ws.page_setup.orientation or "portrait"]
    scale = (ws.page_setup.scale or 100) / 100
    margins = ws.page_margins
    width = sum(((ws.column_dimensions[openpyxl.utils.get_column_letter(c)].width or 8.43)
                 * 7 + 5) * 0.75 for c in range(where.left - 1, where.right + 1))
    height = sum(ws.row_dimensions[r].height or 15 for r in range(where.top - 4,
                                                                  where.bottom + 1))
    return width * scale <= page_w - 72 * (margins.left + margins.right) and \
        height * scale <= page_h - 72 * (margins.top + margins.bottom)


@dataclass(frozen=True)
class Handout:
    name: str
    pdf: Path
    marked_pdf: Path
    marks: dict


def _calibration(folder: Path) -> Path:
    """One cell of digits in the sheets' font at 10 pt, printed at 100 %: how tall
    pdftotext draws a digit of a known size."""
    wb = new_workbook()
    wb.active["A1"] = 12345
    wb.active.page_setup.scale = 100
    path = folder / "calibration.xlsx"
    wb.save(path)
    return path


@pytest.fixture(scope="session")
def handouts(demo, tutorial, tmp_path_factory) -> tuple[list[Handout], float]:
    def make(folder: Path) -> None:
        books = [b for b in demo.books if b.stem.endswith("_cells")]  # blocks prints alike
        for lang in LANGS[1:]:
            for stem, kind, values, layout in demo_plan(with_model=False):  # as `demo`
                if layout == "cells":
                    path = folder / f"{stem[:-len('.xlsx')]}_{lang}.xlsx"
                    write_demo(kind, values, path, layout, lang)
                    books.append(path)
        books += tutorial.books
        inputs = []
        for sub in ("plain", "marked", "pdf"):
            (folder / sub).mkdir()
        for book in books:  # as `pdf` prints them: the About sheet hidden
            inputs.append(handout_copy(book, folder / "plain" / book.name))
            marked = folder / "marked" / f"{book.stem}_marked.xlsx"
            marks = marked_copy(book, marked)
            inputs.append(handout_copy(marked, folder / f"{marked.name}"))
            (folder / f"{book.stem}.marks").write_text(repr(marks))
        inputs.append(_calibration(folder))
        halves = [inputs[0::2], inputs[1::2]]  # two LibreOffice runs side by side
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda part: convert_many(part, "pdf", folder / "pdf"), halves))

    folder = once_per_run(tmp_path_factory, "handouts", make)
    found = []
    for marks_file in sorted(folder.glob("*.marks")):
        stem = marks_file.stem
        found.append(Handout(stem, folder / "pdf" / f"{stem}.pdf",
                             folder / "pdf" / f"{stem}_marked.pdf",
                             eval(marks_file.read_text())))  # noqa: S307 (our own repr)
    words, _ = words_of(folder / "pdf" / "calibration.pdf")
    digit = next(w for w in words if w.text == "12345")
    return found, (digit.bottom - digit.top) / CALIBRATION_PT


@requires_libreoffice
@requires_pdftotext
def test_every_demo_workbook_is_rendered_in_each_language(handouts):
    found, _ = handouts
    stems = {h.name for h in found}
    assert "attention_cells" in stems and "wo-ai-ai_attention" in stems
    if "zh" in LANGS:
        assert "multihead_cells_zh" in stems
    assert len(found) == len([p for p in demo_plan(with_model=False) if p[3] == "cells"]) \
        * len(LANGS) + 2


def _each(handouts):
    found, per_pt = handouts
    return [(h, per_pt) for h in found]


def _each_pdf(handouts):
    """Each handout, the PDF units of a point, and its PDF's words and page heights."""
    for handout, per_pt in _each(handouts):
        yield handout, per_pt, *words_of(handout.pdf)


@requires_libreoffice
@requires_pdftotext
def test_every_printed_digit_is_8_pt_or_more(handouts):
    small = []
    for handout, per_pt, words, _ in _each_pdf(handouts):
        digits = [w for w in words if NUMBER.match(w.text)]
        assert digits, handout.name
        for page in sorted({w.page for w in digits}):
            size = min(w.bottom - w.top for w in digits if w.page == page) / per_pt
            if size < MIN_DIGIT_PT - 0.05:
                small.append(f"{handout.name} page {page + 1}: {size:.2f} pt")
    assert not small, small


@requires_libreoffice
@requires_pdftotext
def test_no_page_but_the_last_has_fewer_than_5_lines(handouts):
    thin = []
    for handout, _, words, heights in _each_pdf(handouts):
        margin = 0.6 * 72  # the header and footer sit outside the body
        for page, height in enumerate(heights[:-1]):
            lines = {round(w.top) for w in words if w.page == page
                     and w.top > margin and w.bottom < height - margin}
            if len(lines) < MIN_LINES:
                thin.append(f"{handout.name} page {page + 1}: {len(lines)} lines")
    assert not thin, thin


# Demo workbooks some of whose pages stay under half full (benchmarks/pages.py tables
# them): a band of blocks wider than a page prints its right parts on pages holding only
# that band's rows (linear_favor's 64 features, scaling's width 64), and the next band
# too tall for what is left of a page would have to be cut through a block that fits a
# page (additive_bias page 1, train_compare_scale page 2: 0.47; encoder_two_texts page 1,
# whose next band is the first text's embedding steps: 0.48; transformer's 74 pages, three
# of them 0.42–0.48, each before a band led by a head's attention chart or a decode step's
# title, neither cut).
SPARSE_PAGES = {"linear_favor", "scaling", "additive_bias", "train_compare_scale",
                "encoder_two_texts", "transformer"}


@requires_libreoffice
@requires_pdftotext
@pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="pdftoppm is missing "
                    "(apt-get install poppler-utils)")
def test_every_page_but_the_last_is_at_least_half_full(handouts, tmp_path):
    """Every demo workbook's PDF, in each language: each page but the last at least half
    full (the share of the printable height with ink, `page_fills`), the few that cannot
    be named in SPARSE_PAGES."""
    demos = {name.removesuffix(".xlsx") for name, *_ in demo_plan(with_model=False)}
    sparse, fine = {}, set()
    for handout, _ in _each(handouts):
        if re.sub(r"_[a-z]{2}$", "", handout.name) not in demos:
            continue  # reproduce's tutorial workbooks
        folder = tmp_path / handout.name
        folder.mkdir()
        fills = page_fills(handout.pdf, folder)
        stem = re.sub(r"_(cells|blocks)(_[a-z]{2})?$", "", handout.name)
        if any(f < 0.5 for f in fills[:-1]):
            sparse[handout.name] = [round(f, 2) for f in fills]
            assert stem in SPARSE_PAGES, (handout.name, sparse[handout.name])
        else:
            fine.add(stem)
    print(sparse)
    assert len(fine) > 20


@requires_libreoffice
@requires_pdftotext
def test_no_block_is_split_across_pages(handouts):
    split, missing = [], []
    for handout, _ in _each(handouts):
        words, _ = words_of(handout.marked_pdf)
        first = {}  # a chart placed later may repeat a label (its series' name)
        for w in words:
            first.setdefault(w.text, w.page)
        assert handout.marks, handout.name
        for block, markers in handout.marks.items():
            seen = {first.get(m) for m in markers}
            if None in seen:
                missing.append(f"{handout.name} {block}")
            elif len(seen) > 1:
                split.append(f"{handout.name} {block}: pages {sorted(p + 1 for p in seen)}")
    assert not missing, missing
    assert not split, split


@requires_libreoffice
@requires_pdftotext
@pytest.mark.parametrize("lang", LANGS)
def test_the_hand_example_of_attention_prints_on_one_page(handouts, demo, lang):
    """`build attention --example hand` (layout cells), as the demo builds it: one page,
    every digit at 8 pt or more, and each query's weights peaked (row max ≥ 0.6) as the
    formulas compute them in the file."""
    found, per_pt = handouts
    stem = "attention_hand_cells" + ("" if lang == "en" else f"_{lang}")
    handout = next(h for h in found if h.name == stem)
    words, heights = words_of(handout.pdf)
    assert len(heights) == 1, f"{stem}: {len(heights)} pages"
    digits = [w for w in words if NUMBER.match(w.text)]
    assert min(w.bottom - w.top for w in digits) / per_pt >= MIN_DIGIT_PT - 0.05
    assert {"WEIGHTS", "OUTPUT"} <= {w.text for w in words}  # the last steps are on it
    book = demo.out / "attention_hand_cells.xlsx"
    weights = evaluated_blocks(book, evaluate_with_formulas(book), ["WEIGHTS"])["WEIGHTS"]
    assert weights.shape == (4, 4) and weights.max(axis=1).min() >= 0.6


@requires_libreoffice
@requires_pdftotext
def test_the_about_sheet_is_not_printed(handouts):
    for handout, _, words, _ in _each_pdf(handouts):
        assert "generator" not in {w.text for w in words}, handout.name


def test_differs_on_the_tutorial_sheet_is_red(tutorial):
    ws = openpyxl.load_workbook(tutorial.books[0])["Tutorial"]
    rules = [rule for cf in ws.conditional_formatting for rule in cf.rules
             if rule.formula == ['"DIFFERS"']]
    assert rules and rules[0].dxf.fill.fgColor.rgb.endswith("FFC7CE")


def test_page_breaks_fall_only_between_units_and_digits_stay_legible(tmp_path):
    """The plan for a sheet of many band lines: every row break sits between two units,
    each page holds at most a page of rows, and the scale never goes under 89 %."""
    ws = new_workbook().active
    units, row = [], 1
    for height in [9, 12, 7, 30, 9, 9, 9, 9, 14, 5]:  # rows of each band line
        units.append(PrintUnit(row, row + height - 1, 17))
        row += height + 1
    for col in range(1, 18):
        ws.column_dimensions[openpyxl.utils.get_column_letter(col)].width = 9
    orientation, scale, rows, cols = plan_pages(ws, units)
    assert orientation == "landscape" and scale >= 89 and not cols
    assert rows and all(any(u.bottom == r for u in units) for r in rows)
    body = (595 - 2 * 0.6 * 72) * 100 / scale
    starts = [1, *(r + 1 for r in rows)]
    ends = [*rows, units[-1].bottom]
    assert all((end - start + 1) * 15 <= body for start, end in zip(starts, ends, strict=True))


def test_a_narrow_tall_sheet_prints_portrait(tmp_path):
    ws = new_workbook().active
    orientation, *_ = plan_pages(ws, [PrintUnit(1, 120, 6)])
    assert orientation == "portrait"


def test_the_handout_copy_hides_only_the_about_sheet(tmp_path):
    book = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    copy = handout_copy(book, tmp_path / "copy.xlsx")
    wb = openpyxl.load_workbook(copy)
    assert [ws.sheet_state for ws in wb.worksheets] == ["visible", "hidden"]
    assert wb.sheetnames[-1] == "About"
    assert openpyxl.load_workbook(book)["About"].sheet_state == "visible"  # file untouched


def test_a_column_break_cuts_only_a_block_wider_than_a_page():
    """A 60-column block must be cut; the 5-column block below it, which straddles where
    the first page would end, moves whole to the next page instead."""
    ws = new_workbook().active
    for col in range(1, 62):
        ws.column_dimensions[openpyxl.utils.get_column_letter(col)].width = 9
    units = [PrintUnit(1, 10, 61), PrintUnit(12, 20, 20)]
    wide, narrow = (1, 61), (15, 20)
    _, _, _, cols = plan_pages(ws, units, [wide, narrow])
    assert cols and all(not narrow[0] <= c < narrow[1] for c in cols)
    _, _, _, unguarded = plan_pages(ws, units, [wide])
    assert any(narrow[0] <= c < narrow[1] for c in unguarded)  # the case is a real one


@pytest.mark.parametrize("layout", ["cells", "hand"])
def test_the_plan_decides_the_compact_layout_as_the_writer_does(layout):
    """The limits are checked on the plan: the hand example of attention (compact in
    both layouts: it fits a page's width) places every block where the plan put it."""
    kind = KINDS["attention"]
    example = kind.examples["hand"]()
    params = make_params(kind, example.params)
    plan = placement_of(kind, params, layout)
    book = api.build("attention", example="hand", layout=layout)
    ws = book.workbook[kind.sheet_title]
    assert plan.compact
    for name, block in plan.blocks.items():
        where = find_name(book.workbook, name, None)
        assert (where.top, where.left, where.bottom, where.right) == \
            (block.top, block.left, block.bottom, block.right), name
    assert (plan.bottom, plan.right) == (ws.max_row, ws.max_column)


def test_a_compact_sheet_keeps_each_explanation_as_the_note_of_its_name():
    book = api.build("attention", example="hand")
    wb = book.workbook
    where = find_name(wb, "WEIGHTS", None)
    ws = wb[where.sheet]
    row, col = name_cell(ws, where)
    assert "probability distribution" in ws.cell(row, col).comment.text
    shown = {c.value for r in ws.iter_rows() for c in r if isinstance(c.value, str)}
    assert not any("probability distribution" in text for text in shown)


@pytest.mark.parametrize("layout", ["cells", "hand"])
def test_whole_numbers_show_as_such_and_the_rest_with_4_decimals(layout):
    """The hand example's inputs and integer products show 2 and −1 (General), their
    copies beside a product too; a block with a fraction keeps 0.0000."""
    wb = api.build("attention", example="hand", layout=layout).workbook
    formats = {}
    for name in ("X", "W_Q", "Q", "SCORES", "SCALED", "WEIGHTS"):
        where = find_name(wb, name, None)
        ws = wb[where.sheet]
        formats[name] = {ws.cell(where.top + i, where.left + j).number_format
                         for i in range(where.shape[0]) for j in range(where.shape[1])}
    assert formats == {"X": {"General"}, "W_Q": {"General"}, "Q": {"General"},
                       "SCORES": {"General"}, "SCALED": {"0.0000"}, "WEIGHTS": {"0.0000"}}
    if layout == "hand":
        ws = wb["Attention"]
        q = find_name(wb, "Q", None)
        left_of_q = ws.cell(q.top, q.left - 2)  # X's copy, last column
        assert left_of_q.value.startswith("=") and left_of_q.number_format == "General"


def test_the_mask_shows_its_masked_cells_grey_with_a_dash():
    """MASK's 0s are what it masks: grey and a dash, by the rule that shades the masked
    weights (reading the mask), while the cells hold 0 and 1 (1 shown as 1)."""
    wb = api.build("attention", seq_len=3, d_model=2, d_k=2, causal=True).workbook
    mask = find_name(wb, "MASK", None)
    ws = wb[mask.sheet]
    rules = {str(cf.sqref): cf.rules for cf in ws.conditional_formatting}
    area = f"{openpyxl.utils.get_column_letter(mask.left)}{mask.top}:" \
           f"{openpyxl.utils.get_column_letter(mask.right)}{mask.bottom}"
    assert area in rules, rules.keys()
    rule = rules[area][0]
    corner = f"{openpyxl.utils.get_column_letter(mask.left)}{mask.top}"
    assert rule.formula == [f"{corner}=0"] and rule.dxf.numFmt.formatCode == '"–";"–";"–"'
    assert rule.dxf.fill.fgColor.rgb.endswith("D9D9D9")
    assert ws.cell(mask.top, mask.left).number_format == "General"
    assert ws.cell(mask.top, mask.left).value.startswith("=IF(")


def test_a_sheet_a_little_taller_than_a_page_prints_on_one_at_89_percent_or_more():
    """34 rows of 15 pt fill more than one landscape page at 100 % but fit at 94 %: one
    page, no break; 40 rows would need 84 %, under the 89 % floor: pages at 100 %."""
    ws = new_workbook().active
    for col in range(1, 16):
        ws.column_dimensions[openpyxl.utils.get_column_letter(col)].width = 9
    lines = [PrintUnit(1, 10, 15), PrintUnit(12, 22, 15), PrintUnit(24, 34, 15)]
    orientation, scale, rows, cols = plan_pages(ws, lines)
    assert (orientation, rows, cols) == ("landscape", [], []) and 89 <= scale < 100
    orientation, scale, rows, _ = plan_pages(ws, [*lines, PrintUnit(36, 40, 15)])
    assert (orientation, scale) == ("landscape", 100) and rows
