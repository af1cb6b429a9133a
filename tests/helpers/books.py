"""Workbooks for the tests: the registry of kinds and their test cases, a workbook built in
tmp_path (and checked from the values its build computed), a build request and a workbook in
memory, a named block's cells and values, and exercises built, answered and self-checked."""

import dataclasses
import types
from pathlib import Path

import numpy as np
import openpyxl
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book.files import BuiltBook, write_workbook
from workbook_builder.book.workbook import build_workbook
from workbook_builder.checking.check import CheckReport, check_workbook
from workbook_builder.engines.cached_values import store_values
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.constants import CONSTANT_BLOCK_CELLS
from workbook_builder.sheet.kind import Kind, complete_inputs, make_params
from workbook_builder.sheet.limits import DEFAULT_MAX_CELLS, place_kind, plan_build
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.request import BuildRequest, ExerciseSpec
from workbook_builder.xlsx.of_openpyxl import load_workbook

KINDS = load_kinds()


def whole_number_flags() -> list[tuple[str, str]]:
    """(kind, flag) of every whole-number parameter of every registered kind."""
    flags = []
    for name, kind in sorted(KINDS.items()):
        for f in dataclasses.fields(kind.Params):
            allowed = f.type.__args__ if isinstance(f.type, types.UnionType) else (f.type,)
            if int in allowed:
                flags.append((name, f.metadata.get("flag", "--" + f.name.replace("_", "-"))))
    return flags


ALL_CASES = [(name, i, case) for name, kind in sorted(KINDS.items())
             for i, case in enumerate(kind.test_cases)]


BUILT: dict[Path, BuiltBook] = {}


def formula_book(title: str, arguments, *formulas) -> Workbook:
    """A workbook of one sheet `title`: each argument in column A, and on its row, in the
    columns after it, each of `formulas` (a function of the row number)."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = title
    for row, x in enumerate(arguments, start=1):
        ws.cell(row, 1, x)
        for column, formula in enumerate(formulas, start=2):
            ws.cell(row, column, formula(row))
    return wb


def write_book(kind: type[Kind], params, path: Path, *, seed: int = 0, given=None,
               tokens=None, layout: str = "cells", force: bool = False,
               max_cells: int = DEFAULT_MAX_CELLS,
               array_block_cells: int | None = CONSTANT_BLOCK_CELLS, **request) -> BuiltBook:
    """A build as the demo makes it: the request (`plan_build`: its limits checked), then
    the workbook written to `path`; `request` holds its other fields (lang, exercise,
    note, student, …)."""
    made = plan_build(kind, params, tokens, max_cells=max_cells, layout=layout,
                      array_block_cells=array_block_cells, **request)
    return write_workbook(made, path, given=given, seed=seed, force=force)


def book_in_memory(kind: type[Kind], params, inputs, labels, layout: str = "cells",
                   **request) -> Workbook:
    """The workbook of a request made of these fields, in memory (no limit checked)."""
    return build_workbook(BuildRequest(kind, params, labels, layout, **request), inputs)


def placement_of(kind: type[Kind], params, layout: str = "cells", exercise=None):
    """Where the writer puts everything on a sheet of these parameters (`place_kind`)."""
    return place_kind(BuildRequest(kind, params, [], layout, exercise=exercise))


def build(tmp_path: Path, kind_name: str, params: dict, layout: str = "cells",
          seed: int = 0, given=None, tokens=None, name: str = "book.xlsx", **options) -> Path:
    """Write a workbook of a kind into tmp_path (replacing one of the same name)."""
    kind = KINDS[kind_name]
    path = tmp_path / name
    BUILT[path] = write_book(kind, make_params(kind, params), path, seed=seed, given=given,
                             tokens=tokens, layout=layout, force=True, **options)
    return path


def check_built(path: Path) -> CheckReport:
    """`check` of a workbook just built, from the values its build computed (as `demo`
    does): one evaluation per workbook."""
    built = BUILT[path]
    return check_workbook(path, values=built.values, workbook=built.workbook)


def cell_of(wb, name: str, i: int, j: int):
    """Cell (i, j) of the block a defined name covers."""
    where = find_name(wb, name, None)
    return wb[where.sheet].cell(where.top + i, where.left + j)


def block_values(path: Path, name: str) -> list[list]:
    """A named block's values as the file stores them (data_only)."""
    wb = openpyxl.load_workbook(path, data_only=True)
    where = find_name(wb, name, path)
    ws = wb[where.sheet]
    return [[ws.cell(where.top + i, where.left + j).value for j in range(where.shape[1])]
            for i in range(where.shape[0])]


def evaluated_blocks(path: Path, values: dict, names) -> dict[str, np.ndarray]:
    """Named blocks of a workbook as an engine computed them (`values`: that engine's cell
    values, e.g. `evaluate_with_formulas(path)` or a build's own). An input block's cells,
    which a build's own values leave out (no formula computes them), are read from the file."""
    wb = load_workbook(path)
    blocks = {}
    for name in names:
        where = find_name(wb, name, path)
        sheet = where.sheet.upper()
        if (sheet, where.top, where.left) in values:
            rows = [[values[(sheet, where.top + i, where.left + j)]
                     for j in range(where.shape[1])] for i in range(where.shape[0])]
        else:  # an input block: the numbers the file holds
            rows = [list(row) for row in wb[where.sheet].iter_rows(
                min_row=where.top, max_row=where.bottom, min_col=where.left,
                max_col=where.right, values_only=True)]
        blocks[name] = np.array(rows, dtype=float)
    return blocks


ATTENTION = {"seq_len": 3, "d_model": 2, "d_k": 2}


def exercise_book(tmp_path, kind_name, values, steps, layout="cells", seed=5, name=None,
                  **options):
    """Build an exercise workbook; returns it and the reference's value of every step."""
    kind = KINDS[kind_name]
    params = make_params(kind, values)
    path = tmp_path / (name or f"{kind_name}_{layout}.xlsx")
    write_book(kind, params, path, seed=seed, layout=layout,
               exercise=ExerciseSpec(tuple(steps), **options))
    answers = kind.reference(complete_inputs(kind, params, {}, seed), params)
    return path, answers


def fill(path, answers, steps, target, change=None):
    """Type the reference answers into the exercise cells; `change(step, i, j, value)` may
    return something else for a cell."""
    wb = openpyxl.load_workbook(path)
    for step in steps:
        where = find_name(wb, step, path)
        for (i, j), value in np.ndenumerate(answers[step]):
            typed = float(value) if change is None else change(step, i, j, float(value))
            wb[where.sheet].cell(where.top + i, where.left + j).value = typed
    wb.save(target)
    return target


def student_answers(tmp_path) -> Path:
    """An attention exercise (WEIGHTS, OUTPUT) answered right: WEIGHTS typed, OUTPUT as
    formulas (so its values depend on who calculated the file)."""
    steps = ["WEIGHTS", "OUTPUT"]
    path, answers = exercise_book(tmp_path, "attention", ATTENTION, steps)
    return fill(path, answers, steps, tmp_path / "student.xlsx",
                lambda s, i, j, v: f"={v!r}*1" if s == "OUTPUT" else v)


def planted_copy(tmp_path) -> tuple[Path, Path, dict]:
    """A small causal attention workbook, a copy of it whose every formula cell carries the
    cached value 123 (a stale value), and the planted values."""
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2,
                                         "causal": True})
    wb = openpyxl.load_workbook(path)
    wrong = {(ws.title.upper(), c.row, c.column): 123.0 for ws in wb.worksheets
             for row in ws.iter_rows() for c in row
             if isinstance(c.value, str) and c.value.startswith("=")}
    planted = tmp_path / "planted.xlsx"
    store_values(path, planted, wrong)
    return path, planted, wrong


def self_check(path, values, steps):
    """{step: (CHECK_<STEP> value, per-row marks)} as an engine computed them."""
    wb = load_workbook(path)
    result = {}
    for step in steps:
        count = find_name(wb, f"CHECK_{step}", path)
        block = find_name(wb, step, path)
        marks = [values.get((block.sheet.upper(), block.top + i, block.right + 1))
                 for i in range(block.shape[0])]
        result[step] = (values.get((count.sheet.upper(), count.top, count.left)), marks)
    return result


def awkward_workbook(path):
    """Formulas filled down and across that a compile cache could get wrong."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Data"
    other = wb.create_sheet("my sheet")
    for row in range(1, 7):
        ws.cell(row, 1, row * 1.5)
        ws.cell(row, 2, 10 - row)
        other.cell(row, 1, row * 100)
        r = row
        fills = {
            3: f"=A{r}*2+B{r}",
            4: f"=ROW()*A{r}+COLUMN()",  # depends on the cell's own position
            5: f"=A{r}+$A$1",  # A1 and $A$1: the same cell in row 1
            6: f"='my sheet'!A{r}+A{r}",
            7: f"=SUM(NUMS)+FIRST+A{r}",  # defined names
            8: f'="A{r}"&B{r}&LEN("B2:C3")',  # strings that look like references
            9: f"=I{r - 1}+A{r}" if row > 1 else "=A1",  # a chain down the column
            10: f"=$A{r}*B$1",
            11: f"=SUM(A$1:A{r})",  # a range that grows down the column
            12: f'=IF(A{r}>4,"big",A{r})',
            13: f"=1/(A{r}-3)",  # #DIV/0! in row 2
            14: f"=data!A{r}+Data!B{r}",
            15: f"=SUMPRODUCT(A{r}:B{r},A$1:B$1)",
            16: f"=B{7 - r}-A{r}",
            17: f"=$A$1:A{r}",  # a range whose corners swap above row 1? never: A1 is top
            18: f"=O{r}*2",
            22: f"=A{r + 1}+$A$3",  # in row 2 both are A3: that cell takes its own path
            23: f"=A{r}-A{r + 5}",  # 'A5' < 'A6' but 'A10' < 'A5': inputs sort differently
        }
        for col, formula in fills.items():
            ws.cell(row, col, formula)
        ws.cell(7, row, f"={chr(64 + row)}1+{chr(64 + row)}$2")  # across a row
    ws["S1"] = ArrayFormula("S1:S2", "=A1:A2*2")
    ws["S3"] = ArrayFormula("S3:S4", "=A3:A4*2")
    ws["T1"] = ArrayFormula("T1:U1", "=TRANSPOSE(A1:A2)")
    ws["T2"] = ArrayFormula("T2:U2", "=TRANSPOSE(A2:A3)")
    wb.defined_names["NUMS"] = DefinedName("NUMS", attr_text="Data!$A$1:$A$6")
    wb.defined_names["FIRST"] = DefinedName("FIRST", attr_text="Data!$B$1")
    wb.save(path)
    return path
