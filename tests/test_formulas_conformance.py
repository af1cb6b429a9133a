"""The `formulas` engine's own test suite (its repository's test/ at v1.3.1 with its
workbooks, kept in shared/conformance/ beside the checkout) run twice in new processes: with
the library as released, and with our changes to the engine in place for the whole run
(tests/formulas_changes_plugin.py). Every test has the same outcome in both runs, and a test
that fails fails with the same report. As released, here, 5 of its 1,012 tests fail:
`test_output_132` and `test_output_regex_20` (F.TEST and TREND last digits that differ
between library versions) and, without the `bahttext` package, BAHTTEXT's `test_output_174`,
`test_excel_model` and `test_ods_model`, whose reports list every cell that differs from the
workbooks' stored results (so a difference of ours there still shows). Each run takes about
3 CPU minutes.

FORMULAS_CONFORMANCE_SUITE names the suite's folder where it is not in the default place."""

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # about 6 CPU minutes: the engine's suite, run twice

ROOT = Path(__file__).resolve().parents[1]
SUITE = Path(os.environ.get("FORMULAS_CONFORMANCE_SUITE",
                            ROOT.parent / "shared" / "conformance" / "formulas-tests" / "test"))
# they test the formulas repository itself (its setup.py and README.rst, not kept beside)
NOT_THE_ENGINE = ("test_setup.py", "test_readme.py")
RUN_TIMEOUT_S = 40 * 60


def outcomes(folder: Path, report: Path, *options: str) -> dict[str, tuple[str, str]]:
    """Each test of the suite in `folder` -> (outcome, failure message), from one pytest
    run in a new process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests"), str(ROOT),
                                                      env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "no:xdist", "-W", "ignore", f"--junitxml={report}",
               *(f"--ignore={name}" for name in NOT_THE_ENGINE), *options]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    found = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                # the whole report (the message attribute is cut after a few lines), where
                # the suite's folder and objects' addresses differ between runs
                outcome, text = child.tag, (child.text or child.get("message") or "")
        text = re.sub(r"0x[0-9a-fA-F]+", "0x…", text.replace(str(folder), "<suite>"))
        found[f"{case.get('classname')}::{case.get('name')}"] = (outcome, text)
    return found


def test_the_engines_own_suite_gives_the_same_outcomes_with_our_changes(tmp_path):
    if not SUITE.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"the formulas conformance suite is missing: {SUITE}")
        pytest.skip(f"the formulas conformance suite is not here: {SUITE}")
    pytest.importorskip("ddt", reason="the formulas suite needs ddt (pip install ddt)")
    pytest.importorskip("dill", reason="the formulas suite needs dill (pip install dill)")
    runs = {}
    for name, options in (("released", ()), ("changed", ("-p", "formulas_changes_plugin"))):
        folder = tmp_path / name / "test"  # one package name in both runs' reports
        shutil.copytree(SUITE, folder)
        for path in [folder, *folder.rglob("*")]:  # a copy of a read-only folder: writable
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        runs[name] = outcomes(folder, tmp_path / f"{name}.xml", *options)
    released, changed = runs["released"], runs["changed"]
    print(f"{len(released)} tests; as released, not passed:",
          {k: v[0] for k, v in released.items() if v[0] != "passed"})
    assert len(released) > 1000
    differ = [(test, released.get(test), changed.get(test))
              for test in sorted(released.keys() | changed.keys())
              if released.get(test) != changed.get(test)]
    assert not differ, differ
