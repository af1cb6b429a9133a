"""The demo: every kind's demo workbooks in both layouts, each built and then checked with the
values its build computed (one evaluation per workbook).

Re-running is safe: a file is replaced only if it is unchanged since the demo wrote it
(its SHA-256 is recorded in DIR/.attnsheets-demo.json), or with `force`.
"""

import hashlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from workbook_builder.book.files import temp_beside, write_workbook
from workbook_builder.checking.check import check_workbook
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Kind, make_params
from workbook_builder.sheet.layout import LAYOUTS
from workbook_builder.sheet.registry import load_kinds

MANIFEST = ".attnsheets-demo.json"


@dataclass(frozen=True)
class DemoResult:
    path: Path
    formula_cells: int
    passed: bool
    steps: int
    first_failure: str
    seconds: float  # build and check


def demo_plan() -> list[tuple[str, type[Kind], dict, str]]:
    """(file name, kind, parameters, layout) for every demo workbook."""
    plan = []
    for _, kind in sorted(load_kinds().items()):
        for stem, values in kind.demo_cases:
            for layout in LAYOUTS:
                plan.append((f"{stem}_{layout}.xlsx", kind, values, layout))
    return plan


def build_and_check(kind_name: str, values: dict, layout: str, path: Path) -> DemoResult:
    """Build one demo workbook and check it from the values its build computed."""
    started = time.perf_counter()
    kind = load_kinds()[kind_name]
    built = write_workbook(kind, make_params(kind, values), path, layout=layout, force=True)
    report = check_workbook(path, values=built.values, workbook=built.workbook)
    failed = [s.name for s in report.steps if not s.passed]
    return DemoResult(path, built.formula_cells, report.passed, len(report.steps),
                      failed[0] if failed else "", time.perf_counter() - started)


def run_demo(out: Path, force: bool, workers: int | None = None) -> Iterator[DemoResult]:
    """Build and check every demo workbook, one process per core, in plan order."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    except (OSError, ValueError):
        manifest = {}
    plan = demo_plan()
    for name, *_ in plan:  # refuse before writing anything
        path = out / name
        if path.exists() and not force and manifest.get(name) != _sha256(path):
            raise UserError(f"{path} exists and was not written by this demo unchanged; "
                            f"pass --force to replace it")
    # one workbook per task: the engine is single-threaded, so cores work side by side
    with ProcessPoolExecutor(workers or demo_workers()) as pool:
        jobs = [pool.submit(build_and_check, kind.name, values, layout, out / name)
                for name, kind, values, layout in plan]
        for (name, *_), job in zip(plan, jobs, strict=True):
            result = job.result()
            manifest[name] = _sha256(out / name)
            _save_manifest(manifest_path, manifest)
            yield result


def demo_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _save_manifest(path: Path, manifest: dict) -> None:
    with temp_beside(path, ".attnsheets-", ".json") as tmp:
        with tmp.open("w") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
