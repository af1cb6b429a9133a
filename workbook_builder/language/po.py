"""Reading and writing the gettext `.po` files that hold the sheets' translations.

Only the part of the format the catalogs use: comments, `msgctxt`, `msgid`, `msgstr` and
their continuation lines (no plurals). The files stay what translation tools (Poedit,
Weblate, `msgfmt`, Babel) open, without a runtime dependency to read them.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t"}
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"\Z')


@dataclass
class PoEntry:
    context: str
    msgid: str
    msgstr: str
    comments: list[str] = field(default_factory=list)  # "#. ..." lines, without the "#. "
    flags: tuple[str, ...] = ()
    line: int = 0  # where the entry starts, for error messages


class PoError(ValueError):
    pass


def _unquote(text: str, where: str) -> str:
    match = _QUOTED.match(text.strip())
    if not match:
        raise PoError(f"{where}: expected a quoted string, got {text.strip()[:40]!r}")
    body = match.group(1)
    try:
        return re.sub(r"\\(.)", lambda m: _ESCAPES[m.group(1)], body)
    except KeyError as e:
        raise PoError(f"{where}: unknown escape \\{e.args[0]}") from None


def read_po(text: str, name: str = "catalog") -> list[PoEntry]:
    """The entries of a .po file (its header, msgid "", left out)."""
    entries: list[PoEntry] = []
    current: dict[str, str] = {}
    comments: list[str] = []
    flags: tuple[str, ...] = ()
    key = None
    start = 0

    def close():
        nonlocal current, comments, flags
        if current:
            if "msgid" not in current or "msgstr" not in current:
                raise PoError(f"{name}:{start}: an entry needs both msgid and msgstr")
            if current["msgid"]:
                entries.append(PoEntry(current.get("msgctxt", ""), current["msgid"],
                                       current["msgstr"], comments, flags, start))
        current, comments, flags = {}, [], ()

    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{name}:{n}"
        if not line:
            continue
        if line.startswith("#"):
            if current and "msgstr" in current:
                close()
            if line.startswith("#."):
                comments.append(line[2:].strip())
            elif line.startswith("#,"):
                flags = tuple(f.strip() for f in line[2:].split(","))
            continue
        if line.startswith('"'):
            if key is None:
                raise PoError(f"{where}: a continuation line outside an entry")
            current[key] += _unquote(line, where)
            continue
        word, _, rest = line.partition(" ")
        if word not in ("msgctxt", "msgid", "msgstr"):
            raise PoError(f"{where}: unknown keyword {word!r} (plurals are not used)")
        if word in ("msgctxt", "msgid") and "msgstr" in current:
            close()
        if not current:
            start = n
        if word in current:
            raise PoError(f"{where}: {word} twice in one entry")
        key = word
        current[key] = _unquote(rest, where)
    close()
    return entries


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
        .replace("\t", "\\t") + '"'


def _field(keyword: str, text: str, width: int = 79) -> list[str]:
    """`keyword "text"`, split as gettext does into lines of at most `width` when long."""
    if len(keyword) + len(_quote(text)) + 1 <= width:
        return [f"{keyword} {_quote(text)}"]
    lines, part = [f'{keyword} ""'], ""
    for word in re.findall(r"\S*\s*", text):
        if part and len(_quote(part + word)) > width:
            lines.append(_quote(part))
            part = ""
        part += word
    if part:
        lines.append(_quote(part))
    return lines


def write_po(header: Iterable[str], meta: dict[str, str], entries: Iterable[PoEntry]) -> str:
    out = [f"# {line}".rstrip() for line in header]
    out += ['msgid ""', 'msgstr ""'] + [_quote(f"{k}: {v}\n") for k, v in meta.items()]
    for entry in entries:
        out.append("")
        out += [f"#. {c}" for c in entry.comments]
        if entry.flags:
            out.append("#, " + ", ".join(entry.flags))
        out += _field("msgctxt", entry.context)
        out += _field("msgid", entry.msgid)
        out += _field("msgstr", entry.msgstr)
    return "\n".join(out) + "\n"
