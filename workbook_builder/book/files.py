"""Workbooks on disk: open one a user named, refuse to overwrite, save atomically with every
formula's value stored beside it, and build-and-save in one call.

Every file is written beside its target and moved into place in one rename, so a path
holds either what it held or the whole new file. Which one, when a command is interrupted,
is told by the record of writes (`writes_since`): each path a command set out to write
(`check_writable`, `expect_writes`) with the file it held then, and each file moved into
place, named before the rename; the path is read again when the command stops."""

import contextlib
import csv
import os
import re
import secrets
import shutil
import signal
import threading
import time
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.book.reading import check_zip_directory, check_zip_parts, regular_file
from workbook_builder.book.sheet_xml import (
    finish_workbook,
    load_with_constant_blocks,
    place_constant_blocks,
)
from workbook_builder.book.workbook import ABOUT, BookSpec, book_spec, build_workbook
from workbook_builder.engines.cached_values import sheet_parts
from workbook_builder.engines.formulas_engine import CellValues, FormulasModel
from workbook_builder.engines.libreoffice import (
    CJK_FONT_HINT,
    INSTALL_HINT,
    convert,
    has_chinese_font,
    read_values,
    require_installed,
    soffice_path,
)
from workbook_builder.errors import UserError
from workbook_builder.sheet.cells import is_formula_cell
from workbook_builder.sheet.kind import Kind, complete_inputs, make_params
from workbook_builder.sheet.limits import (
    EXCEL_COLS,
    EXCEL_ROWS,
    MAX_CELL_XML_BYTES,
    MAX_WORKBOOK_BYTES,
    check_grid,
    check_names,
    check_results_finite,
    named_extent,
)
from workbook_builder.sheet.refs import parse_range
from workbook_builder.sheet.request import BuildRequest
from workbook_builder.xlsx.of_openpyxl import (
    load_workbook,
    openpyxl_shortcuts,
    save_workbook,
    stored_cells,
)


@dataclass
class BuiltBook:
    """A workbook just written: the file, the workbook in memory, what it records, and the
    values the `formulas` engine computed for it (stored in the file beside each formula)."""

    path: Path
    workbook: Workbook
    spec: BookSpec
    values: CellValues | None
    formula_cells: int


def parse_tokens(text: str | None) -> list[str] | None:
    """"我,爱,AI" -> labels (None when not given)."""
    if text is None:
        return None
    tokens = [t.strip() for t in text.split(",")]
    if not all(tokens):
        raise UserError("--tokens has an empty label")
    return tokens


def resolve_params(kind: type[Kind], explicit: dict[str, Any],
                   given: dict[str, np.ndarray], tokens: list[str] | None):
    """Defaults, then sizes implied by given inputs and tokens, then explicit values."""
    values: dict[str, Any] = {}
    if tokens is not None:
        values.update(kind.params_from_tokens(tokens))
    values.update(kind.infer_params(given))
    values.update(explicit)
    return make_params(kind, kind.resolve_tokens(values, tokens))


def write_workbook(request: BuildRequest, path: Path, *,
                   given: dict[str, np.ndarray] | None = None, seed: int = 0,
                   force: bool = False) -> BuiltBook:
    """Build the request's workbook and save it atomically; the evaluation that stores the
    cached values is the only one, and its values come back for whoever checks the file
    next. Inputs not `given` are drawn from `seed`; inputs whose results overflow are
    refused before any work (`check_results_finite`; the request's limits were checked
    when it was made, `plan_build`)."""
    check_writable(path, force)
    inputs = complete_inputs(request.kind, request.params, given or {}, seed)
    check_results_finite(request, inputs)
    wb = build_workbook(request, inputs)
    values = save_atomic(wb, path, force=force)
    return BuiltBook(path, wb, book_spec(request), values, count_formula_cells(wb))


def count_formula_cells(wb: Workbook) -> int:
    """Cells computed by a formula (an array formula counts every cell it fills)."""
    count = 0
    for ws in wb.worksheets:
        for cell in stored_cells(ws):
            if isinstance(cell.value, ArrayFormula):
                top, left, bottom, right = parse_range(cell.value.ref)
                count += (bottom - top + 1) * (right - left + 1)
            elif is_formula_cell(cell):
                count += 1
    return count


def open_workbook(path: Path, data_only: bool = False, array_blocks: bool = False) -> Workbook:
    """Open a workbook the user named, or fail with one line saying why. With
    `array_blocks`, its large named blocks of plain numbers are read as arrays
    (`load_with_constant_blocks`), not as cells."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a workbook")
    regular_file(path, "workbook")  # a pipe would wait forever, /dev/zero never end
    if not zipfile.is_zipfile(path):
        raise UserError(f"{path} is not an .xlsx workbook")
    check_size(path, array_blocks)
    try:
        wb = load_with_constant_blocks(path, data_only) if array_blocks else \
            load_workbook(path, data_only=data_only)
    except Exception as exc:  # openpyxl raises many types on damaged files
        raise UserError(f"{path} is not a readable .xlsx workbook ({exc})") from None
    check_grid(wb, path)
    check_names(wb, path)
    return wb


def saved_values(path: Path) -> CellValues:
    """The values a spreadsheet application saved in its recalculated copy at `path`,
    within the part of each sheet the defined names cover: every formula's and every
    cell's around them, but not a named block of plain numbers (an input the application
    left as it was), read in bulk and left out as the `formulas` engine leaves out the
    input blocks: callers look up formula cells. The whole MiniLM's copy holds 22 M
    such numbers, which `read_values` makes a dict entry of each (6.4 GB)."""
    if not openpyxl_shortcuts():
        return read_values(path)
    wb = load_with_constant_blocks(path, data_only=True)
    rows, cols = named_extent(wb) or (EXCEL_ROWS, EXCEL_COLS)
    return {(ws.title.upper(), cell.row, cell.column): cell.value for ws in wb.worksheets
            for cell in stored_cells(ws)
            if cell.value is not None and cell.row <= rows and cell.column <= cols}


def check_size(path: Path, array_blocks: bool = False) -> None:
    """Refuse, before reading it, a workbook whose parts unpack to more than
    MAX_WORKBOOK_BYTES, or (without `array_blocks`, or outside its sheets, which
    `array_blocks` reads as a stream) to more than MAX_CELL_XML_BYTES: a zip's directory
    states each part's size. Also refused: a zip listing more parts than any workbook has
    (`check_zip_directory`: checked before it is parsed)."""
    try:
        check_zip_directory(path)
        with zipfile.ZipFile(path) as book:
            check_zip_parts(book, path)
            sizes = {info.filename: info.file_size for info in book.infolist()}
            _refuse_unpacked(path, sum(sizes.values()), MAX_WORKBOOK_BYTES)
            sheets = set()
            if array_blocks:  # the parts naming the sheets' parts, read first
                _refuse_unpacked(path, sizes.get(BOOK_PART, 0) + sizes.get(BOOK_RELS, 0),
                                 MAX_CELL_XML_BYTES)
                sheets = set(sheet_parts(book).values())
            _refuse_unpacked(path, sum(size for name, size in sizes.items()
                                       if name not in sheets), MAX_CELL_XML_BYTES)
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise UserError(f"{path} is not a readable .xlsx workbook ({exc})") from None


BOOK_PART, BOOK_RELS = "xl/workbook.xml", "xl/_rels/workbook.xml.rels"


def _refuse_unpacked(path: Path, size: int, limit: int) -> None:
    if size > limit:
        raise UserError(f"{path} unpacks to {size / 2**20:,.0f} MB, more than the "
                        f"{limit // 2**20:,} MB attnsheets reads; it is not a "
                        f"workbook attnsheets wrote")


def check_writable(path: Path, force: bool, suffix: str = ".xlsx") -> None:
    """Refuse to replace a file unless asked, and name a missing folder or a wrong ending;
    the path is recorded as one this command writes (`writes_since`)."""
    expect_writes([path])
    if path.suffix.lower() != suffix:
        raise UserError(f"{path}: the output name must end in {suffix}")
    if not path.parent.exists():
        raise UserError(f"{path.parent}: no such folder (create it first)")
    if path.is_dir():  # --force replaces files, never a folder: not suggested
        raise UserError(f"{path} is a folder; name a file to write")
    if path.exists() and not force:
        raise UserError(f"{path} already exists; pass --force to replace it")


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """An OS error while writing `path` (through a temporary file beside it) names `path`,
    not the temporary file."""
    try:
        yield
    except OSError as exc:
        raise UserError(f"{path}: cannot write it ({exc.strerror or exc})") from None


def save_atomic(wb: Workbook, path: Path, with_values: bool = True,
                force: bool = False) -> CellValues | None:
    """Write beside the target and move it into place, so a failure never leaves a partial
    file; an existing file is replaced only with `force` (see `move_into_place`).
    With `with_values`, every formula cell also carries the value the `formulas` engine
    computes from the workbook's own formulas, for previews and `data_only` readers; those
    values are returned."""
    wb.calculation.fullCalcOnLoad = True  # spreadsheet applications recompute on open
    with writing(path), temp_beside(path, ".attnsheets-", ".xlsx") as saved, \
            temp_beside(path, ".attnsheets-", ".xlsx") as finished:
        placed = place_constant_blocks(wb)  # before openpyxl writes the style table
        save_workbook(wb, saved, compressed=False)  # parts rewritten below, compressed once
        values = None
        if with_values:
            # the workbook in memory is what was just saved: no need to read it back
            values = FormulasModel(wb, path.name).evaluate(input_blocks=False)
        finish_workbook(saved, finished, placed, values)
        move_into_place(finished, path, force)
        return values


def export_pdf(path: Path, output: Path, force: bool = False, lang: str = "en") -> None:
    """A printable PDF of every sheet (through LibreOffice), written atomically; an
    existing file is replaced only with `force`. A Chinese workbook needs a Chinese font:
    without one LibreOffice prints boxes and still exits 0."""
    require_installed(soffice_path(), "LibreOffice", INSTALL_HINT)
    if lang == "zh" and not has_chinese_font():
        raise UserError(f"no Chinese font is installed, so the handout would print boxes "
                        f"({CJK_FONT_HINT})")
    with writing(output), temp_beside(output, ".attnsheets-pdf-", folder=True) as outdir:
        staged = outdir / "staged"
        staged.mkdir()
        pdf = convert(handout_copy(path, staged / path.name), "pdf", outdir)
        move_into_place(pdf, output, force)


def handout_copy(path: Path, target: Path) -> Path:
    """A copy of the workbook with its About sheet hidden, as LibreOffice prints every
    visible sheet: the handout holds the sheets a student reads, not the record of what
    the file is. The copy is the file's own bytes but for that one attribute."""
    about = re.compile(rb'<sheet\b[^>]*\bname="' + ABOUT.encode() + rb'"[^>]*/>')
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w",
                                                         zipfile.ZIP_DEFLATED) as copy:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "xl/workbook.xml":
                data = about.sub(_hidden, data)
            copy.writestr(item, data)
    return target


def _hidden(sheet: re.Match) -> bytes:
    """A workbook.xml <sheet …/> element with state="hidden"."""
    element = re.sub(rb'\sstate="[^"]*"', b"", sheet.group(0))
    return element[:-2].rstrip() + b' state="hidden"/>'


@contextlib.contextmanager
def temp_beside(path: Path, prefix: str, suffix: str = "",
                folder: bool = False) -> Iterator[Path]:
    """An empty temporary file (or a private folder) in `path`'s folder, a file with the
    mode the umask gives, as `path` would get (mkstemp's would be 0600); removed at the
    end, whatever happens (SIGTERM included), unless moved away. The name is chosen, and
    held for the cleanup, before it exists: an interrupt between the two leaves nothing."""
    tmp = None
    try:
        while True:
            tmp = path.parent / f"{prefix}{secrets.token_hex(6)}{suffix}"
            try:
                if folder:
                    tmp.mkdir(mode=0o700)
                else:
                    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                break
            except FileExistsError:
                tmp = None  # not ours: never removed
        yield tmp
    finally:
        if tmp is not None and folder:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            tmp.unlink(missing_ok=True)


def move_into_place(tmp: Path, path: Path, force: bool) -> None:
    """Rename `tmp` to `path`. Without `force` the name is claimed exclusively (a hard
    link fails if `path` exists), so of two runs writing one path only one succeeds.
    The file is recorded before it moves (`writes_since`: wherever an interrupt lands,
    `path` holds it or not)."""
    _record_move(tmp, path)
    if force:
        os.replace(tmp, path)
        return
    taken = f"{path} already exists; pass --force to replace it"
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise UserError(taken) from None
    except OSError:  # no hard links on this file system: claim the name, then replace it
        # an interrupt between the two would leave an empty file: it waits until both ran
        with _signals_held():
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                raise UserError(taken) from None
            try:
                os.replace(tmp, path)
            except OSError:
                path.unlink(missing_ok=True)  # the empty file claiming the name
                raise
        return
    tmp.unlink()


# the signals that stop a command (the CLI raises them where the program is)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """A stop signal arriving in the block is acted on when the block ends, as its handler
    would have (only the main thread runs Python's signal handlers, so only it holds)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    before = {}
    try:
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) is not None:  # None: set outside Python, kept
                before[signum] = signal.signal(signum, lambda got, _: arrived.append(got))
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        if arrived:
            handler = before[arrived[0]]
            if callable(handler):
                handler(arrived[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(arrived[0])


# the record of writes: path -> (when first named, the file it held then, the file moved
# in, if one was); at most MAX_WRITES_RECORDED, the oldest forgotten first (a program
# writing for days through the library keeps no more)
MAX_WRITES_RECORDED = 100_000
Identity = tuple[int, int] | None  # (device, inode) of the file a path holds; None: none
_writes_lock = threading.Lock()
_writes: dict[Path, tuple[float, Identity, Identity]] = {}


def _identity(path: Path) -> Identity:
    try:
        found = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def expect_writes(paths: Iterable[Path]) -> None:
    """Record `paths` as ones this command writes (by itself or by its worker processes),
    each with the file it holds now; a path named again before it is written keeps what
    it held when first named."""
    for path in paths:
        path = Path(path)
        held = _identity(path)
        with _writes_lock:
            if path not in _writes or _writes[path][2] is not None:  # not named, or written
                _writes.pop(path, None)  # (re)named last: the oldest are forgotten first
                _writes[path] = (time.monotonic(), held, None)
                if len(_writes) > MAX_WRITES_RECORDED:
                    del _writes[next(iter(_writes))]


def _record_move(tmp: Path, path: Path) -> None:
    expect_writes([path])
    moved = _identity(tmp)
    with _writes_lock:
        since, held, _ = _writes.get(path, (time.monotonic(), None, None))
        _writes[path] = (since, held, moved)


def writes_since(start: float) -> tuple[list[Path], list[Path]]:
    """Of the paths recorded since `start` (time.monotonic()), those that now hold the
    whole new file, and those that hold what they held (or nothing, as before). A path
    holds the file moved into it, or, written by a worker process, another file than the
    one it held (every write is one rename, so a file there is a whole one)."""
    with _writes_lock:
        recorded = [(path, held, moved) for path, (since, held, moved) in _writes.items()
                    if since >= start]
    written, untouched = [], []
    for path, held, moved in recorded:
        now = _identity(path)
        if moved is not None:
            new = now == moved
        else:  # written by a worker process, if at all
            new = now not in (None, held)
        if new:
            written.append(path)
        elif now == held and not _is_temporary(path):
            untouched.append(path)
    return written, untouched


def _is_temporary(path: Path) -> bool:
    """A file of ours in a folder of ours (names starting with .attnsheets- or
    .NAME.attnsheets-), staged before it moves to where the user asked."""
    return any(".attnsheets-" in part for part in path.parts)


def forget_writes(before: float) -> None:
    """Forget the paths recorded before `before` (time.monotonic())."""
    with _writes_lock:
        for path in [p for p, (since, _, _) in _writes.items() if since < before]:
            del _writes[path]


def csv_text(value: Any) -> Any:
    """A value safe to open in a spreadsheet: text starting with = + - @, a tab or a
    carriage return gets a leading apostrophe, so it is never read as a formula (OWASP's
    advice on CSV injection). Numbers stay numbers."""
    if isinstance(value, str) and value.startswith(("=", "+", "-", "@", "\t", "\r")):
        return "'" + value
    return value


def write_csv(path: Path, header: list[str], rows: list[list], force: bool) -> None:
    """A CSV file written atomically, every cell through `csv_text`."""
    with writing(path), temp_beside(path, ".attnsheets-", ".csv") as tmp:
        with tmp.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow([csv_text(h) for h in header])
            writer.writerows([csv_text(v) for v in row] for row in rows)
        move_into_place(tmp, path, force)
