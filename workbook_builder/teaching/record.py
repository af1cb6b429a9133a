"""The teacher's record of a class (`manifest.json`), which `grade --manifest` trusts
instead of the returned files.

A returned workbook is the student's to edit: its About sheet, its inputs and its hidden
key can all be changed. The record, written by `class` on the teacher's side, holds per
student what grading needs: the kind, parameters, layout, tokens, seed (the inputs are
drawn from it again), the exercise's steps and tolerance, the file names and a digest of
the inputs written. Inputs every student shares (a checkpoint's weights, not drawn from
a seed) are kept beside it in `manifest_inputs.npz`, whose digest the record holds.
`manifest.csv` beside it is the same list for people.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder import __version__
from workbook_builder.book.files import move_into_place, temp_beside
from workbook_builder.errors import UserError
from workbook_builder.registry import get_kind
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.request import BuildRequest, ExerciseSpec
from workbook_builder.teaching.answers import ANSWER_MODES

RECORD = "manifest.json"
SHARED = "manifest_inputs.npz"  # inputs given to every student (a checkpoint's weights)
FORMAT = "attnsheets-class-record/1"
DIGEST_DIGITS = 12  # significant digits hashed: any application's save keeps far more


def inputs_digest(inputs: dict[str, np.ndarray]) -> str:
    """SHA-256 of the input blocks (names, shapes, and each number to 12 significant
    digits, so a file re-saved by Excel, LibreOffice or Gnumeric gives the same digest)."""
    digest = hashlib.sha256()
    for name in sorted(inputs):
        block = np.asarray(inputs[name], dtype=float)
        numbers = ",".join(f"{x + 0.0:.{DIGEST_DIGITS}g}" for x in block.ravel())  # -0 → 0
        digest.update(f"{name}{block.shape}:{numbers};".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class StudentRecord:
    """What grading needs about one student's exercise."""

    student: str
    name: str
    file: str
    key_file: str
    seed: int
    kind: str
    params: dict[str, Any]
    layout: str
    tokens: list[str]
    steps: tuple[str, ...]
    tolerance: float
    inputs_sha256: str
    # whether the exercise has its self-check table (it sets where the blocks start);
    # manifests written before it was recorded always had one
    self_check: bool = True
    # the answers the class takes (answers.ANSWER_MODES); manifests written before it was
    # recorded took typed values and formulas alike
    answers: str = "either"
    # the inputs every student shares, from SHARED (not in the JSON)
    shared: dict[str, np.ndarray] | None = field(default=None, compare=False, repr=False)

    def exercise(self) -> ExerciseSpec:
        return ExerciseSpec(self.steps, self.tolerance, self.self_check)

    def kind_params(self):
        kind = get_kind(self.kind)
        return kind, make_params(kind, self.params)

    def request(self) -> BuildRequest:
        """The request `class` built this student's exercise from."""
        kind, params = self.kind_params()
        return BuildRequest(kind, params, list(self.tokens), self.layout,
                            exercise=self.exercise(), student=self.student,
                            student_name=self.name)

    def inputs(self) -> dict[str, np.ndarray]:
        """The inputs `class` wrote, drawn again from the recorded seed (and checked against
        the recorded digest, so a different drawing is never graded against)."""
        kind, params = self.kind_params()
        inputs = complete_inputs(kind, params, self.shared or {}, self.seed)
        if inputs_digest(inputs) != self.inputs_sha256:
            raise UserError(f"the manifest's inputs of student {self.student} cannot be drawn "
                            f"again from seed {self.seed} by attnsheets {__version__}; "
                            f"grade with the version that wrote the class")
        return inputs


def student_record(student: str, name: str, file: str, key_file: str, seed: int, kind: str,
                   params: dict, layout: str, tokens: list[str], exercise: ExerciseSpec,
                   inputs: dict[str, np.ndarray], answers: str = "either") -> StudentRecord:
    return StudentRecord(student, name, file, key_file, seed, kind, params, layout,
                         list(tokens), tuple(exercise.steps), exercise.tolerance,
                         inputs_digest(inputs), exercise.self_check, answers)


def write_record(path: Path, students: list[StudentRecord],
                 shared: dict[str, np.ndarray] | None = None) -> None:
    """The record as JSON, written atomically (the folder is the class's staging folder),
    and the inputs every student shares, if any, as SHARED beside it."""
    data = {"format": FORMAT, "generator": f"attnsheets {__version__}",
            "students": [{**{k: v for k, v in asdict(s).items() if k != "shared"},
                          "steps": list(s.steps)} for s in students]}
    if shared:
        data["shared_inputs"] = {"file": SHARED, "sha256": inputs_digest(shared)}
        with temp_beside(path, ".attnsheets-", ".npz") as tmp:
            with tmp.open("wb") as handle:
                np.savez_compressed(handle, **shared)
            move_into_place(tmp, path.with_name(SHARED), force=True)
    with temp_beside(path, ".attnsheets-", ".json") as tmp:
        tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
        move_into_place(tmp, path, force=True)


def _read_shared(path: Path, entry: Any) -> dict[str, np.ndarray]:
    """The inputs every student shares, checked against the record's digest."""
    try:
        shared_path = path.with_name(Path(str(entry["file"])).name)
        with np.load(shared_path, allow_pickle=False) as data:
            shared = {name: np.asarray(data[name], dtype=float) for name in data.files}
    except (KeyError, TypeError, OSError, ValueError) as exc:
        raise UserError(f"{path}: the shared inputs {SHARED} beside it cannot be read "
                        f"({exc})") from None
    if inputs_digest(shared) != entry.get("sha256"):
        raise UserError(f"{path.with_name(SHARED)} is not the file the manifest recorded "
                        f"(its digest differs)")
    return shared


def read_record(path: Path) -> list[StudentRecord]:
    """The students of a record written by `class` (a folder means its manifest.json)."""
    if path.is_dir():
        path = path / RECORD
    if path.suffix.lower() == ".csv":
        raise UserError(f"{path} is the manifest for people; give --manifest "
                        f"{path.with_name(RECORD)} (written beside it by class)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such manifest (class writes {RECORD} in its "
                        f"folder)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: not a readable manifest ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}: not a readable manifest (nested too deeply)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{path} is not a class manifest written by attnsheets class")
    try:
        students = [StudentRecord(**{**entry, "steps": tuple(entry["steps"]),
                                     "seed": int(entry["seed"]),
                                     "tolerance": float(entry["tolerance"]),
                                     "self_check": entry.get("self_check", True) is True})
                    for entry in data["students"]]
        for student in students:
            if student.answers not in ANSWER_MODES:
                raise ValueError(f"answers {student.answers!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: a student entry of the manifest is damaged ({exc})") \
            from None
    if not students:
        raise UserError(f"{path}: the manifest lists no students")
    if "shared_inputs" in data:
        shared = _read_shared(path, data["shared_inputs"])
        students = [replace(s, shared=shared) for s in students]
    return students


def by_file_name(students: list[StudentRecord], path: Path) -> StudentRecord | None:
    """The student whose exercise file this is: the same name, or a name ending in it (as
    course platforms prefix downloads, e.g. `Li Lei_1234_attention_s01.xlsx`); the longest
    recorded name wins. Case is ignored."""
    name = path.name.lower()

    def matches(recorded: str) -> bool:
        return name == recorded or (name.endswith(recorded)
                                    and not name[-len(recorded) - 1].isalnum())

    found = [s for s in students if matches(s.file.lower())]
    return max(found, key=lambda s: len(s.file), default=None)


def by_digest(students: list[StudentRecord], digest: str) -> StudentRecord | None:
    return next((s for s in students if s.inputs_sha256 == digest), None)
