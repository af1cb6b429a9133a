"""What a hostile user tries, refused as the user meets it: the command line in a process of
its own, its address space capped at 1 GB (`prlimit --as`) and its time at 60 s, exits 2
with one line on stderr and no traceback, and leaves no file behind nor replaces one. An
.npz whose arrays unpack to gigabytes or whose headers lie, config.json values of the wrong
type or beyond reason in every family, a step count no sheet holds, a class folder whose
manifest points outside it, and a size flag given by hand against a checkpoint's config."""

import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from test_hostile_checkpoints import HEADS, D

from workbook_builder.models.families import DISTILBERT

ADDRESS_SPACE = 1_000_000_000  # bytes, as `prlimit --as` takes them
TIMEOUT_S = 60
PRLIMIT = shutil.which("prlimit")
requires_prlimit = pytest.mark.skipif(PRLIMIT is None, reason="prlimit (util-linux) is "
                                                              "not installed")
pytestmark = requires_prlimit


def capped(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The command line as a user runs it, in a new process within 1 GB and 60 s."""
    return subprocess.run([PRLIMIT, f"--as={ADDRESS_SPACE}", sys.executable, "-m",
                           "workbook_builder", *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT_S, cwd=cwd)


def refused(done: subprocess.CompletedProcess) -> str:
    """The one stderr line of a refusal: exit 2, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def files_in(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused_build(tmp_path: Path, kind: str, *args) -> str:
    """`build KIND ARGS -o out.xlsx` refused, nothing written or changed under tmp_path."""
    before = files_in(tmp_path)
    line = refused(capped("build", kind, *args, "-o", tmp_path / "out.xlsx"))
    assert files_in(tmp_path) == before
    return line


# -- .npz: bounded before anything is unpacked ----------------------------------------------

def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


def bomb(path: Path) -> Path:
    """A few MB of .npz whose one array, zeros, unpacks to 1.2 GB (written in chunks: the
    test never holds it)."""
    shape = (12_000, 12_500)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open(DISTILBERT.anchor + ".npy", "w", force_zip64=True) as member:
            member.write(npy_header(shape))
            chunk, left = bytes(2**24), shape[0] * shape[1] * 8
            while left:
                part = chunk[:min(left, len(chunk))]
                member.write(part)
                left -= len(part)
    return path


def lying_header(path: Path) -> Path:
    """An .npy header claiming 20,000×15,000 float64 (2.4 GB) over 64 bytes."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(DISTILBERT.anchor + ".npy", npy_header((20_000, 15_000)) + bytes(64))
    return path


def not_an_array(path: Path) -> Path:
    """np.savez's arrays and one member that is not a .npy (np.load gives it as bytes)."""
    np.savez(path, **{DISTILBERT.anchor: np.zeros((D, D))})
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("notes.txt", b"not an array")
    return path


@pytest.mark.parametrize("make,says", [
    (bomb, "its arrays unpack to 1,144 MB from"),
    (lying_header, "needs 2,400,000,000 bytes, the member holds 64"),
    (not_an_array, "notes.txt: not a NumPy array (.npy)"),
], ids=["unpacks-to-1.2GB", "header-lies", "not-an-array"])
def test_an_npz_is_bounded_before_it_is_unpacked(tmp_path, make, says):
    path = make(tmp_path / "weights.npz")
    line = refused_build(tmp_path, "encoder-block", "--checkpoint", path, "--heads", HEADS)
    assert says in line, line
