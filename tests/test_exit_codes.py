"""No traceback reaches a user: bad input is one line and exit 2, a bug is one line naming
the exception and exit 3 (never 1, which means a mismatch), `check` of several files
reports each and exits with the worst code; and numeric inputs of any size either build a
workbook that checks or are refused in one line."""

import json
import math
import tempfile
from pathlib import Path

import openpyxl
from helpers.books import ATTENTION, build
from helpers.cli import cli, one_line_error
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from workbook_builder import api
from workbook_builder.cli import app
from workbook_builder.sheet.names import find_name


def test_a_negative_seed_is_one_line(tmp_path):
    line = one_line_error(cli("build", "attention", "-o", tmp_path / "a.xlsx", "--seed", "-1"))
    assert "--seed must be a whole number, 0 or more; got -1" in line
    assert list(tmp_path.iterdir()) == []


def test_a_ragged_csv_says_so_with_the_row(tmp_path):
    csv = tmp_path / "x.csv"
    csv.write_text("1,2\n3\n0.5,1\n")
    line = one_line_error(cli("build", "attention", "-o", tmp_path / "a.xlsx", "--inputs",
                              f"X={csv}"))
    assert "ragged: row 2 has 1 value(s), row 1 has 2" in line
    csv.write_text("1,2\n3,abc\n")
    line = one_line_error(cli("build", "attention", "-o", tmp_path / "a.xlsx", "--inputs",
                              f"X={csv}"))
    assert "row 2, column 2 holds 'abc', not a number" in line


def test_an_unexpected_exception_is_one_line_and_exit_3(tmp_path, monkeypatch):
    path = build(tmp_path, "attention", ATTENTION)

    def broken(*args, **kwargs):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(api, "check", broken)  # the command reads it when it runs
    monkeypatch.delenv(app.DEBUG_VARIABLE, raising=False)
    ran = cli("check", path)
    assert ran.returncode == 3
    assert ran.stderr.strip().splitlines() == [
        f"attnsheets: internal error: {path}: RuntimeError: something broke (set "
        f"ATTNSHEETS_DEBUG=1 for the traceback)"]
    monkeypatch.setenv(app.DEBUG_VARIABLE, "1")
    ran = cli("check", path)
    assert ran.returncode == 3 and "Traceback" in ran.stderr


def test_check_reports_every_file_and_exits_with_the_worst_code(tmp_path):
    good = build(tmp_path, "attention", ATTENTION, name="good.xlsx")
    bad = build(tmp_path, "attention", ATTENTION, name="bad.xlsx")
    wb = openpyxl.load_workbook(bad)
    where = find_name(wb, "OUTPUT", bad)
    wb[where.sheet].cell(where.top, where.left).value = "=1"
    wb.save(bad)
    missing = tmp_path / "missing.xlsx"
    ran = cli("check", good, bad)
    assert ran.returncode == 1
    assert "good.xlsx" in ran.stdout and "bad.xlsx" in ran.stdout
    ran = cli("check", missing, good, bad)
    assert ran.returncode == 2
    assert "good.xlsx" in ran.stdout and "bad.xlsx" in ran.stdout
    assert ran.stderr.strip().splitlines() == [f"attnsheets: error: {missing}: no such file"]
    ran = cli("check", "--json", good, missing)
    assert ran.returncode == 2 and [r["path"] for r in json.loads(ran.stdout)] == [str(good)]


def test_an_os_error_names_the_file_asked_for_not_a_temporary_one(tmp_path):
    target = tmp_path / "taken.xlsx"
    target.mkdir()
    (target / "inside").write_text("keep")
    line = one_line_error(cli("build", "attention", "-o", target, "--force"))
    assert line == f"attnsheets: error: {target} is a folder; name a file to write", line
    assert ".attnsheets-" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.xlsx"]  # no temp left
    assert (target / "inside").read_text() == "keep"


def test_reproduce_creates_its_folder(tmp_path):
    out = tmp_path / "new" / "nested"
    ran = cli("reproduce", "wo-ai-ai", "--out", out)
    assert ran.returncode in (0, 1) and sorted(p.suffix for p in out.iterdir()) == \
        [".xlsx", ".xlsx"]


# -- numeric inputs of any size: a workbook that checks, or one line -------------------------

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),               # anything a float can be
    st.floats(min_value=-1e3, max_value=1e3),                      # ordinary
    st.sampled_from([0.0, 1e-300, -1e-300, 5e-324, 1e150, -1e150, 1e300, 1.7e308]),
)
MATRIX = st.lists(st.lists(NUMBERS, min_size=2, max_size=2), min_size=2, max_size=2)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=MATRIX, w_q=MATRIX)
# the largest doubles: written with 16 significant digits they read back as inf
@example(x=[[0.0, 0.0], [0.0, 0.0]], w_q=[[0.0, 0.0], [0.0, 1.7976931348623155e308]])
def test_numeric_inputs_build_a_workbook_that_checks_or_are_refused(x, w_q):
    with tempfile.TemporaryDirectory() as folder:
        inputs, out = Path(folder) / "in.json", Path(folder) / "a.xlsx"
        inputs.write_text(json.dumps({"X": x, "W_Q": w_q}))  # NaN and ±inf as JSON allows
        built = cli("build", "attention", "-o", out, "--inputs", inputs, "--d-k", "2",
                    "--seed", "3")
        if built.returncode != 0:
            one_line_error(built)
            assert not out.exists() and sorted(p.name for p in Path(folder).iterdir()) == \
                ["in.json"]
            finite = all(math.isfinite(v) for m in (x, w_q) for r in m for v in r)
            assert not finite or "overflow" in built.stderr, built.stderr
            return
        checked = cli("check", out)
        assert checked.returncode == 0, checked.stdout + checked.stderr
