"""Large blocks of plain numbers written into, and read from, a sheet's XML directly.

Writing: openpyxl saves the workbook without the array blocks (`sheet/constants.py`), so
styles, defined names, print setup, comments and charts are all its own; one streamed copy
of the zip then puts each block's `<c>` elements into the sheet's rows, in the form openpyxl
writes them (`<c r="C10" s="3" t="n"><v>0.25</v></c>`).

Reading (`check`): one pass over each sheet's XML takes out every named block whose cells
are all plain numbers of one style, complete and in order, and the stored results of every
array formula (the cells it fills besides its own: `check` evaluates them afresh); openpyxl
loads the rest and the blocks come back as arrays. Anything else in a block (a formula,
text, a shared string, a second style, a missing cell) leaves that block to openpyxl.
"""

import functools
import io
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from openpyxl.utils import get_column_letter
from openpyxl.workbook.workbook import Workbook

from workbook_builder.engines.cached_values import sheet_parts, unescape_xml
from workbook_builder.sheet.constants import (
    CONSTANT_BLOCK_CELLS,
    ConstantBlock,
    add_constant_block,
    blocks_with_cells,
    constant_blocks,
    materialise,
    whole_numbers,
)
from workbook_builder.sheet.refs import parse_range, range_ref
from workbook_builder.xlsx.of_openpyxl import (
    cell_with_style_id,
    load_workbook,
    openpyxl_shortcuts,
)

# -- writing ------------------------------------------------------------------------------

_SHEET_DATA = re.compile(r"<sheetData>(.*)</sheetData>|<sheetData/>", re.S)
_ROW = re.compile(r'<row r="(\d+)"([^>]*?)(?:/>|>(.*?)</row>)', re.S)
_ROW_CELL = re.compile(r'<c r="([A-Z]+)\d+"[^>]*?(?:/>|>.*?</c>)', re.S)
_DIMENSION = re.compile(r'<dimension ref="([A-Z]+\d+(?::[A-Z]+\d+)?)"/>')
_COLUMNS = {}  # column number -> letters


def _letters(col: int) -> str:
    letters = _COLUMNS.get(col)
    if letters is None:
        letters = _COLUMNS[col] = get_column_letter(col)
    return letters


def _column_number(letters: str) -> int:
    number = 0
    for ch in letters:
        number = number * 26 + ord(ch) - 64
    return number


PlacedBlocks = dict[str, list[tuple[ConstantBlock, int]]]  # sheet title -> (block, style id)


def place_constant_blocks(wb: Workbook) -> PlacedBlocks:
    """Ready every array block for writing, before openpyxl saves the workbook: a block
    the sheet has since put a cell into becomes ordinary cells (it is written by
    openpyxl), every other gets its style's number in the workbook's style table."""
    placed: PlacedBlocks = {}
    for ws in wb.worksheets:
        for block in blocks_with_cells(ws):
            materialise(ws, block)
        for block in constant_blocks(ws):
            placed.setdefault(ws.title, []).append((block, block.style.style_id))
    return placed


def _block_row(block: ConstantBlock, style_id: int, i: int) -> str:
    """Row i (0-based) of a block as openpyxl writes cells of numbers."""
    starts = _cell_starts(block.left, block.right)
    style = f' s="{style_id}"' if style_id else ""
    middle = f'{block.top + i}"{style} t="n"><v>'
    values = block.values[i].tolist()
    texts = list(map(float.__repr__, values))
    for j in np.flatnonzero(block.integers[i]).tolist():
        texts[j] = str(int(values[j]))
    return "".join([f"{start}{middle}{text}</v></c>"
                    for start, text in zip(starts, texts, strict=True)])


@functools.lru_cache(maxsize=64)
def _cell_starts(left: int, right: int) -> tuple[str, ...]:
    """'<c r="C' for each column of a block (the row number follows)."""
    return tuple(f'<c r="{_letters(col)}' for col in range(left, right + 1))


def _merged_row(row: int, attrs: str, body: str, placed) -> str:
    """A row's own cells and the blocks' cells of that row, in column order."""
    pieces = [(_column_number(m.group(1)), m.group(0)) for m in _ROW_CELL.finditer(body)]
    pieces += [(block.left, _block_row(block, style_id, row - block.top))
               for block, style_id in placed if block.top <= row <= block.bottom]
    pieces.sort(key=lambda piece: piece[0])
    return f'<row r="{row}"{attrs}>' + "".join(text for _, text in pieces) + "</row>"


def _spliced_rows(sheet_data: str, placed) -> Iterator[str]:
    """The rows of `sheet_data` with every block's cells put in, rows added where the sheet
    has none."""
    block_rows = sorted({row for block, _ in placed for row in range(block.top, block.bottom + 1)})
    k = 0
    for match in _ROW.finditer(sheet_data):
        row = int(match.group(1))
        while k < len(block_rows) and block_rows[k] < row:
            yield _merged_row(block_rows[k], "", "", placed)
            k += 1
        if k < len(block_rows) and block_rows[k] == row:
            yield _merged_row(row, match.group(2), match.group(3) or "", placed)
            k += 1
        else:
            yield match.group(0)
    for row in block_rows[k:]:
        yield _merged_row(row, "", "", placed)


def _dimension(xml_head: str, placed) -> str:
    """The sheet's <dimension> grown to cover the blocks."""
    match = _DIMENSION.search(xml_head)
    if match is None:
        return xml_head
    top, left, bottom, right = parse_range(match.group(1))
    for block, _ in placed:
        top, left = min(top, block.top), min(left, block.left)
        bottom, right = max(bottom, block.bottom), max(right, block.right)
    return (xml_head[:match.start()] + f'<dimension ref="{range_ref(top, left, bottom, right)}"/>'
            + xml_head[match.end():])


def splice_constant_blocks(source: Path, target: Path, placed: PlacedBlocks) -> None:
    """Copy the workbook `source` (as openpyxl saved it) to `target` with every placed
    block's cells in its sheet's XML, each large sheet written as a stream of rows."""
    with zipfile.ZipFile(source) as book, \
            zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        parts = {part: title for title, part in sheet_parts(book).items()}
        for info in book.infolist():
            data = book.read(info.filename)
            title = parts.get(info.filename)
            if title not in placed:
                out.writestr(info, data)
                continue
            xml = data.decode("utf-8")
            match = _SHEET_DATA.search(xml)
            entry = zipfile.ZipInfo(info.filename, info.date_time)
            entry.compress_type = zipfile.ZIP_DEFLATED
            with out.open(entry, "w") as stream:
                stream.write(_dimension(xml[:match.start()], placed[title]).encode("utf-8"))
                stream.write(b"<sheetData>")
                for row in _spliced_rows(match.group(1) or "", placed[title]):
                    stream.write(row.encode("utf-8"))
                stream.write(b"</sheetData>")
                stream.write(xml[match.end():].encode("utf-8"))


# -- reading ------------------------------------------------------------------------------

# a workbook's defined names, less an application's own (_xlnm.Print_Area, …)
_DEFINED_NAME = re.compile(r'<definedName\b(?![^>]*name="_xlnm\.)[^>]*>([^<]*)</definedName>')
_NAMED_RANGE = re.compile(r"^(?:'((?:[^']|'')+)'|([^'!]+))!\$?([A-Z]{1,3})\$?(\d+):"
                          r"\$?([A-Z]{1,3})\$?(\d+)$")
_PLAIN_CELL = re.compile(r'<c r="([A-Z]+\d+)"(?: s="(\d+)")?(?: t="n")?><v>([^<]*)</v></c>')


class _Candidate:
    """A named rectangle that may be read as an array block; its rows as they are found."""

    def __init__(self, sheet: str, top: int, left: int, bottom: int, right: int):
        self.sheet, self.top, self.left, self.bottom, self.right = sheet, top, left, bottom, right
        self.refs = [_letters(c) for c in range(left, right + 1)]
        self.values: list[np.ndarray] = []
        self.integers: list[np.ndarray] = []
        self.spans: list[tuple[int, int]] = []  # where its cells are in the sheet's XML
        self.style: str | None = None
        self.plain = True

    def overlaps(self, other: "_Candidate") -> bool:
        return self.sheet == other.sheet and not (
            self.bottom < other.top or other.bottom < self.top or
            self.right < other.left or other.right < self.left)

    def take_row(self, row: int, xml: str, body_start: int, body_end: int) -> None:
        """Read this rectangle's part of one row, the XML between `body_start` and
        `body_end`."""
        start = xml.find(f'<c r="{self.refs[0]}{row}"', body_start, body_end)
        last = xml.find(f'<c r="{self.refs[-1]}{row}"', max(start, body_start), body_end)
        end = xml.find("</c>", last, body_end) + 4 if last >= 0 else -1
        # every <c> of the span a plain number: as many plain matches as cells
        cells = _PLAIN_CELL.findall(xml, start, end) if start >= 0 and end >= 4 else []
        if len(cells) != len(self.refs) or xml.count("<c ", start, end) != len(cells):
            self.plain = False
            return
        suffix = str(row)
        style = cells[0][1] if self.style is None else self.style
        texts = [text for _, _, text in cells]
        if [ref for ref, _, _ in cells] != [letters + suffix for letters in self.refs] or \
                any(own != style for _, own, _ in cells):
            self.plain = False
            return
        self.style = style
        try:
            values = np.fromiter(map(float, texts), float, len(texts))
        except ValueError:
            self.plain = False
            return
        if not np.isfinite(values).all():
            self.plain = False
            return
        # as openpyxl reads a number: an int unless it has a point or an exponent
        integers = whole_numbers(values)
        for k in np.flatnonzero(integers).tolist():
            integers[k] = not any(ch in texts[k] for ch in ".eE")
        self.integers.append(integers)
        self.values.append(values)
        self.spans.append((start, end))


def _candidates(book: zipfile.ZipFile) -> list[_Candidate]:
    """Named rectangles of at least CONSTANT_BLOCK_CELLS cells, none overlapping another."""
    found: list[_Candidate] = []
    for text in _DEFINED_NAME.findall(book.read("xl/workbook.xml").decode("utf-8")):
        match = _NAMED_RANGE.match(unescape_xml(text).strip())
        if match is None:
            continue
        quoted, plain, left, top, right, bottom = match.groups()
        sheet = quoted.replace("''", "'") if quoted else plain
        candidate = _Candidate(sheet, int(top), _column_number(left), int(bottom),
                               _column_number(right))
        cells = (candidate.bottom - candidate.top + 1) * (candidate.right - candidate.left + 1)
        if cells < CONSTANT_BLOCK_CELLS or candidate.bottom < candidate.top or \
                candidate.right < candidate.left:
            continue
        found.append(candidate)
    return [c for c in found if not any(c is not o and c.overlaps(o) for o in found)]


# an array formula's first cell, and a cell holding only a value (or nothing)
_ARRAY_FORMULA = re.compile(r'<c r="([A-Z]{1,3})(\d+)"[^>]*><f t="array" ref="\$?([A-Z]{1,3})'
                            r'\$?(\d+):\$?([A-Z]{1,3})\$?(\d+)"')
_VALUE_CELL = re.compile(r'<c r="([A-Z]{1,3}\d+)"(?: s="\d+")?(?: t="\w+")?'
                         r'(?:/>|><v>[^<]*</v></c>)')


class _ArrayMembers:
    """The cells an array formula fills besides its own first cell: an application's (or
    the build's) stored results, which `check` evaluates afresh and so never reads. Left
    out of the XML openpyxl loads, a blocks-layout sheet loads in a fraction of the time.
    Only a row whose span holds nothing but those cells, each a bare value, in order, is
    left out; anything else stays for openpyxl."""

    plain = True  # every row is read, as a candidate block's of plain numbers

    def __init__(self, top: int, left: int, bottom: int, right: int):
        self.top, self.left, self.bottom, self.right = top, left, bottom, right
        self.letters = [_letters(col) for col in range(left, right + 1)]
        self.spans: list[tuple[int, int]] = []

    def take_row(self, row: int, xml: str, body_start: int, body_end: int) -> None:
        # the top row without the formula's own cell
        letters = self.letters[1:] if row == self.top else self.letters
        if not letters:
            return
        suffix = str(row)
        refs = [column + suffix for column in letters]
        start = xml.find(f'<c r="{refs[0]}"', body_start, body_end)
        last = xml.find(f'<c r="{refs[-1]}"', max(start, body_start), body_end)
        end = xml.find(">", last, body_end) + 1 if last >= 0 else -1
        if start < 0 or end <= 0:
            return
        if xml[end - 2] != "/":  # <c …>…</c>, not <c …/>
            end = xml.find("</c>", end, body_end) + 4
            if end < 4:
                return
        if xml.count("<c ", start, end) == len(refs) and \
                _VALUE_CELL.findall(xml, start, end) == refs:
            self.spans.append((start, end))


def _array_members(xml: str) -> list[_ArrayMembers]:
    found = []
    for match in _ARRAY_FORMULA.finditer(xml):
        col, row, left, top, right, bottom = match.groups()
        members = _ArrayMembers(int(top), _column_number(left), int(bottom),
                                _column_number(right))
        if (int(row), _column_number(col)) == (members.top, members.left) and \
                members.top <= members.bottom and members.left <= members.right:
            found.append(members)
    return found


# what `check` reads of a sheet as openpyxl would read it, made cheaper: merged ranges
# (openpyxl makes and styles a cell for each cell they cover; nothing checked is merged)
# and text written inline (openpyxl makes a rich-text object of each; a plain one reads as
# the same string cell from a <v>)
_MERGE_CELLS = re.compile(r"<mergeCells\b[^>]*?(?:/>|>.*?</mergeCells>)", re.S)
_PLAIN_INLINE_TEXT = re.compile(r'(<c r="[A-Z]{1,3}\d+"(?: s="\d+")?) t="inlineStr">'
                                r'<is><t(?: xml:space="preserve")?>([^<]+)</t></is></c>')


def _read_sheet(xml: str, candidates: list[_Candidate], array_results: bool = False) -> str:
    """The sheet's XML without the cells of its candidates that are plain numbers (each
    candidate's rows are read on the way), without its array formulas' stored results
    (`_ArrayMembers`; kept with `array_results`) and its merged ranges, and with plain
    inline text as string values."""
    by_row: dict[int, list[_Candidate | _ArrayMembers]] = {}
    arrays = [] if array_results else _array_members(xml)
    for candidate in [*candidates, *arrays]:
        for row in range(candidate.top, candidate.bottom + 1):
            by_row.setdefault(row, []).append(candidate)
    position = 0
    while (start := xml.find('<row r="', position)) >= 0:  # rows found by C-speed search
        number_end = xml.find('"', start + 8)
        opened = xml.find(">", number_end)
        if xml[opened - 1] == "/":  # <row …/>: no cells
            position = opened
            continue
        end = xml.find("</row>", opened)
        if end < 0:
            break
        position = end
        row = int(xml[start + 8:number_end])
        for candidate in by_row.get(row, ()):
            if candidate.plain:
                candidate.take_row(row, xml, opened + 1, end)
    spans = sorted([span for c in candidates
                    if c.plain and len(c.values) == c.bottom - c.top + 1 for span in c.spans]
                   + [span for members in arrays for span in members.spans])
    kept, last = [], 0
    for start, end in spans:
        kept.append(xml[last:start])
        last = end
    kept.append(xml[last:])
    return _PLAIN_INLINE_TEXT.sub(r'\1 t="str"><v>\2</v></c>',
                                  _MERGE_CELLS.sub("", "".join(kept)))


def load_with_constant_blocks(path: Path, data_only: bool = False) -> Workbook:
    """The workbook at `path`, its named blocks of plain numbers as array blocks and its
    array formulas without their stored results (see the module's docstring); openpyxl's
    own load for everything else, and for all of it outside the openpyxl versions this
    reads the internals of. With `data_only`, every formula cell (array formulas' included)
    holds its stored result instead of its formula, as `read_blocks` reads them."""
    if not openpyxl_shortcuts():
        return load_workbook(path, data_only=data_only)
    with zipfile.ZipFile(path) as book:
        candidates = _candidates(book)
        titles = {part: title for title, part in sheet_parts(book).items()}
        stripped = io.BytesIO()
        with zipfile.ZipFile(stripped, "w", zipfile.ZIP_STORED) as out:
            for info in book.infolist():
                data = book.read(info.filename)
                if info.filename in titles:
                    mine = [c for c in candidates if c.sheet == titles[info.filename]]
                    data = _read_sheet(data.decode("utf-8"), mine,
                                       array_results=data_only).encode("utf-8")
                out.writestr(info.filename, data)
    wb = load_workbook(stripped, data_only=data_only)
    for candidate in candidates:
        if not candidate.plain or len(candidate.values) != candidate.bottom - candidate.top + 1:
            continue
        ws = wb[candidate.sheet]
        add_constant_block(ws, candidate.top, candidate.left, np.vstack(candidate.values),
                           cell_with_style_id(ws, int(candidate.style or 0)),
                           np.vstack(candidate.integers))
    return wb
