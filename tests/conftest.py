"""Shared fixtures and helpers: the registry of kinds, building a workbook in tmp_path, the
command line in-process and as a new process, and the demo built once per test run."""

import contextlib
import io
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import openpyxl
import pytest

from workbook_builder.book.files import write_workbook
from workbook_builder.checking.names import find_name
from workbook_builder.cli.main import main
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.registry import load_kinds

KINDS = load_kinds()
ALL_CASES = [(name, i, case) for name, kind in sorted(KINDS.items())
             for i, case in enumerate(kind.test_cases)]


def build(tmp_path: Path, kind_name: str, params: dict, layout: str = "cells",
          seed: int = 0, given=None, tokens=None, name: str = "book.xlsx", **options) -> Path:
    """Write a workbook of a kind into tmp_path (replacing one of the same name)."""
    kind = KINDS[kind_name]
    path = tmp_path / name
    write_workbook(kind, make_params(kind, params), path, seed=seed, given=given,
                   tokens=tokens, layout=layout, force=True, **options)
    return path


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


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Demo:
    """`attnsheets demo` once for the whole run: every kind's demo workbooks, both layouts."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    ran = cli("demo", "--out", out, "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return Demo(out, ran.stdout, sorted(out.glob("*.xlsx")))


requires_torch = pytest.mark.skipif(
    find_spec("torch") is None, reason="PyTorch is not installed (pip install torch==2.13.0)")
requires_libreoffice = pytest.mark.skipif(
    shutil.which("soffice") is None and shutil.which("libreoffice") is None,
    reason="LibreOffice is not installed (apt-get install libreoffice-calc-nogui)")
