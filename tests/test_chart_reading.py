"""Charts a student cannot misread: axis and legend titles say what the groups and the
colours are, in the sheet's language; each chart sits inside its own cells (so no page
break cuts it and the print area holds it); per-row state is drawn as bars, not lines."""

import re
import zipfile
from pathlib import Path

import openpyxl
import pytest
from helpers.books import build

from workbook_builder.language.i18n import SHARED, catalog_sections
from workbook_builder.sheet.printing import row_pt

DRAWING_NS = "{http://schemas.openxmlformats.org/drawingml/2006/spreadsheetDrawing}"
# the words the charts of these kinds must show, by language (English: the message ids)
WEIGHTS_TITLES = ["keys j", "weight A_ij", "query i"]
FLASH_TITLES = ["query row i", "m", "key block j", "α"]


def chart_xml(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as book:
        names = sorted(n for n in book.namelist() if re.match(r"xl/charts/chart\d+\.xml", n))
        return [book.read(n).decode() for n in names]


def chart_texts(xml: str) -> list[str]:
    return re.findall(r"<a:t>([^<]*)</a:t>", xml)


def in_lang(text: str, lang: str) -> str:
    return text if lang == "en" else catalog_sections(lang)[SHARED].get(text, text)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_weights_chart_names_its_axes_and_its_legend_in_the_sheets_language(tmp_path,
                                                                                  lang):
    path = build(tmp_path, "multihead", {"seq_len": 3, "d_model": 4, "heads": 2}, lang=lang)
    charts = chart_xml(path)
    assert len(charts) == 2  # one per head
    for xml in charts:
        texts = chart_texts(xml)
        assert texts == [in_lang(t, lang) for t in ("query i", "keys j", "weight A_ij")], texts
        assert '<legendPos val="r"/>' in xml
    if lang == "zh":  # and the words really are translated
        assert all(in_lang(t, "zh") != t for t in WEIGHTS_TITLES)


def test_flashs_running_state_is_bars_over_the_query_rows_with_named_axes(tmp_path):
    path = build(tmp_path, "flash", {"seq_len": 5, "d_model": 3, "d_k": 2, "block_size": 2})
    charts = [xml for xml in chart_xml(path) if "key block j" in xml]  # not the weights'
    assert len(charts) == 2  # m and α
    for xml in charts:
        assert "<barChart>" in xml and "<lineChart>" not in xml
        assert {"query row i", "key block j"} <= set(chart_texts(xml))


@pytest.mark.parametrize("kind,params,lang", [
    ("multihead", {}, "en"),
    ("multihead", {}, "zh"),
    ("flash", {"seq_len": 5, "d_model": 3, "d_k": 2, "block_size": 2}, "zh"),
    ("attention", {}, "zh"),
])
def test_every_chart_sits_inside_its_cells_on_one_page(tmp_path, kind, params, lang):
    """Anchored corner to corner to its cells, a chart is as tall as its rows whatever
    height they print at; no row break falls inside those rows and they are in the print
    area."""
    path = build(tmp_path, kind, params, lang=lang)
    wb = openpyxl.load_workbook(path)
    ws = wb.worksheets[0]
    breaks = {b.id for b in ws.row_breaks.brk}
    last_row = int(re.search(r"(\d+)$", ws.print_area[0] if isinstance(ws.print_area, list)
                             else ws.print_area).group(1))
    with zipfile.ZipFile(path) as book:
        drawing = next(n for n in book.namelist() if re.match(r"xl/drawings/drawing\d+\.xml",
                                                               n))
        xml = book.read(drawing).decode()
    assert "oneCellAnchor" not in xml and "absoluteAnchor" not in xml
    anchors = re.findall(r"<(?:xdr:)?from><(?:xdr:)?col>(\d+)</(?:xdr:)?col>.*?"
                         r"<(?:xdr:)?row>(\d+)</(?:xdr:)?row>.*?<(?:xdr:)?to>"
                         r"<(?:xdr:)?col>(\d+)</(?:xdr:)?col>.*?<(?:xdr:)?row>(\d+)<", xml,
                         re.S)
    assert anchors and len(anchors) == xml.count("<graphicFrame")
    for _, top, _, bottom in anchors:
        first, last = int(top) + 1, int(bottom)  # 0-based from; to is the row after
        cut = [b for b in breaks if first <= b < last]
        print(kind, lang, "chart rows", first, last, "breaks", sorted(breaks))
        assert cut == [] and last <= last_row
        assert sum(row_pt(ws, r) for r in range(first, last + 1)) > 80  # room for a plot
