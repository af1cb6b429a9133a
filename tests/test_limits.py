"""Limits stated and enforced before any work: Excel's grid, --max-cells, label length,
overflowing inputs, the size of a file read, and readers bounded by the defined names (a
stray cell far down a returned file costs nothing). Big-file cases measure the peak memory
of a new process."""

import io
import json
import re
import zipfile
from pathlib import Path

import openpyxl
import pytest
from helpers.books import ATTENTION, KINDS, build, exercise_book, fill
from helpers.cli import cli, one_line_error, peak_memory
from helpers.requires import requires_libreoffice
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.sheet.constants import CONSTANT_BLOCK_CELLS
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.limits import (
    DEFAULT_MAX_CELLS,
    EXCEL_COLS,
    EXCEL_ROWS,
    MAX_ARRAY_CELLS,
    place_kind,
    plan_build,
    plan_extent,
)
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.request import BuildRequest, ExerciseSpec

pytestmark = pytest.mark.slow  # limits: large grids, files and formulas refused

# peak resident memory of one command, measured in a process of its own: the bound is far
# above a small workbook's (~60–90 MB) and far below what reading a million rows costs
MEMORY_BOUND_MB = 400
OVERSIZED_BUILD_BOUND_MB = 200


# -- the grid, cells and labels, refused before any work --------------------------------------

@pytest.mark.parametrize("args, flag", [
    (["--seq-len", "100000"], "--seq-len"),
    (["--seq-len", "2", "--d-model", "17000", "--d-k", "1"], "--d-model"),
    (["--d-k", "17000"], "--d-k"),  # one block wider than the grid (wider bands wrap)
])
def test_a_sheet_beyond_excels_grid_is_refused_at_once(tmp_path, args, flag):
    out = tmp_path / "big.xlsx"
    done, peak_mb = peak_memory("build", "attention", "-o", out, *args)
    print(f"build attention {' '.join(args)}: {peak_mb:.0f} MB")
    line = one_line_error(done)
    assert "16,384" in line and f"lower {flag}" in line, line
    assert peak_mb < OVERSIZED_BUILD_BOUND_MB
    assert list(tmp_path.iterdir()) == []


GPT2_SMALL = ["--vocab", "50257", "--d-model", "768", "--heads", "12", "--layers", "12",
              "--seq-len", "8"]


def test_gpt2_small_fits_the_grid_with_its_vocabulary_down_the_rows(tmp_path):
    """GPT-2 small's 50,257 ids go down the rows (LOGITS 50,257 × 8): the plan fits Excel's
    grid, MAX_ARRAY_CELLS and the default --max-cells, so it builds without a flag; a lower
    --max-cells refuses it naming LOGITS, the largest block of those written one by one
    (WTE, held as an array, is not counted there)."""
    kind = KINDS["gpt"]
    params = make_params(kind, {"vocab": 50257, "d_model": 768, "heads": 12, "layers": 12,
                                "seq_len": 8})
    request = plan_build(kind, params, layout="blocks", array_block_cells=CONSTANT_BLOCK_CELLS)
    extent = plan_extent(request)
    assert extent.rows <= EXCEL_ROWS and extent.cols <= EXCEL_COLS
    assert 50257 * 768 < extent.array_cells <= MAX_ARRAY_CELLS
    assert 2_000_000 < extent.cells <= DEFAULT_MAX_CELLS
    logits = place_kind(request).blocks["LOGITS"]
    assert (logits.rows, logits.cols) == (50257, 8)
    out = tmp_path / "gpt2.xlsx"
    done, peak_mb = peak_memory("build", "gpt", "-o", out, "--layout", "blocks", *GPT2_SMALL,
                                "--max-cells", "2000000")
    line = one_line_error(done)
    assert "more than --max-cells 2,000,000" in line
    assert "block LOGITS is 50,257×8" in line, line
    assert peak_mb < OVERSIZED_BUILD_BOUND_MB and not out.exists()


def test_a_vocabulary_beyond_the_rows_is_refused_at_once(tmp_path):
    """Down the rows a vocabulary is bounded by Excel's 1,048,576 rows: two million ids
    are refused in one line naming --vocab, before a block is made."""
    out = tmp_path / "big.xlsx"
    done, peak_mb = peak_memory("build", "gpt", "-o", out, "--vocab", "2000000")
    line = one_line_error(done)
    assert "1,048,576" in line and "lower --vocab" in line, line
    assert peak_mb < OVERSIZED_BUILD_BOUND_MB and not out.exists()


def test_max_cells_is_a_stated_default_and_a_flag(tmp_path):
    out = tmp_path / "a.xlsx"
    line = one_line_error(cli("build", "attention", "-o", out, "--max-cells", "20"))
    assert "--max-cells 20 " in line and "raise --max-cells" in line
    # an exercise's hidden key repeats every block: 800² × 4 square blocks and more, twice
    line = one_line_error(cli("build", "attention", "-o", out, "--seq-len", "800",
                              "--exercise", "WEIGHTS"))
    assert f"{DEFAULT_MAX_CELLS:,}" in line and "hidden key" in line, line
    assert "lower --seq-len" in line, line
    assert one_line_error(cli("build", "attention", "-o", out, "--max-cells", "0"))
    assert not out.exists()
    assert cli("build", "attention", "-o", out, "--max-cells", "200").returncode == 0


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_planned_extent_is_the_built_sheets(tmp_path, name):
    """The plan places every block where the writer puts it: the same data cells, and the
    sheet's last row and column (an exercise's marks and self-check table included)."""
    kind = KINDS[name]
    values = kind.test_cases[0]
    params = make_params(kind, values)
    step = kind.step_names(params)[-1]
    path, _ = exercise_book(tmp_path, name, values, [step])
    wb = openpyxl.load_workbook(path)
    ws = wb[kind.sheet_title]
    named = [find_name(wb, n, path) for n in wb.defined_names if not n.startswith("CHECK_")]
    extent = plan_extent(BuildRequest(kind, params, kind.labels(params, None),
                                      exercise=ExerciseSpec((step,))))
    assert extent.cells == 2 * sum(w.shape[0] * w.shape[1] for w in named)
    assert (extent.rows, extent.cols) == (ws.max_row, ws.max_column)


def test_labels_are_bounded(tmp_path):
    out = tmp_path / "a.xlsx"
    line = one_line_error(cli("build", "attention", "-o", out, "--tokens",
                              "a," + "x" * 256 + ",c,d"))
    assert "token 2 has 256 characters" in line and "255" in line
    # each within 255, together beyond one cell of the About sheet
    many = ",".join(f"{i:03d}" + "y" * 196 for i in range(170))
    line = one_line_error(cli("build", "attention", "-o", out, "--tokens", many))
    assert "32,767" in line
    assert not out.exists()
    assert cli("build", "attention", "-o", out, "--tokens", "a," + "x" * 255 + ",c,d"
               ).returncode == 0
    assert cli("check", out).returncode == 0


def test_inputs_whose_results_overflow_are_refused_naming_the_step(tmp_path):
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"X": [[1e200, 1], [1, 1]]}))
    out = tmp_path / "a.xlsx"
    line = one_line_error(cli("build", "attention", "-o", out, "--inputs", inputs))
    assert "overflow" in line and "step SCORES" in line, line
    assert not out.exists()


def test_results_of_any_size_check_as_well_as_ordinary_ones(tmp_path):
    """Inputs ×1e15 give scores near 1e60: the tolerance scales with them."""
    inputs = tmp_path / "in.json"
    big = [[1e15, -2e15], [3e15, 1e15], [-1e15, 2e15]]
    eye = [[1e15, 0], [0, 1e15]]
    inputs.write_text(json.dumps({"X": big, "W_Q": eye, "W_K": eye, "W_V": eye}))
    out = tmp_path / "a.xlsx"
    assert cli("build", "attention", "-o", out, "--inputs", inputs).returncode == 0
    ran = cli("check", out, "--json")
    steps = {s["name"]: s for s in json.loads(ran.stdout)["steps"]}
    assert steps["SCORES"]["passed"] and steps["ROW_MAX"]["passed"], steps["SCORES"]
    assert ran.returncode == 0


def test_a_masked_row_max_has_no_sentinel_to_lose_to(tmp_path):
    """Sliding-window scores all below −1e30: a −1E+30 fill value would win the row max
    and the softmax would overflow; the row's own score cannot."""
    inputs = tmp_path / "in.json"
    x = [[1e10, 1e10], [2e10, 1e10], [1e10, 3e10], [2e10, 2e10]]
    inputs.write_text(json.dumps({"X": x, "W_Q": [[1e11, 0], [0, 1e11]],
                                  "W_K": [[-1e11, 0], [0, -1e11]]}))
    out = tmp_path / "sw.xlsx"
    built = cli("build", "sliding-window", "-o", out, "--inputs", inputs, "--window", "1")
    assert built.returncode == 0, built.stderr
    ran = cli("check", out)
    assert ran.returncode == 0, ran.stdout


# -- files read: size, grid, and only the part the names cover -----------------------------

def returned_exercise(tmp_path) -> Path:
    """An attention exercise answered right with formulas, saved by a script (no cached
    values, so grade evaluates it), plus one stray cell far down the sheet."""
    steps = ["WEIGHTS", "OUTPUT"]
    path, answers = exercise_book(tmp_path, "attention", ATTENTION, steps)
    return fill(path, answers, steps, tmp_path / "student.xlsx",
                lambda s, i, j, v: f"={v!r}*1")


def with_stray(source: Path, target: Path, cell: str, value) -> Path:
    wb = openpyxl.load_workbook(source)
    wb["Attention"][cell] = value
    wb.save(target)
    return target


@pytest.mark.parametrize("stray", [
    "x",                                   # a typed entry
    "=SUM(A1:A999999)",                    # a formula reading a million cells
    "array",                               # an array formula over a million cells
])
def test_a_stray_cell_far_down_a_returned_exercise_costs_nothing(tmp_path, stray):
    student = returned_exercise(tmp_path)
    target = tmp_path / "stray.xlsx"
    if stray == "array":
        wb = openpyxl.load_workbook(student)
        wb["Attention"]["A1000"] = ArrayFormula("A1000:A1000000", "=1")
        wb.save(target)
    else:
        with_stray(student, target, "A1000000", stray)
    assert target.stat().st_size < 40_000
    graded, grade_mb = peak_memory("grade", target)
    checked, check_mb = peak_memory("check", target)
    print(f"stray {stray!r}: grade {grade_mb:.0f} MB, check {check_mb:.0f} MB")
    assert graded.returncode == 0 and "15/15" in graded.stdout, graded.stdout + graded.stderr
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert grade_mb < MEMORY_BOUND_MB and check_mb < MEMORY_BOUND_MB


def test_a_formula_reading_a_whole_column_is_refused_in_one_line(tmp_path):
    path = build(tmp_path, "attention", ATTENTION)
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "SCORES", path)
    wb[where.sheet].cell(where.top, where.left).value = "=SUM(A:A)"
    wb.save(tmp_path / "col.xlsx")
    line = one_line_error(cli("check", tmp_path / "col.xlsx"))
    assert "reads A:A (1,048,576 cells)" in line


def test_a_file_that_unpacks_beyond_the_cap_is_refused_before_reading(tmp_path):
    path = build(tmp_path, "attention", ATTENTION)
    padded = tmp_path / "padded.xlsx"
    with zipfile.ZipFile(path) as book, zipfile.ZipFile(padded, "w",
                                                        zipfile.ZIP_DEFLATED) as out:
        for info in book.infolist():
            out.writestr(info, book.read(info.filename))
        with out.open("xl/media/padding.bin", "w") as part:
            block = b"\0" * 2**20
            for _ in range(201):
                part.write(block)
    done, peak_mb = peak_memory("check", padded)
    line = one_line_error(done)
    assert "unpacks to 201 MB, more than the 200 MB" in line
    assert peak_mb < MEMORY_BOUND_MB


def xml_edited(source: Path, target: Path, part: str, edit) -> Path:
    with zipfile.ZipFile(source) as book, zipfile.ZipFile(target, "w") as out:
        for info in book.infolist():
            data = book.read(info.filename)
            out.writestr(info, edit(data) if info.filename == part else data)
    return target


def test_a_sheet_beyond_excels_rows_is_one_line(tmp_path):
    path = build(tmp_path, "attention", ATTENTION)
    tall = xml_edited(path, tmp_path / "tall.xlsx", "xl/worksheets/sheet1.xml",
                      lambda xml: xml.replace(b"</sheetData>", b'<row r="1048577"><c r='
                                              b'"A1048577"><v>1</v></c></row></sheetData>'))
    line = one_line_error(cli("check", tall))
    assert "beyond Excel's 1,048,576 rows" in line


def test_a_defined_name_with_empty_text_is_one_line(tmp_path):
    path = build(tmp_path, "attention", ATTENTION)
    emptied = xml_edited(path, tmp_path / "empty.xlsx", "xl/workbook.xml",
                         lambda xml: re.sub(rb'(<definedName name="OUTPUT"[^>]*>)[^<]*',
                                            rb"\1", xml))
    line = one_line_error(cli("check", emptied))
    assert "defined name OUTPUT points at nothing" in line, line


@pytest.mark.parametrize("value, shown", [(4.0, "4.0"), ("4", "'4'"), (True, "True")])
def test_about_params_of_the_wrong_type_are_one_line(tmp_path, value, shown):
    path = build(tmp_path, "attention", {"seq_len": 4, "d_model": 2, "d_k": 2})
    wb = openpyxl.load_workbook(path)
    about = wb["About"]
    row = next(r for r in range(1, 20) if about.cell(r, 1).value == "params")
    params = json.loads(about.cell(row, 2).value)
    about.cell(row, 2).value = json.dumps({**params, "seq_len": value})
    wb.save(tmp_path / "edited.xlsx")
    line = one_line_error(cli("check", tmp_path / "edited.xlsx"))
    assert f"seq_len must be a whole number, got {shown}" in line, line


def test_pasted_values_in_a_step_fail_the_check(tmp_path):
    """Every cell of WEIGHTS replaced by the number it showed: right today, and dead."""
    path = build(tmp_path, "attention", ATTENTION)
    values = openpyxl.load_workbook(path, data_only=True)
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "WEIGHTS", path)
    for i in range(where.shape[0]):
        for j in range(where.shape[1]):
            r, c = where.top + i, where.left + j
            wb[where.sheet].cell(r, c).value = values[where.sheet].cell(r, c).value
    wb.save(tmp_path / "pasted.xlsx")
    ran = cli("check", tmp_path / "pasted.xlsx", "--json")
    steps = {s["name"]: s for s in json.loads(ran.stdout)["steps"]}
    assert ran.returncode == 1
    assert not steps["WEIGHTS"]["passed"]
    assert steps["WEIGHTS"]["problem"].startswith("values, not formulas: 9 of 9")
    assert steps["OUTPUT"]["passed"]


def test_cached_error_values_are_error_cells(tmp_path):
    """An exercise's #N/A flows into OUTPUT; the value stored beside OUTPUT's formula is an
    error cell (t="e"), as Excel stores it, not the text "#N/A"."""
    path, _ = exercise_book(tmp_path, "attention", ATTENTION, ["WEIGHTS"])
    wb = openpyxl.load_workbook(path)
    first = find_name(wb, "OUTPUT", path)
    ref = f"{openpyxl.utils.get_column_letter(first.left)}{first.top}"
    with zipfile.ZipFile(path) as book:
        xml = book.read("xl/worksheets/sheet1.xml").decode()
    cell = re.search(rf'<c r="{ref}"[^>]*>.*?</c>', xml).group(0)
    assert 't="e"' in cell and "<v>#N/A</v>" in cell, cell
    stored = openpyxl.load_workbook(path, data_only=True)
    assert stored[first.sheet].cell(first.top, first.left).data_type == "e"


@requires_libreoffice
def test_libreoffice_gets_only_the_part_the_names_cover(tmp_path):
    """A stray entry at A1000000 made LibreOffice itself take ~530 MB and ~18 s; it is
    handed a copy without the rows below the named blocks."""
    student = returned_exercise(tmp_path)
    target = with_stray(student, tmp_path / "stray.xlsx", "A1000000", "x")
    checked, peak_mb = peak_memory("check", "--engine", "libreoffice", target)
    print(f"check --engine libreoffice of the stray file: {peak_mb:.0f} MB")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert peak_mb < MEMORY_BOUND_MB


def test_a_sheet_is_trimmed_a_piece_at_a_time_without_splitting_a_row(monkeypatch):
    """The copy an application recalculates streams each sheet through in pieces cut where
    a row starts: tiny pieces give the same XML as one piece, the dimension and the rows
    below the names gone, every other row (a self-closing one included) kept whole."""
    from workbook_builder.engines import cached_values

    def row(n: int) -> bytes:
        cells = "".join(f'<c r="{col}{n}"><v>{n}.{col}</v></c>' for col in "ABC")
        return f'<row r="{n}" spans="1:3">{cells}</row>'.encode()

    kept = [row(n) for n in range(1, 40)] + [b'<row r="40"/>']
    stray = [row(1000), row(1001)]
    head = b'<worksheet><dimension ref="A1:C1001"/><sheetData>'
    tail = b'</sheetData><pageMargins left="0.7"/></worksheet>'
    xml = head + b"".join(kept + stray) + tail
    wanted = b'<worksheet><sheetData>' + b"".join(kept) + tail
    for size in (1, 7, 64, len(xml) + 1):
        monkeypatch.setattr(cached_values, "_PIECE_BYTES", size)
        pieces = list(cached_values.trimmed_rows(io.BytesIO(xml), 40))
        assert b"".join(pieces) == wanted, size
        # pieces smaller than a row: a piece for each row, none for a part of one
        assert len(pieces) >= len(kept + stray) if size < len(row(1)) else len(pieces) < 4


def test_a_workbook_libreoffice_cannot_load_is_refused_before_it_is_read(tmp_path,
                                                                          monkeypatch):
    """LibreOffice loads no part over 2 GiB unpacked (GPT-2 small's sheet is 7.45 GB):
    `check --engine libreoffice` says so in one line before reading the file. (The bound
    is lowered here to a small workbook's sheet.)"""
    from workbook_builder.checking import check
    from workbook_builder.engines import libreoffice
    from workbook_builder.errors import UserError

    path = build(tmp_path, "attention", ATTENTION)
    with zipfile.ZipFile(path) as book:
        largest = max(book.infolist(), key=lambda info: info.file_size)
    monkeypatch.setattr(libreoffice, "MOST_PART_BYTES", largest.file_size - 1)
    monkeypatch.setattr(check, "open_workbook", lambda *a, **k: pytest.fail("read"))
    with pytest.raises(UserError) as refused:
        check.check_workbook(path, "libreoffice")
    line = str(refused.value)
    assert f"its part {largest.filename} unpacks to {largest.file_size:,} bytes" in line
    assert "LibreOffice loads no part over 2 GiB" in line and "--engine formulas" in line
    monkeypatch.setattr(libreoffice, "MOST_PART_BYTES", largest.file_size)
    libreoffice.refuse_parts_beyond_libreoffice(path)  # at the bound: loads
