"""What the test run makes once and every pytest-xdist worker reads: a folder filled by the
first worker to ask (`once_per_run`), and what a command printed beside the files it
wrote (`Demo`)."""

import os
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock


@dataclass
class Demo:
    out: Path
    stdout: str
    books: list[Path]


def once_per_run(tmp_path_factory, name: str, make) -> Path:
    """A folder that `make(folder)` fills once per test run, shared by pytest-xdist's
    workers (the first to arrive makes it, the others wait for it and read it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' base folders share this parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            done.touch()
    return folder
