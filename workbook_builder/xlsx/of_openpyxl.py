"""Every use of openpyxl's internals: reading a workbook with every number as the number it
is, writing floats exactly and fonts in the schema's order, and the cells a sheet stores.

Each shortcut is taken only within the releases `versions.SUPPORTED` names for openpyxl
(and not when the environment forces the released library); elsewhere the public path is
taken, slower but as released. tests/test_evaluate.py shows both paths give the same
workbooks. A change to openpyxl's own module (the number reader, the float writer, the
font's serialiser) is in place only while we read or save, and undone afterwards.
"""

import contextlib
import functools
import math
import os
import threading
import warnings
from collections.abc import Iterator
from copy import copy

import openpyxl
from openpyxl.cell.cell import Cell, MergedCell
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.merge import MergedCellRange

from workbook_builder.xlsx.versions import supported

# openpyxl's module-level functions we replace while reading or saving: one thread at a time
_module_lock = threading.RLock()


def openpyxl_shortcuts(shortcuts: bool | None = None) -> bool:
    """`shortcuts`, or (None) whether the installed openpyxl is one they were written for."""
    return supported("openpyxl") if shortcuts is None else shortcuts


def _number_a_double_holds(cast):
    """openpyxl's reading of a number cell's text, except that a whole number too large for
    a double (400 digits: no application writes one) reads as ±inf, as its text with a
    decimal point would, instead of a Python int that every later float() refuses."""
    @functools.wraps(cast)
    def read(text: str):
        number = cast(text)
        if isinstance(number, int) and len(text) > 300:
            return float(text)  # a double, as a spreadsheet reads it: float("9" * 400) is inf
        return number
    read.wraps_cast = True
    return read


@contextlib.contextmanager
def _numbers_as_doubles(shortcuts: bool) -> Iterator[None]:
    """openpyxl's cell reader reading a huge whole number as a double, for the block."""
    from openpyxl.worksheet import _reader

    cast = getattr(_reader, "_cast_number", None)
    if not shortcuts or cast is None or getattr(cast, "wraps_cast", False):
        yield
        return
    with _module_lock:
        _reader._cast_number = _number_a_double_holds(cast)
        try:
            yield
        finally:
            _reader._cast_number = cast


def _huge_numbers_as_doubles(wb) -> None:
    """The public path of `_numbers_as_doubles`: each whole number beyond a double's range
    replaced, after reading, by the double its text reads as (±inf)."""
    if getattr(wb, "read_only", False):
        return
    for ws in wb.worksheets:
        for cell in stored_cells(ws, shortcuts=False):
            if type(cell.value) is int and abs(cell.value) >= 10 ** 300:
                cell.value = float(str(cell.value))


def load_workbook(path, **options):
    """openpyxl.load_workbook, without its warning about a missing default cell style
    (files saved by Gnumeric have none, and it says nothing about their contents), and with
    every number read as the number it is: openpyxl turns a number in a cell formatted as a
    date or a time into a `datetime` (rounded to the millisecond), while every formula,
    and an exercise's self-check, sees the number; a whole number beyond a double's range
    reads as ±inf."""
    shortcuts = openpyxl_shortcuts()
    with warnings.catch_warnings(), _numbers_as_doubles(shortcuts):
        warnings.filterwarnings("ignore", "Workbook contains no default style")
        if not shortcuts:
            wb = _dates_as_numbers(openpyxl.load_workbook(path, **options))
            _huge_numbers_as_doubles(wb)
            return wb
        from openpyxl.reader.excel import ExcelReader

        class NumbersReader(ExcelReader):
            def read_worksheets(self):
                # openpyxl 3.1: the cell reader converts the numbers of the styles in
                # these sets; with none, a number stays the float the file holds
                self.wb._date_formats, self.wb._timedelta_formats = set(), set()
                super().read_worksheets()

        reader = NumbersReader(path, **options)
        reader.read()
        return reader.wb


def _dates_as_numbers(wb):
    """The public path: each date a cell holds converted back with the workbook's epoch
    (to the millisecond openpyxl kept; a read-only workbook's cells are left as read)."""
    if getattr(wb, "read_only", False):
        return wb
    from openpyxl.utils.datetime import to_excel

    for ws in wb.worksheets:
        for cell in stored_cells(ws, shortcuts=False):
            if cell.data_type == "d" and cell.value is not None:
                cell.value = to_excel(cell.value, wb.epoch)
    return wb


def _exact_number_text(value, original) -> str:
    """A float as the shortest text that reads back as the same double (repr); anything
    else as openpyxl writes it."""
    if isinstance(value, float) and math.isfinite(value):
        return float.__repr__(value)  # not repr(): numpy 2 prints np.float64(…)
    return original(value)


# A font's children in the order of Excel's schema (CT_Font, as Microsoft's Open XML SDK
# validates it); openpyxl 3.1 writes name, charset and family first and sz after color
FONT_CHILDREN = ("b", "i", "strike", "condense", "extend", "outline", "shadow", "u",
                 "vertAlign", "sz", "color", "name", "family", "charset", "scheme")


def _in_schema_order(tree):
    """A <font> element with its children sorted into FONT_CHILDREN's order (stable:
    anything else after them)."""
    rank = {tag: i for i, tag in enumerate(FONT_CHILDREN)}
    children = sorted(tree, key=lambda child: rank.get(child.tag.rpartition("}")[2], len(rank)))
    for child in children:
        tree.remove(child)
        tree.append(child)
    return tree


def fonts_in_schema_order(save):
    """`save` with openpyxl writing every <font> of styles.xml (cell fonts, the default
    font, a conditional format's) with its children in the schema's order, the one
    Microsoft's Open XML validator accepts (it rejects openpyxl's). Within the openpyxl
    releases of `versions.SUPPORTED` only; elsewhere `save` as it is. The font's serialiser
    is wrapped, not its list of children, which its hash and equality read; a subclass (a
    rich-text run's font, another schema type) keeps its own order."""
    @functools.wraps(save)
    def saving(*args, **kwargs):
        from openpyxl.styles.fonts import Font

        if not supported("openpyxl") or \
                set(Font.__elements__) != set(FONT_CHILDREN) or \
                getattr(Font.to_tree, "in_schema_order", False):  # already, further out
            return save(*args, **kwargs)
        released = Font.to_tree

        def to_tree(font, *tree_args, **tree_kwargs):
            tree = released(font, *tree_args, **tree_kwargs)
            return _in_schema_order(tree) if type(font) is Font else tree

        to_tree.in_schema_order = True
        with _module_lock:
            own = Font.__dict__.get("to_tree")
            Font.to_tree = to_tree
            try:
                return save(*args, **kwargs)
            finally:
                if own is None:
                    del Font.to_tree
                else:
                    Font.to_tree = own

    return saving


@fonts_in_schema_order
def save_workbook(wb, path, shortcuts: bool | None = None, compressed: bool = True) -> None:
    """wb.save(path), every float written exactly. openpyxl 3.1 writes numbers with
    "%.16g" (its cell writer's `safe_string`), 16 significant digits, which can move a
    double by one unit in the last place; repr's up to 17 read back bit for bit. Without
    `compressed`, the parts are stored as they are (for a copy that rewrites them: nothing
    is compressed only to be unpacked again)."""
    save = wb.save if compressed else functools.partial(_save_stored, wb)
    if not (openpyxl_shortcuts(shortcuts)):
        _closing_on_failure(save, path)
        return
    import openpyxl.cell._writer as writer

    with _module_lock:
        original = writer.safe_string
        writer.safe_string = functools.partial(_exact_number_text, original=original)
        try:
            _closing_on_failure(save, path)
        finally:
            writer.safe_string = original


def _save_stored(wb, path) -> None:
    """`wb.save(path)` (openpyxl's `save_workbook`, through its public `ExcelWriter`) into a
    zip whose parts are stored, not compressed."""
    import datetime
    import zipfile

    from openpyxl.writer.excel import ExcelWriter

    if wb.read_only:
        raise TypeError("Workbook is read-only")
    if wb.write_only and not wb.worksheets:
        wb.create_sheet()
    archive = zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True)
    wb.properties.modified = datetime.datetime.now(tz=datetime.UTC).replace(
        tzinfo=None)
    ExcelWriter(wb, archive).save()


def _closing_on_failure(save, path) -> None:
    """`save(path)`; if it fails (a full disk), what openpyxl left open, its zip and the
    sheet writer's stream, is closed now, quietly, rather than by the garbage collector,
    which prints "Exception ignored in ZipFile.__del__" and a traceback under the one-line
    error. lxml's error for a failed write becomes the OSError it stands for."""
    import errno
    import types
    import zipfile

    try:
        from lxml.etree import SerialisationError
    except ImportError:  # openpyxl writes with the standard library then
        SerialisationError = OSError  # noqa: N806 (a stand-in for the class)

    def close_quietly(value) -> None:
        if isinstance(value, zipfile.ZipFile | types.GeneratorType):
            with contextlib.suppress(Exception):
                value.close()  # fails again on a full disk, but marks it closed

    try:
        save(path)
    except BaseException as exc:
        frame = exc.__traceback__
        while frame is not None:
            for value in list(frame.tb_frame.f_locals.values()):
                close_quietly(value)
                for attribute in list(getattr(value, "__dict__", {}).values()):
                    close_quietly(attribute)  # a writer's open stream (WorksheetWriter.xf)
            frame = frame.tb_next
        if isinstance(exc, SerialisationError):  # "IO_ENOSPC", "IO_EFBIG", …
            code = getattr(errno, str(exc).removeprefix("IO_"), errno.EIO)
            raise OSError(code, os.strerror(code)) from None  # callers name the file
        raise


def stored_cells(ws, shortcuts: bool | None = None) -> Iterator[Cell]:
    """The cells a worksheet holds (not the empty ones inside its used range)."""
    if openpyxl_shortcuts(shortcuts):
        yield from list(ws._cells.values())
        return
    for row in ws.iter_rows():
        for cell in row:
            if cell.value is not None or cell.has_style:
                yield cell


def copy_style(source: Cell, target: Cell, shortcuts: bool | None = None) -> None:
    """Give `target` the style of `source`. Setting style attributes hashes the whole style
    each time (~10 µs a cell); copying the style record, as openpyxl's own copy_worksheet
    does, keeps a 512×512 block to a fraction of a second."""
    if openpyxl_shortcuts(shortcuts):
        target._style = source._style.__copy__()
        return
    target.font, target.fill = copy(source.font), copy(source.fill)
    target.border, target.alignment = copy(source.border), copy(source.alignment)
    target.number_format, target.protection = source.number_format, copy(source.protection)


def merge_row(ws, row: int, left: int, right: int, shortcuts: bool | None = None) -> None:
    """Merge columns left … right of one row. openpyxl's `merge_cells` makes a MergedCell
    object for every covered cell (a title over a 1,536-column block: 1,535 of them), to
    give the edge cells the first cell's border; with no border on the first cell those
    objects hold nothing, are written as bare `<c r="…"/>` and are made again on load from
    the merge itself. So only the merge and its last cell (the sheet's extent, which the
    column widths and the print area read) are recorded then."""
    first = ws.cell(row, left)
    if not openpyxl_shortcuts(shortcuts) or first.has_style and any(
            side is not None and side.style is not None
            for side in (first.border.top, first.border.left, first.border.right,
                         first.border.bottom)):
        ws.merge_cells(start_row=row, start_column=left, end_row=row, end_column=right)
        return
    # into the set itself: MultiCellRange.add first looks for a range holding the new one
    # among all before it (2,692 titles: 3.6 million comparisons); the layout's never overlap
    ws.merged_cells.ranges.add(MergedCellRange(
        ws, f"{get_column_letter(left)}{row}:{get_column_letter(right)}{row}"))
    if right > left:
        ws._cells[row, right] = MergedCell(ws, row, right)


def cell_with_style_id(ws, style_id: int) -> Cell:
    """A cell of `ws`, in no place on it, styled as the workbook's cell style number
    `style_id` (a file's `s` attribute), as openpyxl's reader styles a cell it loads."""
    cell = Cell(ws)
    cell._style = copy(ws.parent._cell_styles[style_id])
    return cell


def set_default_font(wb, font) -> None:
    """Make `font` the workbook's default (style record 0 and the Normal style), which
    every cell without a font of its own, empty cells and column widths are measured in.
    Call on a new workbook, before any cell is styled."""
    from openpyxl.utils.indexed_list import IndexedList
    wb._fonts = IndexedList([font])
    wb._named_styles["Normal"].font = font


def chart_rows(ws) -> list[tuple[int, int]]:
    """(first row, last row), 1-based, of each chart anchored corner to corner on `ws`.
    openpyxl keeps a sheet's charts in `_charts` and a two-cell anchor's top-left corner
    in `_from` (`from` is a Python keyword), neither published."""
    rows = []
    for chart in ws._charts:
        anchor = chart.anchor
        if hasattr(anchor, "_from") and hasattr(anchor, "to"):
            rows.append((anchor._from.row + 1, anchor.to.row + 1))
    return rows
