"""Stores each formula cell's evaluated value in the .xlsx, beside its formula.

openpyxl writes formulas with empty values, so file previews, pandas and
`openpyxl.load_workbook(data_only=True)` would show nothing. The values written here come
from evaluating the workbook's own formulas with the `formulas` engine (never from the
NumPy reference); Excel and LibreOffice still recalculate on open.

openpyxl's sheet XML is regular (`<c r="B15" s="8"><f>…</f><v></v></c>`, array-range
members as empty styled cells), so a streaming rewrite of the `<c>` elements is enough.
"""

import math
import re
import zipfile
from pathlib import Path, PurePosixPath

from workbook_builder.engines.formulas_engine import CellValues
from workbook_builder.sheet.limits import EXCEL_ROWS, extent_of
from workbook_builder.sheet.refs import parse_cell, parse_range

_CELL = re.compile(r'<c r="([A-Z]+\d+)"([^>]*?)(?:/>|>(.*?)</c>)', re.S)
_ARRAY_REF = re.compile(r'<f t="array" ref="([A-Z]+\d+(?::[A-Z]+\d+)?)"')
_SHEET = re.compile(r'<sheet [^>]*name="([^"]+)"[^>]*r:id="([^"]+)"')
_REL = re.compile(r'<Relationship [^>]*Id="([^"]+)"[^>]*Target="([^"]+)"|'
                  r'<Relationship [^>]*Target="([^"]+)"[^>]*Id="([^"]+)"')


def sheet_parts(book: zipfile.ZipFile) -> dict[str, str]:
    """Sheet title -> path of its XML part inside the zip."""
    rels = {}
    for match in _REL.finditer(book.read("xl/_rels/workbook.xml.rels").decode()):
        rel_id, target = (match.group(1), match.group(2)) if match.group(1) else \
            (match.group(4), match.group(3))
        rels[rel_id] = target
    parts = {}
    for title, rel_id in _SHEET.findall(book.read("xl/workbook.xml").decode()):
        target = rels[rel_id]
        parts[unescape_xml(title)] = target.lstrip("/") if target.startswith("/") else \
            str(PurePosixPath("xl") / target)
    return parts


def escape_xml(text: str) -> str:
    """Text for an XML element: &, < and > escaped (as xml.sax.saxutils.escape, whose
    import brings urllib and http, a fiftieth of a second at every start)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape_xml(text: str) -> str:
    return (text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
            .replace("&apos;", "'").replace("&amp;", "&"))


def typed_value(value) -> tuple[str, str] | None:
    """(t attribute, <v> text) for a value, or None when there is nothing to store."""
    if isinstance(value, bool):
        return "b", "1" if value else "0"
    if isinstance(value, int | float):
        return ("n", repr(float(value))) if math.isfinite(value) else ("e", "#NUM!")
    if value is None:
        return None
    if type(value) is str:
        return "str", escape_xml(value)
    # the engine's error values (XlError) are a subclass of str that prints as '#VALUE!':
    # stored as an error cell, so applications and data_only readers see an error, not text
    return "e", escape_xml(str(value))


def rewrite_sheet(xml: str, sheet: str, values: CellValues) -> str:
    """A sheet's XML with each formula cell (an array formula's members included) holding
    its value from `values`."""
    member_rows: dict[int, list[tuple[int, int]]] = {}  # row -> an array formula's columns
    for ref in _ARRAY_REF.findall(xml):
        top, left, bottom, right = parse_range(ref)
        for row in range(top, bottom + 1):
            member_rows.setdefault(row, []).append((left, right))
    sheet = sheet.upper()

    def replace(match: re.Match) -> str:
        ref, attrs, body = match.group(1), match.group(2), match.group(3) or ""
        if "<f" not in body:  # a constant (most cells of a big sheet), or an array's member
            if not member_rows:
                return match.group(0)
            row, col = parse_cell(ref)
            if not any(left <= col <= right for left, right in member_rows.get(row, ())):
                return match.group(0)
        else:
            row, col = parse_cell(ref)
        formula = re.match(r"<f[^>]*(?:/>|>.*?</f>)", body, re.S)
        typed = typed_value(values.get((sheet, row, col)))
        if typed is None:
            return match.group(0)
        kind, text = typed
        attrs = re.sub(r'\s+t="[^"]*"', "", attrs)
        type_attr = "" if kind == "n" else f' t="{kind}"'
        return (f'<c r="{ref}"{attrs}{type_attr}>{formula.group(0) if formula else ""}'
                f"<v>{text}</v></c>")

    return _CELL.sub(replace, xml)


_DEFINED_NAME = re.compile(r"<definedName [^>]*>([^<]*)</definedName>")
_ROW = re.compile(rb'<row r="(\d+)"[^>]*?(?:/>|>.*?</row>)', re.S)
_ROW_START = b'<row r="'
_DIMENSION = re.compile(rb'<dimension ref="[^"]*"/>')
# a sheet's XML is trimmed a piece at a time: a model's sheet unpacks to gigabytes
_PIECE_BYTES = 1 << 24


def trimmed_copy(source: Path, target: Path) -> Path:
    """The workbook `source` without the rows below its defined names' extent
    (`extent_of`), for a spreadsheet application to recalculate: a stray entry at
    A1000000 of a returned file would cost LibreOffice half a gigabyte and twenty
    seconds, and nothing read comes from there. `source` itself when no sheet has such a
    row (a model's workbook as built: copying its 1.4 GB sheet took 42 s), else a copy at
    `target`, each sheet streamed through in pieces."""
    with zipfile.ZipFile(source) as book:
        names = [unescape_xml(ref) for ref in
                 _DEFINED_NAME.findall(book.read("xl/workbook.xml").decode("utf-8"))]
        last_row = (extent_of(names) or (EXCEL_ROWS,))[0]
        parts = set(sheet_parts(book).values())
        sheets = [info for info in book.infolist() if info.filename in parts]
        if not any(_has_row_beyond(book, info, last_row) for info in sheets):
            return source
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
            for info in book.infolist():
                if info.filename not in parts:
                    out.writestr(info, book.read(info.filename))
                    continue
                with book.open(info) as sheet, \
                        out.open(info, "w", force_zip64=True) as copy:
                    for piece in trimmed_rows(sheet, last_row):
                        copy.write(piece)
    return target


_ROW_NUMBER = re.compile(rb'<row r="(\d+)"')


def _has_row_beyond(book: zipfile.ZipFile, info: zipfile.ZipInfo, last_row: int) -> bool:
    """Whether the sheet holds a row below `last_row`, read a piece at a time."""
    with book.open(info) as sheet:
        held = b""
        while data := sheet.read(_PIECE_BYTES):
            text = held + data
            if any(int(number) > last_row for number in _ROW_NUMBER.findall(text)):
                return True
            held = text[-64:]  # a row's tag cut between two reads
    return False


def trimmed_rows(sheet, last_row: int):
    """A sheet's XML (a binary stream) in pieces, without its dimension (the application
    finds the extent itself) and without the rows below `last_row`. Each piece ends
    where a row starts, so no row is split between two."""

    def keep(match: re.Match) -> bytes:
        return match.group(0) if int(match.group(1)) <= last_row else b""

    held, first = b"", True
    while True:
        data = sheet.read(_PIECE_BYTES)
        text = held + data
        cut = text.rfind(_ROW_START) if data else len(text)
        if data and cut <= 0:  # no row starts after the first byte: read on
            held = text
            continue
        piece, held = text[:cut], text[cut:]
        if first:
            piece, first = _DIMENSION.sub(b"", piece, count=1), False
        yield _ROW.sub(keep, piece)
        if not data:
            return


def store_values(source: Path, target: Path, values: CellValues) -> None:
    """Copy the workbook `source` to `target` with every formula cell's value stored."""
    with zipfile.ZipFile(source) as book, \
            zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        parts = {part: title for title, part in sheet_parts(book).items()}
        for info in book.infolist():
            data = book.read(info.filename)
            if info.filename in parts:
                data = rewrite_sheet(data.decode("utf-8"), parts[info.filename],
                                      values).encode("utf-8")
            out.writestr(info, data)
