"""A1-style cell-reference helpers (rows and columns are 1-based, as in Excel), and a
formula's relative (R1C1) form, the same for every cell it was filled to."""

import re

from openpyxl.utils import column_index_from_string, get_column_letter

_CELL = re.compile(r"^\$?([A-Z]{1,3})\$?(\d+)$")


def cell_ref(row: int, col: int, fix_row: bool = False, fix_col: bool = False) -> str:
    """`cell_ref(5, 3)` -> 'C5'; fix_row/fix_col add the `$` anchors."""
    return f"{'$' if fix_col else ''}{get_column_letter(col)}{'$' if fix_row else ''}{row}"


def range_ref(top: int, left: int, bottom: int, right: int,
              fix_row: bool = False, fix_col: bool = False) -> str:
    """A rectangle; a single cell is written as one reference."""
    first = cell_ref(top, left, fix_row, fix_col)
    if (top, left) == (bottom, right):
        return first
    return f"{first}:{cell_ref(bottom, right, fix_row, fix_col)}"


def quote_sheet(title: str) -> str:
    """Sheet titles are always quoted, which Excel accepts for any title."""
    return "'" + title.replace("'", "''") + "'"


def parse_cell(ref: str) -> tuple[int, int]:
    """'$C$5' -> (5, 3)."""
    match = _CELL.match(ref.upper())
    if not match:
        raise ValueError(f"not a cell reference: {ref!r}")
    return int(match.group(2)), column_index_from_string(match.group(1))


def parse_range(ref: str) -> tuple[int, int, int, int]:
    """'C5:F9' -> (top, left, bottom, right); a single cell is a 1x1 range."""
    first, _, last = ref.partition(":")
    top, left = parse_cell(first)
    bottom, right = parse_cell(last) if last else (top, left)
    return top, left, bottom, right


# the form of every name a workbook of ours holds: a quoted sheet and one cell or range
_QUOTED_SHEET_RANGE = re.compile(r"'((?:[^']|'')+)'!(\$?[A-Z]{1,3}\$?\d+(?::\$?[A-Z]{1,3}\$?\d+)?)")


def name_destinations(defined) -> list[tuple[str, str]]:
    """A defined name's (sheet, cells) pairs, each sheet as it is called: openpyxl 3.1's
    `destinations` keeps a quoted name's doubled apostrophes ('Bob''s sheet'!A1). A name
    openpyxl cannot read (an empty one, a formula) has none. A name of our one form is
    read as openpyxl reads it without its formula tokenizer (~30 µs a name, and a check
    asks for each name several times)."""
    text = getattr(defined, "attr_text", None)
    ours = _QUOTED_SHEET_RANGE.fullmatch(text) if isinstance(text, str) else None
    if ours:
        return [(ours.group(1).replace("''", "'"), ours.group(2))]
    try:
        return [(sheet.replace("''", "'"), cells) for sheet, cells in defined.destinations]
    except Exception:  # openpyxl's tokenizer raises TypeError, ValueError, … on odd text
        return []


# A formula's references, for its relative (R1C1) form: an optional sheet ('quoted name'! or
# NAME!) and a cell or cell range; string literals are matched first and kept as they are
_FORMULA_REFERENCE = re.compile(
    r'(?P<string>"(?:[^"]|"")*")'
    r"|(?<![\w.$'!\]])(?P<sheet>'(?:[^']|'')+'!|[A-Za-z_][\w.]*!)?"
    r"(?P<ref>\$?[A-Za-z]{1,3}\$?\d+(?::\$?[A-Za-z]{1,3}\$?\d+)?)(?![\w(!:.$])")
FORMULA_CELL = re.compile(r"(\$?)([A-Za-z]{1,3})(\$?)(\d+)")
# what a formula's value may take from its own position (ROW() is folded into a constant
# when compiled), or from references it builds (OFFSET, INDIRECT), an external book, whole
# rows or columns, implicit intersection (the lookahead, the names' first letters, only
# spares the regex trying every name at every word)
_POSITIONAL = re.compile(r"\b(?=[ACFGIORS])(ROW|COLUMN|OFFSET|INDIRECT|CELL|ADDRESS|INFO|"
                         r"FORMULATEXT|ISFORMULA|SHEET|SHEETS|GETPIVOTDATA)\s*\(|[@\[{#]|"
                         r"\$?\b[A-Za-z]{1,3}:\$?[A-Za-z]{1,3}\b|\$?\b\d+:\$?\d+\b", re.I)


def column_number(letters: str) -> int:
    """'C' -> 3, 'AA' -> 27 (no check: the letters come from a matched reference)."""
    number = 0
    for ch in letters.upper():
        number = number * 26 + ord(ch) - 64
    return number


def column_letters(number: int) -> str:
    """3 -> 'C', 27 -> 'AA'."""
    letters = ""
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def formula_form(formula: str, row: int, col: int, relative: bool = True):
    """A formula's relative (R1C1) form, the same for every cell its text was filled down or
    across to, and its references in order: [(sheet text or "", ((row, col), …)), …].
    None when the formula may depend on its own position or is not understood. Without
    `relative`, the form leaves out where its references are (they are all "")."""
    outside_strings = re.sub(r'"(?:[^"]|"")*"', '""', formula) if '"' in formula else formula
    if _POSITIONAL.search(outside_strings) or outside_strings.count('"') % 2:
        return None
    pieces, refs, last = [], [], 0
    for match in _FORMULA_REFERENCE.finditer(formula):
        if match.group("string") is not None:
            continue
        corners, places = [], []
        for dollar_col, letters, dollar_row, digits in FORMULA_CELL.findall(match.group("ref")):
            r, c = int(digits), column_number(letters)
            corners.append((r, c))
            if relative:
                places.append((f"R{r}" if dollar_row else f"R[{r - row}]") +
                              (f"C{c}" if dollar_col else f"C[{c - col}]"))
        sheet = match.group("sheet") or ""
        pieces += [formula[last:match.start()], sheet.upper(), ":".join(places)]
        refs.append((sheet, tuple(corners)))
        last = match.end()
    pieces.append(formula[last:])
    return "\0".join(pieces), refs


def sheet_name(sheet_text: str) -> str:
    """'my sheet'! or SHEET! -> the sheet's name."""
    name = sheet_text[:-1]
    if name.startswith("'"):
        name = name[1:-1].replace("''", "'")
    return name
