"""Shared fixtures: the registry of kinds, and helpers to build a workbook in tmp_path."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbook_builder.build import write_workbook
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.registry import load_kinds

KINDS = load_kinds()
ALL_CASES = [(name, i, case) for name, kind in sorted(KINDS.items())
             for i, case in enumerate(kind.test_cases)]


def build(tmp_path: Path, kind_name: str, params: dict, layout: str = "cells",
          seed: int = 0, given=None, tokens=None, name: str = "book.xlsx") -> Path:
    kind = KINDS[kind_name]
    path = tmp_path / name
    write_workbook(kind, make_params(kind, params), path, seed=seed, given=given,
                   tokens=tokens, layout=layout, force=True)
    return path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a new process, text output."""
    return subprocess.run([sys.executable, "-m", "workbook_builder", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


requires_torch = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None,
    reason="PyTorch is not installed (pip install torch==2.13.0)")
requires_libreoffice = pytest.mark.skipif(
    shutil.which("soffice") is None and shutil.which("libreoffice") is None,
    reason="LibreOffice is not installed (apt-get install libreoffice-calc-nogui)")
