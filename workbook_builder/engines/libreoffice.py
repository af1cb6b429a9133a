"""LibreOffice as a second, independent spreadsheet engine, run headless.

It recalculates with a private profile that forces a full recalculation on load, so values
cached in the file are never trusted (engines.md §4: the shipped default keeps them).
"""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from workbook_builder.engines.cached_values import trimmed_copy
from workbook_builder.engines.formulas_engine import CellValues, check_application_input
from workbook_builder.errors import UserError
from workbook_builder.sheet.limits import named_extent
from workbook_builder.xlsx.of_openpyxl import load_workbook

INSTALL_HINT = "apt-get install libreoffice-calc-nogui"
TIMEOUT_S = 600
# LibreOffice (7.4) loads no workbook with a part of more than 2 GiB unpacked: "source file
# could not be loaded" within a second (measured: a sheet of 2,100,025,792 bytes loads, one
# of 2,200,025,792 does not). GPT-2 small's sheet is 7.45 GB.
MOST_PART_BYTES = 2**31 - 1

_RECALC_ALWAYS = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry"
 xmlns:xs="http://www.w3.org/2001/XMLSchema"
 xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode"
 oor:op="fuse"><value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="ODFRecalcMode"
 oor:op="fuse"><value>0</value></prop></item>
</oor:items>
"""


def soffice_path() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


def require_installed(path: str | None, title: str, install: str) -> str:
    """The program's `path`, or a one-line error saying how to install `title`."""
    if path is None:
        raise UserError(f"{title} is not installed ({install}); use --engine formulas instead")
    return path


def run_program(command: list[str], title: str, timeout: float,
                while_running: Callable[[], None] | None = None,
                **options) -> subprocess.CompletedProcess:
    """Run an office program in its own process group and wait for it (calling
    `while_running` about every half second meanwhile); if the wait ends any other way
    (timeout, Ctrl-C, SIGTERM) the whole group is killed first, so no helper process
    outlives us or keeps writing into a temporary folder being removed."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, **options)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                wait = timeout if while_running is None else 0.5
                stdout, stderr = process.communicate(
                    timeout=max(0.01, min(wait, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
                while_running()
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise UserError(f"{title} did not finish within {timeout:g} s") from None
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def refuse_parts_beyond_libreoffice(path: Path, instead: str = "") -> None:
    """Refuse, in one line before LibreOffice starts, a workbook it cannot load: one with a
    part over MOST_PART_BYTES unpacked (`instead`: what to do, after a semicolon)."""
    try:
        with zipfile.ZipFile(path) as book:
            largest = max(book.infolist(), key=lambda info: info.file_size, default=None)
    except (OSError, zipfile.BadZipFile):
        return  # not a zip: the reader, or LibreOffice, says so
    if largest is not None and largest.file_size > MOST_PART_BYTES:
        raise UserError(f"{path}: LibreOffice cannot load it: its part {largest.filename} "
                        f"unpacks to {largest.file_size:,} bytes, and LibreOffice loads no "
                        f"part over 2 GiB ({MOST_PART_BYTES + 1:,} bytes){instead}")


def convert(path: Path, target_format: str, outdir: Path) -> Path:
    """Open `path` in headless LibreOffice (recalculating everything) and save it as
    `target_format` ('xlsx' or 'pdf') in `outdir`; returns the new file."""
    return convert_many([path], target_format, outdir)[0]


def convert_many(paths: list[Path], target_format: str, outdir: Path,
                 progress: Callable[[int], None] | None = None) -> list[Path]:
    """`convert` for several files in one LibreOffice start (start-up dominates);
    `progress` hears how many are done while it runs (their stems must differ)."""
    soffice = require_installed(soffice_path(), "LibreOffice", INSTALL_HINT)
    for path in paths:
        refuse_parts_beyond_libreoffice(path)
    with tempfile.TemporaryDirectory(prefix="attnsheets-lo-") as profile:
        user = Path(profile) / "user"
        user.mkdir()
        (user / "registrymodifications.xcu").write_text(_RECALC_ALWAYS)
        command = [soffice, "--headless", "--norestore", "--nologo", "--nolockcheck",
                   f"-env:UserInstallation={Path(profile).as_uri()}",
                   "--convert-to", target_format, "--outdir", str(outdir),
                   *map(str, paths)]
        results = [outdir / f"{path.stem}.{target_format}" for path in paths]

        def count_done() -> None:
            if progress is not None:
                progress(sum(result.exists() for result in results))

        # its own temporary files (lu….tmp) in the profile too: removed with it, even
        # after a signal stopped it before it could remove them
        done = run_program(command, "LibreOffice", TIMEOUT_S * max(1, len(paths) // 10),
                           count_done, env={**os.environ, "HOME": profile, "TMPDIR": profile})
    for path, result in zip(paths, results, strict=True):
        if not result.exists():  # soffice exits 0 even when it converts nothing
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise UserError(f"LibreOffice could not convert {path}"
                            + (f" ({detail[-1]})" if detail else ""))
    return results


def read_values(path: Path) -> CellValues:
    """The values a spreadsheet application saved in the file, within the part of each
    sheet its defined names cover (`named_extent`): read as a stream, row by row, so a
    stray cell far down a sheet costs nothing."""
    wb = load_workbook(path, data_only=True, read_only=True)
    try:
        rows, cols = named_extent(wb) or (None, None)  # None: the sheets' own extent
        return {(ws.title.upper(), r, c): value for ws in wb.worksheets
                for r, row in enumerate(ws.iter_rows(max_row=rows, max_col=cols,
                                                     values_only=True), start=1)
                for c, value in enumerate(row, start=1) if value is not None}
    finally:
        wb.close()


def evaluate_with_libreoffice(path: Path, wb=None,
                              read: Callable[[Path], CellValues] | None = None) -> CellValues:
    """Every cell value after LibreOffice recalculated the workbook (the part its defined
    names cover: `trimmed_copy`), as `read` (default `read_values`) reads the saved copy.
    Given the workbook loaded, its formulas are bounded before LibreOffice starts
    (`check_application_input`)."""
    refuse_parts_beyond_libreoffice(Path(path), "; check it with --engine formulas")
    if wb is not None:
        check_application_input(wb, Path(path).name)
    with tempfile.TemporaryDirectory(prefix="attnsheets-out-") as outdir:
        inside = Path(outdir) / "trimmed"  # apart from LibreOffice's output, of the same name
        inside.mkdir()
        trimmed = trimmed_copy(Path(path), inside / Path(path).name)
        return (read or read_values)(convert(trimmed, "xlsx", Path(outdir)))


CJK_FONT_HINT = "apt-get install fonts-noto-cjk"


def has_chinese_font() -> bool:
    """Whether fontconfig (which LibreOffice draws its fonts from) has a font covering
    Chinese; True where fc-list itself is missing, since then nothing can be told."""
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        return True
    try:
        done = subprocess.run([fc_list, ":lang=zh", "family"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return bool(done.stdout.strip())
