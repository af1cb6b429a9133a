"""Large input blocks written and read as arrays, not as cell objects: the file, and every
value read back from it, are the same as the plain path's (each block forced through the
array path here by a threshold of one cell)."""

import re
import subprocess
import warnings
import zipfile
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from helpers.books import ALL_CASES, KINDS, book_in_memory, write_book
from helpers.requires import requires_gnumeric, requires_libreoffice
from openpyxl.comments import Comment
from openpyxl.styles import Font
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder import api
from workbook_builder.book import sheet_xml
from workbook_builder.book.files import open_workbook, save_atomic, saved_values
from workbook_builder.checking.check import check_workbook, read_inputs
from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.engines.gnumeric import recalculate, ssconvert_path
from workbook_builder.engines.libreoffice import convert, read_values
from workbook_builder.sheet.constants import (
    ConstantBlock,
    blocks_with_cells,
    constant_blocks,
    positions_inside,
)
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.refs import cell_ref, parse_range

FIRST_CASES = {name: case for name, i, case in ALL_CASES if i == 0}


def _written(tmp_path: Path, kind_name: str, case: dict, layout: str, array_cells,
             name: str) -> Path:
    kind = KINDS[kind_name]
    path = tmp_path / name
    write_book(kind, make_params(kind, case), path, seed=3, layout=layout, force=True,
               array_block_cells=array_cells)
    return path


def _as_read(path: Path) -> dict:
    """Everything openpyxl reads of a file (warnings included), styles by content."""
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        wb = openpyxl.load_workbook(path)
    cells = {}
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for c in row:
                if c.value is not None or c.has_style:
                    value = getattr(c.value, "text", c.value)
                    cells[(ws.title, c.coordinate)] = (
                        type(c.value).__name__, value, c.data_type, repr(
                            (c.font, c.fill, c.number_format, c.border, c.alignment,
                             c.protection)),
                        c.comment.text if c.comment else None)
    sheets = [(ws.title, ws.page_setup.orientation, ws.oddHeader.center.text,
               ws.print_options.gridLines, ws.freeze_panes,
               sorted((k, d.width) for k, d in ws.column_dimensions.items()))
              for ws in wb.worksheets]
    with zipfile.ZipFile(path) as book:
        parts = sorted(book.namelist())
    return {"cells": cells, "sheets": sheets, "parts": parts,
            "names": sorted((n, d.attr_text) for n, d in wb.defined_names.items()),
            "warnings": [str(w.message) for w in heard]}


@pytest.mark.slow  # every kind; the tests below read four kinds back through the array path
@pytest.mark.parametrize("kind_name", sorted(FIRST_CASES))
def test_array_blocks_write_the_same_workbook_as_cells(tmp_path, kind_name):
    layout = "blocks" if kind_name in ("multihead", "flash", "ssm") else "cells"
    case = FIRST_CASES[kind_name]
    plain = _as_read(_written(tmp_path, kind_name, case, layout, None, "plain.xlsx"))
    arrays = _as_read(_written(tmp_path, kind_name, case, layout, 1, "arrays.xlsx"))
    assert arrays["warnings"] == []
    for part in ("names", "sheets", "parts"):
        assert arrays[part] == plain[part], part
    assert set(arrays["cells"]) == set(plain["cells"])
    differ = [k for k in plain["cells"] if arrays["cells"][k] != plain["cells"][k]]
    assert differ == []


def test_a_large_input_block_is_held_as_an_array_and_a_small_one_as_cells(tmp_path):
    kind = KINDS["attention"]
    params = make_params(kind, {"seq_len": 70, "d_model": 64, "d_k": 2})  # X: 4,480 cells
    book = write_book(kind, params, tmp_path / "a.xlsx", layout="blocks")
    held = {(b.values.shape) for ws in book.workbook.worksheets for b in constant_blocks(ws)}
    assert held == {(70, 64)}
    read = open_workbook(book.path, array_blocks=True)  # as `check` reads it
    assert [b.values.shape for b in constant_blocks(read["Attention"])] == [(70, 64)]
    assert blocks_with_cells(read["Attention"]) == []  # no cell object inside it
    assert check_workbook(book.path).passed


def _values_read_both_ways(path: Path, monkeypatch) -> tuple[dict, dict, int]:
    monkeypatch.setattr(sheet_xml, "CONSTANT_BLOCK_CELLS", 1)
    fast = open_workbook(path, array_blocks=True)
    arrays = sum(len(constant_blocks(ws)) for ws in fast.worksheets)
    general = open_workbook(path)
    return (FormulasModel(fast, path.name).evaluate(),
            FormulasModel(general, path.name).evaluate(), arrays)


def _same_typed(a: dict, b: dict) -> list:
    return [k for k in set(a) | set(b)
            if type(a.get(k)) is not type(b.get(k)) or
            (a.get(k) != b.get(k) and not (a.get(k) != a.get(k) and b.get(k) != b.get(k)))]


@pytest.mark.parametrize("kind_name", ["attention", "multihead", "ssm", "encoder-block"])
def test_check_reads_the_same_values_as_openpyxl(tmp_path, monkeypatch, kind_name):
    layout = "blocks" if kind_name != "attention" else "cells"
    path = _written(tmp_path, kind_name, FIRST_CASES[kind_name], layout, 1, "a.xlsx")
    fast, general, arrays = _values_read_both_ways(path, monkeypatch)
    assert arrays == len(KINDS[kind_name].input_shapes(
        make_params(KINDS[kind_name], FIRST_CASES[kind_name])))
    assert _same_typed(fast, general) == []
    kind = KINDS[kind_name]
    params = make_params(kind, FIRST_CASES[kind_name])
    read = [read_inputs(open_workbook(path, array_blocks=array), kind, params, path, dict)
            for array in (True, False)]
    assert {k: v.tolist() for k, v in read[0].items()} == \
        {k: v.tolist() for k, v in read[1].items()}


def test_whole_numbers_read_back_as_integers_both_ways(tmp_path, monkeypatch):
    kind = KINDS["attention"]
    given = {"X": np.array([[1.0, -2.0], [0.5, 3.0], [4.0, 1e17]])}
    path = tmp_path / "w.xlsx"
    write_book(kind, make_params(kind, FIRST_CASES["attention"]), path, given=given,
               array_block_cells=1)
    fast, general, _ = _values_read_both_ways(path, monkeypatch)
    assert _same_typed(fast, general) == []
    where = find_name(open_workbook(path), "X", path)
    corner = (where.sheet.upper(), where.top, where.left)
    assert [type(v) for v in (fast[corner], general[corner])] == [int, int]
    last = (where.sheet.upper(), where.bottom, where.right)
    assert [type(v) for v in (fast[last], general[last])] == [float, float]


def test_a_block_with_text_keeps_the_general_path_and_is_refused_by_check(tmp_path,
                                                                        monkeypatch):
    path = _written(tmp_path, "attention", FIRST_CASES["attention"], "cells", 1, "a.xlsx")
    wb = openpyxl.load_workbook(path)
    where = wb.defined_names["X"].destinations
    sheet, ref = next(iter(where))
    top_left = ref.replace("$", "").split(":")[0]
    wb[sheet][top_left] = "abc"
    wb.save(path)
    monkeypatch.setattr(sheet_xml, "CONSTANT_BLOCK_CELLS", 1)
    loaded = open_workbook(path, array_blocks=True)
    assert all(b.values.shape != (3, 2) for ws in loaded.worksheets
               for b in constant_blocks(ws))
    with pytest.raises(api.AttnsheetsError, match=f"input X cell .*{top_left} holds 'abc'"):
        check_workbook(path)


def test_a_cell_styled_inside_an_array_block_is_written_with_its_style(tmp_path):
    kind = KINDS["attention"]
    params = make_params(kind, FIRST_CASES["attention"])
    inputs = complete_inputs(kind, params, {}, 0)
    labels = kind.labels(params, None)
    books = {}
    for name, cells in (("plain", None), ("arrays", 1)):
        wb = book_in_memory(kind, params, inputs, labels, "cells", array_block_cells=cells)
        where = find_name(wb, "X", Path(name))
        wb[where.sheet].cell(where.top, where.left).font = Font(bold=True)
        books[name] = tmp_path / f"{name}.xlsx"
        save_atomic(wb, books[name])
    arrays, plain = _as_read(books["arrays"]), _as_read(books["plain"])
    corner = (where.sheet, cell_ref(where.top, where.left))
    # the cell made after the block was kept has its own style, the block's value
    assert arrays["cells"].pop(corner)[:3] == plain["cells"].pop(corner)[:3]
    assert openpyxl.load_workbook(books["arrays"])[corner[0]][corner[1]].font.b
    assert arrays == plain
    assert check_workbook(books["arrays"]).passed


def test_set_input_changes_an_array_block(tmp_path, monkeypatch):
    monkeypatch.setattr(api, "CONSTANT_BLOCK_CELLS", 1)
    book = api.build("attention", tmp_path / "a.xlsx", **FIRST_CASES["attention"])
    assert any(constant_blocks(ws) for ws in book.workbook.worksheets)
    book.set_input("X", 0, 0, 7.25)
    assert api.read_blocks(book)["X"].iloc[0, 0] == 7.25
    book.save(tmp_path / "b.xlsx")
    assert api.read_blocks(tmp_path / "b.xlsx")["X"].iloc[0, 0] == 7.25
    assert api.check(tmp_path / "b.xlsx").passed


@requires_libreoffice
def test_a_file_saved_by_libreoffice_reads_the_same_both_ways(tmp_path, monkeypatch):
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", 1, "m.xlsx")
    out = tmp_path / "lo"
    out.mkdir()
    resaved = convert(path, "xlsx", out)
    fast, general, _ = _values_read_both_ways(resaved, monkeypatch)
    assert _same_typed(fast, general) == []


@pytest.mark.parametrize("engine", [
    pytest.param("libreoffice", marks=requires_libreoffice),
    pytest.param("gnumeric", marks=requires_gnumeric)])
def test_an_applications_copy_is_read_with_its_blocks_of_plain_numbers_left_out(tmp_path,
                                                                              monkeypatch,
                                                                              engine):
    """`saved_values` (what check reads of an application's recalculated copy) gives every
    cell `read_values` gives, the same, except those of the named blocks of plain numbers
    (the inputs: no caller looks them up), which it reads in bulk and leaves out: all of
    them in LibreOffice's copy; Gnumeric writes its cells otherwise, read as before."""
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", 1, "m.xlsx")
    out = tmp_path / engine
    out.mkdir()
    saved = convert(path, "xlsx", out) if engine == "libreoffice" else \
        recalculate(path, out / "m.xlsx")
    monkeypatch.setattr(sheet_xml, "CONSTANT_BLOCK_CELLS", 1)
    every, read = read_values(saved), saved_values(saved)
    wb = openpyxl.load_workbook(saved)
    inputs = KINDS["multihead"].input_shapes(make_params(KINDS["multihead"],
                                                         FIRST_CASES["multihead"]))
    plain = set()
    for name in inputs:
        where = find_name(wb, name, saved)
        plain |= {(where.sheet.upper(), where.top + i, where.left + j)
                  for i in range(where.shape[0]) for j in range(where.shape[1])}
    assert plain and plain <= set(every)
    left_out = set(every) - set(read)
    assert left_out == (plain if engine == "libreoffice" else set()), left_out - plain
    assert set(read) <= set(every)
    assert _same_typed(read, {key: every[key] for key in read}) == []


@pytest.mark.parametrize("engine", [
    pytest.param("libreoffice", marks=requires_libreoffice),
    pytest.param("gnumeric", marks=requires_gnumeric)])
def test_applications_recalculate_a_workbook_written_with_array_blocks(tmp_path, engine):
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", 1, "m.xlsx")
    report = check_workbook(path, engine)
    assert report.passed, [s for s in report.steps if not s.passed]


@requires_gnumeric
def test_gnumeric_says_nothing_more_of_array_blocks_than_of_cells(tmp_path):
    said = []
    for name, cells in (("plain.xlsx", None), ("arrays.xlsx", 1)):
        path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", cells, name)
        done = subprocess.run([ssconvert_path(), "--recalc", str(path),
                               str(tmp_path / f"out-{name}")], capture_output=True, text=True,
                              timeout=120)
        lines = (done.stderr + done.stdout).splitlines()  # less the process id and the time
        said.append(sorted({re.sub(r"\(ssconvert:\d+\)|\d+:\d+:\d+\.\d+", "", line)
                            for line in lines}))
    assert said[1] == said[0]


def test_a_print_area_over_the_blocks_leaves_them_read_as_arrays(tmp_path, monkeypatch):
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", 1, "m.xlsx")
    wb = openpyxl.load_workbook(path)
    wb["Multihead"].print_area = "A1:AZ300"  # an application's own defined name
    wb.save(path)
    assert "_xlnm.Print_Area" in zipfile.ZipFile(path).read("xl/workbook.xml").decode()
    fast, general, arrays = _values_read_both_ways(path, monkeypatch)
    assert arrays == len(KINDS["multihead"].input_shapes(
        make_params(KINDS["multihead"], FIRST_CASES["multihead"])))
    assert _same_typed(fast, general) == []


def _cells_in_array_ranges(wb) -> list[str]:
    """The cells a loaded workbook holds inside its array formulas' ranges, besides each
    formula's own first cell."""
    found = []
    for ws in wb.worksheets:
        ranges = [parse_range(c.value.ref) for c in ws._cells.values()
                  if isinstance(c.value, ArrayFormula)]
        found += [f"{ws.title}!{c.coordinate}" for c in ws._cells.values()
                  if any(top <= c.row <= bottom and left <= c.column <= right and
                         (c.row, c.column) != (top, left)
                         for top, left, bottom, right in ranges)]
    return found


def test_check_reads_a_blocks_workbook_without_its_array_formulas_stored_results(tmp_path):
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", None, "m.xlsx")
    assert _cells_in_array_ranges(openpyxl.load_workbook(path)) != []  # the build stored them
    read = open_workbook(path, array_blocks=True)  # as `check` reads it
    assert any(isinstance(c.value, ArrayFormula) for c in read["Multihead"]._cells.values())
    assert _cells_in_array_ranges(read) == []
    assert _same_typed(FormulasModel(read, path.name).evaluate(),
                       FormulasModel(open_workbook(path), path.name).evaluate()) == []
    assert check_workbook(path).passed


def test_an_array_range_row_holding_more_than_stored_values_is_read_by_openpyxl(tmp_path):
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", None, "m.xlsx")
    wb = openpyxl.load_workbook(path)
    master = next(c for c in wb["Multihead"]._cells.values() if isinstance(c.value, ArrayFormula))
    top, left, bottom, right = parse_range(master.value.ref)
    assert bottom > top and right > left
    wb["Multihead"].cell(bottom, right).comment = Comment("a note", "teacher")
    wb["Multihead"].cell(bottom, right).value = "=1+1"  # no longer a stored result
    wb.save(path)
    read = open_workbook(path, array_blocks=True)
    assert read["Multihead"].cell(bottom, right).value == "=1+1"
    kept = {c for c in _cells_in_array_ranges(read) if c.startswith("Multihead!")}
    assert f"Multihead!{read['Multihead'].cell(bottom, right).coordinate}" in kept
    assert len(kept) == right - left + 1  # the row it is in, no other


def test_positions_inside_blocks_are_the_positions_each_block_holds():
    rng = np.random.default_rng(0)
    blocks = [ConstantBlock(int(top), int(left), np.zeros((int(h), int(w))),
                            np.zeros((int(h), int(w)), bool), None)
              for top, left, h, w in rng.integers(1, 12, size=(6, 4))]
    positions = sorted({(int(r), int(c)) for r, c in rng.integers(1, 25, size=(300, 2))})
    assert positions_inside(blocks, positions) == [
        {p for p in positions if block.holds(*p)} for block in blocks]
    assert positions_inside(blocks, []) == [set()] * len(blocks)


def _read_values(wb) -> dict:
    """(sheet, cell) -> (value, data type) of every cell holding something, less the stored
    results of array formulas."""
    held = {}
    for ws in wb.worksheets:
        ranges = [parse_range(c.value.ref) for c in ws._cells.values()
                  if isinstance(c.value, ArrayFormula)]
        for c in ws._cells.values():
            inside = any(top <= c.row <= bottom and left <= c.column <= right and
                         (c.row, c.column) != (top, left) for top, left, bottom, right in ranges)
            if c.value is not None and not inside:
                held[(ws.title, c.coordinate)] = (getattr(c.value, "text", c.value),
                                                  c.data_type)
    return held


@pytest.mark.parametrize("layout,lang", [("cells", "zh"), ("blocks", "en")])
def test_check_reads_every_text_and_value_as_openpyxl_does(tmp_path, layout, lang):
    tokens = [" spaced ", "a&b<c>", "=1+1", "#N/A", "我", "'quoted"]
    path = tmp_path / "t.xlsx"
    api.build("attention", path, seq_len=6, d_model=2, d_k=2, tokens=tokens, layout=layout,
              lang=lang)
    general = openpyxl.load_workbook(path)
    assert general["Attention"].merged_cells.ranges  # headers span their blocks
    read = open_workbook(path, array_blocks=True)  # as `check` reads it
    assert not read["Attention"].merged_cells.ranges  # nothing checked is merged
    assert _read_values(read) == _read_values(general)
    assert {v for v, t in _read_values(read).values() if t == "s"} >= set(tokens)
    assert check_workbook(path).passed


def test_a_blocks_workbook_with_formula_regions_is_the_workbook_of_cells(tmp_path):
    # the array formulas' other cells written without cell objects, as openpyxl wrote them
    case = {"seq_len": 6, "d_model": 8, "d_k": 4}
    plain = _written(tmp_path, "attention", case, "blocks", None, "plain.xlsx")
    arrays = _written(tmp_path, "attention", case, "blocks", 1, "arrays.xlsx")
    assert _as_read(arrays) == _as_read(plain)
    with zipfile.ZipFile(plain) as a, zipfile.ZipFile(arrays) as b:
        sheet = "xl/worksheets/sheet2.xml"  # the kind's sheet, after About
        assert b.read(sheet) == a.read(sheet)
    assert check_workbook(arrays).passed


def test_a_sheet_read_in_small_pieces_reads_the_same(tmp_path, monkeypatch):
    # every row boundary falls across a piece of the stream somewhere
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", 1, "m.xlsx")
    whole, _, arrays = _values_read_both_ways(path, monkeypatch)
    monkeypatch.setattr(sheet_xml, "_READ_BYTES", 997)
    pieces, general, again = _values_read_both_ways(path, monkeypatch)
    assert again == arrays > 0
    assert _same_typed(pieces, whole) == [] and _same_typed(pieces, general) == []


def test_a_block_broken_in_its_last_row_is_read_again_by_openpyxl(tmp_path, monkeypatch):
    # its first rows were already left out of the XML openpyxl loads when the last row
    # turns out to hold text: the sheet is read again, the block left to openpyxl
    kind = KINDS["attention"]
    params = make_params(kind, {"seq_len": 6, "d_model": 4, "d_k": 2})
    path = tmp_path / "a.xlsx"
    write_book(kind, params, path, array_block_cells=1)
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "X", path)
    wb[where.sheet].cell(where.bottom, where.right).value = "abc"
    wb.save(path)
    monkeypatch.setattr(sheet_xml, "CONSTANT_BLOCK_CELLS", 1)
    loaded = open_workbook(path, array_blocks=True)
    shapes = [b.values.shape for ws in loaded.worksheets for b in constant_blocks(ws)]
    assert (6, 4) not in shapes and shapes  # the other blocks are still arrays
    assert loaded[where.sheet].cell(where.top, where.left).value == \
        wb[where.sheet].cell(where.top, where.left).value
    fast, general, _ = _values_read_both_ways(path, monkeypatch)
    assert _same_typed(fast, general) == []


def test_a_sheet_holding_too_much_besides_its_blocks_is_refused_in_one_line(tmp_path,
                                                                          monkeypatch):
    path = _written(tmp_path, "multihead", FIRST_CASES["multihead"], "blocks", 1, "m.xlsx")
    monkeypatch.setattr(sheet_xml, "MAX_CELL_XML_BYTES", 1000)
    monkeypatch.setattr(sheet_xml, "_READ_BYTES", 2000)
    with pytest.raises(api.AttnsheetsError, match="more than 0 MB of its XML is cells other"):
        open_workbook(path, array_blocks=True)
