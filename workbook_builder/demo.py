"""The demo: every kind's demo workbooks in both layouts, each built and then checked with the
values its build computed (one evaluation per workbook).

Re-running is safe: a file is replaced only if it is unchanged since the demo wrote it
(its SHA-256 is recorded in DIR/.attnsheets-demo.json), or with `force`.

When the all-MiniLM-L6-v2 package is installed, a real model's layer joins them
(`real_model_demo`): BERT layer 0 of all-MiniLM-L6-v2 on the seed tutorial's sentence, in
the blocks layout, in DIR/model/.
"""

import hashlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbook_builder.book.files import temp_beside, write_workbook
from workbook_builder.checking.check import check_workbook
from workbook_builder.errors import UserError
from workbook_builder.models.examples import (
    SEED_SENTENCE,
    make_example,
    minilm_zip,
    reads_a_model,
)
from workbook_builder.models.loader import model_inputs
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.constants import CONSTANT_BLOCK_CELLS
from workbook_builder.sheet.kind import Kind, make_params
from workbook_builder.sheet.limits import plan_build
from workbook_builder.sheet.names import find_name

MANIFEST = ".attnsheets-demo.json"
# the hand layout is for teaching sizes and is built on request, not in the demo
DEMO_LAYOUTS = ("cells", "blocks")


@dataclass(frozen=True)
class DemoResult:
    path: Path
    formula_cells: int
    passed: bool
    steps: int
    first_failure: str
    seconds: float  # build and check


def demo_plan(with_model: bool = True) -> list[tuple[str, type[Kind], dict, str]]:
    """(file name, kind, parameters, layout) for every demo workbook: each kind's
    examples first ({"example": NAME} as parameters), then its demo cases."""
    plan = []
    for _, kind in sorted(load_kinds().items()):
        examples = [(f"{kind.name}_{name}".replace("-", "_"), {"example": name})
                    for name in kind.demo_examples
                    if with_model or not reads_a_model(kind, name)]
        for stem, values in examples + list(kind.demo_cases):
            for layout in DEMO_LAYOUTS:
                plan.append((f"{stem}_{layout}.xlsx", kind, values, layout))
    return plan


def write_demo(kind: type[Kind], values: dict, path: Path, layout: str, lang: str = "en"):
    """Write one demo workbook: the kind's example when `values` names one
    ({"example": NAME}), else the kind at these parameters with inputs from the seed."""
    given, tokens, note = {}, None, None
    if "example" in values:
        preset = make_example(kind, values["example"])
        given = {k: np.asarray(v, dtype=float) for k, v in preset.inputs.items()}
        values, tokens, note = preset.params, preset.tokens, preset.note
    request = plan_build(kind, make_params(kind, values), tokens, layout=layout, lang=lang,
                         note=note, array_block_cells=CONSTANT_BLOCK_CELLS)
    return write_workbook(request, path, given=given, force=True)


def build_and_check(kind_name: str, values: dict, layout: str, path: Path) -> DemoResult:
    """Build one demo workbook (a kind's example when `values` names one) and check it
    from the values its build computed."""
    started = time.perf_counter()
    built = write_demo(load_kinds()[kind_name], values, path, layout)
    report = check_workbook(path, values=built.values, workbook=built.workbook)
    failed = [s.name for s in report.steps if not s.passed]
    return DemoResult(path, built.formula_cells, report.passed, len(report.steps),
                      failed[0] if failed else "", time.perf_counter() - started)


def _manifest(out: Path, names: list[str], force: bool) -> tuple[Path, dict]:
    """The demo's record of the files it wrote; refuses (before anything is written) to
    replace a file it did not write unchanged."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    except (OSError, ValueError):
        manifest = {}
    for name in names:
        path = out / name
        if path.exists() and not force and manifest.get(name) != _sha256(path):
            raise UserError(f"{path} exists and was not written by this demo unchanged; "
                            f"pass --force to replace it")
    return manifest_path, manifest


def run_demo(out: Path, force: bool, workers: int | None = None,
             with_model: bool = True) -> Iterator[DemoResult]:
    """Build and check every demo workbook, one process per core, in plan order."""
    plan = demo_plan(with_model)
    manifest_path, manifest = _manifest(out, [name for name, *_ in plan], force)
    # one workbook per task: the engine is single-threaded, so cores work side by side
    with ProcessPoolExecutor(workers or demo_workers()) as pool:
        jobs = [pool.submit(build_and_check, kind.name, values, layout, out / name)
                for name, kind, values, layout in plan]
        for (name, *_), job in zip(plan, jobs, strict=True):
            result = job.result()
            manifest[name] = _sha256(out / name)
            _save_manifest(manifest_path, manifest)
            yield result


# the real model's workbook: all-MiniLM-L6-v2 on the seed tutorial's sentence
REAL_MODEL_BOOK = "model/bert_minilm_layer0_blocks.xlsx"


@dataclass(frozen=True)
class RealModelDemo:
    """The real model's workbook, checked, and for the token "it" the token each head
    attends to most: (head, token, weight)."""

    result: DemoResult
    top_for_it: list[tuple[int, str, float]]


def real_model_demo(out: Path, force: bool) -> RealModelDemo | None:
    """BERT layer 0 of all-MiniLM-L6-v2 on the seed sentence (encoder-block, blocks
    layout), built and checked; None when the package is not installed."""
    zipped = minilm_zip()
    if zipped is None:
        return None
    manifest_path, manifest = _manifest(out, [REAL_MODEL_BOOK], force)
    started = time.perf_counter()
    kind = load_kinds()["encoder-block"]
    model = model_inputs(kind.name, zipped, layer=0, text=SEED_SENTENCE)
    path = out / REAL_MODEL_BOOK
    path.parent.mkdir(exist_ok=True)
    request = plan_build(kind, make_params(kind, model.params), model.labels,
                         layout="blocks", note=model.note,
                         array_block_cells=CONSTANT_BLOCK_CELLS)
    built = write_workbook(request, path, given=model.inputs, force=True)
    report = check_workbook(path, values=built.values, workbook=built.workbook)
    manifest[REAL_MODEL_BOOK] = _sha256(path)
    _save_manifest(manifest_path, manifest)
    failed = [s.name for s in report.steps if not s.passed]
    result = DemoResult(path, built.formula_cells, report.passed, len(report.steps),
                        failed[0] if failed else "", time.perf_counter() - started)
    it = model.labels.index("it")
    top = []
    for h in range(model.params["heads"]):
        where = find_name(built.workbook, f"WEIGHTS_H{h + 1}", path)
        row = np.array([built.values[(where.sheet.upper(), where.top + it, where.left + j)]
                        for j in range(where.shape[1])], dtype=float)
        best = int(np.argmax(row))
        top.append((h + 1, model.labels[best], float(row[best])))
    return RealModelDemo(result, top)


def demo_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _save_manifest(path: Path, manifest: dict) -> None:
    with temp_beside(path, ".attnsheets-", ".json") as tmp:
        with tmp.open("w") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
