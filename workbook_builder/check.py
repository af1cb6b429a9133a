"""`check`: re-derive every step from the inputs a workbook holds now, and compare.

The expected blocks come from the kind's NumPy reference, fed with the inputs read back
from the file (a teacher may have edited them); the actual blocks come from evaluating the
workbook's own formulas. Every named step block is compared cell by cell.
"""

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from openpyxl.workbook.workbook import Workbook

from workbook_builder.book import open_workbook, read_spec, spec_kind_params
from workbook_builder.errors import UserError
from workbook_builder.evaluate import CellValues, evaluate_with_formulas
from workbook_builder.libreoffice import evaluate_with_libreoffice
from workbook_builder.progress import silent
from workbook_builder.sheet.refs import cell_ref, parse_range

# Excel sums left to right, NumPy pairwise; float64 results agree to ~1e-15 relative. A
# wrong formula is off by far more than this bound.
RELATIVE_TOLERANCE = 1e-9

Engine = Callable[[Path, Workbook], CellValues]  # the file, and it loaded by openpyxl
ENGINES: dict[str, Engine] = {"formulas": evaluate_with_formulas,
                              "libreoffice": evaluate_with_libreoffice}


@dataclass(frozen=True)
class NamedRange:
    name: str
    sheet: str
    top: int
    left: int
    bottom: int
    right: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.bottom - self.top + 1, self.right - self.left + 1

    def address(self, i: int, j: int) -> str:
        return f"{self.sheet}!{cell_ref(self.top + i, self.left + j)}"


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
        return data


def find_name(wb: Workbook, name: str, path: Path) -> NamedRange:
    """The single rectangle a workbook-level defined name points at."""
    defined = wb.defined_names.get(name)
    if defined is None:
        raise UserError(f"{path} lacks the defined name {name}; it is not an attnsheets "
                        f"workbook of this kind, or the name was deleted")
    destinations = list(defined.destinations)
    if len(destinations) != 1:
        raise UserError(f"{path}: defined name {name} does not point at one range")
    sheet, ref = destinations[0]
    if sheet not in wb.sheetnames:
        raise UserError(f"{path}: defined name {name} points at a missing sheet {sheet!r}")
    return NamedRange(name, sheet, *parse_range(ref.replace("$", "")))


def read_inputs(wb: Workbook, kind, params, path: Path,
                evaluated: Callable[[], CellValues]) -> dict[str, np.ndarray]:
    """The input blocks as they are now; a cell holding a formula takes its evaluated value.
    Text, blanks and error values are refused with the cell's address."""
    inputs = {}
    for name, shape in kind.input_shapes(params).items():
        where = find_name(wb, name, path)
        if where.shape != shape:
            raise UserError(f"{path}: input {name} spans {where.shape[0]}×{where.shape[1]} "
                            f"cells but the recorded parameters need {shape[0]}×{shape[1]}")
        ws = wb[where.sheet]
        block = np.empty(shape)
        for i in range(shape[0]):
            for j in range(shape[1]):
                value = ws.cell(where.top + i, where.left + j).value
                if isinstance(value, str) and value.startswith("="):
                    value = evaluated().get((where.sheet.upper(), where.top + i,
                                             where.left + j))
                block[i, j] = _input_number(value, name, where.address(i, j), path)
        inputs[name] = block
    return inputs


def _input_number(value: Any, name: str, address: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = "nothing" if value is None or value == "" else repr(str(value))
        raise UserError(f"{path}: input {name} cell {address} holds {shown}, not a number")
    if not math.isfinite(value):
        raise UserError(f"{path}: input {name} cell {address} is not a finite number")
    return float(value)


def compare_block(where: NamedRange, expected: np.ndarray, values: CellValues) -> StepResult:
    """Cell-by-cell comparison; a missing or non-numeric cell fails the step."""
    cells = expected.size
    # scale by the block's ordinary numbers: a -1E+30 sentinel must not widen the tolerance
    ordinary = np.abs(expected[np.abs(expected) < 1e29])
    tolerance = RELATIVE_TOLERANCE * max(1.0, float(ordinary.max(initial=0.0)))
    if where.shape != expected.shape:
        return StepResult(where.name, cells, None, "", tolerance, False,
                          f"block spans {where.shape} but the reference is {expected.shape}")
    worst, worst_cell, missing, bad = -1.0, "", 0, ""
    for i in range(expected.shape[0]):
        for j in range(expected.shape[1]):
            key = (where.sheet.upper(), where.top + i, where.left + j)
            if key not in values:
                missing += 1
                continue
            got = values[key]
            if isinstance(got, bool) or not isinstance(got, int | float) or \
                    not math.isfinite(got):
                bad = bad or f"{where.address(i, j)} holds {got}"
                continue
            error = abs(float(got) - float(expected[i, j]))
            if error > worst:
                worst, worst_cell = error, where.address(i, j)
    problem = bad
    if missing:
        problem = (f"{missing} cell(s) left without a value by the engine "
                   f"(a reference cycle?)" + (f"; {bad}" if bad else ""))
    passed = not problem and worst <= tolerance
    return StepResult(where.name, cells, worst if worst >= 0 else None, worst_cell, tolerance,
                      passed, problem)


def check_workbook(path: Path, engine: str = "formulas",
                   values: CellValues | None = None,
                   progress: Callable[[str], None] = silent) -> CheckReport:
    """`values` are the engine's results when they were computed already (e.g. many files
    recalculated by one LibreOffice run); `progress` hears what is being done."""
    started = time.perf_counter()
    progress(f"reading {path.name}")
    wb = open_workbook(path)
    spec = read_spec(wb, path)
    kind, params = spec_kind_params(spec)
    if spec.exercise is not None:  # blank steps: checked with the right answers typed in
        from workbook_builder.exercise import check_exercise

        return check_exercise(path, wb, spec, kind, params, engine, started)
    evaluate = ENGINES[engine]
    cache: list[CellValues] = [] if values is None else [values]

    def evaluated() -> CellValues:
        if not cache:
            progress(f"evaluating {path.name} with {engine}")
            cache.append(evaluate(path, wb))
        return cache[0]

    inputs = read_inputs(wb, kind, params, path, evaluated)
    expected = kind.reference(inputs, params)
    places = {name: find_name(wb, name, path) for name in expected}
    values = evaluated()
    progress(f"comparing {len(expected)} steps of {path.name}")
    report = CheckReport(str(path), kind.name, spec.params, spec.layout, engine)
    for name, block in expected.items():
        report.steps.append(compare_block(places[name], np.asarray(block, float), values))
    report.seconds = time.perf_counter() - started
    return report


def format_report(report: CheckReport) -> str:
    lines = [f"{report.path}: kind {report.kind}, layout {report.layout}, "
             f"engine {report.engine}"]
    width = max(len(step.name) for step in report.steps)
    lines.append(f"  {'step':<{width}}  {'cells':>6}  {'max |error|':>11}  "
                 f"{'worst cell':<20}  result")
    for step in report.steps:
        error = "-" if step.max_abs_error is None else f"{step.max_abs_error:.2e}"
        verdict = "pass" if step.passed else "FAIL" + (f" ({step.problem})" if step.problem
                                                       else f" (> {step.tolerance:.0e})")
        lines.append(f"  {step.name:<{width}}  {step.cells:>6}  {error:>11}  "
                     f"{step.worst_cell:<20}  {verdict}")
    failed = [step.name for step in report.steps if not step.passed]
    if failed:
        lines.append(f"  FAILED: {len(failed)} of {len(report.steps)} steps; first: "
                     f"{failed[0]} ({report.seconds:.1f} s)")
    else:
        lines.append(f"  all {len(report.steps)} steps pass ({report.seconds:.1f} s)")
    return "\n".join(lines)


def format_side_by_side(reports: list[CheckReport]) -> str:
    """One file checked by several engines: one row per step, one error column each."""
    first = reports[0]
    width = max(len(step.name) for step in first.steps)
    engines = [r.engine for r in reports]
    lines = [f"{first.path}: kind {first.kind}, layout {first.layout}, engines "
             f"{' + '.join(engines)}",
             f"  {'step':<{width}}  {'cells':>6}  "
             + "  ".join(f"{e + ' max|err|':>22}" for e in engines) + "  result"]
    for i, step in enumerate(first.steps):
        row = [r.steps[i] for r in reports]
        errors = []
        for result in row:
            shown = "-" if result.max_abs_error is None else f"{result.max_abs_error:.2e}"
            if result.problem:
                shown = "FAIL"
            elif not result.passed:
                shown += " FAIL"
            errors.append(f"{shown:>22}")
        verdict = "pass" if all(r.passed for r in row) else "FAIL" + "".join(
            f" ({r.engine}: {res.problem or res.worst_cell})"
            for r, res in zip(reports, row, strict=True) if not res.passed)
        lines.append(f"  {step.name:<{width}}  {step.cells:>6}  " + "  ".join(errors)
                     + f"  {verdict}")
    timing = ", ".join(f"{r.engine} {r.seconds:.1f} s" for r in reports)
    passed = all(r.passed for r in reports)
    lines.append(f"  {'all steps pass in every engine' if passed else 'FAILED'} ({timing})")
    return "\n".join(lines)
