"""LibreOffice, a real spreadsheet application, as the second engine: it recalculates every
demo workbook to the reference, shows no error cell, never trusts cached values, reads files
it saved itself, and prints a PDF handout."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import openpyxl
import pytest
from helpers.books import build, planted_copy
from helpers.cli import cli, one_line_error
from helpers.requires import requires_libreoffice

from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.libreoffice import convert, read_values
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.printing import MIN_SCALE

ERROR_VALUE = re.compile(r"^(#(NAME\?|VALUE!|REF!|DIV/0!|NUM!|N/A|NULL!)|Err:\d+)")


@requires_libreoffice
def test_libreoffice_recalculates_every_demo_workbook_to_the_reference(recalculated_demo):
    failures = []
    for book, recalculated in recalculated_demo:
        report = check_workbook(book, "libreoffice", values=read_values(recalculated))
        if not report.passed:
            failures.append(format_report(report))
    assert not failures, "\n".join(failures)


@requires_libreoffice
def test_no_cell_of_any_demo_workbook_holds_an_error_after_libreoffice(recalculated_demo):
    errors = [f"{recalculated.name} {sheet}!{row},{col}: {value}"
              for _, recalculated in recalculated_demo
              for (sheet, row, col), value in read_values(recalculated).items()
              if isinstance(value, str) and ERROR_VALUE.match(value)]
    assert not errors, "\n".join(errors[:20])


@requires_libreoffice
@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_check_engine_all_passes_fresh_and_after_an_edit(tmp_path, layout):
    path = build(tmp_path, "multihead", {"seq_len": 4, "d_model": 4, "heads": 2,
                                         "kv_heads": 1, "causal": True}, layout=layout)
    fresh = cli("check", path, "--engine", "all")
    assert fresh.returncode == 0, fresh.stdout
    assert "all steps pass in every engine" in fresh.stdout
    header = fresh.stdout.splitlines()[1]  # every engine named, `formulas` first
    assert 0 <= header.find("formulas max|err|") < header.find("libreoffice max|err|") \
        and "gnumeric max|err|" in header
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "X", path)
    wb[where.sheet].cell(where.top, where.left).value = 2.5
    wb.save(path)
    edited = cli("check", path, "--engine", "all")
    assert edited.returncode == 0, edited.stdout


@requires_libreoffice
def test_libreoffice_does_not_trust_cached_values(tmp_path):
    """Plant wrong cached values: LibreOffice must recompute, so its check still passes."""
    _, planted, _ = planted_copy(tmp_path)
    cached = openpyxl.load_workbook(planted, data_only=True)
    output = find_name(cached, "OUTPUT", planted)
    assert cached[output.sheet].cell(output.top, output.left).value == 123.0
    assert check_workbook(planted, "libreoffice").passed


@requires_libreoffice
@pytest.mark.parametrize("kind,params", [
    ("attention", {"seq_len": 3, "d_model": 2, "d_k": 2}),
    ("multihead", {"seq_len": 3, "d_model": 4, "heads": 2, "causal": True}),
])
def test_a_workbook_saved_by_libreoffice_is_checked_from_its_inputs(tmp_path, kind, params):
    """A teacher edits inputs and saves in another program: the file LibreOffice writes
    (its own XML, names and cached values) still checks with both engines."""
    path = build(tmp_path, kind, params, layout="blocks")
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "W_V", path)
    wb[where.sheet].cell(where.top, where.left).value = -3.25
    wb.save(path)
    saved = convert(path, "xlsx", tmp_path / "lo")
    assert openpyxl.load_workbook(saved)[where.sheet].cell(where.top, where.left).value == -3.25
    for engine in ("formulas", "libreoffice"):
        report = check_workbook(saved, engine)
        assert report.passed, format_report(report)


@requires_libreoffice
def test_pdf_handout_has_pages(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 4, "d_model": 3, "d_k": 2,
                                         "causal": True})
    result = cli("pdf", path)
    assert result.returncode == 0, result.stderr
    pdf = path.with_suffix(".pdf")
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    pages = len(re.findall(rb"/Type\s*/Page[^s]", data))
    assert pages >= 2  # the attention sheet and the About sheet
    again = cli("pdf", path)
    assert again.returncode == 2 and "--force" in again.stderr
    assert pdf.read_bytes() == data


@requires_libreoffice
def test_pdf_of_a_chinese_workbook_without_a_chinese_font_is_refused(tmp_path, monkeypatch):
    """Without a CJK font LibreOffice prints boxes and exits 0; `pdf` says so in one line
    and names the package, and writes nothing. fontconfig reads FONTCONFIG_FILE: one with no
    font folder is a machine with no fonts at all."""
    path = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2}, lang="zh")
    empty = tmp_path / "fonts.conf"
    empty.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd">'
                     f"<fontconfig><cachedir>{tmp_path / 'cache'}</cachedir></fontconfig>")
    monkeypatch.setenv("FONTCONFIG_FILE", str(empty))
    result = cli("pdf", path)
    assert result.returncode == 2
    assert "Chinese font" in one_line_error(result) and "fonts-noto-cjk" in result.stderr
    assert not path.with_suffix(".pdf").exists()


@requires_libreoffice
@pytest.mark.skipif(shutil.which("pdftotext") is None,
                    reason="pdftotext is not installed (apt-get install poppler-utils)")
def test_pdf_of_a_chinese_workbook_prints_its_chinese_text(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2}, lang="zh")
    title = openpyxl.load_workbook(path).worksheets[0]["A1"].value
    chinese = max(re.findall("[\u4e00-\u9fff]+", title), key=len)  # its longest Chinese run
    assert len(chinese) >= 2, title
    assert cli("pdf", path).returncode == 0
    text = subprocess.run(["pdftotext", str(path.with_suffix(".pdf")), "-"],
                          capture_output=True, text=True, check=True).stdout
    assert chinese in "".join(text.split()), text[:300]


def test_every_sheet_is_set_up_for_printing(tmp_path):
    wb = openpyxl.load_workbook(build(tmp_path, "attention", {"seq_len": 2, "d_model": 2,
                                                              "d_k": 2}))
    for ws in wb.worksheets:
        # a fixed scale (digits never printed under 8 pt), no gridlines: blocks have borders
        assert not ws.sheet_properties.pageSetUpPr or not ws.sheet_properties.pageSetUpPr.fitToPage
        assert not ws.print_options.gridLines and not ws.print_options.headings
        assert ws.title in ws.oddHeader.center.text
    sheet = wb[wb.sheetnames[0]]
    assert MIN_SCALE <= sheet.page_setup.scale <= 100
    assert sheet.page_setup.orientation in ("portrait", "landscape") and sheet.print_area


def test_without_libreoffice_the_engine_says_so_in_one_line(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2})
    with tempfile.TemporaryDirectory() as empty:
        env = {**os.environ, "PATH": empty}
        result = subprocess.run([sys.executable, "-m", "workbook_builder", "check", str(path),
                                 "--engine", "libreoffice"], capture_output=True, text=True,
                                env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "attnsheets: error: LibreOffice is not installed (apt-get install "
        "libreoffice-calc-nogui); use --engine formulas instead"]
    assert Path(path).exists()
