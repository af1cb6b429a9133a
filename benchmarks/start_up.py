"""Times how long `attnsheets --help`, `list` and `--version` take to start and finish;
prints a table and writes it to benchmarks/start_up.md.

    .venv/bin/python benchmarks/start_up.py [--runs 10] [--compare DIR] [--out FILE]

Each command runs as a user runs it: a new process (`python -m workbook_builder`), the
modules compiled to bytecode first, as an installed package has them. Wall seconds and CPU
seconds (user + system, from wait4) are medians of --runs runs. With --compare DIR (another
checkout of the project, e.g. an older commit's tree; its modules are compiled to bytecode
too), both checkouts run each command in turn, this one then DIR's, so a machine that is
busier for a while slows both alike; the table says whether their outputs are identical.
The machine's load average (`uptime`) before and after is printed with the table.
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (("--help",), ("list",), ("--version",))
TARGET_SECONDS = 0.5


def compile_bytecode(tree: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    *(str(tree / package) for package in ("workbook_builder", "sheets",
                                                          "reference"))],
                   env=env, check=True)


def run_once(tree: Path, args: tuple[str, ...]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, stdout) of `attnsheets ARGS` with `tree`'s package."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "workbook_builder", *args], cwd=tree,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)  # the child's own CPU time
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"attnsheets {' '.join(args)} failed ({process.returncode}) in "
                           f"{tree}: {out.decode()[-300:]}")
    return wall, usage.ru_utime + usage.ru_stime, out.decode()


def measure(trees: list[Path], runs: int) -> list[dict]:
    """Per command and tree: median wall and CPU seconds, and the output of the last run."""
    results = {(args, tree): {"wall": [], "cpu": [], "out": None}
               for args in COMMANDS for tree in trees}
    for _ in range(runs):
        for args in COMMANDS:
            for tree in trees:  # in turn
                wall, cpu, out = run_once(tree, args)
                cell = results[args, tree]
                cell["wall"].append(wall)
                cell["cpu"].append(cpu)
                cell["out"] = out
    rows = []
    for args in COMMANDS:
        first = results[args, trees[0]]["out"]
        for tree in trees:
            cell = results[args, tree]
            rows.append({"command": " ".join(args), "tree": tree,
                         "wall": statistics.median(cell["wall"]),
                         "cpu": statistics.median(cell["cpu"]),
                         "same": cell["out"] == first})
    return rows


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def table(rows: list[dict], runs: int, trees: list[Path], loads: tuple[str, str]) -> str:
    lines = [f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; medians of {runs} runs"
             f"{', taking turns between the checkouts' if len(trees) > 1 else ''}; modules "
             f"compiled to bytecode first, as installed; load average (1, 5, 15 min) "
             f"{loads[0]} before, {loads[1]} after; {time.strftime('%Y-%m-%d %H:%M')}.", "",
             "| command | checkout | wall s | CPU s | output as this checkout's | target |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        where = "this" if row["tree"] == ROOT else str(row["tree"])
        same = "–" if row["tree"] == ROOT else ("identical" if row["same"] else "DIFFERENT")
        lines.append(f"| attnsheets {row['command']} | {where} | {row['wall']:.2f} | "
                     f"{row['cpu']:.2f} | {same} | ≤ {TARGET_SECONDS} s |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="another checkout of the project, timed in turn with this one")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "start_up.md")
    args = parser.parse_args()
    trees = [ROOT] + ([args.compare.resolve()] if args.compare else [])
    for tree in trees:
        compile_bytecode(tree)
    before = load()
    rows = measure(trees, args.runs)
    text = table(rows, args.runs, trees, (before, load()))
    print(text)
    args.out.write_text("# Start-up times\n\n" + text + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
