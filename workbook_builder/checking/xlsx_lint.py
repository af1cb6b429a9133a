"""What Excel refuses or repairs in a workbook that Microsoft's Open XML validator does not
check: formulas that do not parse or name a missing sheet, defined names (duplicates, invalid,
pointing at missing sheets), overlapping merged ranges, text over 32,767 characters, invalid
sheet names, rows and cells out of order, and comments without a well-formed VML drawing.

Read from the file's XML parts, as Excel reads them (not through openpyxl, which tidies some
of these away on loading). `lint_workbook(path)` lists the problems, one line each.
"""

import functools
import re
import zipfile
from pathlib import Path, PurePosixPath
from xml.etree import ElementTree

from workbook_builder.sheet.refs import column_number, parse_cell, parse_range

MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
CHART = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
RELATIONSHIP_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
PACKAGE_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
VML = "{urn:schemas-microsoft-com:vml}"
VML_EXCEL = "{urn:schemas-microsoft-com:office:excel}"

# Excel's specifications and limits
MAX_TEXT = 32_767  # characters in a cell
MAX_FORMULA = 8_192  # characters of a formula
MAX_ROW, MAX_COLUMN = 1_048_576, 16_384
MAX_SHEET_NAME, MAX_DEFINED_NAME = 31, 255
SHEET_NAME_FORBIDDEN = set("[]:*?/\\")

_STRING = re.compile(r'"(?:[^"]|"")*"')
# a sheet before a reference: 'quoted'! or plain! (not an error value such as #REF!)
_SHEET = re.compile(r"'((?:[^']|'')+)'!|(?<![\w.#'\]])([^\W\d][\w.]*)!")
# a cell reference (not a function name, a defined name or a sheet name)
_CELL = re.compile(r"(?<![\w.$])\$?([A-Za-z]{1,3})\$?(\d+)(?![\w(!.])")
_STRING_OR_CELL = re.compile(f"(?P<string>{_STRING.pattern})|{_CELL.pattern}")
_DEFINED_NAME = re.compile(r"[^\W\d\\][\w.\\]*|\\")
_R1C1 = re.compile(r"[Rr]\d*[Cc]?\d*|[Cc]\d*", re.A)


def utf16_length(text: str) -> int:
    """Length as Excel counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


@functools.cache
def _parse_error(shape: str) -> str | None:
    """Why the `formulas` engine's Excel grammar refuses a formula, or None. Cached by
    shape: the cells a formula was filled into differ only in their references."""
    from formulas import Parser

    try:
        Parser().ast("=" + shape)
    except Exception as error:  # the parser's own errors and anything it trips over
        return str(error.args[0] if error.args else error).replace("%s", "").strip() or \
            type(error).__name__
    return None


def formula_problems(text: str, sheets: set[str]) -> list[str]:
    """A formula's text (without "="): it parses, is no longer than Excel takes, its
    references are inside the sheet and name sheets that exist (`sheets`: upper case)."""
    problems = []
    if utf16_length(text) + 1 > MAX_FORMULA:
        problems.append(f"formula of {utf16_length(text) + 1:,} characters "
                        f"(Excel takes {MAX_FORMULA:,})")
    outside = _STRING.sub('""', text)
    if "#REF!" in outside.upper():
        problems.append("formula with a broken reference (#REF!)")
    for quoted, plain in _SHEET.findall(outside):
        sheet = quoted.replace("''", "'") if quoted else plain
        if sheet.upper() not in sheets:
            problems.append(f"formula names sheet {sheet!r}, which the workbook lacks")
    for letters, row in _CELL.findall(outside):
        if column_number(letters) > MAX_COLUMN or not 1 <= int(row) <= MAX_ROW:
            problems.append(f"reference {letters}{row} outside the sheet")
    error = _parse_error(_STRING_OR_CELL.sub(lambda m: m.group("string") or "A1", text))
    if error:
        problems.append(f"formula does not parse ({error}): ={text[:80]}")
    return problems


def defined_name_problem(name: str) -> str | None:
    """Why Excel refuses a defined name, or None."""
    if not 1 <= len(name) <= MAX_DEFINED_NAME:
        return f"defined name of {len(name)} characters"
    if not _DEFINED_NAME.fullmatch(name):
        return f"defined name {name!r} has a character Excel does not allow"
    cell = re.fullmatch(r"([A-Za-z]{1,3})(\d+)", name)
    if cell and column_number(cell.group(1)) <= MAX_COLUMN and 1 <= int(cell.group(2)) <= MAX_ROW:
        return f"defined name {name!r} is a cell reference"
    if _R1C1.fullmatch(name):
        return f"defined name {name!r} is an R1C1 reference"
    return None


def sheet_name_problem(name: str) -> str | None:
    """Why Excel refuses a sheet name, or None."""
    if not 1 <= utf16_length(name) <= MAX_SHEET_NAME:
        return f"sheet name {name!r} is not 1 to {MAX_SHEET_NAME} characters"
    if SHEET_NAME_FORBIDDEN & set(name):
        return f"sheet name {name!r} has one of {''.join(sorted(SHEET_NAME_FORBIDDEN))}"
    if name.startswith("'") or name.endswith("'"):
        return f"sheet name {name!r} begins or ends with an apostrophe"
    if name.upper() == "HISTORY":
        return "sheet name 'History' is reserved by Excel"
    return None


def overlapping_merges(refs: list[str]) -> list[tuple[str, str]]:
    """Pairs of merged ranges that share a cell."""
    ranges = sorted((parse_range(ref), ref) for ref in refs)
    pairs = []
    for i, ((_, left, bottom, right), ref) in enumerate(ranges):
        for (top2, left2, _, right2), ref2 in ranges[i + 1:]:
            if top2 > bottom:
                break  # sorted by top: no later range reaches up into this one
            if left2 <= right and left <= right2:
                pairs.append((ref, ref2))
    return pairs


class _Package:
    """The parts of an .xlsx and its relationships."""

    def __init__(self, book: zipfile.ZipFile):
        self.book = book
        self.names = set(book.namelist())

    def xml(self, part: str) -> ElementTree.Element:
        return ElementTree.fromstring(self.book.read(part))

    def related(self, part: str) -> dict[str, tuple[str, str]]:
        """Relationship id -> (type's last word, target part) of a part."""
        path = PurePosixPath(part)
        rels = str(path.parent / "_rels" / f"{path.name}.rels")
        if rels not in self.names:
            return {}
        found = {}
        for rel in self.xml(rels).iter(f"{PACKAGE_RELS}Relationship"):
            if rel.get("TargetMode") == "External":
                continue
            target = rel.get("Target")
            target = target.lstrip("/") if target.startswith("/") else \
                _normal(str(path.parent / target))
            found[rel.get("Id")] = (rel.get("Type").rpartition("/")[2], target)
        return found


def _normal(path: str) -> str:
    parts = []
    for piece in path.split("/"):
        if piece == "..":
            parts.pop()
        elif piece not in ("", "."):
            parts.append(piece)
    return "/".join(parts)


def _text(item: ElementTree.Element) -> str:
    """A string item's text: its <t> and its runs' <t>, not its phonetic hints."""
    pieces = [item.find(f"{MAIN}t"), *(r.find(f"{MAIN}t") for r in item.iter(f"{MAIN}r"))]
    return "".join(t.text or "" for t in pieces if t is not None)


def lint_workbook(path: Path) -> list[str]:
    """Every problem found, as "part: where: what"."""
    with zipfile.ZipFile(path) as book:
        package = _Package(book)
        workbook_part = "xl/workbook.xml"
        workbook = package.xml(workbook_part)
        relations = package.related(workbook_part)
        problems: list[str] = []
        sheets = [(s.get("name"), relations.get(s.get(RELATIONSHIP_ID), ("", ""))[1])
                  for s in workbook.iter(f"{MAIN}sheet")]
        problems += _sheet_names(workbook_part, [name for name, _ in sheets])
        titles = {name.upper() for name, _ in sheets}
        problems += _defined_names(workbook, workbook_part, titles, len(sheets))
        if "xl/sharedStrings.xml" in package.names:
            for i, item in enumerate(package.xml("xl/sharedStrings.xml").iter(f"{MAIN}si")):
                length = utf16_length(_text(item))
                if length > MAX_TEXT:
                    problems.append(f"xl/sharedStrings.xml: string {i}: {length:,} characters "
                                    f"(a cell holds {MAX_TEXT:,})")
        for _, part in sheets:
            if part in package.names:
                problems += _sheet(package, part, titles)
        for part in sorted(n for n in package.names if re.fullmatch(r"xl/charts/chart\d+\.xml", n)):
            for f in package.xml(part).iter(f"{CHART}f"):
                problems += [f"{part}: chart reference: {p}"
                             for p in formula_problems(f.text or "", titles)]
        return problems


def _sheet_names(part: str, names: list[str]) -> list[str]:
    problems = [f"{part}: {problem}" for problem in map(sheet_name_problem, names) if problem]
    seen = set()
    for name in names:
        if name.upper() in seen:
            problems.append(f"{part}: two sheets named {name!r}")
        seen.add(name.upper())
    return problems


def _defined_names(workbook, part: str, titles: set[str], sheet_count: int) -> list[str]:
    problems, seen = [], set()
    for defined in workbook.iter(f"{MAIN}definedName"):
        name, scope = defined.get("name", ""), defined.get("localSheetId")
        where = f"{part}: defined name {name!r}"
        problem = defined_name_problem(name)
        if problem:
            problems.append(f"{part}: {problem}")
        if (scope, name.upper()) in seen:
            problems.append(f"{where} is defined twice")
        seen.add((scope, name.upper()))
        if scope is not None and not (scope.isdigit() and int(scope) < sheet_count):
            problems.append(f"{where} belongs to sheet number {scope}, which does not exist")
        problems += [f"{where}: {p}" for p in formula_problems(defined.text or "", titles)]
    return problems


def _sheet(package: _Package, part: str, titles: set[str]) -> list[str]:
    sheet = package.xml(part)
    problems = []
    last_row = 0
    for row in sheet.iter(f"{MAIN}row"):
        number = int(row.get("r", last_row + 1))
        if number <= last_row:
            problems.append(f"{part}: row {number} after row {last_row}")
        last_row, last_column = number, 0
        for cell in row.iter(f"{MAIN}c"):
            ref = cell.get("r")
            where = f"{part}: {ref}"
            if ref is not None:
                cell_row, column = parse_cell(ref)
                if cell_row != number:
                    problems.append(f"{where}: a cell of row {cell_row} inside row {number}")
                if column <= last_column:
                    problems.append(f"{where}: cells of row {number} out of order")
                last_column = column
            formula = cell.find(f"{MAIN}f")
            if formula is not None and formula.text:
                problems += [f"{where}: {p}" for p in formula_problems(formula.text, titles)]
            texts = [cell.find(f"{MAIN}is")] + \
                ([cell.find(f"{MAIN}v")] if cell.get("t") == "str" else [])
            for text in texts:
                if text is not None and utf16_length(_text(text) or text.text or "") > MAX_TEXT:
                    problems.append(f"{where}: text of more than {MAX_TEXT:,} characters")
    for tag in ("formula", "formula1", "formula2"):  # conditional formats, data validation
        for formula in sheet.iter(f"{MAIN}{tag}"):
            problems += [f"{part}: {tag}: {p}" for p in formula_problems(formula.text or "",
                                                                         titles)]
    merges = [m.get("ref") for m in sheet.iter(f"{MAIN}mergeCell")]
    problems += [f"{part}: merged ranges {a} and {b} overlap"
                 for a, b in overlapping_merges(merges)]
    return problems + _comments(package, part, sheet)


def _comments(package: _Package, part: str, sheet) -> list[str]:
    """A sheet's comments each have a note shape, at their cell, in its VML drawing, and
    that drawing is well-formed XML."""
    relations = package.related(part)
    comments = [target for kind, target in relations.values() if kind == "comments"]
    if not comments:
        return []
    refs = [c.get("ref") for c in package.xml(comments[0]).iter(f"{MAIN}comment")]
    legacy = sheet.find(f"{MAIN}legacyDrawing")
    vml = relations.get(legacy.get(RELATIONSHIP_ID)) if legacy is not None else None
    if vml is None or vml[0] != "vmlDrawing" or vml[1] not in package.names:
        return [f"{part}: {len(refs)} comments without a VML drawing (legacyDrawing)"]
    try:
        drawing = package.xml(vml[1])
    except ElementTree.ParseError as error:
        return [f"{vml[1]}: the comments' VML drawing is not well formed ({error})"]
    notes = []
    for shape in drawing.iter(f"{VML}shape"):
        data = shape.find(f"{VML_EXCEL}ClientData")
        if data is not None and data.get("ObjectType") == "Note":
            row, column = data.find(f"{VML_EXCEL}Row"), data.find(f"{VML_EXCEL}Column")
            if row is None or column is None:
                return [f"{vml[1]}: a note shape without its row and column"]
            notes.append((int(row.text) + 1, int(column.text) + 1))
    wanted = sorted(parse_cell(ref) for ref in refs)
    if sorted(notes) != wanted:
        return [f"{vml[1]}: note shapes at {sorted(notes)[:5]}… do not match the "
                f"{len(refs)} comments of {comments[0]}"]
    return []
