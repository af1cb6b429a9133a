"""One build request: what a workbook is built from, made once where a build starts
(`api.build`, `attnsheets class`, the demo, a tutorial, the catalog check; through
`plan_build` in sheet/limits.py, which refuses it before any work when it cannot fit) and
read by everything below: the size plan and the limits (sheet/limits.py), the writer
(sheet/kind_sheet.py), the exercise (sheet/exercise.py), the workbook and its About sheet
(book/workbook.py); `check` and `grade` make one from what a file records. An exercise's
steps (`ExerciseSpec`) are part of it."""

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind

DEFAULT_TOLERANCE = 0.001


@dataclass(frozen=True)
class ExerciseSpec:
    steps: tuple[str, ...]
    tolerance: float = DEFAULT_TOLERANCE
    self_check: bool = True

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "steps": list(self.steps)})

    @classmethod
    def from_json(cls, text: str) -> "ExerciseSpec":
        data = json.loads(text)
        return cls(tuple(data["steps"]), float(data["tolerance"]), bool(data["self_check"]))


def parse_steps(text: str) -> tuple[str, ...]:
    """'weights, output' -> ('WEIGHTS', 'OUTPUT'); checked against the kind later."""
    steps = tuple(s.strip().upper() for s in text.split(","))
    if not all(steps):
        raise UserError("--exercise has an empty step name")
    if len(set(steps)) != len(steps):
        raise UserError("--exercise names a step twice")
    return steps


def make_spec(steps_text: str, tolerance: float | None, self_check: bool) -> ExerciseSpec:
    tolerance = DEFAULT_TOLERANCE if tolerance is None else tolerance
    if not math.isfinite(tolerance) or tolerance <= 0:
        raise UserError(f"--tolerance must be a positive number, got {tolerance}")
    return ExerciseSpec(parse_steps(steps_text), tolerance, self_check)


def validate_steps(kind, params, spec: ExerciseSpec) -> None:
    known = kind.step_names(params)
    for step in spec.steps:
        if step not in known:
            raise UserError(f"kind {kind.name} has no step {step!r} with these parameters; "
                            f"its steps are {', '.join(known)}")


@dataclass(frozen=True)
class BuildRequest:
    """A workbook to build: the kind and its parameters (the kind's Params, validated), the
    labels of its rows, the layout and the sheet's language; with an exercise, the steps
    left for the student; for a class, the student (id and name); where the inputs come
    from (`note`, under the title and on the About sheet); and from how many cells an input
    block is kept as an array (`array_block_cells`, sheet/constants.py; never in an
    exercise, which edits input cells)."""

    kind: type[Kind]
    params: Any
    labels: list[str]
    layout: str = "cells"
    lang: str = "en"
    exercise: ExerciseSpec | None = None
    student: str | None = None
    student_name: str = ""
    note: str | None = None
    # where each parameter comes from: "parameters: heads 2 from …" (sheet/provenance.py)
    sources: str | None = None
    array_block_cells: int | None = None
