"""Hostile files and flags: every one is a report or one line and exit 2, never an internal
error. Formulas no engine reads, numbers beyond a double, defined names that are no range,
JSON nested or keyed to break a reader, decimal-comma CSVs, strict `--json`."""

import json
import os
import resource
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import openpyxl
import pytest
from helpers.books import ATTENTION, build, exercise_book
from helpers.cli import cli, one_line_error, run_cli, start, terminate_once
from helpers.requires import requires_libreoffice
from openpyxl.workbook.defined_name import DefinedName

SIZES = ("--seq-len", "3", "--d-model", "2", "--d-k", "2")
DEEP = "[" * 5000 + "]" * 5000  # beyond the json module's recursion


def edited(path: Path, target: Path, change) -> Path:
    """A copy of the workbook with `change(wb)` applied."""
    wb = openpyxl.load_workbook(path)
    change(wb)
    wb.save(target)
    return target


def replaced_in_xml(path: Path, old: bytes, new: bytes) -> None:
    """Text replaced inside the workbook's parts (what openpyxl refuses to write)."""
    parts = {}
    with zipfile.ZipFile(path) as book:
        for item in book.infolist():
            parts[item.filename] = book.read(item).replace(old, new)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as book:
        for name, data in parts.items():
            book.writestr(name, data)


def first_cell(wb, name: str):
    sheet, ref = next(iter(wb.defined_names[name].destinations))
    return wb[sheet.strip("'")][ref.replace("$", "").split(":")[0]]


@pytest.mark.parametrize("formula", ["=cmd|' /C calc'!A0", "=1+"])
def test_a_formula_no_engine_reads_is_one_line_naming_its_cell(tmp_path, formula):
    book = build(tmp_path, "attention", ATTENTION)

    def plant(wb):
        first_cell(wb, "Q").value = formula
    hostile = edited(book, tmp_path / "hostile.xlsx", plant)
    line = one_line_error(cli("check", hostile))
    where = first_cell(openpyxl.load_workbook(book), "Q").coordinate
    assert f"hostile.xlsx: Attention!{where} holds {formula!r}, not a formula" in line, line


def test_a_400_digit_number_in_an_input_cell_is_one_line(tmp_path):
    book = build(tmp_path, "attention", ATTENTION)
    marker = 123454321

    def plant(wb):
        first_cell(wb, "X").value = marker
    hostile = edited(book, tmp_path / "hostile.xlsx", plant)
    replaced_in_xml(hostile, str(marker).encode(), b"9" * 400)
    line = one_line_error(cli("check", hostile))
    assert "input X cell Attention!" in line and "not a finite number" in line, line


@pytest.mark.parametrize("ref, says", [("'Attention'!$A:$A", "covers $A:$A (1,048,576 cells)"),
                                       ("'Attention'!$1:$2", "covers $1:$2 (32,768 cells)"),
                                       ("", "points at nothing")])
def test_an_added_name_over_whole_columns_or_nothing_is_refused_in_one_line(tmp_path, ref,
                                                                            says):
    book = build(tmp_path, "attention", ATTENTION)

    def add(wb):
        wb.defined_names["NOTES"] = DefinedName("NOTES", attr_text=ref)
    line = one_line_error(cli("check", edited(book, tmp_path / "added.xlsx", add)))
    assert "defined name NOTES" in line and says in line, line


def test_check_of_several_files_reports_around_a_hostile_one(tmp_path):
    first = build(tmp_path, "attention", ATTENTION, name="a.xlsx")
    last = build(tmp_path, "attention", ATTENTION, name="b.xlsx")

    def plant(wb):
        first_cell(wb, "Q").value = "=1+"
    hostile = edited(first, tmp_path / "hostile.xlsx", plant)
    ran = cli("check", first, hostile, last)
    assert ran.returncode == 2
    assert f"{first}: kind attention" in ran.stdout and f"{last}: kind attention" in ran.stdout
    [line] = ran.stderr.strip().splitlines()
    assert "hostile.xlsx" in line and "internal error" not in line


@pytest.mark.parametrize("text,says", [
    ('{"X": [[1' + "0" * 400 + ", 1], [1, 2], [3, 4]]}", "not a finite number"),
    ('{"X": ' + DEEP + "}", "nested too deeply"),
    ('{"X": [[1, 2], [3, 4], [5, 6]], "X": [[0, 0], [0, 0], [0, 0]]}', "'X' appears twice"),
])
def test_an_inputs_json_that_breaks_a_reader_is_one_line(tmp_path, text, says):
    inputs = tmp_path / "in.json"
    inputs.write_text(text)
    line = one_line_error(cli("build", "attention", "-o", tmp_path / "a.xlsx", *SIZES,
                              "--inputs", inputs))
    assert says in line, line
    assert not (tmp_path / "a.xlsx").exists()


@pytest.mark.parametrize("key", ["params", "tokens"])
def test_an_about_value_nested_5000_deep_is_one_line(tmp_path, key):
    book = build(tmp_path, "attention", ATTENTION)

    def nest(wb):
        ws = wb["About"]
        row = next(r for r in range(1, ws.max_row + 1) if ws.cell(r, 1).value == key)
        ws.cell(row, 2).value = DEEP
    line = one_line_error(cli("check", edited(book, tmp_path / "deep.xlsx", nest)))
    assert "the About sheet lacks a readable kind/params/layout/tokens table" in line


def test_a_manifest_nested_5000_deep_is_one_line(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"format": ' + DEEP + "}")
    build(tmp_path, "attention", ATTENTION)
    line = one_line_error(cli("grade", tmp_path / "book.xlsx", "--manifest", manifest))
    assert "not a readable manifest (nested too deeply)" in line, line


@pytest.mark.parametrize("text,says", [
    ("0,5\n1,5\n2,5\n", "if that is a decimal comma, write 0.5"),
    ("0,5;1,25\n2,0;3,5\n", "decimal commas (0,5)"),
])
def test_a_decimal_comma_csv_is_refused_not_read_as_other_columns(tmp_path, text, says):
    csv = tmp_path / "x.csv"
    csv.write_text(text)
    line = one_line_error(cli("build", "attention", "-o", tmp_path / "a.xlsx", "--d-k", "2",
                              "--inputs", f"X={csv}"))
    assert says in line, line


def test_two_columns_of_whole_numbers_are_read_once_a_point_says_so(tmp_path):
    csv = tmp_path / "x.csv"
    csv.write_text("0,5.0\n1,5\n2,5\n")
    ran = cli("build", "attention", "-o", tmp_path / "a.xlsx", "--d-k", "2", "--inputs",
              f"X={csv}")
    assert ran.returncode == 0 and "seq_len=3, d_model=2" in ran.stdout, ran.stderr


def test_json_report_is_strict_json_without_numpy_warnings(tmp_path):
    book = build(tmp_path, "attention", ATTENTION)

    def huge(wb):
        first_cell(wb, "X").value = 1e308
    edited_book = edited(book, tmp_path / "huge.xlsx", huge)
    ran = run_cli("check", "--json", edited_book)  # a new process: warnings reach stderr
    assert ran.returncode == 1 and ran.stderr == "", ran.stderr

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")
    report = json.loads(ran.stdout, parse_constant=refuse)
    assert not report["passed"]


def test_a_folder_named_like_the_output_is_never_offered_to_force(tmp_path):
    folder = tmp_path / "dir.xlsx"
    folder.mkdir()
    for force in ([], ["--force"]):
        line = one_line_error(cli("build", "attention", "-o", folder, *force))
        assert line == f"attnsheets: error: {folder} is a folder; name a file to write"
    assert folder.is_dir() and list(folder.iterdir()) == []


# -- signals ---------------------------------------------------------------------------------

def processes_naming(text: str) -> list[str]:
    """The command lines of running processes that contain `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(line)
    return found


def test_sighup_during_build_cleans_up_as_sigterm_does(tmp_path):
    out = tmp_path / "books"
    out.mkdir()
    process, _ = start(["build", "attention", "-o", out / "big.xlsx", "--seq-len", "40",
                        "--d-model", "16", "--d-k", "16"], tmp_path)
    code, err = terminate_once(process, lambda: any(out.glob(".attnsheets-*")), signal.SIGHUP)
    assert (code, err.strip()) == (
        129, f"attnsheets: hung up; nothing was written ({out}/big.xlsx is as it was)")
    assert list(out.iterdir()) == []


@requires_libreoffice
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_a_libreoffice_check_leaves_no_soffice_and_no_folder(tmp_path, signum):
    book = build(tmp_path, "attention", ATTENTION)
    process, private = start(["check", book, "--engine", "libreoffice", "--quiet"], tmp_path)
    # LibreOffice has made its own lu….tmp folder when the signal comes
    code, err = terminate_once(process, lambda: any(private.rglob("lu*.tmp")), signum)
    assert code == 128 + signum, err
    assert list(private.iterdir()) == []
    assert processes_naming(str(private)) == []


# -- a full disk -----------------------------------------------------------------------------

def run_with_file_size_limit(args, limit: int, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a new process that cannot write a file beyond `limit` bytes: writes fail
    as on a full disk (EFBIG; Python ignores SIGXFSZ)."""
    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([sys.executable, "-m", "workbook_builder", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300,
                          preexec_fn=limited, env={**os.environ, "TMPDIR": str(cwd)})


@pytest.mark.parametrize("command", [
    ["build", "attention", "-o", "out/a.xlsx", "--seq-len", "12", "--d-model", "8",
     "--d-k", "8"],
    ["class", "attention", "--roster", "roster.csv", "--out", "out/class", "--exercise",
     "WEIGHTS", "--seq-len", "12", "--d-model", "8", "--d-k", "8"],
], ids=["build", "class"])
def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, command):
    (tmp_path / "out").mkdir()
    (tmp_path / "roster.csv").write_text("id,name\ns1,A\ns2,B\n")
    ran = run_with_file_size_limit(command, 20_000, tmp_path)
    assert ran.returncode == 2, ran.stderr
    [line] = ran.stderr.strip().splitlines()  # no "Exception ignored in …" after it
    assert "File too large" in line and "attnsheets-" not in line, line
    assert list((tmp_path / "out").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "roster.csv"]


# -- file names that hold terminal escape sequences ------------------------------------------

ESCAPES = "\x1b[2J\x1b]0;owned\x07"  # clear the screen, retitle the terminal


def test_file_names_with_escape_sequences_never_reach_the_terminal_raw(tmp_path):
    returned = tmp_path / "returned"
    returned.mkdir()
    exercise_book(returned, "attention", ATTENTION, ["WEIGHTS"], name=f"a{ESCAPES}.xlsx")
    (returned / f"b{ESCAPES}.xlsx").write_bytes(b"not a workbook")
    graded = cli("grade", returned)
    assert "NOT GRADED" in graded.stdout and "\\x1b[2J" in graded.stderr, graded
    checked = cli("check", *sorted(returned.iterdir()))
    assert checked.returncode == 2 and "\\x1b]0;owned\\x07" in checked.stdout + checked.stderr
    for ran in (graded, checked):
        assert "\x1b" not in ran.stdout + ran.stderr and "\x07" not in ran.stdout + ran.stderr
