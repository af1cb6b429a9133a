"""Limits stated and checked before any work: Excel's grid, the cells one build may write,
the length of a label, and the size of a workbook `check` and `grade` will read.

A sheet's extent comes from the kind's declaration (`place_sheet` places every block without
writing a cell, and the writer renders that placement), so an impossible size is refused in
a fraction of a second instead of after minutes of building and gigabytes of memory.
"""

import dataclasses
import json
import re
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.sheet.block import Block
from workbook_builder.sheet.constants import CONSTANT_BLOCK_CELLS, constant_blocks
from workbook_builder.sheet.places import (
    FIRST_ROW,
    HAND_MAX_SIDE,
    LAYOUTS,
    NO_LIMITS,
    HandTooLarge,
    Limits,
    PlanBeyond,
    SheetPlacement,
    place_sheet,
)
from workbook_builder.sheet.refs import name_destinations, parse_range
from workbook_builder.sheet.request import BuildRequest
from workbook_builder.xlsx.of_openpyxl import stored_cells

EXCEL_ROWS, EXCEL_COLS = 1_048_576, 16_384
EXCEL_CELL_CHARS = 32_767          # Excel (and openpyxl) cut longer text short
# formula cells and inputs written cell by cell, of one build (answer key included). In
# the blocks layout a formula cell costs ~4 µs and ~230 bytes (attention --seq-len 1000
# --d-model 4 --d-k 4: 4,018,000 built in 15 s at 0.91 GB, checked in 16 s at 0.99 GB);
# GPT-2 small holds 2,236,421 beside its weights held as arrays. The cells layout, a cell
# object and a formula node each, has a lower bound of its own (MOST_CELLS_LAYOUT_CELLS).
DEFAULT_MAX_CELLS = 4_000_000
# the cells layout makes a cell object and a formula node for each: 600,000 of them
# (gpt --vocab 100000) took 1.4 GB before failing; the blocks layout builds it in 0.9 GB
MOST_CELLS_LAYOUT_CELLS = 500_000
# inputs held as arrays (blocks of CONSTANT_BLOCK_CELLS or more, `sheet/constants.py`):
# ~9 bytes each in memory, ~20-40 in the file's XML; GPT-2 small's weights are 124 M
MAX_ARRAY_CELLS = 200_000_000
MAX_LABEL_CHARS = 255              # one token or label
# a workbook's parts, uncompressed, that check/grade read: the blocks of plain numbers are
# read as a stream into arrays (MAX_ARRAY_CELLS of ~45 bytes of XML each); of the rest,
# what openpyxl loads cell by cell, at most MAX_CELL_XML_BYTES
MAX_WORKBOOK_BYTES = 10 * 2**30
MAX_CELL_XML_BYTES = 200 * 2**20
# a formula check/grade hand an engine: attnsheets writes none over 300 characters, and the
# `formulas` engine parses an operator chain in time and memory growing with its square
# (one 10 KB formula: ~0.5 GB and ~15 s), so a longer one is refused before any engine
MAX_FORMULA_CHARS = 1_024


# an exercise's instructions and self-check table open the sheet, under its title (rows
# 1-3), so that they print on page 1; the blocks start below them
EXERCISE_TOP = 4
COUNT_COL = 4  # the self-check table's "correct" column


def exercise_rows(exercise) -> int:
    """Rows an exercise's instructions and self-check table take, with a blank row under
    them."""
    return 1 + (3 + len(exercise.steps) if exercise.self_check else 0) + 1


@dataclasses.dataclass(frozen=True)
class Extent:
    """What a build would write: its sheet's last row and column, its data cells written
    cell by cell and those of its inputs held as arrays."""

    rows: int
    cols: int
    cells: int
    array_cells: int = 0


def plan_extent(request: BuildRequest, max_cells: int | None = None) -> Extent:
    """The extent of the request's sheet, from its kind's declaration alone.
    An exercise adds a column of ✓/✗ marks, the self-check table and, with its self-check,
    the hidden key: the same blocks again on a sheet of their own. Input blocks of the
    request's `array_block_cells` cells or more are held as arrays (never in an exercise,
    whose inputs get edited) and count towards MAX_ARRAY_CELLS, not `max_cells`. Raises
    PlanBeyond at the first block outside Excel's grid or past either count, and in the
    hand layout HandTooLarge at the first block with a side over HAND_MAX_SIDE."""
    exercise = request.exercise
    copies = 2 if exercise is not None and exercise.self_check else 1
    array_from = None if exercise is not None else request.array_block_cells
    plan = place_kind(dataclasses.replace(request, exercise=None), Limits(
        EXCEL_ROWS, EXCEL_COLS, None if max_cells is None else max_cells // copies,
        array_cells=None if max_cells is None or array_from is None else MAX_ARRAY_CELLS,
        array_from=array_from))
    rows, cols = plan.bottom, plan.right
    if exercise is not None:  # the instructions and self-check table above the blocks
        blocks = plan.blocks
        rows += 5 + len(exercise.steps)
        cols = max([cols] + [blocks[s].right + 1 for s in exercise.steps if s in blocks])
    return Extent(rows, cols, plan.cells * copies, plan.array_cells)


def place_kind(request: BuildRequest, limits: Limits = NO_LIMITS) -> SheetPlacement:
    """Where the writer puts everything on the request's sheet, no cell written: under the
    sheet's title (and an exercise's instructions and self-check); the hand layout stops
    at a block beyond teaching sizes (HandTooLarge)."""
    kind, params, layout, exercise = (request.kind, request.params, request.layout,
                                      request.exercise)
    if layout == "hand":
        limits = dataclasses.replace(limits, hand_side=HAND_MAX_SIDE)
    first_row = FIRST_ROW if exercise is None else EXERCISE_TOP + exercise_rows(exercise)
    return place_sheet(kind.sections(params), params, layout, sheet=kind.sheet_title,
                       first_row=first_row, glued_from=1, limits=limits)


def planned_places(request: BuildRequest) -> dict[str, Block]:
    """Every defined name the writer gives the request's workbook, and the block it
    covers there: each input and step on the kind's sheet and, in an exercise with its
    self-check, each CHECK_<STEP> cell of the table under the blocks. `check` and `grade`
    hold a file's names to it, as the size plan (`plan_extent`) does not need to. (Places
    do not depend on the texts: the labels are not read.)"""
    sheet, exercise = request.kind.sheet_title, request.exercise
    places = place_kind(request).blocks
    if exercise is not None and exercise.self_check:
        # apply_exercise: a line of instructions, the self-check's title, legend and
        # header, then one row per step with its count in COUNT_COL
        for n, step in enumerate(exercise.steps):
            name = f"CHECK_{step}"
            places[name] = Block(name, sheet, EXERCISE_TOP + 4 + n, COUNT_COL, 1, 1)
    return places


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def _lower(params, *sizes: int, guess: bool = True) -> str:
    """"lower --seq-len": the flags whose value is one of the sizes of a block too large,
    else (with `guess`) every size flag above 1."""
    sizes_of = [f for f in dataclasses.fields(params) if type(getattr(params, f.name)) is int]
    flags = [_flag(f) for f in sizes_of if getattr(params, f.name) in sizes] or \
        [_flag(f) for f in sizes_of if guess and getattr(params, f.name) > 1]
    return "lower " + " or ".join(flags) if flags else "use smaller sizes"


def check_sizes(kind, params, max_cells: int = DEFAULT_MAX_CELLS) -> None:
    """Refuse, from the parameters alone and before any label or block is made, sizes no
    sheet can hold: an input block beyond Excel's grid, or inputs of more than
    `max_cells` cells together. Every present input is a block of the sheet, so this is a
    lower bound of the plan `check_fits` then makes; without it a billion tokens would
    first make a billion labels."""
    if type(max_cells) is not int or max_cells <= 0:
        raise UserError(f"--max-cells must be a positive whole number, got {max_cells}")
    shapes = kind.input_shapes(params)
    for name, (rows, cols) in shapes.items():
        shape = f"input {name} is {rows:,}×{cols:,}"
        if cols > EXCEL_COLS:
            raise UserError(f"{kind.name}: the sheet would be at least {cols:,} columns "
                            f"wide, more than Excel's {EXCEL_COLS:,} ({shape}); "
                            f"{_lower(params, cols)}")
        if rows > EXCEL_ROWS:
            raise UserError(f"{kind.name}: the sheet would be at least {rows:,} rows long, "
                            f"more than Excel's {EXCEL_ROWS:,} ({shape}); "
                            f"{_lower(params, rows)}")
    # a lower bound: every input held as an array that can be one (an exercise's are cells,
    # which the plan then counts)
    arrays = {name: shape for name, shape in shapes.items()
              if shape[0] * shape[1] >= CONSTANT_BLOCK_CELLS}
    cells = sum(rows * cols for name, (rows, cols) in shapes.items() if name not in arrays)
    if cells > max_cells:
        name, (rows, cols) = max(((n, s) for n, s in shapes.items() if n not in arrays),
                                 key=lambda item: item[1][0] * item[1][1])
        raise UserError(f"{kind.name}: the workbook would hold more than --max-cells "
                        f"{max_cells:,} input and formula cells (its inputs alone hold "
                        f"{cells:,}; input {name} is {rows:,}×{cols:,}); "
                        f"{_lower(params, rows, cols)}, or raise --max-cells")
    held = sum(rows * cols for rows, cols in arrays.values())
    if held > MAX_ARRAY_CELLS:
        name, (rows, cols) = max(arrays.items(), key=lambda item: item[1][0] * item[1][1])
        raise UserError(_arrays_too_large(kind, params, held, name, rows, cols))


def _arrays_too_large(kind, params, held: int | None, name: str, rows: int, cols: int) -> str:
    """The one line refusing inputs beyond MAX_ARRAY_CELLS."""
    hold = f"its inputs hold {held:,}; " if held is not None else ""
    return (f"{kind.name}: the workbook's input blocks would hold more than "
            f"{MAX_ARRAY_CELLS:,} numbers, what attnsheets writes and reads in bounded "
            f"memory ({hold}input {name} is {rows:,}×{cols:,}); {_lower(params, rows, cols)}")


def plan_build(kind, params, tokens: list[str] | None = None, *,
               max_cells: int = DEFAULT_MAX_CELLS, **request) -> BuildRequest:
    """The request of a build (`request`: its fields beyond the kind, the parameters and the
    labels), made where the build starts and refused before any work when it cannot fit:
    first sizes no sheet can hold, from the parameters alone (`check_sizes`), then the
    labels (`tokens`, or the kind's own), then the whole sheet (`check_fits`)."""
    check_sizes(kind, params, max_cells)  # before anything is allocated
    made = BuildRequest(kind, params, kind.labels(params, tokens), **request)
    extent = check_fits(made, max_cells)
    if made.layout == "cells" and extent.cells > MOST_CELLS_LAYOUT_CELLS:
        raise UserError(f"{kind.name}: the sheet would write {extent.cells:,} cells one by "
                        f"one, more than the cells layout takes ({MOST_CELLS_LAYOUT_CELLS:,}: "
                        f"a formula object each); build it with --layout blocks")
    return made


def check_fits(request: BuildRequest, max_cells: int = DEFAULT_MAX_CELLS) -> Extent:
    """Refuse, in one line saying which flag to lower, a workbook that would not fit
    Excel's grid or would hold more than `max_cells` formula cells and inputs written cell
    by cell, or more than MAX_ARRAY_CELLS numbers in the inputs held as arrays (blocks of
    the request's `array_block_cells` cells or more), a hand layout beyond teaching sizes;
    and labels longer than a cell can record."""
    if type(max_cells) is not int or max_cells <= 0:
        raise UserError(f"--max-cells must be a positive whole number, got {max_cells}")
    kind, params, exercise = request.kind, request.params, request.exercise
    check_repeats(request, max_cells)
    try:
        extent = plan_extent(request, max_cells)
    except HandTooLarge as large:
        block = large.block
        sides = [side for side in (block.rows, block.cols) if side > HAND_MAX_SIDE]
        others = " or ".join(f"--layout {other}" for other in LAYOUTS if other != "hand")
        raise UserError(f"{kind.name}: the hand layout is for teaching sizes, at most "
                        f"{HAND_MAX_SIDE} rows and {HAND_MAX_SIDE} columns per block, but "
                        f"block {block.name} is {block.rows:,}×{block.cols:,}; "
                        f"{_lower(params, *sides, guess=False)}, or use {others}") from None
    except PlanBeyond as beyond:
        block = beyond.block
        shape = f"block {block.name} is {block.rows:,}×{block.cols:,}"
        if block.right > EXCEL_COLS:
            raise UserError(f"{kind.name}: the sheet would be at least {block.right:,} columns "
                            f"wide, more than Excel's {EXCEL_COLS:,} ({shape}); "
                            f"{_lower(params, block.cols)}") from None
        if block.bottom > EXCEL_ROWS:
            raise UserError(f"{kind.name}: the sheet would be at least {block.bottom:,} rows "
                            f"long, more than Excel's {EXCEL_ROWS:,} ({shape}); "
                            f"{_lower(params, block.rows)}") from None
        # the largest block of those the crossed count counts
        counted = [b for b in beyond.blocks.values()
                   if (b.name in beyond.arrays) == (beyond.limit == "array_cells")]
        big = max(counted, key=lambda b: b.rows * b.cols)
        if beyond.limit == "array_cells":
            raise UserError(_arrays_too_large(kind, params, None, big.name, big.rows,
                                              big.cols)) from None
        copies = " (twice: the exercise's hidden key repeats them)" if \
            exercise is not None and exercise.self_check else ""
        raise UserError(f"{kind.name}: the workbook would hold more than --max-cells "
                        f"{max_cells:,} input and formula cells{copies} (block {big.name} is "
                        f"{big.rows:,}×{big.cols:,}); {_lower(params, big.rows, big.cols)}, "
                        f"or raise --max-cells") from None
    if extent.cols > EXCEL_COLS or extent.rows > EXCEL_ROWS:  # the exercise's extras
        raise UserError(f"{kind.name}: the exercise would be {extent.rows:,} rows × "
                        f"{extent.cols:,} columns, beyond Excel's {EXCEL_ROWS:,} × "
                        f"{EXCEL_COLS:,}; {_lower(params)}")
    check_labels(request.labels)
    return extent


def check_repeats(request: BuildRequest, max_cells: int = DEFAULT_MAX_CELLS) -> None:
    """Refuse, naming its flag, a count of repeats (`Kind.repeated_by`: train's steps) no
    sheet holds, from the plans of 1 and 2 repeats: each adds the same cells and rows, so
    k repeats hold c₁ + (k − 1)·(c₂ − c₁) — where placing them would first place millions
    of blocks, and the block that crosses the limit names the flags of its own sizes."""
    kind, params = request.kind, request.params
    fields = {f.name: f for f in dataclasses.fields(params)}
    for name in kind.repeated_by:
        count = getattr(params, name)
        if count <= 2:
            continue
        # the other repeats at one each: fewer cells than the request's, so a count
        # refused here is refused at any count of the others, and planning stays cheap
        others = {other: min(getattr(params, other), 1) for other in kind.repeated_by
                  if other != name}
        try:
            one, two = (plan_extent(dataclasses.replace(
                request, params=dataclasses.replace(params, **others, **{name: k})))
                for k in (1, 2))
        except (PlanBeyond, HandTooLarge):
            continue  # one repeat is too large already: the whole plan says which flag
        flag = _flag(fields[name])
        cells = one.cells + (count - 1) * (two.cells - one.cells)
        rows = one.rows + (count - 1) * (two.rows - one.rows)
        if cells > max_cells:
            raise UserError(f"{kind.name}: the workbook would hold at least {cells:,} "
                            f"input and formula cells, more than --max-cells {max_cells:,} "
                            f"({flag} {count:,}, each adding {two.cells - one.cells:,}); "
                            f"lower {flag}, or raise --max-cells")
        if rows > EXCEL_ROWS:
            raise UserError(f"{kind.name}: the sheet would be at least {rows:,} rows long, "
                            f"more than Excel's {EXCEL_ROWS:,} ({flag} {count:,}, each "
                            f"adding {two.rows - one.rows:,}); lower {flag}")


def check_labels(labels: list[Any]) -> None:
    """Every label at most MAX_LABEL_CHARS characters, and all of them together within
    one cell of the About sheet, which records them."""
    for i, label in enumerate(labels, start=1):
        if len(str(label)) > MAX_LABEL_CHARS:
            raise UserError(f"token {i} has {len(str(label)):,} characters; a label may have "
                            f"at most {MAX_LABEL_CHARS}")
    recorded = len(json.dumps([str(x) for x in labels], ensure_ascii=False))
    if recorded > EXCEL_CELL_CHARS:
        raise UserError(f"the {len(labels):,} token labels take {recorded:,} characters "
                        f"together; the About sheet records them in one cell, which holds at "
                        f"most {EXCEL_CELL_CHARS:,}: shorten the tokens or lower the length")


def check_results_finite(request: BuildRequest, inputs: dict[str, np.ndarray]) -> None:
    """Refuse inputs for which a step would overflow (Excel shows #NUM!, and nothing could
    be checked): the reference's value of every step must be finite. Names the first
    step, in sheet order, and its first such cell."""
    kind, params = request.kind, request.params
    with np.errstate(all="ignore"):
        results = kind.reference(inputs, params)
    for name in kind.step_names(params):
        block = np.atleast_2d(np.asarray(results[name], dtype=float))
        bad = np.argwhere(~np.isfinite(block))
        if len(bad):
            i, j = (int(x) for x in bad[0][:2])
            raise UserError(f"these inputs overflow: step {name} would hold {block[i, j]} at "
                            f"row {i + 1}, column {j + 1} (a spreadsheet shows #NUM!); use "
                            f"inputs of smaller magnitude")


def named_extent(wb) -> tuple[int, int] | None:
    """The last row and column any defined name of a workbook covers, plus one of each
    (the ✓/✗ marks beside an exercise step): the part of each sheet that `check` and
    `grade` read. A cell beyond it (a stray entry far down a returned file) is never
    read. None for a workbook without a name that is a range (nothing to bound it by)."""
    refs = []
    for defined in wb.defined_names.values():
        try:
            refs.append(name_destinations(defined)[0][1])
        except Exception:  # empty, or a formula: not a range
            continue
    return extent_of(refs)


def extent_of(refs) -> tuple[int, int] | None:
    """`named_extent` of a workbook whose defined names hold these references ("$B$5:$E$8",
    with or without a sheet); a reference that is not one plain range is left out
    (`find_name` refuses it)."""
    bottom = right = 0
    for ref in refs:
        try:
            _, _, last_row, last_col = parse_range(ref.rpartition("!")[2].replace("$", ""))
        except ValueError:  # a whole column, a constant: not ours
            continue
        bottom, right = max(bottom, last_row), max(right, last_col)
    if not bottom:
        return None
    return min(bottom + 1, EXCEL_ROWS), min(right + 1, EXCEL_COLS)


def named_cells(wb) -> int:
    """The cells the workbook-level defined names cover together (each a plain range):
    no formula of a workbook of ours reads a range larger than that."""
    total = 0
    for defined in wb.defined_names.values():
        try:
            top, left, bottom, right = parse_range(
                name_destinations(defined)[0][1].replace("$", ""))
        except Exception:  # empty, a formula, a whole column: not a plain range
            continue
        total += (bottom - top + 1) * (right - left + 1)
    return total


def spanned_cells(ws) -> int:
    """The cells of the rectangle from A1 to the sheet's last stored cell, or of its blocks
    kept as arrays if more: a name attnsheets wrote lies inside it, empty cells included
    (an application saving the file may drop a blank cell of a block)."""
    last_row = last_col = 0
    for cell in stored_cells(ws):
        last_row, last_col = max(last_row, cell.row), max(last_col, cell.column)
    return max(last_row * last_col,
               sum(block.values.size for block in constant_blocks(ws)))


def check_names(wb, path) -> None:
    """Refuse a defined name covering more cells than its sheet spans (`A1:XFD1048576`
    over a sheet of a few hundred): every name attnsheets writes covers cells it wrote,
    and reading such a name's cells, or bounding a formula's reach by it, would cost
    gigabytes."""
    held: dict[str, int] = {}
    for name, defined in wb.defined_names.items():
        if not (defined.attr_text or "").strip():
            raise UserError(f"{path}: defined name {name} points at nothing; it is not a name "
                            f"attnsheets wrote (delete it)")
        try:
            (sheet, ref), = name_destinations(defined)
            top, left, bottom, right = parse_range(_whole_lines(ref.replace("$", "")))
        except Exception:  # not one plain range: `find_name` refuses it if it is read
            continue
        if sheet not in wb.sheetnames:
            continue
        cells = (bottom - top + 1) * (right - left + 1)
        if sheet not in held and cells > 1:
            held[sheet] = spanned_cells(wb[sheet])
        if cells > held.get(sheet, 1):
            raise UserError(f"{path}: defined name {name} covers {ref} ({cells:,} cells), "
                            f"more than the {held[sheet]:,} cells sheet {sheet!r} spans; it "
                            f"is not a name attnsheets wrote (delete it)")


def _whole_lines(ref: str) -> str:
    """`A:B` (whole columns) and `3:4` (whole rows) as the cell ranges they cover."""
    columns = re.fullmatch(r"([A-Za-z]{1,3}):([A-Za-z]{1,3})", ref)
    if columns:
        return f"{columns[1]}1:{columns[2]}{EXCEL_ROWS}"
    rows = re.fullmatch(r"(\d{1,7}):(\d{1,7})", ref)
    if rows:
        return f"A{rows[1]}:XFD{rows[2]}"
    return ref


def check_grid(wb, path) -> None:
    """Refuse a workbook with a cell beyond Excel's grid (no application wrote it)."""
    for ws in wb.worksheets:
        if ws.max_row > EXCEL_ROWS or ws.max_column > EXCEL_COLS:
            raise UserError(f"{path}: sheet {ws.title!r} has cells beyond Excel's "
                            f"{EXCEL_ROWS:,} rows × {EXCEL_COLS:,} columns (row "
                            f"{ws.max_row:,}, column {ws.max_column:,})")
