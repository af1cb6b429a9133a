"""Handouts that fill their pages: the example handouts print on few pages, each page but
the last at least half full, and an exercise's instructions and self-check table print on
page 1."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import cli, requires_libreoffice

from workbook_builder.engines.libreoffice import has_chinese_font

requires_poppler = pytest.mark.skipif(
    shutil.which("pdftotext") is None or shutil.which("pdftoppm") is None,
    reason="pdftotext/pdftoppm are missing (apt-get install poppler-utils)")
LANGS = ["en", "zh"] if has_chinese_font() else ["en"]
DPI = 30
MARGIN_IN = 0.6  # the top and bottom margins (sheet/printing.py), header and footer in them


def page_fills(pdf: Path, folder: Path) -> list[float]:
    """Per page, the share of the printable height whose pixel rows hold any ink (a page
    of blocks with empty bands between them is about 0.7; a third of a page, 0.33)."""
    subprocess.run(["pdftoppm", "-gray", "-r", str(DPI), str(pdf), str(folder / "p")],
                   check=True)
    fills = []
    for image in sorted(folder.glob("p-*.pgm"), key=lambda p: int(p.stem.split("-")[1])):
        data = image.read_bytes()
        _, width, height, _, pixels = data.split(maxsplit=4)
        width, height = int(width), int(height)
        pixels = pixels[-width * height:]
        margin = int(MARGIN_IN * DPI) + 1
        rows = range(margin, height - margin)
        inked = sum(min(pixels[y * width:(y + 1) * width]) < 200 for y in rows)
        fills.append(inked / len(rows))
    return fills


def printed(tmp_path: Path, *build_args: str) -> Path:
    book = tmp_path / "book.xlsx"
    assert cli("build", *build_args, "-o", book).returncode == 0
    assert cli("pdf", book, "-q").returncode == 0
    return book.with_suffix(".pdf")


@requires_libreoffice
@requires_poppler
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("args,most_pages", [
    (["multihead", "--example", "hand"], 2),
    (["flash", "--example", "hand"], 3),
    (["gpt"], 12),
])
def test_a_handout_prints_on_few_pages_each_but_the_last_half_full(tmp_path, args,
                                                                    most_pages, lang):
    pdf = printed(tmp_path, *args, "--lang", lang)
    fills = page_fills(pdf, tmp_path)
    print(" ".join(args), lang, len(fills), "pages, fill", [f"{f:.2f}" for f in fills])
    assert len(fills) <= most_pages
    assert all(f >= 0.5 for f in fills[:-1])


@requires_libreoffice
@requires_poppler
@pytest.mark.parametrize("lang", LANGS)
def test_an_exercise_prints_its_instructions_and_self_check_on_page_1(tmp_path, lang):
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name\ns1,Ann\n", encoding="utf-8")
    out = tmp_path / "class"
    assert cli("class", "multihead", "--roster", roster, "--out", out, "--exercise",
               "WEIGHTS_H1,OUTPUT", "--lang", lang).returncode == 0
    book = out / "multihead_s1.xlsx"
    assert cli("pdf", book, "-q").returncode == 0
    pages = subprocess.run(["pdftotext", "-layout", str(book.with_suffix(".pdf")), "-"],
                           capture_output=True, text=True, check=True).stdout.split("\f")
    first = pages[0]
    instructions = {"en": ["Exercise:", "Self-check"], "zh": ["练习", "自我检查"]}[lang]
    assert all(w in first for w in instructions), first[:600]
    # the self-check table: a line per exercise step, its cells correct (0 on the blank
    # exercise) and of how many
    for step in ("WEIGHTS_H1", "OUTPUT"):
        assert re.search(rf"^\s*{step}\s+0\s+\d+\s*$", first, re.M), (step, first[:900])
