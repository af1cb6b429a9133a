"""A kind's workbook in memory: its sheets, print setup and the About sheet recording what
it is (read back by `read_spec`)."""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openpyxl
from openpyxl.workbook.workbook import Workbook

from workbook_builder import __version__
from workbook_builder.errors import UserError
from workbook_builder.language.i18n import catalog_for, translate_sheets
from workbook_builder.registry import get_kind
from workbook_builder.sheet.cells import set_text, write_text
from workbook_builder.sheet.exercise import KEY_SHEET, apply_exercise
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.kind_sheet import kind_writer, lay_out
from workbook_builder.sheet.printing import (
    COMPACT_MIN_SCALE,
    MIN_SCALE,
    base_setup,
    set_print_layout,
)
from workbook_builder.sheet.request import BuildRequest, ExerciseSpec
from workbook_builder.sheet.styles import BOLD_FONT, TEXT_FONT, TITLE_FONT
from workbook_builder.xlsx.of_openpyxl import set_default_font, stored_cells

ABOUT = "About"
ABOUT_ROWS = 50  # the About table is read from these rows only (it fills about a dozen)


@dataclass(frozen=True)
class BookSpec:
    """What a workbook records about itself, enough for `check` to recompute everything."""

    kind: str
    params: dict[str, Any]
    layout: str
    tokens: list[str]
    lang: str = "en"
    exercise: ExerciseSpec | None = None  # for exercise workbooks
    student: str | None = None       # set by `attnsheets class`


def build_workbook(request: BuildRequest, inputs: dict[str, np.ndarray]) -> Workbook:
    """The workbook of a build request; its `note` (where the inputs came from, e.g. a
    checkpoint's layer) is written under the title and on the About sheet. Input blocks of
    at least `array_block_cells` cells are kept as arrays (`sheet/constants.py`; written by
    `save_atomic`), not in an exercise (it edits input cells). A student's name and id open
    the title and head every printed page, so each printout says whose it is."""
    kind, params, layout, exercise = (request.kind, request.params, request.layout,
                                      request.exercise)
    tr = catalog_for(kind, request.lang, request.labels)
    wb = new_workbook()
    ws = wb.active
    ws.title = kind.sheet_title
    # charts' axis and legend titles are in the sheet's language
    sheet = kind_writer(ws, request, tr=tr)
    sheet.title(f"{kind.sheet_title}: {tr(kind.summary)}",
                f"{kind.describe(params)}; layout={layout}" +
                (f"; {request.note}" if request.note else ""))
    lay_out(sheet, kind, inputs)
    if exercise is not None:  # its instructions and self-check open the sheet
        apply_exercise(sheet, request, inputs)
    with np.errstate(all="ignore"):  # finite: the build checked (check_results_finite)
        shown = {**inputs, **kind.reference(inputs, params)}
    sheet.finish(shown)
    translate_sheets(wb, tr, skip=[KEY_SHEET])
    _write_about(wb, book_spec(request), sorted(n for n in wb.defined_names), tr,
                 request.note, request.sources)
    student = request.student
    if student is not None:
        whose = student_line(student, request.student_name, tr)
        set_text(ws.cell(1, 1), f"{whose}    {ws.cell(1, 1).value}")
    sheet.fit_text_rows()  # the heights the translated text and the student line take
    footer = tr("page &P of &N")
    for other in wb.worksheets:
        base_setup(other, f"attnsheets — {kind.name} — {other.title}", footer)
    set_print_layout(ws, sheet.units, f"attnsheets — {kind.name} — {ws.title}",
                     [(b.left - 1, b.right) for b in sheet.blocks.values()], footer,
                     COMPACT_MIN_SCALE if sheet.compact else MIN_SCALE,
                     [(sheet.name_cells.get(name, (b.top,))[0], b.top, b.bottom)
                      for name, b in sheet.blocks.items()])
    if student is not None:
        for other in wb.worksheets:
            other.oddHeader.left.text = header_text(whose)
    return wb


def book_spec(request: BuildRequest) -> BookSpec:
    """What the request's workbook records about itself."""
    return BookSpec(request.kind.name, dataclasses.asdict(request.params), request.layout,
                    request.labels, request.lang, request.exercise, request.student)


def student_line(student: str, name: str, tr=str) -> str:
    """'Student: Ann    ID: s01' in the sheet's language (the id alone without a name)."""
    said_id = f"{tr('ID')}: {student}"
    return f"{tr('Student')}: {name}    {said_id}" if name else said_id


def header_text(text: str) -> str:
    """`text` as a page header section prints it: `&` starts a code there, so it is
    doubled; Excel takes at most 255 characters for the whole header."""
    return text.replace("&", "&&")[:120]


def new_workbook() -> Workbook:
    """An empty workbook whose default font is the sheets' one sans-serif font."""
    wb = openpyxl.Workbook()
    set_default_font(wb, TEXT_FONT)
    return wb


def _write_about(wb: Workbook, spec: BookSpec, names: list[str], tr=str,
                 note: str | None = None, sources: str | None = None) -> None:
    # the keys in column A are read back by `read_spec`, so they stay English
    ws = wb.create_sheet(ABOUT)
    write_text(ws, 1, 1, tr("attnsheets workbook")).font = TITLE_FONT
    write_text(ws, 2, 1, tr("Yellow cells are inputs: edit them and the formulas recalculate. "
                  "`attnsheets check` re-derives every step from the inputs held here now."))
    rows = [("kind", spec.kind), ("params", json.dumps(spec.params)),
            ("layout", spec.layout), ("tokens", json.dumps(spec.tokens, ensure_ascii=False)),
            ("lang", spec.lang),
            ("generator", f"attnsheets {__version__}"),
            ("defined names", ", ".join(names))]
    if spec.exercise is not None:
        rows.append(("exercise", spec.exercise.to_json()))
    if spec.student is not None:
        rows.append(("student", spec.student))
    if note is not None:
        rows.append(("source", note))
    if sources is not None:
        rows.append(("parameters", sources.removeprefix("parameters: ")))
    for i, (key, value) in enumerate(rows, start=4):
        write_text(ws, i, 1, key).font = BOLD_FONT
        write_text(ws, i, 2, value)
    ws.column_dimensions["A"].width = 16
    ws.column_dimensions["B"].width = 80


def read_spec(wb: Workbook, path: Path) -> BookSpec:
    if ABOUT not in wb.sheetnames:
        raise UserError(f"{path} is not an attnsheets workbook (it has no {ABOUT} sheet)")
    ws = wb[ABOUT]
    values = {}
    cells = {(c.row, c.column): c.value for c in stored_cells(ws)
             if c.column <= 2 and c.row <= ABOUT_ROWS}
    for (row, col), key in sorted(cells.items()):
        if col == 1 and key is not None:
            values[str(key)] = cells.get((row, 2))
    try:
        exercise = values.get("exercise")
        return BookSpec(str(values["kind"]), json.loads(values["params"]),
                        str(values["layout"]), json.loads(values["tokens"]),
                        str(values.get("lang") or "en"),
                        None if exercise is None else ExerciseSpec.from_json(exercise),
                        None if values.get("student") is None else str(values["student"]))
    except (KeyError, TypeError, ValueError, RecursionError):  # JSON nested 5,000 deep
        raise UserError(f"{path}: the {ABOUT} sheet lacks a readable kind/params/layout/"
                        f"tokens table") from None


def spec_request(spec: BookSpec) -> BuildRequest:
    """The request a workbook's record makes: its kind and parameters as the kind reads
    them now (an error for a kind or parameters it does not know)."""
    kind = get_kind(spec.kind)
    return BuildRequest(kind, make_params(kind, spec.params), spec.tokens, spec.layout,
                        spec.lang, spec.exercise, spec.student)
