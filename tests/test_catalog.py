"""The translation catalogs (workbook_builder/language/locale/*.po) against the sheets:
every entry is needed by some demo, example or test case, every entry keeps its English's
{slots}, and a Chinese sheet holds no English but names, equations, token labels and
numbers. A broken catalog is refused when read, with the line and the entry."""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from workbook_builder.language import i18n
from workbook_builder.language.po import PoEntry, PoError, read_po, write_po
from workbook_builder.teaching import catalog

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "workbook_builder" / "language" / "locale"
CATALOGS = sorted(LOCALE.glob("*.po"))


@pytest.fixture(scope="module")
def findings():
    """Every case built in Chinese with the shipped catalog (about a minute of CPU)."""
    return catalog.collect("zh")


def test_every_language_but_english_has_a_catalog():
    assert sorted(p.stem for p in CATALOGS) == [lang for lang in i18n.LANGS if lang != "en"]


@pytest.mark.slow  # builds every case in Chinese (about a minute)
def test_no_chinese_sheet_holds_english_without_an_entry(findings):
    assert findings.cases > 400 and findings.texts > 10_000  # the cases were built
    missing = {text: sorted(where)[:2] for text, where in findings.missing.items()}
    assert not missing, missing


@pytest.mark.slow  # the same builds
def test_every_catalog_entry_is_used_by_some_case(findings):
    assert findings.used  # the record saw the entries
    assert not findings.unused, findings.unused


@pytest.mark.parametrize("path", CATALOGS, ids=[p.name for p in CATALOGS])
def test_every_entry_keeps_the_slots_of_its_english(path):
    entries = read_po(path.read_text(encoding="utf-8"), path.name)
    assert entries
    wrong = [(e.context, e.msgid) for e in entries if i18n.slots(e.msgid) != i18n.slots(e.msgstr)]
    assert not wrong, wrong
    # gettext's own tool agrees: it checks the slots of entries flagged python-brace-format
    flagged = [e.msgid for e in entries if i18n.slots(e.msgid)
               and "python-brace-format" not in e.flags]
    assert not flagged, flagged
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (GNU gettext) is not installed")
    run = subprocess.run(["msgfmt", "--check", "-o", "/dev/null", str(path)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def broken_copy(tmp_path: Path, old: str, new: str, in_msgstr: bool = True) -> Path:
    """The shipped Chinese catalog with `old` replaced by `new` in the first entry whose
    msgstr (or msgid) holds it."""
    text = (LOCALE / "zh.po").read_text(encoding="utf-8")
    entries = read_po(text)
    entry = next(e for e in entries if old in (e.msgstr if in_msgstr else e.msgid))
    if in_msgstr:
        entry.msgstr = entry.msgstr.replace(old, new)
    else:
        entry.msgid = entry.msgid.replace(old, new)
    path = tmp_path / "zh.po"
    path.write_text(write_po([], {"Language": "zh"}, entries), encoding="utf-8")
    return path


def test_a_slot_renamed_in_one_language_is_refused_naming_the_entry(tmp_path):
    path = broken_copy(tmp_path, "{h}", "{head}")
    with pytest.raises(PoError, match=r"zh\.po:\d+ .*slots \['head'\] differ from the "
                                      r"English's \['h'\]"):
        i18n.parse_catalog(path.read_text(encoding="utf-8"), "zh.po")
    run = subprocess.run([sys.executable, "-m", "workbook_builder.cli.catalog", "check",
                          "--catalog", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, run.stderr
    assert "Traceback" not in run.stderr


def test_an_entry_whose_english_no_sheet_writes_shows_as_unused_and_its_text_as_missing(
        tmp_path):
    """As when a kind's English changes and the catalog does not follow: the sheet would
    go back to English, and the check says which text and which entry."""
    english = "Queries: what each token is looking for."
    path = broken_copy(tmp_path, english, english.replace("looking", "searching"),
                       in_msgstr=False)
    sections = i18n.parse_catalog(path.read_text(encoding="utf-8"), "zh.po")
    cases = [c for c in catalog.cases() if c.name == "attention/defaults/cells"]
    found = catalog.collect("zh", sections, only=cases)
    assert english in found.missing
    assert ("shared", english.replace("looking", "searching")) in found.unused


def test_what_stays_as_written():
    stays = ["m_i = max_j (S/√d_k)_ij", "silu(z) = z·σ(z)", "seq_len=4, d_k=2; layout=cells",
             "WEIGHTS", "CHECK_OUTPUT, SCORES", "d1.n1", "0.5", "1e-05", "",
             "Attention: 单头缩放点积注意力", "Linear: φ = elu+1；--features favor：对照"]
    english = ["One row per token.", "keys j", "Attention: weights over the keys",
               "The softmax denominator."]
    assert [t for t in stays if not catalog.stays_as_written(t)] == []
    assert [t for t in english if catalog.stays_as_written(t)] == []


def test_a_po_file_reads_back_as_written():
    entries = [PoEntry("shared", 'a "quoted"\\ text\twith a tab ' * 5, "译文 {x}\n第二行"),
               PoEntry("gpt", "Block {blk} of {of} — {title}", "第 {blk}/{of} 块 — {title}",
                       ["a note"], ("python-brace-format",))]
    back = read_po(write_po(["header"], {"Language": "zh"}, entries))
    assert [(e.context, e.msgid, e.msgstr, e.comments, e.flags) for e in back] == \
        [(e.context, e.msgid, e.msgstr, e.comments, e.flags) for e in entries]


@pytest.mark.parametrize("text,error", [
    ('msgctxt "a"\nmsgid "x"\n', "needs both msgid and msgstr"),
    ('msgid "x"\nmsgstr "y"\n', "needs a msgctxt"),
    ('msgctxt "a"\nmsgid "x"\nmsgid_plural "xs"\nmsgstr "y"\n', "plurals are not used"),
    ('msgctxt "a"\nmsgid "x\\q"\nmsgstr "y"\n', "unknown escape"),
    ('msgctxt "a"\nmsgid "x"\nmsgstr "y"\n\nmsgctxt "a"\nmsgid "x"\nmsgstr "z"\n', "twice"),
])
def test_a_malformed_catalog_is_refused_with_its_line(text, error):
    with pytest.raises(PoError, match=error):
        i18n.parse_catalog(text, "zh.po")


def test_the_catalogs_are_package_data():
    """`pip install .` (not only -e) ships them: pyproject's package-data names them."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setup["package-data"]["workbook_builder.language"]
    package = ROOT / "workbook_builder" / "language"
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    assert set(CATALOGS) <= shipped


def test_an_entry_not_yet_translated_keeps_its_english():
    text = ('msgctxt "shared"\nmsgid "Output of head {h}."\nmsgstr ""\n\n'
            'msgctxt "shared"\nmsgid "keys"\nmsgstr "键"\n')
    sections = i18n.parse_catalog(text, "new.po")
    assert sections == {"shared": {"keys": "键"}}
