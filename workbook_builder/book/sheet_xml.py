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

import contextlib
import functools
import io
import queue
import re
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from openpyxl.utils import get_column_letter
from openpyxl.workbook.workbook import Workbook

from workbook_builder.book.number_text import parsed_numbers, shortest_texts
from workbook_builder.engines.cached_values import (
    rewrite_sheet,
    sheet_parts,
    typed_value,
    unescape_xml,
)
from workbook_builder.engines.formulas_engine import CellValues
from workbook_builder.errors import UserError
from workbook_builder.sheet.constants import (
    CONSTANT_BLOCK_CELLS,
    ConstantBlock,
    FormulaRegion,
    add_constant_block,
    blocks_with_cells,
    constant_blocks,
    formula_regions,
    materialise,
    whole_numbers,
)
from workbook_builder.sheet.limits import MAX_CELL_XML_BYTES
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


# sheet title -> (an array block or a formula region, its style's number)
PlacedBlocks = dict[str, list[tuple[ConstantBlock | FormulaRegion, int]]]


def place_constant_blocks(wb: Workbook) -> PlacedBlocks:
    """Ready every array block and formula region for writing, before openpyxl saves the
    workbook: a block the sheet has since put a cell into becomes ordinary cells (it is
    written by openpyxl), every other, and every region, gets its style's number in the
    workbook's style table."""
    placed: PlacedBlocks = {}
    for ws in wb.worksheets:
        for block in blocks_with_cells(ws):
            materialise(ws, block)
        for block in [*constant_blocks(ws), *formula_regions(ws)]:
            placed.setdefault(ws.title, []).append((block, block.style.style_id))
    return placed


def _block_row(block: ConstantBlock, style_id: int, i: int) -> str:
    """Row i (0-based) of a block as openpyxl writes cells of numbers: one format call per
    row, of a template made once per block."""
    row = block.values[i]
    texts = shortest_texts(row)
    if texts is None:  # a NaN or an infinity: written as before, by `repr`
        texts = list(map(float.__repr__, row.tolist()))
    for j in np.flatnonzero(block.integers[i]).tolist():
        texts[j] = str(int(row[j]))
    return _row_template(block.left, block.right, style_id, ' t="n"').format(block.top + i,
                                                                            *texts)


@functools.lru_cache(maxsize=256)
def _row_template(left: int, right: int, style_id: int, kind: str = "") -> str:
    """'<c r="C{0}" s="3" t="n"><v>{1}</v></c><c r="D{0}" …' for the columns left to
    right: {0} the row, {1}, {2}, … each cell's text; `kind` the type attribute."""
    style = f' s="{style_id}"' if style_id else ""
    return "".join(f'<c r="{_letters(col)}{{0}}"{style}{kind}><v>{{{k}}}</v></c>'
                   for k, col in enumerate(range(left, right + 1), start=1))


_FLOAT_REPR = float.__repr__


def _region_run(sheet: str, row: int, left: int, right: int, style_id: int,
                values: CellValues | None) -> str:
    """Cells left to right of a formula region's row, each with its value from `values`
    as `store_values` writes a formula cell's (or empty, styled, without values)."""
    style = f' s="{style_id}"' if style_id else ""
    if values is None:
        return "".join(f'<c r="{_letters(col)}{row}"{style}/>' for col in range(left, right + 1))
    found = [values.get((sheet, row, col)) for col in range(left, right + 1)]
    try:  # numbers, all finite: one format call (a bool, text or error takes the loop)
        if all(type(value) is float or type(value) is int for value in found):
            texts = list(map(_FLOAT_REPR, map(float, found)))
            if "inf" not in "".join(texts) and "nan" not in "".join(texts):
                return _row_template(left, right, style_id).format(row, *texts)
    except OverflowError:  # an int beyond a double
        pass
    pieces = []
    for col, value in zip(range(left, right + 1), found, strict=True):
        typed = typed_value(value)
        if typed is None:
            pieces.append(f'<c r="{_letters(col)}{row}"{style}/>')
            continue
        kind, text = typed
        kind = "" if kind == "n" else f' t="{kind}"'
        pieces.append(f'<c r="{_letters(col)}{row}"{style}{kind}><v>{text}</v></c>')
    return "".join(pieces)


def _region_pieces(region: FormulaRegion, style_id: int, row: int, own: list[int],
                   sheet: str, values: CellValues | None) -> list[tuple[int, str]]:
    """(first column, text) of each run of a region's row between the cells the sheet
    holds there (`own`, its row's columns in order)."""
    pieces, start = [], region.left
    for col in [c for c in own if region.left <= c <= region.right] + [region.right + 1]:
        if col > start:
            pieces.append((start, _region_run(sheet, row, start, col - 1, style_id, values)))
        start = col + 1
    return pieces


def _merged_row(row: int, attrs: str, body: str, placed, sheet: str = "",
                values: CellValues | None = None) -> str:
    """A row's own cells and the blocks' and regions' cells of that row, in column order."""
    pieces = [(_column_number(m.group(1)), m.group(0)) for m in _ROW_CELL.finditer(body)]
    own = [col for col, _ in pieces]
    for block, style_id in placed:
        if block.top <= row <= block.bottom:
            if isinstance(block, FormulaRegion):
                pieces += _region_pieces(block, style_id, row, own, sheet, values)
            else:
                pieces.append((block.left, _block_row(block, style_id, row - block.top)))
    pieces.sort(key=lambda piece: piece[0])
    return f'<row r="{row}"{attrs}>' + "".join(text for _, text in pieces) + "</row>"


def _spliced_rows(sheet_data: str, placed, sheet: str = "",
                  values: CellValues | None = None) -> Iterator[str]:
    """The rows of `sheet_data` with every block's and region's cells put in, rows added
    where the sheet has none (`sheet`: its upper-cased title, as `values` keys it)."""
    block_rows = sorted({row for block, _ in placed for row in range(block.top, block.bottom + 1)})
    k = 0
    for match in _ROW.finditer(sheet_data):
        row = int(match.group(1))
        while k < len(block_rows) and block_rows[k] < row:
            yield _merged_row(block_rows[k], "", "", placed, sheet, values)
            k += 1
        if k < len(block_rows) and block_rows[k] == row:
            yield _merged_row(row, match.group(2), match.group(3) or "", placed, sheet, values)
            k += 1
        else:
            yield match.group(0)
    for row in block_rows[k:]:
        yield _merged_row(row, "", "", placed, sheet, values)


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


# zlib's fastest level: a sheet of numbers packs about as well (the text of doubles is
# mostly digits), in a third of the time
COMPRESS_LEVEL = 1
# text handed to the compressing thread at a time: large, so that the thread, which must
# take Python's lock back after each piece (waiting up to the 5 ms switch interval while
# the rows are made), spends most of its time compressing (1 MB pieces: a 1.4 GB sheet
# took 20 s to finish, 16 MB: 12 s)
_PIECE_BYTES = 1 << 24


def finish_workbook(source: Path, target: Path, placed: PlacedBlocks,
                    values: CellValues | None = None) -> None:
    """Copy the workbook `source` (as openpyxl saved it, parts stored uncompressed) to
    `target` in one pass: every formula cell's value stored beside it (`values`, see
    `store_values`), every placed block's cells in its sheet's XML, each sheet written as a
    stream of rows and compressed while the next rows are made."""
    with zipfile.ZipFile(source) as book, \
            zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED,
                            compresslevel=COMPRESS_LEVEL) as out:
        parts = {part: title for title, part in sheet_parts(book).items()}
        for info in book.infolist():
            data = book.read(info.filename)
            title = parts.get(info.filename)
            if title is None:
                out.writestr(info.filename, data)
                continue
            xml = data.decode("utf-8")
            del data
            if values is not None:
                xml = rewrite_sheet(xml, title, values)
            with out.open(info.filename, "w", force_zip64=True) as stream, \
                    _compressing_beside(stream) as write:
                for piece in _sheet_pieces(xml, placed.get(title, []), title.upper(),
                                           values):
                    write(piece)


def _sheet_pieces(xml: str, placed, sheet: str, values: CellValues | None) -> Iterator[str]:
    """The sheet's XML with the placed blocks' and regions' cells in its rows, in pieces."""
    if not placed:
        yield xml
        return
    match = _SHEET_DATA.search(xml)
    yield _dimension(xml[:match.start()], placed)
    yield "<sheetData>"
    yield from _spliced_rows(match.group(1) or "", placed, sheet, values)
    yield "</sheetData>"
    yield xml[match.end():]


@contextlib.contextmanager
def _compressing_beside(stream) -> Iterator:
    """A `write(text)` that gathers text into pieces of _PIECE_BYTES (16 MB), and a thread
    that encodes nothing but writes (compresses) them into `stream`: zlib lets go of
    Python's lock while it compresses, so the next rows are made meanwhile, on the other
    core."""
    pieces: queue.Queue = queue.Queue(maxsize=2)  # at most four pieces made at once
    failed: list[BaseException] = []

    def drain() -> None:
        while (piece := pieces.get()) is not None:
            if not failed:
                try:
                    stream.write(piece)
                except BaseException as error:  # a full disk: said once the text is made
                    failed.append(error)

    writer = threading.Thread(target=drain, name="attnsheets-compress", daemon=True)
    writer.start()
    gathered: list[str] = []
    size = 0

    def write(text: str) -> None:
        nonlocal size
        gathered.append(text)
        size += len(text)
        if size >= _PIECE_BYTES:
            pieces.put("".join(gathered).encode("utf-8"))
            gathered.clear()
            size = 0

    try:
        yield write
        if gathered:
            pieces.put("".join(gathered).encode("utf-8"))
    finally:
        pieces.put(None)
        writer.join()
    if failed:
        raise failed[0]


# -- reading ------------------------------------------------------------------------------

# a workbook's defined names, less an application's own (_xlnm.Print_Area, …)
_DEFINED_NAME = re.compile(r'<definedName\b(?![^>]*name="_xlnm\.)[^>]*>([^<]*)</definedName>')
_NAMED_RANGE = re.compile(r"^(?:'((?:[^']|'')+)'|([^'!]+))!\$?([A-Z]{1,3})\$?(\d+):"
                          r"\$?([A-Z]{1,3})\$?(\d+)$")
_PLAIN_CELL = re.compile(r'<c r="([A-Z]+\d+)"(?: s="(\d+)")?(?: t="n")?><v>([^<]*)</v></c>')


_VALUE = re.compile(rb"<v>([^<]*)</v>")
_PLAIN_CELL_BYTES = re.compile(rb'<c r="([A-Z]+\d+)"(?: s="(\d+)")?(?: t="n")?><v>([^<]*)</v></c>')


# where a skeleton holds its row number (no byte of a cell's XML is 0)
_ROW_SLOT = b"\x00"


@functools.lru_cache(maxsize=256)
def _skeleton(left: int, right: int, style: bytes, typed: bool) -> bytes:
    """A row of plain number cells without their <v> elements, _ROW_SLOT for the row
    number: '<c r="C\\0" s="3" t="n"></c><c r="D\\0" …' (a bytes.replace per row, not a
    format call with a field per cell)."""
    attrs = (f' s="{style.decode()}"' if style else "") + (' t="n"' if typed else "")
    return "".join(f'<c r="{_letters(col)}\x00"{attrs}></c>'
                   for col in range(left, right + 1)).encode()


def _span(xml: bytes, first: bytes, last: bytes, body_start: int, body_end: int,
          closed: bool = True) -> tuple[int, int] | None:
    """Where the cells `first` to `last` (b'C10', b'F10') are in a row's XML, the first's
    start to the last's end; None when either is missing. `closed`: the last cell is
    <c …>…</c> (else it may be <c …/>)."""
    start = xml.find(b'<c r="' + first + b'"', body_start, body_end)
    if start < 0:
        return None
    last_at = xml.find(b'<c r="' + last + b'"', start, body_end)
    if last_at < 0:
        return None
    end = xml.find(b">", last_at, body_end) + 1
    if end <= 0:
        return None
    if not closed and xml[end - 2] == 47:  # b"/": <c …/>
        return start, end
    end = xml.find(b"</c>", end - 1, body_end) + 4
    return (start, end) if end >= 4 else None


class _Candidate:
    """A named rectangle that may be read as an array block, its numbers filled in row by
    row as the sheet's XML streams past."""

    def __init__(self, sheet: str, top: int, left: int, bottom: int, right: int):
        self.sheet, self.top, self.left, self.bottom, self.right = sheet, top, left, bottom, right
        self.first, self.last = _letters(left).encode(), _letters(right).encode()
        self.values: np.ndarray | None = None  # made at its first row
        self.integers: np.ndarray | None = None
        self.rows_read = 0
        self.style: bytes | None = None
        self.plain = True
        self.removed = False  # rows of it already left out of the XML openpyxl loads

    @property
    def key(self) -> tuple:
        return self.sheet, self.top, self.left, self.bottom, self.right

    @property
    def complete(self) -> bool:
        return self.plain and self.rows_read == self.bottom - self.top + 1

    def overlaps(self, other: "_Candidate") -> bool:
        return self.sheet == other.sheet and not (
            self.bottom < other.top or other.bottom < self.top or
            self.right < other.left or other.right < self.left)

    def take_row(self, row: int, xml: bytes, body_start: int, body_end: int
                 ) -> tuple[int, int] | None:
        """Read this rectangle's part of one row (the XML between `body_start` and
        `body_end`); where its cells are, when every one is a plain number of the block's
        style, in order (else None, and the block is left to openpyxl)."""
        suffix = str(row).encode()
        span = _span(xml, self.first + suffix, self.last + suffix, body_start, body_end) \
            if row == self.top + self.rows_read else None
        texts = self._numbers(row, xml, span) if span is not None else None
        if texts is None:
            self.plain = False
            return None
        cols = self.right - self.left + 1
        values = parsed_numbers(texts)
        if values is None:  # a number JSON does not spell (`.5`, `+1`): `float` reads it
            try:
                values = np.fromiter(map(float, texts), np.float64, len(texts))
            except ValueError:
                values = None
        if values is None or values.shape != (cols,) or not np.isfinite(values).all():
            self.plain = False
            return None
        if self.values is None:
            self.values = np.empty((self.bottom - self.top + 1, cols))
            self.integers = np.zeros(self.values.shape, bool)
        # as openpyxl reads a number: an int unless it has a point or an exponent
        integers = whole_numbers(values)
        for k in np.flatnonzero(integers).tolist():
            integers[k] = not any(ch in texts[k] for ch in b".eE")
        self.values[self.rows_read] = values
        self.integers[self.rows_read] = integers
        self.rows_read += 1
        return span

    def _numbers(self, row: int, xml: bytes, span: tuple[int, int]) -> list[bytes] | None:
        """The text of each cell's number, when the span holds exactly the rectangle's
        cells of one row, each a plain number of the block's one style: the span without
        its values must be the row's skeleton (one comparison, not a match per cell)."""
        start, end = span
        first = _PLAIN_CELL_BYTES.match(xml, start, end)
        if first is None:
            return None
        style = first.group(2) or b""
        if self.style is not None and style != self.style:
            return None
        typed = b' t="n">' in xml[start:first.start(3)]
        parts = _VALUE.split(xml[start:end])
        expected = _skeleton(self.left, self.right, style, typed).replace(_ROW_SLOT,
                                                                           str(row).encode())
        if b"".join(parts[0::2]) != expected:
            return self._numbers_one_by_one(row, xml, span, style)
        self.style = style
        return parts[1::2]

    def _numbers_one_by_one(self, row: int, xml: bytes, span: tuple[int, int],
                            style: bytes) -> list[bytes] | None:
        """`_numbers` for a row whose cells are plain numbers written in more than one way
        (some with t="n", some without): a match per cell."""
        start, end = span
        cells = _PLAIN_CELL_BYTES.findall(xml, start, end)
        refs = [(_letters(col) + str(row)).encode() for col in range(self.left, self.right + 1)]
        if xml.count(b"<c ", start, end) != len(cells) or \
                [ref for ref, _, _ in cells] != refs or any(own != style for _, own, _ in cells):
            return None
        self.style = style
        return [text for _, _, text in cells]


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
_ARRAY_FORMULA = re.compile(rb'<c r="([A-Z]{1,3})(\d+)"[^>]*><f t="array" ref="\$?([A-Z]{1,3})'
                            rb'\$?(\d+):\$?([A-Z]{1,3})\$?(\d+)"')
_VALUE_CELL = re.compile(rb'<c r="([A-Z]{1,3}\d+)"(?: s="\d+")?(?: t="\w+")?'
                         rb'(?:/>|><v>[^<]*</v></c>)')


class _ArrayMembers:
    """The cells an array formula fills besides its own first cell: an application's (or
    the build's) stored results, which `check` evaluates afresh and so never reads. Left
    out of the XML openpyxl loads, a blocks-layout sheet loads in a fraction of the time.
    Only a row whose span holds nothing but those cells, each a bare value, in order, is
    left out; anything else stays for openpyxl."""

    plain = True  # every row is read, as a candidate block's of plain numbers

    def __init__(self, top: int, left: int, bottom: int, right: int):
        self.top, self.left, self.bottom, self.right = top, left, bottom, right
        self.letters = [_letters(col).encode() for col in range(left, right + 1)]

    def take_row(self, row: int, xml: bytes, body_start: int, body_end: int
                 ) -> tuple[int, int] | None:
        # the top row without the formula's own cell
        letters = self.letters[1:] if row == self.top else self.letters
        if not letters:
            return None
        suffix = str(row).encode()
        span = _span(xml, letters[0] + suffix, letters[-1] + suffix, body_start, body_end,
                     closed=False)
        if span is None:
            return None
        start, end = span
        if xml.count(b"<c ", start, end) == len(letters) and \
                _VALUE_CELL.findall(xml, start, end) == [c + suffix for c in letters]:
            return span
        return None


def _array_members_in(xml: bytes, body_start: int, body_end: int) -> list[_ArrayMembers]:
    """The array formulas whose first cell is in this row's XML (found by a C-speed search
    for their <f t="array">, not a match at every cell)."""
    found = []
    position = body_start
    while (at := xml.find(b'<f t="array" ref="', position, body_end)) >= 0:
        position = at + 1
        cell = xml.rfind(b'<c r="', body_start, at)
        match = _ARRAY_FORMULA.match(xml, cell) if cell >= 0 else None
        if match is None or match.end() > body_end:
            continue
        col, row, left, top, right, bottom = (g.decode() for g in match.groups())
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
_MERGE_CELLS = re.compile(rb"<mergeCells\b[^>]*?(?:/>|>.*?</mergeCells>)", re.S)
_PLAIN_INLINE_TEXT = re.compile(rb'(<c r="[A-Z]{1,3}\d+"(?: s="\d+")?) t="inlineStr">'
                                rb'<is><t(?: xml:space="preserve")?>([^<]+)</t></is></c>')
_READ_BYTES = 1 << 24  # of a sheet's XML at a time (large for the reason of _PIECE_BYTES)


def _chunks_beside(stream) -> Iterator[bytes]:
    """The stream's bytes in chunks, read (decompressed) by a thread of its own while the
    chunks before are parsed: zlib lets go of Python's lock while it decompresses."""
    chunks: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()

    def fill() -> None:
        try:
            while not stop.is_set():
                chunk = stream.read(_READ_BYTES)
                chunks.put(chunk)
                if not chunk:
                    return
        except BaseException as error:  # a damaged zip: raised where the chunk is wanted
            chunks.put(error)

    reader = threading.Thread(target=fill, name="attnsheets-unpack", daemon=True)
    reader.start()
    try:
        while True:
            chunk = chunks.get()
            if isinstance(chunk, BaseException):
                raise chunk
            if not chunk:
                return
            yield chunk
    finally:
        stop.set()
        while reader.is_alive():  # let a filler waiting on a full queue finish
            with contextlib.suppress(queue.Empty):
                chunks.get_nowait()
            reader.join(0.01)


def _read_sheet(stream, candidates: list[_Candidate], array_results: bool = False,
                where: str = "the workbook") -> bytes:
    """The sheet's XML, read from `stream` _READ_BYTES (16 MB) at a time, without the cells of
    its candidates that are plain numbers (each candidate's rows are read on the way),
    without its array formulas' stored results (`_ArrayMembers`; kept with
    `array_results`) and its merged ranges, and with plain inline text as string values.
    No moment holds the whole sheet's text: only what openpyxl is to load."""
    by_row: dict[int, list[_Candidate | _ArrayMembers]] = {}
    for candidate in candidates:
        for row in range(candidate.top, candidate.bottom + 1):
            by_row.setdefault(row, []).append(candidate)
    kept: list[bytes] = []
    kept_bytes = 0
    pending = b""
    for chunk in _chunks_beside(stream):
        piece = pending + chunk
        cut = piece.rfind(b"</row>")
        if cut < 0:
            pending = piece
            continue
        pending = piece[cut + 6:]
        kept.append(_read_rows(piece[:cut + 6], by_row, array_results))
        kept_bytes += len(kept[-1])
        if kept_bytes > MAX_CELL_XML_BYTES:
            raise UserError(f"{where}: more than {MAX_CELL_XML_BYTES // 2**20:,} MB of its "
                            f"XML is cells other than blocks of plain numbers, more than "
                            f"attnsheets reads cell by cell; it is not a workbook "
                            f"attnsheets wrote")
    kept.append(_read_rows(pending, by_row, array_results))
    xml = b"".join(kept)
    return _PLAIN_INLINE_TEXT.sub(rb'\1 t="str"><v>\2</v></c>', _MERGE_CELLS.sub(b"", xml))


def _read_rows(xml: bytes, by_row: dict, array_results: bool) -> bytes:
    """`_read_sheet` of a piece of the sheet's XML that ends at a row's end."""
    kept, last, position = [], 0, 0
    while (start := xml.find(b'<row r="', position)) >= 0:  # rows found by C-speed search
        number_end = xml.find(b'"', start + 8)
        opened = xml.find(b">", number_end)
        if opened < 0:
            break
        if xml[opened - 1] == 47:  # <row …/>: no cells
            position = opened
            continue
        end = xml.find(b"</row>", opened)
        if end < 0:
            break
        position = end
        row = int(xml[start + 8:number_end])
        if not array_results:
            for members in _array_members_in(xml, opened + 1, end):
                for r in range(members.top, members.bottom + 1):
                    by_row.setdefault(r, []).append(members)
        spans = []
        for reader in by_row.pop(row, ()):
            if reader.plain:
                span = reader.take_row(row, xml, opened + 1, end)
                if span is not None:
                    spans.append((span, reader))
        spans.sort(key=lambda found: found[0])
        for (span_start, span_end), reader in spans:
            if span_start < last:  # two readers claim one cell: neither is left out
                reader.plain = False
                continue
            if isinstance(reader, _Candidate):
                reader.removed = True
            kept.append(xml[last:span_start])
            last = span_end
    kept.append(xml[last:])
    return b"".join(kept)


def load_with_constant_blocks(path: Path, data_only: bool = False) -> Workbook:
    """The workbook at `path`, its named blocks of plain numbers as array blocks and its
    array formulas without their stored results (see the module's docstring); openpyxl's
    own load for everything else, and for all of it outside the openpyxl versions this
    reads the internals of. With `data_only`, every formula cell (array formulas' included)
    holds its stored result instead of its formula, as `read_blocks` reads them."""
    if not openpyxl_shortcuts():
        return load_workbook(path, data_only=data_only)
    with zipfile.ZipFile(path) as book:
        found = _candidates(book)
        titles = {part: title for title, part in sheet_parts(book).items()}
        stripped = io.BytesIO()
        read: list[_Candidate] = []
        with zipfile.ZipFile(stripped, "w", zipfile.ZIP_STORED) as out:
            for info in book.infolist():
                if info.filename not in titles:
                    out.writestr(info.filename, book.read(info.filename))
                    continue
                mine = [c for c in found if c.sheet == titles[info.filename]]
                while True:
                    with book.open(info) as stream:
                        data = _read_sheet(stream, mine, data_only,
                                           f"{path}: sheet {titles[info.filename]!r}")
                    # a block found not plain after some of its rows were left out: read
                    # the sheet again without it (a file an application changed)
                    broken = {c.key for c in mine if c.removed and not c.complete}
                    if not broken:
                        break
                    mine = [_Candidate(*c.key) for c in mine if c.key not in broken]
                read += [c for c in mine if c.complete]
                out.writestr(info.filename, data)
                del data
    wb = load_workbook(stripped, data_only=data_only)
    for candidate in read:
        ws = wb[candidate.sheet]
        add_constant_block(ws, candidate.top, candidate.left, candidate.values,
                           cell_with_style_id(ws, int(candidate.style or 0)),
                           candidate.integers)
    return wb
