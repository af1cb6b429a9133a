"""Sheet text in more than one language.

The English text a kind writes is the message id, as in gettext: a catalog maps it to its
translation, so the kinds keep writing plain English and a language is a file,
`locale/<lang>.po`. Entries with `{name}` placeholders match formatted text (e.g.
"Head {h} — query columns …"); what a placeholder captured is translated too when the
catalog has it. Text with no entry is left as it is (names, equations, token labels).

An entry's `msgctxt` says where it is read: "shared" by every kind, "cost" by the kinds
with a cost table (sheets/_blocks/costs.py), otherwise by the kind of that name and the kinds
built on it (BUILDS_ON). `python -m workbook_builder.cli.catalog check` builds every
demo and example case and lists text with no entry and entries no sheet uses.
"""

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from importlib import resources

from openpyxl.comments import Comment
from openpyxl.workbook.workbook import Workbook

from workbook_builder.language.po import PoError, read_po
from workbook_builder.sheet.cells import set_text
from workbook_builder.xlsx.of_openpyxl import stored_cells

LANGS = ("en", "zh")
SHARED, COST = "shared", "cost"

# the sections a kind reads besides its own and "shared", in the order they are merged
# (a later one wins): the kinds whose sheets it repeats, and the cost table
BUILDS_ON: dict[str, tuple[str, ...]] = {
    "decoder-block": ("encoder-block",),
    "gpt": ("encoder-block", "decoder-block"),
    "encoder": (COST, "encoder-block", "decoder-block", "gpt"),
    "mamba-block": (COST, "ssm"),
    "flash": (COST,), "linear": (COST,), "multihead": (COST,), "sliding-window": (COST,),
    "ssm": (COST,),
    "transformer": (COST, "positional", "cross-attention", "encoder-block", "decoder-block",
                    "gpt", "mamba-block"),
    "seq2seq": (COST, "additive"),
}

SLOT = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
# while `trial` is open, catalogs are made from its sections and note what they are asked
TRIALS: list[tuple[Mapping[str, Mapping[str, str]] | None, dict[str, str | None]]] = []


def slots(text: str) -> set[str]:
    return set(SLOT.findall(text))


def parse_catalog(text: str, name: str) -> dict[str, dict[str, str]]:
    """section -> {English: translation} from a .po file's text; a catalog whose entry
    names other `{slots}` than its English, or holds an entry twice, is refused."""
    sections: dict[str, dict[str, str]] = {}
    for entry in read_po(text, name):
        where = f"{name}:{entry.line} (msgctxt {entry.context!r}, msgid {entry.msgid[:50]!r})"
        if not entry.context:
            raise PoError(f"{where}: an entry needs a msgctxt saying where it is read")
        if not entry.msgstr:
            continue  # not translated yet: the English stays
        if slots(entry.msgid) != slots(entry.msgstr):
            raise PoError(f"{where}: the translation's slots {sorted(slots(entry.msgstr))} "
                          f"differ from the English's {sorted(slots(entry.msgid))}")
        section = sections.setdefault(entry.context, {})
        if entry.msgid in section:
            raise PoError(f"{where}: the entry is there twice")
        section[entry.msgid] = entry.msgstr
    return sections


@cache
def catalog_sections(lang: str) -> dict[str, dict[str, str]]:
    """The sections of the catalog shipped for `lang` (none for English)."""
    if lang == "en":
        return {}
    source = resources.files("workbook_builder.language") / "locale" / f"{lang}.po"
    return parse_catalog(source.read_text(encoding="utf-8"), f"locale/{lang}.po")


def kind_sections(kind_name: str) -> tuple[str, ...]:
    """The sections a kind reads, in merge order (a later one wins)."""
    return (SHARED, *BUILDS_ON.get(kind_name, ()), kind_name)


def kind_entries(sections: Mapping[str, Mapping[str, str]], kind_name: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for section in kind_sections(kind_name):
        entries.update(sections.get(section, {}))
    return entries


def _compile(template: str) -> re.Pattern:
    parts = SLOT.split(template)
    pattern = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>.+?)"
                      for i, part in enumerate(parts))
    return re.compile(pattern + r"\Z", re.S)


class Catalog:
    """English text -> text in `lang`; English itself is the identity. `entries` maps
    English (with `{slots}`) to the translation; `keep` is user text (token labels), never
    translated. With `record` set, every text asked for is noted with the entry that
    translated it (None: no entry; "" : kept as a token label)."""

    def __init__(self, lang: str, entries: Mapping[str, str] | None = None,
                 keep: Iterable[str] = ()):
        if lang not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}")
        self.lang = lang
        entries = {} if entries is None else entries
        self.exact = {k: v for k, v in entries.items() if not SLOT.search(k)}
        self.templates = [(k, _compile(k), v) for k, v in entries.items() if SLOT.search(k)]
        self.keep = set(keep)
        self.record = TRIALS[-1][1] if TRIALS else None

    def __call__(self, text: str) -> str:
        if self.lang == "en":
            return text
        if text in self.keep:
            self._note(text, "")
            return text
        return self._translate(text, top=True)

    def _note(self, text: str, key: str | None) -> None:
        if self.record is not None:
            self.record.setdefault(text, key)

    def _translate(self, text: str, top: bool) -> str:
        if text in self.exact:
            self._note(text, text)
            return self.exact[text]
        for key, pattern, translation in self.templates:
            match = pattern.match(text)
            if match:
                self._note(text, key)
                return translation.format(**{k: self._slot(v)
                                             for k, v in match.groupdict().items()})
        if top:
            self._note(text, None)
        return text

    def _slot(self, value: str) -> str:
        """What a slot captured: translated when an entry matches it, else as it is."""
        return self._translate(value, top=False)


def catalog_for(kind, lang: str, tokens: Iterable[str] = ()) -> Catalog:
    trial = TRIALS[-1][0] if TRIALS else None
    sections = catalog_sections(lang) if trial is None else trial
    return Catalog(lang, kind_entries(sections, kind.name), keep=tokens)


@contextmanager
def trial(sections: Mapping[str, Mapping[str, str]] | None = None
          ) -> Iterator[dict[str, str | None]]:
    """While open, the catalogs made use `sections` (the shipped catalog if None) and
    note in the dict yielded every text they are asked for: text -> the entry that
    translated it, "" for a token label, None for text with no entry."""
    record: dict[str, str | None] = {}
    TRIALS.append((sections, record))
    try:
        yield record
    finally:
        TRIALS.pop()


def translate_sheets(wb: Workbook, tr: Catalog, skip: Iterable[str] = ()) -> None:
    """Translate every text cell and cell note of the workbook's sheets (formulas, numbers
    and sheets in `skip` untouched)."""
    if tr.lang == "en":
        return
    skip = set(skip)
    for ws in wb.worksheets:
        if ws.title in skip:
            continue
        for cell in stored_cells(ws):
            if isinstance(cell.value, str) and cell.data_type == "s":  # text, not #N/A
                set_text(cell, tr(cell.value))
            if cell.comment is not None:
                old = cell.comment
                cell.comment = Comment(tr(old.text), old.author, width=old.width,
                                       height=old.height)
