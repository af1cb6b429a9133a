"""Reading where a defined name points: our workbooks' names (a quoted sheet and one cell
or range) are read without openpyxl's formula tokenizer, and give exactly what openpyxl's
`destinations` gives; every other text is openpyxl's to read."""

import pytest
from openpyxl.workbook.defined_name import DefinedName

from workbook_builder.sheet.refs import name_destinations

OUR_FORM = ["'Train'!$B$8:$D$10", "'Attention'!C5", "'Bob''s sheet'!$A$1", "'a!b'!A1:B2",
            "'S p a c e'!$XFD$1048576", "'TRUE'!A1", "'注意力'!$C$3:$E$5", "'x'!$A1:B$2"]
OTHER_FORMS = ["Train!$B$8", "'x'!A1,'x'!B2", "'x'!a1", "'x'!$A:$A", "'x'!1:2", "=1+2",
               "'x'!A1+1", "#REF!", "", "'x'!A1:"]


def openpyxl_reads(text: str) -> list[tuple[str, str]]:
    try:
        return [(sheet.replace("''", "'"), cells)
                for sheet, cells in DefinedName("n", attr_text=text).destinations]
    except Exception:
        return []


@pytest.mark.parametrize("text", OUR_FORM + OTHER_FORMS)
def test_a_name_points_where_openpyxl_reads_it(text):
    assert name_destinations(DefinedName("n", attr_text=text)) == openpyxl_reads(text)


@pytest.mark.parametrize("text", OUR_FORM)
def test_our_form_is_read_without_the_tokenizer(monkeypatch, text):
    def refuse(self):
        raise AssertionError("tokenized")

    monkeypatch.setattr(DefinedName, "destinations", property(refuse))
    assert len(name_destinations(DefinedName("n", attr_text=text))) == 1
