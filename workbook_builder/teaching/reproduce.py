"""`reproduce`: a tutorial's worked example as live workbooks, beside the numbers it prints.

Each workbook gets a `Tutorial` sheet: every printed number, the live cell that computes it,
and a formula saying whether they agree at the tutorial's 3 decimals.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from openpyxl.formatting.rule import CellIsRule
from openpyxl.styles import Alignment, Font, PatternFill

from sheets._tutorials import TUTORIALS, Example, Tutorial
from workbook_builder.book.files import check_writable, save_atomic
from workbook_builder.book.workbook import build_workbook
from workbook_builder.checking.check import CheckReport, check_workbook
from workbook_builder.errors import UserError
from workbook_builder.registry import get_kind
from workbook_builder.sheet.cells import write_text
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.printing import FONT_NAME, PrintUnit, set_print_layout
from workbook_builder.sheet.refs import cell_ref, quote_sheet
from workbook_builder.sheet.request import BuildRequest
from workbook_builder.sheet.styles import BOLD_FONT, TEXT_FONT

AGREE_WITHIN = 0.0005  # printed to 3 decimals
DIFFERS_FONT = Font(name=FONT_NAME, bold=True, color="9C0006")
DIFFERS_FILL = PatternFill("solid", fgColor="FFC7CE", bgColor="FFC7CE")
TUTORIAL_COLUMNS = 6


@dataclass(frozen=True)
class Row:
    step: str
    query: str
    column: int
    printed: float
    live_cell: str
    live: float | None

    @property
    def agrees(self) -> bool:
        return self.live is not None and abs(self.live - self.printed) <= AGREE_WITHIN


@dataclass(frozen=True)
class ExampleResult:
    example: Example
    path: Path
    report: CheckReport
    rows: list[Row]


def reproduce(name: str, out: Path, force: bool) -> list[ExampleResult]:
    """Write each example's workbook (with its Tutorial sheet) and check it; the values the
    build computed are the ones checked."""
    if name not in TUTORIALS:
        raise UserError(f"no tutorial {name!r}; the tutorials are {', '.join(TUTORIALS)}")
    tutorial = TUTORIALS[name]
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{ex.file_stem}.xlsx" for ex in tutorial.examples]
    for path in paths:
        check_writable(path, force)
    results = []
    for example, path in zip(tutorial.examples, paths, strict=True):
        wb, values, rows = _write_example(tutorial, example, path, force)
        report = check_workbook(path, values=values, workbook=wb)
        results.append(ExampleResult(example, path, report, rows))
    return results


def _printed_cells(example: Example) -> list[tuple[str, int, int, float]]:
    return [(step, i, j, float(value)) for step, matrix in example.printed.items()
            for i, row in enumerate(matrix) for j, value in enumerate(row)]


def _write_example(tutorial: Tutorial, example: Example, path: Path, force: bool):
    kind = get_kind(example.kind)
    params = make_params(kind, example.params)
    inputs = {k: np.asarray(v, dtype=float) for k, v in example.inputs.items()}
    wb = build_workbook(BuildRequest(kind, params, tutorial.tokens), inputs)
    ws = wb.create_sheet("Tutorial", 0)
    lines = [(f"Printed by the tutorial vs computed live — {tutorial.source}",
              Font(name=FONT_NAME, bold=True, size=13)),
             ("'agree' when they match at the tutorial's 3 decimals; 'DIFFERS' marks a "
              "printed number that its own formula does not give.", TEXT_FONT)]
    if example.note:
        lines.append((example.note, TEXT_FONT))
    for r, (text, font) in enumerate(lines, start=1):  # wrapped within the printed columns
        cell = write_text(ws, r, 1, text)
        cell.font, cell.alignment = font, Alignment(wrap_text=True, vertical="top")
        ws.merge_cells(start_row=r, start_column=1, end_row=r, end_column=TUTORIAL_COLUMNS)
        ws.row_dimensions[r].height = 2 * font.sz * 1.3 if len(text) > 70 else None
    headers = ["step", "query", "column", "printed", "live cell", "agree?"]
    for j, header in enumerate(headers, start=1):
        write_text(ws, 5, j, header).font = BOLD_FONT
    cells = []
    for r, (step, i, j, printed) in enumerate(_printed_cells(example), start=6):
        where = find_name(wb, step, path)
        live = f"{quote_sheet(where.sheet)}!{cell_ref(where.top + i, where.left + j)}"
        write_text(ws, r, 1, step)
        write_text(ws, r, 2, tutorial.tokens[i])
        ws.cell(r, 3, j + 1)
        ws.cell(r, 4, printed).number_format = "0.000"
        ws.cell(r, 5, f"={live}").number_format = "0.0000"
        ws.cell(r, 6, f'=IF(ABS(E{r}-D{r})<={AGREE_WITHIN},"agree","DIFFERS")')
        cells.append((r, step, i, j, printed))
    last = 5 + len(cells)
    ws.conditional_formatting.add(f"F6:F{last}", CellIsRule(
        operator="equal", formula=['"DIFFERS"'], font=DIFFERS_FONT, fill=DIFFERS_FILL))
    ws.column_dimensions["A"].width = 12
    for col in "BCDEF":
        ws.column_dimensions[col].width = 11
    ws.print_title_rows = "5:5"  # the column headers on every page
    set_print_layout(ws, [PrintUnit(1, 6, TUTORIAL_COLUMNS)] + [
        PrintUnit(r, r, TUTORIAL_COLUMNS) for r in range(7, last + 1)],
        f"attnsheets — {tutorial.source}")
    values = save_atomic(wb, path, force=force)  # the live cells' values, stored beside
    rows = []
    for r, step, i, j, printed in cells:
        live = values.get(("TUTORIAL", r, 5))
        live = float(live) if isinstance(live, int | float) else None
        rows.append(Row(step, tutorial.tokens[i], j + 1, printed, f"Tutorial!E{r}", live))
    return wb, values, rows
