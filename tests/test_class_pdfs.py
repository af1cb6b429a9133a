"""A class's handouts as they come out of the printer: each page says whose it is, and one
`pdf` call prints a whole class folder (roster order), one PDF per workbook and one of all."""

import re
import shutil
import subprocess
from pathlib import Path

import openpyxl
import pytest
from helpers.cli import cli, one_line_error
from helpers.requires import requires_libreoffice

from workbook_builder.engines.libreoffice import has_chinese_font

ROSTER = [("s01", "Ann & Bo"), ("s02", "李雷"), ("s03", "")]  # roster order, not name order
requires_pdftotext = pytest.mark.skipif(
    shutil.which("pdftotext") is None or shutil.which("pdfunite") is None,
    reason="pdftotext/pdfunite are missing (apt-get install poppler-utils)")
LANGS = ["en", "zh"] if has_chinese_font() else ["en"]


def write_class(tmp_path: Path, lang: str, kind: str = "multihead",
                step: str = "WEIGHTS_H1") -> Path:
    roster = tmp_path / "roster.csv"
    # s03 before s02 in the file: the roster's order is not the ids' order
    rows = [ROSTER[0], ROSTER[2], ROSTER[1]]
    roster.write_text("id,name\n" + "".join(f"{i},{n}\n" for i, n in rows), encoding="utf-8")
    out = tmp_path / f"class_{lang}"
    ran = cli("class", kind, "--roster", roster, "--out", out, "--exercise", step,
              "--lang", lang)
    assert ran.returncode == 0, ran.stderr
    return out


def pages_of(pdf: Path) -> list[str]:
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    return [page for page in text.split("\f") if page.strip()]


@pytest.mark.parametrize("lang", LANGS)
def test_every_sheet_of_an_exercise_says_whose_it_is_in_its_header_and_title(tmp_path, lang):
    out = write_class(tmp_path, lang)
    for student, name in ROSTER:
        wb = openpyxl.load_workbook(out / f"multihead_{student}.xlsx")
        said_id = {"en": "ID", "zh": "学号"}[lang]
        for ws in wb.worksheets:
            header = ws.oddHeader.left.text
            assert f"{said_id}: {student}" in header, (ws.title, header)
            assert name.replace("&", "&&") in header  # & starts a header code
        title = wb.worksheets[0]["A1"].value
        assert f"{said_id}: {student}" in title and name in title
        footer = wb.worksheets[0].oddFooter.center.text
        assert ("第 &P 页" in footer) == (lang == "zh")


@requires_libreoffice
@requires_pdftotext
@pytest.mark.parametrize("lang", LANGS)
def test_a_class_folder_prints_in_roster_order_each_id_on_every_page(tmp_path, lang):
    out = write_class(tmp_path, lang)
    combined = tmp_path / "all.pdf"
    ran = cli("pdf", out, "--combined", combined)
    assert ran.returncode == 0, ran.stderr
    order = ["s01", "s03", "s02"]  # the roster's
    assert ran.stdout.splitlines() == [f"wrote {out / f'multihead_{s}.pdf'}" for s in order] \
        + [f"wrote {combined} (3 workbooks)"]
    assert not list(out.glob("*_key.pdf"))  # the answer keys are not handed out
    said_id = {"en": "ID", "zh": "学号"}[lang]
    every_page = []
    for student in order:
        pages = pages_of(out / f"multihead_{student}.pdf")
        missing = [n + 1 for n, page in enumerate(pages) if f"{said_id}: {student}" not in page]
        print(student, len(pages), "pages; without the id:", missing)
        assert pages and missing == []
        every_page += [student] * len(pages)
    joined = pages_of(combined)
    assert len(joined) == len(every_page)
    assert all(f"{said_id}: {student}" in page for student, page in zip(every_page, joined,
                                                                       strict=True))


@requires_libreoffice
@requires_pdftotext
def test_several_files_print_in_one_call_and_nothing_is_replaced_without_force(tmp_path):
    out = write_class(tmp_path, "en", kind="attention", step="WEIGHTS")
    books = [out / "attention_s02.xlsx", out / "attention_s01.xlsx"]
    assert cli("pdf", *books).returncode == 0
    made = books[0].with_suffix(".pdf").read_bytes()
    again = cli("pdf", *books)
    assert "already exists; pass --force" in one_line_error(again)
    assert books[0].with_suffix(".pdf").read_bytes() == made


@pytest.mark.parametrize("args,message", [
    (["{out}", "-o", "{tmp}/one.pdf"], "-o names the PDF of one workbook"),
    (["{tmp}/empty"], "no workbooks (.xlsx) in this folder"),
    (["{tmp}/nothing-here"], "no such file or folder"),
])
def test_pdf_refuses_what_it_cannot_print_in_one_line(tmp_path, args, message):
    out = write_class(tmp_path, "en", kind="attention", step="WEIGHTS")
    (tmp_path / "empty").mkdir()
    ran = cli("pdf", *[a.format(out=out, tmp=tmp_path) for a in args])
    assert message in one_line_error(ran)
    assert not list(tmp_path.rglob("*.pdf"))


def words_on_first_page(pdf: Path) -> list[tuple[float, float, str]]:
    """(top, bottom, text) of every word on the PDF's first page."""
    out = subprocess.run(["pdftotext", "-bbox", "-f", "1", "-l", "1", str(pdf), "-"],
                         capture_output=True, text=True, check=True).stdout
    return [(float(m.group(1)), float(m.group(2)), m.group(3)) for m in re.finditer(
        r'<word xMin="[^"]+" yMin="([^"]+)" xMax="[^"]+" yMax="([^"]+)">([^<]*)</word>', out)]


@requires_libreoffice
@requires_pdftotext
@pytest.mark.skipif("zh" not in LANGS, reason="no Chinese font (apt-get install "
                                               "fonts-noto-cjk)")
@pytest.mark.parametrize("kind,step", [("multihead", "WEIGHTS_H1"), ("attention", "WEIGHTS"),
                                       ("flash", "OUTPUT")])
def test_a_chinese_title_never_runs_into_the_subtitle_below_it(tmp_path, kind, step):
    """The title (the student line, the kind's summary: two lines in Chinese) prints
    wholly above the subtitle (`seq_len=…`), in a row as tall as its translated text."""
    out = write_class(tmp_path, "zh", kind=kind, step=step)
    book = out / f"{kind}_s01.xlsx"
    assert cli("pdf", book).returncode == 0
    words = words_on_first_page(book.with_suffix(".pdf"))
    subtitle_top = next(top for top, _, text in words if text.startswith("seq_len="))
    title = [(top, bottom, text) for top, bottom, text in words
             if top < subtitle_top - 2 and top > 40]  # under the page header
    assert title, words[:10]
    lowest = max(bottom for _, bottom, _ in title)
    print(kind, "title bottom", lowest, "subtitle top", subtitle_top)
    assert lowest <= subtitle_top + 0.5
