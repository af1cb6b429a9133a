"""Shared fixtures and helpers: the registry of kinds, building a workbook in tmp_path, the
command line in-process and as a new process, and the demo built once per test run."""

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import openpyxl
import pytest
from filelock import FileLock
from hypothesis import settings
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book.files import BuiltBook, write_workbook
from workbook_builder.checking.check import CheckReport, check_workbook
from workbook_builder.cli.app import main
from workbook_builder.engines.cached_values import store_values
from workbook_builder.engines.gnumeric import recalculate_many
from workbook_builder.engines.libreoffice import convert_many
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.exercise import ExerciseSpec
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.refs import parse_range
from workbook_builder.xlsx.of_openpyxl import load_workbook
from workbook_builder.xlsx.versions import RELEASED_LIBRARIES_SWITCH

# property tests draw the same examples on every run and keep no example database: a
# failure reproduces anywhere (CI included), and nothing is written into the checkout
settings.register_profile("attnsheets", derandomize=True, database=None)
settings.load_profile("attnsheets")

KINDS = load_kinds()
ALL_CASES = [(name, i, case) for name, kind in sorted(KINDS.items())
             for i, case in enumerate(kind.test_cases)]


BUILT: dict[Path, BuiltBook] = {}


def build(tmp_path: Path, kind_name: str, params: dict, layout: str = "cells",
          seed: int = 0, given=None, tokens=None, name: str = "book.xlsx", **options) -> Path:
    """Write a workbook of a kind into tmp_path (replacing one of the same name)."""
    kind = KINDS[kind_name]
    path = tmp_path / name
    BUILT[path] = write_workbook(kind, make_params(kind, params), path, seed=seed,
                                 given=given, tokens=tokens, layout=layout, force=True,
                                 **options)
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
    values, e.g. `evaluate_with_formulas(path)` or a build's own)."""
    wb = load_workbook(path)
    blocks = {}
    for name in names:
        where = find_name(wb, name, path)
        blocks[name] = np.array([[values[(where.sheet.upper(), where.top + i, where.left + j)]
                                  for j in range(where.shape[1])]
                                 for i in range(where.shape[0])], dtype=float)
    return blocks


# -- exercises -------------------------------------------------------------------------------

ATTENTION = {"seq_len": 3, "d_model": 2, "d_k": 2}


def exercise_book(tmp_path, kind_name, values, steps, layout="cells", seed=5, name=None,
                  **options):
    """Build an exercise workbook; returns it and the reference's value of every step."""
    kind = KINDS[kind_name]
    params = make_params(kind, values)
    path = tmp_path / (name or f"{kind_name}_{layout}.xlsx")
    write_workbook(kind, params, path, seed=seed, layout=layout,
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


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def cli(*args) -> Ran:
    """The command line in this process: `main(argv)`, its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Ran(code, out.getvalue(), err.getvalue())


# a fresh Python running the CLI as its child, printing the child's peak resident memory
# (ru_maxrss, KB on Linux) as the last line of stderr
PEAK_MEMORY_PROBE = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stdout.write(done.stdout); sys.stderr.write(done.stderr); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(done.returncode)")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a new process, text output."""
    return subprocess.run([sys.executable, "-m", "workbook_builder", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def one_line_error(result) -> str:
    """The single stderr line of a usage error (exit 2, no traceback)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@dataclass
class Demo:
    out: Path
    stdout: str
    books: list[Path]


def once_per_run(tmp_path_factory, name: str, make) -> Path:
    """A folder that `make(folder)` fills once per test run, shared by pytest-xdist's
    workers (the first to arrive makes it, the others wait for it and read it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' base folders share this parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Demo:
    """`attnsheets demo` once for the whole run: every kind's demo workbooks, both layouts."""
    def make(folder: Path) -> None:
        ran = cli("demo", "--out", folder / "demo", "--quiet", "--no-model")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        (folder / "stdout.txt").write_text(ran.stdout, encoding="utf-8")

    folder = once_per_run(tmp_path_factory, "demo", make)
    return Demo(folder / "demo", (folder / "stdout.txt").read_text(encoding="utf-8"),
                sorted((folder / "demo").glob("*.xlsx")))


@pytest.fixture(scope="session")
def tutorial(tmp_path_factory) -> Demo:
    """`attnsheets reproduce wo-ai-ai` once for the whole run."""
    def make(folder: Path) -> None:
        ran = cli("reproduce", "wo-ai-ai", "--out", folder / "books")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        (folder / "stdout.txt").write_text(ran.stdout, encoding="utf-8")

    folder = once_per_run(tmp_path_factory, "tutorial", make)
    return Demo(folder / "books", (folder / "stdout.txt").read_text(encoding="utf-8"),
                sorted((folder / "books").glob("wo-ai-ai_*.xlsx")))


CHART_NS = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"


def charts_in(path: Path) -> list[list[dict]]:
    """Every chart of the file, in the order of its parts: [{tx, x, y}] per series, the
    references each series reads (name, categories or x values, values)."""
    with zipfile.ZipFile(path) as book:
        names = sorted((n for n in book.namelist() if re.match(r"xl/charts/chart\d+\.xml", n)),
                       key=lambda n: int(re.search(r"(\d+)\.xml", n).group(1)))
        roots = [ElementTree.fromstring(book.read(name)) for name in names]
    charts = []
    for root in roots:
        found = []
        for ser in root.iter(f"{CHART_NS}ser"):
            def ref(*tags, ser=ser):
                for tag in tags:
                    node = ser.find(f"{CHART_NS}{tag}")
                    if node is not None:
                        return node.find(f".//{CHART_NS}f").text
                return None
            found.append({"tx": ref("tx"), "x": ref("xVal", "cat"), "y": ref("yVal", "val")})
        charts.append(found)
    return charts


def chart_series(path: Path) -> list[dict]:
    """The series of the file's first chart."""
    return charts_in(path)[0]


def parse_ref(ref: str):
    """'Sheet'!$A$1:$B$2 -> (sheet, (top, left, bottom, right))."""
    sheet, _, cells = ref.rpartition("!")
    return sheet.strip("'"), parse_range(cells)


def formulas_of(path: Path):
    """(sheet!cell or sheet!range, formula text, is an array formula) for every formula."""
    wb = openpyxl.load_workbook(path)
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, ArrayFormula):
                    yield f"{ws.title}!{cell.value.ref}", cell.value.text, True
                elif cell.data_type == "f":  # a formula, not a text starting with "="
                    yield f"{ws.title}!{cell.coordinate}", cell.value, False


# ../shared/DESIGN.md, "Formula style": the portable set
ALLOWED = {"SUMPRODUCT", "MMULT", "TRANSPOSE", "EXP", "LN", "SQRT", "MAX", "MIN", "SUM", "IF",
           "AND", "OR", "ABS", "TANH", "SIN", "COS", "PI", "POWER", "INDEX",
           # exercise self-checks: in every Excel since 2.0, LibreOffice and `formulas`; the
           # only way to count a student's text or #DIV/0! as wrong instead of erroring
           "ISNUMBER",
           # a floor: flash's cost table (its key blocks T = ⌈n/B⌉ at n = 1k, 4k, 32k, exact
           # integers) and T5's log buckets (relative-position). LibreOffice's INT snaps
           # values within ~1e-15 of a whole number: the sheets floor only exact integers or
           # float32 values, whole or ≥ 2^-24 relative away; tests/test_portability.py and
           # tests/test_relative_position.py show the engines agree there, negatives included
           "INT",
           # scaling's summary: the median row's ‖J_i‖_F (the mean is carried by the few
           # rows whose top scores nearly tie); in every Excel, LibreOffice and `formulas`
           # (test_scaling.py shows the two agree, negative and even-count arguments included)
           "MEDIAN",
           # the exact GELU, 0.5·x·(1 + erf(x/√2)), as BERT computes it (encoder-block
           # --gelu exact); in Excel 2010+ (older Excel refused negative arguments),
           # LibreOffice, Gnumeric and `formulas` (tests/test_encoder_block.py shows the three
           # engines agree with math.erf, at negative, zero and |x| > 5)
           "ERF"}
_STRING = re.compile(r'"[^"]*"')
_FUNCTION = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\(")
_SPILL = re.compile(r"[A-Z]+\$?\d+#")
_UNSIGNED_EXPONENT = re.compile(r"(?<![A-Za-z_$])\d+(?:\.\d*)?[eE]\d")
_INDEX = re.compile(r"INDEX\(([^()]*)\)")


def portability_problems(text: str, is_array: bool) -> list[str]:
    bare = _STRING.sub('""', text)
    problems = [f"function {name} is not in the portable set"
                for name in _FUNCTION.findall(bare) if name.upper() not in ALLOWED]
    if "TRANSPOSE(" in bare.upper() and not is_array:
        problems.append("TRANSPOSE outside an array formula needs Ctrl+Shift+Enter in old Excel")
    if _SPILL.search(bare):
        problems.append("spilled range reference")
    if _UNSIGNED_EXPONENT.search(bare):
        problems.append("exponent literal without a sign (write 1E+30)")
    for args in _INDEX.findall(bare):
        parts = [a.strip() for a in args.split(",")]
        if len(parts) != 3 or "0" in parts[1:]:
            problems.append("INDEX needs both a row and a column index")
    return problems


requires_torch = pytest.mark.skipif(
    find_spec("torch") is None, reason="PyTorch is not installed (pip install torch==2.13.0)")
requires_transformers = pytest.mark.skipif(
    find_spec("transformers") is None,
    reason="transformers is not installed (pip install transformers)")
requires_libreoffice = pytest.mark.skipif(
    shutil.which("soffice") is None and shutil.which("libreoffice") is None,
    reason="LibreOffice is not installed (apt-get install libreoffice-calc-nogui)")
requires_gnumeric = pytest.mark.skipif(
    shutil.which("ssconvert") is None,
    reason="Gnumeric is not installed (apt-get install gnumeric)")


# -- tiers ------------------------------------------------------------------------------------
# A plain `pytest` runs the default tier; tests marked with a tier below run under `-m` (e.g.
# `pytest -m slow`) or `--all`. A test needing LibreOffice or Gnumeric is in `engines`, one
# needing PyTorch or transformers in `models`, without a mark of its own.
TIERS = ("engines", "models", "slow")
_TIER_OF_REQUIREMENT = [(requires_libreoffice.mark, "engines"),
                        (requires_gnumeric.mark, "engines"),
                        (requires_torch.mark, "models"), (requires_transformers.mark, "models")]


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", dest="all_tiers",
                     help="run every tier: also the tests marked engines, models or slow")
    _released_libraries_option(parser)


def _default_tier_only(config) -> bool:
    return not (config.option.markexpr or config.option.all_tiers)


def pytest_report_header(config):
    if _default_tier_only(config):
        return f"tiers: default ({', '.join(TIERS)} deselected; --all or -m runs them)"
    return None


@pytest.hookimpl(tryfirst=True)  # the tier marks are in place before `-m` selects
def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in list(item.iter_markers("skipif")):
            for requirement, tier in _TIER_OF_REQUIREMENT:
                if mark == requirement and not item.get_closest_marker(tier):
                    item.add_marker(tier)
    if _default_tier_only(config):
        tiered = [item for item in items if any(item.get_closest_marker(t) for t in TIERS)]
        tiered_ids = set(map(id, tiered))
        if tiered:
            config.hook.pytest_deselected(items=tiered)
            items[:] = [item for item in items if id(item) not in tiered_ids]


@pytest.fixture(scope="session")
def recalculated_demo(demo, tmp_path_factory) -> list[tuple[Path, Path]]:
    """Every demo workbook, and its copy recalculated and saved by one LibreOffice run."""
    folder = once_per_run(tmp_path_factory, "recalculated",
                          lambda folder: convert_many(demo.books, "xlsx", folder))
    return [(book, folder / book.name) for book in demo.books]


@pytest.fixture(scope="session")
def gnumeric_demo(demo, tmp_path_factory) -> list[tuple[Path, Path]]:
    """Every demo workbook, and its copy recalculated and saved by Gnumeric (one ssconvert
    process per workbook, as many at once as there are cores)."""
    folder = once_per_run(tmp_path_factory, "gnumeric",
                          lambda folder: recalculate_many(demo.books, folder))
    return [(book, folder / book.name) for book in demo.books]


def _released_libraries_option(parser):
    parser.addoption("--released-libraries", action="store_true",
                     help="run with every library as released: each version guard of "
                          "workbook_builder/xlsx/versions.py answers 'unsupported' (sets "
                          f"{RELEASED_LIBRARIES_SWITCH}=1)")


def pytest_configure(config):
    if config.getoption("--released-libraries"):
        os.environ[RELEASED_LIBRARIES_SWITCH] = "1"  # read at each guard, workers inherit it
