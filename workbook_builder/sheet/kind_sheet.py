"""A kind's sheet written from a build request: the writer of its layout, configured once
(`kind_writer`), and every declared section laid out on it (`lay_out`). Declaring a kind
(sheet/kind.py) imports none of this."""

from collections.abc import Callable, Mapping

import numpy as np
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.declare import Input
from workbook_builder.sheet.hand_layout import HandWriter
from workbook_builder.sheet.kind import Kind
from workbook_builder.sheet.layout import SheetWriter
from workbook_builder.sheet.limits import EXERCISE_TOP, exercise_rows
from workbook_builder.sheet.places import FIRST_ROW
from workbook_builder.sheet.request import BuildRequest


def kind_writer(ws: Worksheet, request: BuildRequest, *, tr: Callable[[str], str] = str,
                answer_key_of: Mapping[str, Block] | None = None) -> SheetWriter:
    """The writer of the request's layout at its parameters and labels, its blocks under
    the title (and under an exercise's instructions and self-check); `tr` the sheet's
    language; `answer_key_of`, an exercise's hidden key of these visible blocks."""
    exercise = request.exercise
    writer = HandWriter if request.layout == "hand" else SheetWriter
    return writer(ws, request.layout, request.params,
                  request.kind.label_sets(request.params, request.labels),
                  FIRST_ROW if exercise is None else EXERCISE_TOP + exercise_rows(exercise),
                  tr=tr, array_block_cells=request.array_block_cells if exercise is None
                  else None, answer_key_of=answer_key_of)


def lay_out(sheet: SheetWriter, kind: type[Kind], inputs: Mapping[str, np.ndarray]) -> None:
    """Write every section the kind declares at the writer's parameters."""
    params = sheet.params
    sections = list(kind.sections(params))  # a kind may declare them lazily
    declared = {i.name for i in kind.inputs if i.present(params)}
    placed = {item.name for sec in sections for band in sec.bands for item in band
              if isinstance(item, Input)}
    if placed != declared:  # a declaration error, caught by the tests of every kind
        raise ValueError(f"kind {kind.name} places inputs {sorted(placed)} but declares "
                         f"{sorted(declared)}")
    sheet.write(sections, inputs)
