"""`demo`: build every kind's demo workbooks in both layouts, then check each one.

Re-running is safe: a file is replaced only if it is unchanged since the demo wrote it
(its SHA-256 is recorded in DIR/.attnsheets-demo.json), or with --force.
"""

import hashlib
import json
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from workbook_builder.build import write_workbook
from workbook_builder.check import check_workbook
from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.registry import load_kinds
from workbook_builder.sheet.layout import LAYOUTS
from workbook_builder.progress import Progress

MANIFEST = ".attnsheets-demo.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def demo_plan() -> list[tuple[str, type, dict, str]]:
    """(file name, kind, parameters, layout) for every demo workbook."""
    plan = []
    for _, kind in sorted(load_kinds().items()):
        for stem, values in kind.demo_cases:
            for layout in LAYOUTS:
                plan.append((f"{stem}_{layout}.xlsx", kind, values, layout))
    return plan


def run_demo(out: Path, force: bool, progress: Progress | None = None) -> bool:
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
    print(f"{'workbook':<44} {'formula cells':>13} {'steps':>6} {'check s':>8}  result")
    progress = progress or Progress(quiet=True)
    progress(f"building and checking {len(plan)} workbooks on {_workers()} cores")
    all_passed = True
    # one workbook per task: the engine is single-threaded, so cores work side by side
    with ProcessPoolExecutor(_workers()) as pool:
        jobs = [pool.submit(_build_and_check, kind.name, values, layout, out / name)
                for name, kind, values, layout in plan]
        for number, ((name, *_), job) in enumerate(zip(plan, jobs, strict=True), start=1):
            cells, passed, steps, first_failure, seconds = job.result()
            manifest[name] = _sha256(out / name)
            _save_manifest(manifest_path, manifest)
            progress.clear()
            all_passed &= passed
            verdict = "pass" if passed else f"FAIL at {first_failure}"
            print(f"{str(out / name):<44} {cells:>13} {steps:>6} {seconds:>8.2f}  {verdict}",
                  flush=True)
            progress(f"[{number}/{len(plan)}] done")
    progress.clear()
    print(f"{len(plan)} workbooks in {out}: " + ("all checks pass" if all_passed
                                                 else "some checks FAILED"))
    for _, kind in sorted(load_kinds().items()):
        note = kind.demo_note()
        if note:
            print(f"\n{kind.name}: {note}")
    return all_passed


def _workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def _build_and_check(kind_name: str, values: dict, layout: str, path: Path):
    """In a worker process: (formula cells, passed, steps, first failing step, check s)."""
    kind = load_kinds()[kind_name]
    cells = write_workbook(kind, make_params(kind, values), path, layout=layout, force=True)
    started = time.perf_counter()
    report = check_workbook(path)
    failed = [s.name for s in report.steps if not s.passed]
    return (cells, report.passed, len(report.steps), failed[0] if failed else "",
            time.perf_counter() - started)


def _save_manifest(path: Path, manifest: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
