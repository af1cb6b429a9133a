"""Gnumeric as a third, independent spreadsheet engine: `ssconvert --recalc`.

ssconvert ignores the file's request for a full recalculation on load (`fullCalcOnLoad`):
without `--recalc` it writes the cached values back unchanged, stale or not. With it, every
cell is recomputed before the file is written. As for LibreOffice, each run gets a private
home folder (ssconvert keeps a settings cache there), and `check` reads the recalculated
copy from a private temporary folder.
"""

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from workbook_builder.engines.cached_values import trimmed_copy
from workbook_builder.engines.formulas_engine import CellValues, check_application_input
from workbook_builder.engines.libreoffice import read_values, require_installed, run_program
from workbook_builder.errors import UserError

INSTALL_HINT = "apt-get install gnumeric"
TIMEOUT_S = 600
# read as xlsx whatever the file is called, write Excel 2010's xlsx (what openpyxl reads)
_IMPORTER, _EXPORTER = "Gnumeric_Excel:xlsx", "Gnumeric_Excel:xlsx2"


def ssconvert_path() -> str | None:
    return shutil.which("ssconvert")


def recalculate(path: Path, target: Path) -> Path:
    """Open `path` in Gnumeric, recalculate every cell and save it as xlsx at `target`."""
    ssconvert = require_installed(ssconvert_path(), "Gnumeric", INSTALL_HINT)
    Path(target).unlink(missing_ok=True)  # so a run that writes nothing is seen to fail
    with tempfile.TemporaryDirectory(prefix="attnsheets-gnumeric-") as home:
        env = {**os.environ, "HOME": home, "XDG_CONFIG_HOME": f"{home}/config",
               "XDG_CACHE_HOME": f"{home}/cache", "XDG_DATA_HOME": f"{home}/data",
               "GSETTINGS_BACKEND": "memory"}
        command = [ssconvert, "--recalc", "-I", _IMPORTER, "-T", _EXPORTER,
                   str(Path(path).absolute()), str(Path(target).absolute())]
        done = run_program(command, "Gnumeric", TIMEOUT_S, env=env, cwd=home)
    if done.returncode != 0 or not target.exists():  # a file it cannot load: exit 0, no file
        detail = [line for line in (done.stderr or done.stdout).strip().splitlines()
                  if "fail" in line.lower() or line.startswith("E ")]
        raise UserError(f"Gnumeric could not convert {path}"
                        + (f" ({detail[-1].strip()})" if detail else ""))
    return target


def recalculate_many(paths: list[Path], outdir: Path) -> list[Path]:
    """`recalculate` for several files into `outdir` (same names), one process per file,
    as many at once as there are cores."""
    targets = [outdir / Path(path).name for path in paths]
    if len(set(targets)) != len(targets):
        raise ValueError("two files of the same name would overwrite each other")
    from concurrent.futures import ThreadPoolExecutor  # only here: every command imports us

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(recalculate, map(Path, paths), targets))


def evaluate_with_gnumeric(path: Path, wb=None,
                           read: Callable[[Path], CellValues] | None = None) -> CellValues:
    """Every cell value after Gnumeric recalculated the workbook, as `read` (default
    `read_values`) reads the saved copy. Given the workbook loaded, its formulas are
    bounded before Gnumeric starts (`check_application_input`)."""
    if wb is not None:
        check_application_input(wb, Path(path).name)
    with tempfile.TemporaryDirectory(prefix="attnsheets-out-") as outdir:
        trimmed = trimmed_copy(Path(path), Path(outdir) / "trimmed.xlsx")
        return (read or read_values)(recalculate(trimmed,
                                                 Path(outdir) / "recalculated.xlsx"))
