"""Memory and time bounded on every path: each hostile input below is generated here and
refused in one line (exit 2) by a command running in a process of its own whose address
space is capped (RLIMIT_AS), so a command that would take gigabytes fails here instead of
taking the machine down."""

import json
import os
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import openpyxl
import pytest
from helpers.books import ATTENTION, build, whole_number_flags
from helpers.cli import PEAK_MEMORY_PROBE
from helpers.requires import requires_gnumeric, requires_libreoffice
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.sheet.names import find_name

pytestmark = pytest.mark.slow  # commands run under a memory cap, in processes of their own

ADDRESS_SPACE = 1_500_000_000  # bytes: Python, NumPy and openpyxl fit in a fraction of it
TIMEOUT_S = 120                # a hang (a pipe read forever) fails instead of waiting


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def capped_cli(*args) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI in a new process with its address space capped; with the peak resident
    memory (MB) of the process and its children."""
    done = subprocess.run([sys.executable, "-c", PEAK_MEMORY_PROBE, sys.executable, "-m",
                           "workbook_builder", *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT_S, preexec_fn=_capped)
    *stderr, peak_kb = done.stderr.strip().splitlines()
    done.stderr = "\n".join(stderr) + ("\n" if stderr else "")
    return done, int(peak_kb) / 1024


def refused(done: subprocess.CompletedProcess) -> str:
    """The one stderr line of a refusal (exit 2, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


# -- build: sizes decided from the parameters before anything is allocated -------------------



_EVERY_FLAG = """
import contextlib, io, json, sys
from workbook_builder.cli.app import main
out, results = sys.argv[1], []
for kind, flag, value in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["build", kind, flag, str(value), "-o", out, "--force"])
    results.append([kind, flag, value, code, err.getvalue().strip()])
print(json.dumps(results))
"""


def test_every_size_flag_of_every_kind_is_decided_from_the_plan(tmp_path):
    """A billion (and a hundred thousand) of any size: refused in one line, or (a size
    that sets no block, as RoPE's base, or a table that fits, as 100,000 vocabulary rows)
    built, never a MemoryError. One capped process per kind builds its cases in turn (a
    process that built several kinds' 100,000-row tables holds their freed heap)."""
    by_kind: dict[str, list] = {}
    for kind, flag in whole_number_flags():
        by_kind.setdefault(kind, []).extend([kind, flag, value] for value in (10**9, 10**5))
    results = []
    for kind, cases in by_kind.items():
        done = subprocess.run([sys.executable, "-c", _EVERY_FLAG,
                               str(tmp_path / "sized.xlsx"), json.dumps(cases)],
                              capture_output=True, text=True, timeout=300,
                              preexec_fn=_capped)
        assert done.returncode == 0, (kind, done.stderr[-2000:])
        results += json.loads(done.stdout.strip().splitlines()[-1])
    bad = [r for r in results if r[3] not in (0, 2) or
           (r[3] == 2 and len(r[4].splitlines()) != 1)]
    assert not bad, bad
    codes = {(kind, flag, value): code for kind, flag, value, code, _ in results}
    for case in [("attention", "--seq-len", 10**9), ("multihead", "--d-model", 10**9),
                 ("kv-cache", "--seq-len", 10**5), ("cross-attention", "--src-len", 10**9)]:
        assert codes[case] == 2, case


@pytest.mark.parametrize("args", [
    ["attention", "--seq-len", "1000000000"],
    ["multihead", "--d-model", "1000000000", "--heads", "1"],
    ["kv-cache", "--seq-len", "100000"],
    ["flash", "--seq-len", "1000000", "--block-size", "1"],
    ["flash", "--seq-len", "400000", "--d-model", "1", "--d-k", "1", "--block-size", "1"],
    ["cross-attention", "--src-len", "1000000000"],
])
def test_a_huge_size_is_one_line_within_the_memory_cap(tmp_path, args):
    done, peak_mb = capped_cli("build", *args, "-o", tmp_path / "big.xlsx")
    print(f"build {' '.join(args)}: {peak_mb:.0f} MB")
    line = refused(done)
    assert "lower --" in line, line
    assert list(tmp_path.iterdir()) == []


# -- check and grade: hostile workbooks --------------------------------------------------------

def edited(source: Path, target: Path, edit) -> Path:
    wb = openpyxl.load_workbook(source)
    edit(wb, wb["Attention"], find_name(wb, "OUTPUT", source))
    wb.save(target)
    return target


def with_formula(text: str):
    def edit(wb, ws, output):
        ws.cell(output.top, output.left).value = text
    return edit


def test_a_defined_name_over_the_whole_grid_is_refused(tmp_path):
    path = build(tmp_path, "attention", ATTENTION)

    def whole_grid(wb, ws, output):
        wb.defined_names["FOO"] = DefinedName("FOO", attr_text="Attention!$A$1:$XFD$1048576")

    done, peak_mb = capped_cli("check", edited(path, tmp_path / "foo.xlsx", whole_grid))
    print(f"FOO over the grid: {peak_mb:.0f} MB")
    line = refused(done)
    assert "defined name FOO covers" in line and "17,179,869,184 cells" in line, line


def far_reads(tmp_path) -> dict[str, Path]:
    """A workbook whose named blocks span a few hundred cells, given a formula reading
    far beyond them, three ways."""
    path = build(tmp_path, "attention", ATTENTION)

    def array_far(wb, ws, output):
        ws.cell(output.top, output.left).value = ArrayFormula(
            f"{ws.cell(output.top, output.left).coordinate}:XFD1048576", "=1")

    return {
        "sumproduct": edited(path, tmp_path / "sumproduct.xlsx",
                             with_formula("=SUMPRODUCT((A1:XFD1048576+1)*1)")),
        "array": edited(path, tmp_path / "array.xlsx", array_far),
        "mmult": edited(path, tmp_path / "mmult.xlsx",
                        with_formula("=SUM(MMULT(A1:ZZ100000,A1:A702))")),
    }


@pytest.mark.parametrize("engine", [
    pytest.param("libreoffice", marks=requires_libreoffice),
    pytest.param("gnumeric", marks=requires_gnumeric),
])
def test_a_formula_reading_far_beyond_the_names_never_reaches_an_application(tmp_path,
                                                                            engine):
    for case, path in far_reads(tmp_path).items():
        done, peak_mb = capped_cli("check", "--engine", engine, path)
        print(f"{engine} {case}: {peak_mb:.0f} MB")
        line = refused(done)
        assert " reads " in line and "named blocks hold" in line, line
        assert peak_mb < 400


def test_long_formulas_are_refused_before_any_engine(tmp_path):
    """40 distinct formulas of 10 KB each inside the named blocks (the `formulas` engine
    parses an operator chain in time and memory growing with its square)."""
    path = build(tmp_path, "attention", {"seq_len": 8, "d_model": 4, "d_k": 4})

    def long_formulas(wb, ws, output):
        cells = [(output.top + i, output.left + j) for i in range(output.shape[0])
                 for j in range(output.shape[1])]
        for k, (row, col) in enumerate(cells[:40]):
            terms = [f"B{5 + (i + k) % 7}" for i in range(3100)]
            ws.cell(row, col).value = "=" + "+".join(terms)

    done, peak_mb = capped_cli("check", edited(path, tmp_path / "long.xlsx", long_formulas))
    print(f"40 formulas of 10 KB: {peak_mb:.0f} MB")
    line = refused(done)
    assert "holds a formula of 1" in line and "at most 1,024" in line, line


def test_a_workbook_of_many_empty_parts_is_refused_before_its_directory_is_read(tmp_path):
    path = build(tmp_path, "attention", ATTENTION)
    padded = tmp_path / "parts.xlsx"
    with zipfile.ZipFile(path) as book, zipfile.ZipFile(padded, "w") as out:
        for info in book.infolist():
            out.writestr(info, book.read(info.filename))
        for i in range(10_001):
            out.writestr(f"xl/empty/{i}.bin", b"")
    line = refused(capped_cli("check", padded)[0])
    assert "its zip lists 10,0" in line and "at most 10,000 parts" in line, line


@pytest.mark.parametrize("command", ["check", "grade"])
def test_a_pipe_named_like_a_workbook_is_refused_not_read(tmp_path, command):
    fifo = tmp_path / "f.xlsx"
    os.mkfifo(fifo)
    line = refused(capped_cli(command, fifo)[0])  # a read would wait forever
    assert "not a regular file" in line, line


def test_a_device_is_refused_not_read():
    line = refused(capped_cli("check", "/dev/zero")[0])
    assert "not a regular file" in line, line


# -- build: files given -----------------------------------------------------------------------

def test_a_huge_inputs_file_is_refused_before_it_is_parsed(tmp_path):
    big = tmp_path / "big.json"
    with big.open("wb") as handle:  # sparse: 300 MB that take no disk
        handle.truncate(300 * 2**20)
    done, peak_mb = capped_cli("build", "attention", "--inputs", big, "-o",
                               tmp_path / "a.xlsx")
    print(f"a 300 MB --inputs: {peak_mb:.0f} MB")
    line = refused(done)
    assert "is 300 MB, more than the 64 MB" in line, line
    assert peak_mb < 200


def test_a_zip_checkpoint_unpacking_to_gigabytes_is_refused_before_unpacking(tmp_path):
    """A zip of a few MB whose model.safetensors declares a gigabyte (zeros pack 1000:1;
    weights barely pack)."""
    bomb = tmp_path / "model.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", json.dumps({"model_type": "bert"}))
        with archive.open("model.safetensors", "w", force_zip64=True) as member:
            block = b"\0" * 2**24
            for _ in range(64):
                member.write(block)
    assert bomb.stat().st_size < 5 * 2**20
    done, peak_mb = capped_cli("build", "encoder-block", "--checkpoint", bomb, "-o",
                               tmp_path / "b.xlsx", "--layout", "blocks")
    print(f"a 1 GB model.safetensors in a {bomb.stat().st_size / 2**20:.1f} MB zip: "
          f"{peak_mb:.0f} MB")
    line = refused(done)
    assert "model.safetensors unpacks to 1,024 MB" in line, line
    assert peak_mb < 200
