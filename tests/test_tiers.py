"""Tests in tiers: a plain `pytest` runs the default tier, CI runs every tier as well, and
the two runs together select every test exactly once."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from helpers.requires import TIERS

ROOT = Path(__file__).resolve().parent.parent


def registered_markers() -> list[str]:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [line.split(":")[0] for line in options["tool"]["pytest"]["ini_options"]["markers"]]


def test_every_tier_is_registered_and_ci_runs_it():
    assert registered_markers() == list(TIERS)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    runs = [re.search(r'-m "([^"]*)"', line) for line in ci if "-m pytest -m" in line]
    assert [set(run.group(1).split(" or ")) for run in runs if run] == [set(TIERS)]


def collected(*args: str) -> set[str]:
    """The test ids a run with these arguments selects (collected, not run)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n0",
                           "-p", "no:cacheprovider", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing selected
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_default_run_and_the_tiers_run_select_every_test_once():
    # a file mixing LibreOffice tests with tests that need no engine, and a slow file
    files = ["tests/test_libreoffice.py", "tests/test_formulas_conformance.py"]
    default = collected(*files)
    tiers = collected("-m", " or ".join(TIERS), *files)
    everything = collected("--all", *files)
    assert default and tiers and not default & tiers
    assert default | tiers == everything
    assert any("test_formulas_conformance.py" in test for test in tiers)
    assert not any("test_formulas_conformance.py" in test for test in default)
    assert any("test_libreoffice_does_not_trust_cached_values" in test for test in tiers)
