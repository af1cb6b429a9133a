"""Exercises: chosen step blocks left for the student to fill, with live self-checks.

The exercise cells keep their place (and their defined name) and hold #N/A until filled, so
every later step still reads them and works from the student's entries. For the self-check,
the whole computation is laid out a second time on a `veryHidden` sheet, its input blocks
linked to the visible inputs (the answers follow edited inputs) and its blocks unnamed. Each
exercise step gets per-row ✓/✗ marks beside it and a defined name CHECK_<STEP> on the count
of cells within the tolerance of the hidden answer (blank, text and error cells are not
correct).

veryHidden hides the key sheet from Excel's Unhide dialog; anyone who opens the .xlsx as a
zip (or Excel's VBA editor) can still read it, and Gnumeric's xlsx writer saves it as an
ordinary visible sheet. `self_check=False` writes no answers at all.
"""

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from openpyxl.styles import Border, PatternFill, Side
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.cells import write_text
from workbook_builder.sheet.kind_sheet import kind_writer, lay_out
from workbook_builder.sheet.layout import SheetWriter
from workbook_builder.sheet.limits import COUNT_COL, EXERCISE_TOP
from workbook_builder.sheet.names import NamedRange, define_name, find_block
from workbook_builder.sheet.refs import cell_ref, quote_sheet
from workbook_builder.sheet.request import BuildRequest, ExerciseSpec, validate_steps
from workbook_builder.sheet.styles import BOLD_FONT, LABEL_FONT, NAME_FONT
from workbook_builder.xlsx.of_openpyxl import load_workbook, save_workbook

KEY_SHEET = "Key"
ANSWER_FILL = PatternFill("solid", fgColor="E2EFDA")  # pale green: your answer goes here
_DASHED = Side(style="dashed", color="548235")
ANSWER_BORDER = Border(left=_DASHED, right=_DASHED, top=_DASHED, bottom=_DASHED)
# What an unfilled answer cell holds: the error value #N/A ("not available"). An error is
# carried through arithmetic, MMULT, SUMPRODUCT, MAX and SUM (as in Excel), so every cell
# computed from an unfilled one shows #N/A in LibreOffice, Gnumeric and `formulas` alike
# (tests/test_gnumeric.py). A blank would not do (Gnumeric's MMULT counts it as 0), nor
# would text such as "—" (Gnumeric's MMULT, and SUMPRODUCT, MAX and SUM in every engine,
# skip text and show numbers).
PLACEHOLDER = "#N/A"
ANSWER_LEGEND = "    green = your answer"  # after the layout's legend


def _number(x: float) -> str:
    """A literal every engine parses (the `formulas` engine wants a signed exponent)."""
    text = repr(float(x))
    return text if "e" not in text else f"{x:.6E}"


def apply_exercise(sheet: SheetWriter, request: BuildRequest,
                   inputs: Mapping[str, np.ndarray]) -> None:
    """Blank the request's exercise steps on `sheet` (laid out from row EXERCISE_TOP +
    exercise_rows(spec) on) and add the instructions, the hidden key and self-checks
    above them."""
    kind, spec = request.kind, request.exercise
    validate_steps(kind, request.params, spec)
    ws, wb = sheet.ws, sheet.ws.parent
    write_text(ws, 3, 1, sheet.legend + ANSWER_LEGEND)
    key = None
    if spec.self_check:  # each block where the sheet has it
        key = kind_writer(wb.create_sheet(KEY_SHEET), request, answer_key_of=sheet.blocks)
        key.title(f"{kind.sheet_title}: answer key")
        lay_out(key, kind, inputs)
        key.ws.sheet_state = "veryHidden"
    for step in spec.steps:
        _blank(ws, sheet.blocks[step])
    row = EXERCISE_TOP
    write_text(ws, row, 1, "Exercise: replace the #N/A in each green cell with a number or a "
                    "formula; later steps use your entries (and show #N/A until then)."
            ).font = BOLD_FONT
    sheet.wrap_text_row(row)
    if key is None:
        return
    tol = _number(spec.tolerance)
    row += 1
    write_text(ws, row, 1, f"Self-check (a cell is correct within ±{spec.tolerance:g})").font = \
        BOLD_FONT
    sheet.wrap_text_row(row)
    write_text(ws, row + 1, 1, "✓ = row correct, ✗ = not yet").font = LABEL_FONT
    # the counts three columns right: a step's name has room to show whole before them
    for j, header in zip((1, COUNT_COL, COUNT_COL + 1), ("step", "correct", "of"),
                         strict=True):
        write_text(ws, row + 2, j, header).font = LABEL_FONT
    for n, step in enumerate(spec.steps):
        mine, answer = sheet.blocks[step], key.blocks[step]
        for i in range(mine.rows):
            mark = cell_ref(mine.top + i, mine.right + 1)
            ws[mark] = ArrayFormula(mark, f'=IF({_count(mine, answer, tol, i)}='
                                          f'{mine.cols},"✓","✗")')
        r = row + 3 + n
        write_text(ws, r, 1, step).font = NAME_FONT
        count = cell_ref(r, COUNT_COL)
        ws[count] = ArrayFormula(count, f"={_count(mine, answer, tol)}")
        ws.cell(r, COUNT_COL + 1, mine.rows * mine.cols)
        where = f"{quote_sheet(ws.title)}!{cell_ref(r, COUNT_COL, True, True)}"
        define_name(wb, f"CHECK_{step}", where)


def _blank(ws, block: Block) -> None:
    for i in range(block.rows):
        for j in range(block.cols):
            cell = ws.cell(block.top + i, block.left + j)
            cell.value = PLACEHOLDER
            cell.fill, cell.border = ANSWER_FILL, ANSWER_BORDER


def _count(mine: Block, answer: Block, tol: str, row: int | None = None) -> str:
    """Cells of `mine` (or of one row) within `tol` of the key, for an array formula (IF over
    a range needs array evaluation in Excel 2019 and older). ISNUMBER first, so blanks,
    text and error values count as wrong instead of turning the count into an error."""
    if row is None:
        got, want = mine.whole(), answer.whole()
    else:
        got, want = mine.row(row), answer.row(row)
    want = f"{quote_sheet(answer.sheet)}!{want}"
    return f"SUM(IF(ISNUMBER({got}),IF(ABS({got}-{want})<={tol},1,0),0))"


def key_range(where, sheet: str = KEY_SHEET):
    """The hidden key's copy of a visible named block (laid out at the same place)."""
    return NamedRange(f"{sheet}!{where.name}", sheet, where.top, where.left, where.bottom,
                      where.right)


def filled_copy(path: Path, target: Path, spec: ExerciseSpec, expected: dict,
                places: dict[str, NamedRange] | None = None) -> None:
    """A copy of the exercise with the right answers typed into the exercise cells (at
    `places`, where the layout puts them, when given; else where their names point)."""
    wb = load_workbook(path)
    for step in spec.steps:
        where = find_block(wb, step, path, expected[step].shape) if places is None \
            else places[step]
        ws = wb[where.sheet]
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                ws.cell(where.top + i, where.left + j).value = float(expected[step][i, j])
    save_workbook(wb, target)
