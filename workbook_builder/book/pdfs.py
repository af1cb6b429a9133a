"""`pdf`: printable handouts of many workbooks in one LibreOffice start.

A folder a class was written into (it holds `manifest.csv`) prints its exercises in roster
order, the answer keys left out; any other folder prints its workbooks by name. Each
workbook gets its PDF beside it; `combined` joins them all, in that order, into one file
(with poppler's `pdfunite`) for a single print job.
"""

import csv
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbook_builder.book.files import (
    check_writable,
    handout_copy,
    move_into_place,
    open_workbook,
    temp_beside,
    writing,
)
from workbook_builder.book.workbook import read_spec
from workbook_builder.engines.libreoffice import (
    CJK_FONT_HINT,
    INSTALL_HINT,
    convert_many,
    has_chinese_font,
    require_installed,
    soffice_path,
)
from workbook_builder.errors import UserError

CLASS_MANIFEST = "manifest.csv"  # written by `class` (teaching/classroom.py)
POPPLER_HINT = "apt-get install poppler-utils"


@dataclass(frozen=True)
class Handout:
    workbook: Path
    pdf: Path
    lang: str


def workbooks_in(paths: list[Path]) -> list[Path]:
    """The workbooks named, a folder standing for its exercises in roster order (a class's
    folder) or else its .xlsx files by name; each once, in the order given."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = _class_exercises(path) if (path / CLASS_MANIFEST).is_file() else \
                sorted(p for p in path.glob("*.xlsx") if not p.name.startswith(("~$", ".")))
            if not inside:
                raise UserError(f"{path}: no workbooks (.xlsx) in this folder")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise UserError(f"{path}: no such file or folder")
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return [next(p for p in found if p.resolve() == u) for u in unique]


def _class_exercises(folder: Path) -> list[Path]:
    """The exercise files `manifest.csv` lists, in its (the roster's) order."""
    with open(folder / CLASS_MANIFEST, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "file" not in rows[0]:
        raise UserError(f"{folder / CLASS_MANIFEST}: not a class manifest (no 'file' column)")
    inside = folder.resolve()
    outside = next((row["file"] for row in rows if not row["file"] or
                    not (folder / row["file"]).resolve().is_relative_to(inside)), None)
    if outside is not None:  # its PDF would be written there too
        raise UserError(f"{folder / CLASS_MANIFEST} lists {outside!r}, which is not a file "
                        f"inside the class folder; a class prints its own exercises")
    missing = [row["file"] for row in rows if not (folder / row["file"]).is_file()]
    if missing:
        raise UserError(f"{folder}: {missing[0]} is listed in {CLASS_MANIFEST} but missing"
                        + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return [folder / row["file"] for row in rows]


def plan_handouts(paths: list[Path], output: Path | None = None) -> list[Handout]:
    """Each workbook (only ours: read_spec refuses others) and the PDF it prints to:
    `output` for a single workbook, else the workbook's name with .pdf."""
    books = workbooks_in(paths)
    if output is not None and len(books) > 1:
        raise UserError(f"-o names the PDF of one workbook; these are {len(books)} "
                        f"(each gets its PDF beside it; --combined FILE joins them)")
    handouts = []
    for book in books:
        spec = read_spec(open_workbook(book), book)
        handouts.append(Handout(book, output or book.with_suffix(".pdf"), spec.lang))
    return handouts


def export_pdfs(handouts: list[Handout], force: bool = False, combined: Path | None = None,
                progress: Callable[[int, int], None] | None = None) -> None:
    """Every handout's PDF (and, with `combined`, all of them in one), in one LibreOffice
    start, each written atomically; nothing is replaced without `force`, and every target
    is checked before LibreOffice starts. `progress(done, total)` hears how far it is."""
    require_installed(soffice_path(), "LibreOffice", INSTALL_HINT)
    pdfunite = shutil.which("pdfunite")
    if combined is not None and pdfunite is None:
        raise UserError(f"--combined needs pdfunite, which is not installed ({POPPLER_HINT})")
    if any(h.lang == "zh" for h in handouts) and not has_chinese_font():
        raise UserError(f"no Chinese font is installed, so the handout would print boxes "
                        f"({CJK_FONT_HINT})")
    targets = [h.pdf for h in handouts] + ([combined] if combined is not None else [])
    if len({t.resolve() for t in targets}) < len(targets):
        raise UserError("two workbooks would print to the same PDF; pass them separately")
    for target in targets:
        check_writable(target, force, ".pdf")
    first = targets[0]
    with writing(first), temp_beside(first, ".attnsheets-pdf-", folder=True) as outdir:
        staged = outdir / "staged"
        staged.mkdir()
        # copies named by number alone: two workbooks of one name in different folders
        # stay apart, and a name LibreOffice cannot read (not UTF-8) never reaches it
        copies = [handout_copy(h.workbook, staged / f"{i:05d}.xlsx")
                  for i, h in enumerate(handouts)]
        try:
            pdfs = convert_many(copies, "pdf", outdir, None if progress is None else
                                lambda done: progress(done, len(handouts)))
        except UserError as error:  # named by the user's file, not by its copy
            message = str(error)
            for copy, handout in zip(copies, handouts, strict=True):
                message = message.replace(str(copy), str(handout.workbook))
            raise UserError(message) from None
        if combined is not None:
            joined = outdir / "combined.pdf"
            ran = subprocess.run([pdfunite, *map(str, pdfs), str(joined)],
                                 capture_output=True, text=True, timeout=600)
            if ran.returncode != 0 or not joined.exists():
                raise UserError(f"pdfunite could not join the PDFs "
                                f"({(ran.stderr or ran.stdout).strip()[:200]})")
        for handout, pdf in zip(handouts, pdfs, strict=True):
            _move_across(pdf, handout.pdf, force)
        if combined is not None:
            _move_across(joined, combined, force)


def _move_across(made: Path, target: Path, force: bool) -> None:
    """`made` (in the temporary folder) moved to `target`, atomically in target's folder."""
    if made.parent == target.parent or made.parent.parent == target.parent:
        move_into_place(made, target, force)
        return
    with temp_beside(target, ".attnsheets-pdf-", ".pdf") as tmp:
        shutil.copyfile(made, tmp)
        move_into_place(tmp, target, force)
