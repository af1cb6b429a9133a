"""Every command block of the README and docs/ runs as pasted.

One new virtual environment for the run (`python3 -m venv`, then `pip install -e` of this
checkout, as the quick start makes it); each page's blocks run in order, in an empty
folder of their own holding `.venv` (a link to that environment, so `source
.venv/bin/activate` works as written), with the environment active: `bash` blocks with
`bash -e`, `python` blocks as a script. The README's quick start is not run here: its test
command is `.ci/run`'s, and its demo command is the demo block's own.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.doc_blocks import ROOT, RUN, blocks_of, doc_pages

NEEDS = {"soffice": "LibreOffice (apt-get install libreoffice-calc-nogui)",
         "pdfunite": "poppler's pdfunite (apt-get install poppler-utils)"}


def missing_tools() -> list[str]:
    missing = [what for tool, what in NEEDS.items() if shutil.which(tool) is None]
    fonts = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True) \
        if shutil.which("fc-list") else None
    if fonts is None or not fonts.stdout.strip():
        missing.append("a Chinese font (apt-get install fonts-noto-cjk)")
    return missing


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory) -> Path:
    """A new environment with this checkout installed, as a user's quick start makes it."""
    venv = tmp_path_factory.mktemp("doc-venv") / ".venv"
    python3 = shutil.which("python3") or sys.executable
    subprocess.run([python3, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-e", str(ROOT)], check=True,
                   env=_clean_env())
    return venv


def _clean_env() -> dict[str, str]:
    """The caller's environment without what points Python at this checkout or another
    environment."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _active(venv: Path) -> dict[str, str]:
    env = _clean_env()
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               COLUMNS="100")
    return env


def run_block(block, folder: Path, venv: Path, number: int) -> str | None:
    """None when the block ran cleanly, else what went wrong."""
    if block.language == "bash":
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    else:
        script = folder / f"block_{number}.py"
        script.write_text(block.text, encoding="utf-8")
        command = [str(venv / "bin" / "python"), script.name]
    ran = subprocess.run(command, cwd=folder, env=_active(venv), capture_output=True,
                         text=True, timeout=900)
    if ran.returncode == 0:
        return None
    return (f"{block.page.relative_to(ROOT)}:{block.line} ({block.language}) exit "
            f"{ran.returncode}\n{block.text}--- stdout\n{ran.stdout[-2000:]}"
            f"--- stderr\n{ran.stderr[-2000:]}")


@pytest.mark.slow
def test_every_command_block_runs_as_pasted(fresh_venv, tmp_path):
    if missing_tools():
        pytest.skip("the docs print PDFs: missing " + ", ".join(missing_tools()))
    failures, timings = [], []
    for page in doc_pages():
        blocks = [b for b in blocks_of(page) if b.language in RUN
                  and not (page.name == "README.md" and b.section == "Quick start")]
        if not blocks:
            continue
        folder = tmp_path / page.relative_to(ROOT).with_suffix("").as_posix().replace("/", "_")
        folder.mkdir()
        (folder / ".venv").symlink_to(fresh_venv)
        start = time.monotonic()
        for number, block in enumerate(blocks, 1):
            problem = run_block(block, folder, fresh_venv, number)
            if problem:
                failures.append(problem)
                break  # later blocks of a page build on the earlier ones
        timings.append(f"{page.relative_to(ROOT)} {time.monotonic() - start:.0f} s")
    print("\n".join(timings))
    assert not failures, "\n\n".join(failures)
