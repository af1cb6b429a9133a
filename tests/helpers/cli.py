"""The command line as the tests run it: in this process (`cli`: `main(argv)`, its exit code
and what it printed) and as a user runs it, a new process (`run_cli`); a usage error's one
line, a build refused in one, and a refusal that leaves its folder as it was."""

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from workbook_builder.cli.app import main

# a hostile input's command runs within these bounds (`capped`)
ADDRESS_SPACE = 1_000_000_000  # bytes, as `prlimit --as` takes them
TIMEOUT_S = 60
PRLIMIT = shutil.which("prlimit")
requires_prlimit = pytest.mark.skipif(PRLIMIT is None, reason="prlimit (util-linux) is "
                                                              "not installed")

# the start of `build attention` into {tmp}/a.xlsx, for the tables of arguments refused
BUILD_ATTENTION = ["build", "attention", "-o", "{tmp}/a.xlsx"]


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def cli(*args) -> Ran:
    """The command line in this process: `main(argv)`, its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Ran(code, out.getvalue(), err.getvalue())


# a fresh Python running the CLI as its child, printing the child's peak resident memory
# (ru_maxrss, KB on Linux) as the last line of stderr
PEAK_MEMORY_PROBE = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stdout.write(done.stdout); sys.stderr.write(done.stderr); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(done.returncode)")


def peak_memory(*args) -> tuple[subprocess.CompletedProcess, float]:
    """Run the CLI in a child of a fresh Python and return it with the child's peak
    resident memory in MB (ru_maxrss of the waited-for children, in KB on Linux)."""
    done = subprocess.run([sys.executable, "-c", PEAK_MEMORY_PROBE, sys.executable, "-m",
                           "workbook_builder", *map(str, args)],
                          capture_output=True, text=True, timeout=600)
    *stderr, peak_kb = done.stderr.strip().splitlines()
    done.stderr = "\n".join(stderr) + ("\n" if stderr else "")
    return done, int(peak_kb) / 1024


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a new process, text output."""
    return subprocess.run([sys.executable, "-m", "workbook_builder", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def one_line_error(result) -> str:
    """The single stderr line of a usage error (exit 2, no traceback)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def start(args, tmp_path, program=("-m", "workbook_builder")) -> tuple[subprocess.Popen, Path]:
    """The CLI in a new process whose temporary folder is a private one, to look into."""
    private = tmp_path / "tmp"
    private.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(private)}
    return subprocess.Popen([sys.executable, *map(str, program), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=Path(__file__).resolve().parents[2],
                            # as from a terminal, whatever the test runner ignores
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
                            ), private


def terminate_once(process: subprocess.Popen, seen,
                   signum: int = signal.SIGTERM) -> tuple[int, str]:
    """`signum` as soon as `seen()` holds (the work is under way); the exit code, stderr."""
    deadline = time.monotonic() + 300
    while not seen() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "finished before it could be interrupted"
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def build_refused(kind: str, tmp_path: Path, *args) -> str:
    """The one line `build kind … args` prints refusing them; no workbook is left behind."""
    out = tmp_path / "refused.xlsx"
    line = one_line_error(cli("build", kind, "-o", out, *args))
    assert not out.exists()
    return line


def refused_writing_nothing(tmp_path: Path, args: list[str]) -> str:
    """The one line the command line prints refusing `args` ({tmp} standing for
    `tmp_path`), which it leaves as it found it."""
    before = sorted(p.name for p in tmp_path.iterdir())
    line = one_line_error(cli(*[a.format(tmp=tmp_path) for a in args]))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return line


def says_contradiction(says: str, line: str) -> bool:
    """Whether `line` refuses a flag as `says` puts it: "--heads 1 contradicts config.json:
    KEY gives V)" (the checkpoint's config.json, wherever its folder is) or "--pre-ln True
    contradicts the checkpoint (BERT's layer gives False)"."""
    flag, _, source = says.partition(" contradicts ")
    return f"{flag} contradicts the checkpoint (" in line and \
        source.removeprefix("the checkpoint (") in line


def capped(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The command line as a user runs it, in a new process within 1 GB and 60 s."""
    return subprocess.run([PRLIMIT, f"--as={ADDRESS_SPACE}", sys.executable, "-m",
                           "workbook_builder", *map(str, args)], capture_output=True,
                          text=True, errors="backslashreplace", timeout=TIMEOUT_S, cwd=cwd)


def refused(done: subprocess.CompletedProcess) -> str:
    """The one stderr line of a refusal: exit 2, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]
