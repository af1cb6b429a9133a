"""The per-kind pages of docs/kinds/ are written from the declarations
(`python -m workbook_builder.docs`) and are up to date; the hand-written notes they carry
name every block the kind can have."""

import re
from pathlib import Path

import pytest
from helpers.books import KINDS

from workbook_builder import docs
from workbook_builder.sheet.kind import make_params

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "kinds"


def test_the_pages_in_docs_kinds_are_those_the_declarations_write():
    stale = [path.name for path, text in docs.pages(PAGES).items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"run `python -m workbook_builder.docs`: {stale} out of date"


def test_a_page_carries_its_notes_and_is_written_where_asked(tmp_path):
    (tmp_path / "prose").mkdir()
    (tmp_path / "prose" / "index.md").write_text("Index notes.\n", encoding="utf-8")
    (tmp_path / "prose" / "attention.md").write_text("# `attention`\n\nA planted note.\n",
                                                     encoding="utf-8")
    assert docs.main([str(tmp_path)]) == 0
    page = (tmp_path / "attention.md").read_text(encoding="utf-8")
    assert "A planted note." in page and "`--seq-len`" in page
    assert "Index notes." in (tmp_path / "README.md").read_text(encoding="utf-8")
    # a kind without notes still gets its page, titled by its summary
    assert KINDS["flash"].summary in (tmp_path / "flash.md").read_text(encoding="utf-8")


def documented_name(name: str) -> str:
    """SCORES_H2 is documented as SCORES_Hh, S_B3 as S_Bj, SCORES_D64 (a width) as
    SCORES_Dw, Q_T3 (a decoding step) as Q_Tt, a stacked block's SCORES_H2_L1 as
    SCORES_Hh_Ll, and a second text's SCORES_H2_L1_2 as SCORES_Hh_Ll_2."""
    if re.search(r"_L\d+_2$", name):
        return documented_name(name[:-2]) + "_2"
    layer = re.search(r"_L\d+$", name)
    if layer:
        return documented_name(name[:layer.start()]) + "_Ll"
    for numbered, documented in (("H", "Hh"), ("B", "Bj"), ("D", "Dw"), ("T", "Tt")):
        name = re.sub(rf"_{numbered}\d+$", f"_{documented}", name)
    return name


def documented_with(name: str, suffixes) -> str:
    """A kind's own numbered suffixes, a chain of them written whole: SCORES_H1_D2_T3 ->
    SCORES_Hh_Dl_Tt for (("H", "Hh"), ("D", "Dl"), ("T", "Tt"))."""
    letters = {letter: written for letter, written, *_ in suffixes}
    parts = name.split("_")
    tail = []
    while len(parts) > 1 and re.fullmatch(r"[A-Z]\d+", parts[-1]) and parts[-1][0] in letters:
        tail.insert(0, letters[parts.pop()[0]])
    return "_".join(parts + tail)


def test_a_chain_of_a_kinds_own_suffixes_is_documented_whole():
    suffixes = (("H", "Hh", "head h"), ("D", "Dl", "decoder layer l"), ("T", "Tt", "step t"))
    assert documented_with("CROSS_WEIGHTS_H2_D1_T3", suffixes) == "CROSS_WEIGHTS_Hh_Dl_Tt"
    assert docs.documented_name("CROSS_WEIGHTS_H2_D1_T3", suffixes) == \
        "CROSS_WEIGHTS_Hh_Dl_Tt"
    assert docs.documented_name("W_1_D12", suffixes) == "W_1_Dl"
    assert docs.documented_name("SCORES_D64") == "SCORES_Dw"  # a width, without them


def declared_names(kind) -> set[str]:
    names = set()
    own = getattr(kind, "documented_suffixes", None)
    for case in kind.test_cases + [values for _, values in kind.demo_cases]:
        params = make_params(kind, case)
        names |= {documented_with(n, own) if own else documented_name(n)
                  for n in list(kind.input_shapes(params)) + kind.step_names(params)}
    return names


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_the_notes_name_every_block_the_declaration_has(kind_name):
    """The notes' name tables are tested against the declarations: every input and every
    step of every test and demo case is named in the kind's notes."""
    notes = PAGES / "prose" / f"{kind_name}.md"
    assert notes.exists(), f"no notes for kind {kind_name} in {notes.parent}"
    named = set(re.findall(r"`([A-Z][A-Za-z0-9_]*)`", notes.read_text(encoding="utf-8")))
    missing = sorted(declared_names(KINDS[kind_name]) - named)
    assert not missing, f"the notes of {kind_name} lack {missing}"


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_the_generated_table_names_every_block_the_declaration_has(kind_name):
    page = docs.pages(PAGES)[PAGES / f"{kind_name}.md"]
    table = page.split("### Defined names", 1)[1]
    named = set(re.findall(r"^\| `([A-Z][A-Za-z0-9_]*)` \|", table, re.M))
    assert declared_names(KINDS[kind_name]) <= named
