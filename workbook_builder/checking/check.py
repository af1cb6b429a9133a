"""`check`: re-derive every step from the inputs a workbook holds now, and compare.

The expected blocks come from the kind's NumPy reference, fed with the inputs read back
from the file (a teacher may have edited them); the actual blocks come from evaluating the
workbook's own formulas. Every named step block is compared cell by cell.
"""

import functools
import html
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book.files import open_workbook, saved_values
from workbook_builder.book.reading import check_zip_directory
from workbook_builder.book.workbook import BookSpec, read_spec, spec_request
from workbook_builder.checking.placement import Placement, hold_to_layout
from workbook_builder.engines.formulas_engine import (
    CellValues,
    check_application_input,
    evaluate_with_formulas,
)
from workbook_builder.engines.gnumeric import INSTALL_HINT as GNUMERIC_HINT
from workbook_builder.engines.gnumeric import evaluate_with_gnumeric, ssconvert_path
from workbook_builder.engines.libreoffice import INSTALL_HINT as LIBREOFFICE_HINT
from workbook_builder.engines.libreoffice import (
    evaluate_with_libreoffice,
    refuse_parts_beyond_libreoffice,
    require_installed,
    soffice_path,
)
from workbook_builder.errors import UserError
from workbook_builder.sheet.cells import is_formula_cell
from workbook_builder.sheet.constants import (
    constant_block_at,
    constant_blocks,
    constant_value,
)
from workbook_builder.sheet.exercise import KEY_SHEET, filled_copy, key_range
from workbook_builder.sheet.kind import check_input_rules
from workbook_builder.sheet.names import NamedRange, find_block, find_name
from workbook_builder.sheet.refs import parse_range
from workbook_builder.sheet.request import BuildRequest
from workbook_builder.xlsx.of_openpyxl import stored_cells

# Excel sums left to right, NumPy pairwise; float64 results agree to ~1e-15 relative. A
# wrong formula is off by far more than this bound.
RELATIVE_TOLERANCE = 1e-9

Engine = Callable[[Path, Workbook | None], CellValues]  # the file, and it loaded (if at hand)
# an application's saved copy read with its inputs' blocks in bulk, not a cell at a time
ENGINES: dict[str, Engine] = {
    "formulas": evaluate_with_formulas,
    "libreoffice": functools.partial(evaluate_with_libreoffice, read=saved_values),
    "gnumeric": functools.partial(evaluate_with_gnumeric, read=saved_values)}


@dataclass(frozen=True)
class Application:
    """An engine that is a program of its own: its name, where it is (None when it is not
    installed) and the command that installs it."""
    title: str
    found: Callable[[], str | None]
    install: str


APPLICATIONS = {"libreoffice": Application("LibreOffice", soffice_path, LIBREOFFICE_HINT),
                "gnumeric": Application("Gnumeric", ssconvert_path, GNUMERIC_HINT)}


def installed_engines() -> tuple[list[str], list[str]]:
    """(the engines that can run here, "name (install command)" for those that cannot)."""
    present, missing = [], []
    for name in ENGINES:
        app = APPLICATIONS.get(name)
        if app is None or app.found() is not None:
            present.append(name)
        else:
            missing.append(f"{name} ({app.install})")
    return present, missing


def require_engine(name: str) -> None:
    """Fail now, in one line, if engine `name` is a program that is not installed."""
    app = APPLICATIONS.get(name)
    if app is not None:
        require_installed(app.found(), app.title, app.install)

if TYPE_CHECKING:  # pandas is imported on first use: it costs ~0.3 s at start-up
    import pandas as pd


@dataclass
class StepResult:
    name: str
    cells: int
    max_abs_error: float | None
    worst_cell: str
    tolerance: float
    passed: bool
    problem: str = ""


@dataclass
class CheckReport:
    path: str
    kind: str
    params: dict[str, Any]
    layout: str
    engine: str
    steps: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.steps) and all(step.passed for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return _finite_or_none(data)

    def to_frame(self) -> "pd.DataFrame":
        """One row per step: cells, max |error|, worst cell, tolerance, passed, problem."""
        import pandas as pd

        return pd.DataFrame([asdict(step) for step in self.steps]).set_index("name")

    def _repr_html_(self) -> str:
        verdict = "all steps pass" if self.passed else "FAILED"
        colour = "#C6EFCE" if self.passed else "#FFC7CE"
        table = self.to_frame().style.apply(
            lambda row: [f"background-color: {'#C6EFCE' if row['passed'] else '#FFC7CE'}"]
            * len(row), axis=1).format({"max_abs_error": "{:.2e}", "tolerance": "{:.0e}"},
                                       na_rep="—").to_html()
        return (f"<p style='background:{colour}'><b>{html.escape(self.kind)}</b> "
                f"({html.escape(self.engine)}): {verdict}</p>{table}")


def read_inputs(wb: Workbook, kind, params, path: Path,
                evaluated: Callable[[], CellValues],
                places: dict[str, NamedRange] | None = None) -> dict[str, np.ndarray]:
    """The input blocks as they are now; a cell holding a formula takes its evaluated value.
    Text, blanks and error values are refused with the cell's address. `places`: where
    the layout puts each block (`hold_to_layout`), read instead of where the names point."""
    inputs, read_at = {}, {}
    for name, shape in kind.input_shapes(params).items():
        where = find_block(wb, name, path, shape) if places is None else places[name]
        read_at[name] = where
        ws = wb[where.sheet]
        array = constant_block_at(ws, where.top, where.left, where.bottom, where.right)
        if array is not None:  # plain numbers, checked finite when read
            inputs[name] = array.values.copy()
            continue
        block = np.empty(shape)
        # array blocks are asked for its cells only when one overlaps it (not once a cell)
        partly_array = any(b.top <= where.bottom and where.top <= b.bottom and
                           b.left <= where.right and where.left <= b.right
                           for b in constant_blocks(ws))
        for i in range(shape[0]):
            for j in range(shape[1]):
                held, value = constant_value(ws, where.top + i, where.left + j) \
                    if partly_array else (False, None)
                cell = None if held else ws.cell(where.top + i, where.left + j)
                value = value if held else cell.value
                if cell is not None and is_formula_cell(cell):
                    value = evaluated().get((where.sheet.upper(), where.top + i,
                                             where.left + j))
                block[i, j] = _input_number(value, name, where.address(i, j), path)
        inputs[name] = block
    check_input_rules(kind, params, inputs,  # a rule declared on an input, e.g. token ids
                      lambda name, i, j: f"{path}: input {name} cell {read_at[name].address(i, j)}")
    return inputs


def _input_number(value: Any, name: str, address: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = "nothing" if value is None or value == "" else repr(str(value))
        raise UserError(f"{path}: input {name} cell {address} holds {shown}, not a number")
    if not math.isfinite(value):
        raise UserError(f"{path}: input {name} cell {address} is not a finite number")
    return float(value)


_MISSING = object()  # a cell the engine gave no value


def _finite_or_none(data: Any) -> Any:
    """`data` with every ±inf or NaN float made None: strict JSON has neither (an input
    near 1e308 overflows the reference; the step's problem says where)."""
    if isinstance(data, dict):
        return {key: _finite_or_none(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_finite_or_none(value) for value in data]
    return None if isinstance(data, float) and not math.isfinite(data) else data


def compare_block(where: NamedRange, expected: np.ndarray, values: CellValues,
                  wb: Workbook | None = None, ranges: dict[str, list] | None = None
                  ) -> StepResult:
    """Cell-by-cell comparison; a missing or non-numeric cell fails the step, and so does,
    given the workbook `wb`, a cell that holds a value where the step needs a formula
    (`ranges`: each sheet's `array_ranges`, found once for many steps)."""
    cells = expected.size
    # relative to the block's largest value, however large (no sheet writes a sentinel
    # into a step: masks are IFs, and a masked row max falls back on an allowed score)
    tolerance = RELATIVE_TOLERANCE * max(1.0, float(np.abs(expected).max(initial=0.0)))
    if where.shape != expected.shape:
        return StepResult(where.name, cells, None, "", tolerance, False,
                          f"block spans {where.shape} but the reference is {expected.shape}")
    worst, worst_cell, missing, bad = -1.0, "", 0, ""
    sheet, cols = where.sheet.upper(), expected.shape[1]
    got = [values.get((sheet, where.top + i, where.left + j), _MISSING)
           for i in range(expected.shape[0]) for j in range(cols)]
    numbers = np.full(len(got), np.nan)  # NaN: not compared
    for k, value in enumerate(got):
        if value is _MISSING:
            missing += 1
        elif isinstance(value, bool) or not isinstance(value, int | float) or \
                not math.isfinite(value):
            bad = bad or f"{where.address(k // cols, k % cols)} holds {value}"
        else:
            numbers[k] = value
    # the error of every cell at once; the worst is the first of the largest (a NaN in the
    # reference is never the worst)
    errors = np.abs(numbers - expected.ravel())
    errors[np.isnan(errors)] = -1.0
    if errors.size and errors.max() >= 0:
        k = int(np.argmax(errors))
        worst, worst_cell = float(errors[k]), where.address(k // cols, k % cols)
    problem = bad
    typed = [] if wb is None else typed_values(wb, where, ranges)
    if typed:
        problem = (f"values, not formulas: {len(typed)} of {cells} cell(s) hold a typed "
                   f"value (first {typed[0]})" + (f"; {bad}" if bad else ""))
    # a step pasted over with numbers is a block of constants, which the engine does not
    # copy out: its cells are typed values, not cells the engine left without one
    if missing and not typed:
        problem = (f"{missing} cell(s) left without a value by the engine "
                   f"(a reference cycle?)" + (f"; {bad}" if bad else ""))
    passed = not problem and worst <= tolerance
    return StepResult(where.name, cells, worst if worst >= 0 else None, worst_cell, tolerance,
                      passed, problem)


# a cell the engine gave no value
_MISSING = object()


def array_ranges(ws) -> list[tuple[int, int, int, int]]:
    """The rectangles the sheet's array formulas fill."""
    return [parse_range(cell.value.ref) for cell in stored_cells(ws)
            if isinstance(cell.value, ArrayFormula)]


def array_members(ws, where: NamedRange,
                  ranges: list[tuple[int, int, int, int]] | None = None) -> set[tuple[int, int]]:
    """The cells of the block `where` that an array formula fills (only those: an array
    formula elsewhere may span a million cells); `ranges`: the sheet's `array_ranges`, when
    known (a sheet of many steps is walked once, not once a step)."""
    cells = set()
    for top, left, bottom, right in array_ranges(ws) if ranges is None else ranges:
        top, left = max(top, where.top), max(left, where.left)
        bottom, right = min(bottom, where.bottom), min(right, where.right)
        cells |= {(r, c) for r in range(top, bottom + 1) for c in range(left, right + 1)}
    return cells


def holds_formula(cell, arrays: set[tuple[int, int]]) -> bool:
    """A cell computed by a formula: its own, or an array formula's over it (text that
    starts with "=" is text)."""
    return is_formula_cell(cell) or (cell.row, cell.column) in arrays


def typed_values(wb: Workbook, where: NamedRange,
                 ranges: dict[str, list] | None = None) -> list[str]:
    """The cells of a step block that hold a value, not a formula (pasted values pass no
    check: nothing in them follows the inputs); `ranges`: each sheet's `array_ranges`."""
    ws = wb[where.sheet]
    arrays = array_members(ws, where, None if ranges is None else ranges[where.sheet])
    typed = []
    if len(arrays) == where.shape[0] * where.shape[1]:  # all filled by array formulas
        return typed
    for i in range(where.shape[0]):
        for j in range(where.shape[1]):
            row, col = where.top + i, where.left + j
            if (row, col) not in arrays and not holds_formula(ws.cell(row, col), arrays):
                typed.append(where.address(i, j))
    return typed


def expected_steps(kind, params, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference's value of every declared step, in sheet order. A step the reference
    does not give (or one it gives that the sheet lacks) is a defect of the kind."""
    with np.errstate(all="ignore"):  # inputs near 1e308 overflow: the report shows where
        computed = kind.reference(inputs, params)
    declared = kind.step_names(params)
    if set(computed) != set(declared):
        raise ValueError(f"kind {kind.name}: the sheet declares {sorted(declared)} but the "
                         f"reference gives {sorted(computed)}")
    return {name: np.asarray(computed[name], float) for name in declared}


def _silent(message: str) -> None:
    """The progress callback of calls nobody watches."""


def check_workbook(path: Path, engine: str = "formulas", values: CellValues | None = None,
                   progress: Callable[[str], None] = _silent,
                   workbook: Workbook | None = None) -> CheckReport:
    """Check one file. `values` are the engine's results when they were computed already
    (by the build that wrote the file, or by one LibreOffice run over many files), and
    `workbook` the file as openpyxl loaded it; `progress` hears what is being done."""
    started = time.perf_counter()
    if engine == "libreoffice" and values is None:  # before minutes of reading such a file
        check_zip_directory(path)  # bounded before zipfile lists the parts
        refuse_parts_beyond_libreoffice(path, "; check it with --engine formulas")
    progress(f"reading {path.name}")
    wb = open_workbook(path, array_blocks=True) if workbook is None else workbook
    spec = read_spec(wb, path)
    request = spec_request(spec)
    kind, params = request.kind, request.params
    evaluate = ENGINES[engine]
    if spec.exercise is not None:  # blank steps: checked with the right answers typed in
        return _check_exercise(path, wb, spec, request, evaluate, engine, started)
    cache: list[CellValues] = [] if values is None else [values]

    def evaluated() -> CellValues:
        if not cache:
            progress(f"evaluating {path.name} with {engine}")
            # the input blocks' own cells are never compared: not copied out of the engine
            cache.append(evaluate(path, wb, input_blocks=False)
                         if evaluate is evaluate_with_formulas else evaluate(path, wb))
        return cache[0]

    placement = hold_to_layout(wb, request, path)
    _refuse_unreadable_names(wb, placement, path)
    places = placement.places
    inputs = read_inputs(wb, kind, params, path, evaluated, places)
    expected = expected_steps(kind, params, inputs)
    values = evaluated()
    progress(f"comparing {len(expected)} steps of {path.name}")
    report = CheckReport(str(path), kind.name, spec.params, spec.layout, engine)
    ranges = {ws.title: array_ranges(ws) for ws in wb.worksheets}
    for name, block in expected.items():
        report.steps.append(compare_block(places[name], block, values, wb, ranges))
    report.steps = placement_results(placement, report.steps)
    report.seconds = time.perf_counter() - started
    return report


def _refuse_unreadable_names(wb: Workbook, placement: Placement, path: Path) -> None:
    """A name missing, or not one range on a sheet the file has, is not a workbook of this
    kind: one line, exit 2 (`find_name`), before any engine runs."""
    for name in placement.misplaced:
        find_name(wb, name, path)


def placement_results(placement: Placement, steps: list[StepResult]) -> list[StepResult]:
    """The step results, each step whose name is not where the layout puts it failed with
    the reason; then a failed row for each other name (an input's, a self-check's) and each
    sheet added, hidden or missing."""
    compared = {step.name for step in steps}
    for step in steps:
        problem = placement.misplaced.get(step.name)
        if problem:
            step.passed = False
            step.problem = problem + (f"; {step.problem}" if step.problem else "")
    others = [StepResult(name, 0, None, "", 0.0, False, problem)
              for name, problem in placement.misplaced.items() if name not in compared]
    sheets = [StepResult("sheets", 0, None, "", 0.0, False, problem)
              for problem in placement.sheets]
    return sheets + others + steps


def _check_exercise(path: Path, wb: Workbook, spec: BookSpec, request: BuildRequest,
                    evaluate: Engine, engine: str, started: float) -> CheckReport:
    """`check` for an exercise workbook: is it a correct exercise? In a copy with the right
    answers typed into the exercise cells, every other visible step must equal the
    reference (so later steps really work from the student's entries), every block of the
    hidden key must equal it (so the self-check compares with right answers), and every
    CHECK_<STEP> must count all its cells. The student's own entries are `grade`'s job."""
    kind, params, exercise = request.kind, request.params, request.exercise
    placement = hold_to_layout(wb, request, path)
    _refuse_unreadable_names(wb, placement, path)
    places = placement.places
    if engine != "formulas":  # the filled copy goes to the application without `wb`
        check_application_input(wb, path.name)
    inputs = read_inputs(wb, kind, params, path, lambda: evaluate(path, wb), places)
    expected = expected_steps(kind, params, inputs)
    with tempfile.TemporaryDirectory(prefix="attnsheets-check-") as tmp:
        filled = Path(tmp) / path.name
        filled_copy(path, filled, exercise, expected, places)
        values = evaluate(filled, None)
    report = CheckReport(str(path), kind.name, spec.params, spec.layout, engine)
    ranges = {ws.title: array_ranges(ws) for ws in wb.worksheets}
    for name, block in expected.items():
        if name not in exercise.steps:
            report.steps.append(compare_block(places[name], block, values, wb, ranges))
    if exercise.self_check:
        if KEY_SHEET not in wb.sheetnames:
            raise UserError(f"{path}: the hidden {KEY_SHEET} sheet of its self-checks is "
                            f"missing")
        for name, block in expected.items():
            report.steps.append(compare_block(key_range(places[name]), block, values, wb,
                                              ranges))
        for step in exercise.steps:
            where = places.get(f"CHECK_{step}") or find_name(wb, f"CHECK_{step}", path)
            report.steps.append(compare_block(where, np.array([[expected[step].size]], float),
                                              values))
    report.steps = placement_results(placement, report.steps)
    report.seconds = time.perf_counter() - started
    return report
