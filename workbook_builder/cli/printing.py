"""What the commands print: reports and summaries as text lines, and the one place every
line the command line writes passes through (`terminal_output`): while a command runs,
stdout and stderr escape the control characters of whatever reaches them, so a file's name
or a user's text never drives the terminal (an escape sequence could rewrite the screen)."""

import contextlib
import sys
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # imported with the commands that make them
    from workbook_builder.api import ExampleResult, Grade
    from workbook_builder.api import Report as CheckReport


def format_report(report: "CheckReport") -> str:
    lines = [f"{report.path}: kind {report.kind}, layout {report.layout}, "
             f"engine {report.engine}"]
    width = max(len(step.name) for step in report.steps)
    lines.append(f"  {'step':<{width}}  {'cells':>6}  {'max |error|':>11}  "
                 f"{'worst cell':<20}  result")
    for step in report.steps:
        error = "-" if step.max_abs_error is None else f"{step.max_abs_error:.2e}"
        verdict = "pass" if step.passed else "FAIL" + (f" ({step.problem})" if step.problem
                                                       else f" (> {step.tolerance:.0e})")
        lines.append(f"  {step.name:<{width}}  {step.cells:>6}  {error:>11}  "
                     f"{step.worst_cell:<20}  {verdict}")
    failed = [step.name for step in report.steps if not step.passed]
    if failed:
        lines.append(f"  FAILED: {len(failed)} of {len(report.steps)} steps; first: "
                     f"{failed[0]} ({report.seconds:.1f} s)")
    else:
        lines.append(f"  all {len(report.steps)} steps pass ({report.seconds:.1f} s)")
    return "\n".join(map(printable, lines))  # a file's name or text may hold escapes


def format_side_by_side(reports: "list[CheckReport]") -> str:
    """One file checked by several engines: one row per step, one error column each."""
    first = reports[0]
    width = max(len(step.name) for step in first.steps)
    engines = [r.engine for r in reports]
    lines = [f"{first.path}: kind {first.kind}, layout {first.layout}, engines "
             f"{' + '.join(engines)}",
             f"  {'step':<{width}}  {'cells':>6}  "
             + "  ".join(f"{e + ' max|err|':>22}" for e in engines) + "  result"]
    for i, step in enumerate(first.steps):
        row = [r.steps[i] for r in reports]
        errors = []
        for result in row:
            shown = "-" if result.max_abs_error is None else f"{result.max_abs_error:.2e}"
            if result.problem:
                shown = "FAIL"
            elif not result.passed:
                shown += " FAIL"
            errors.append(f"{shown:>22}")
        verdict = "pass" if all(r.passed for r in row) else "FAIL" + "".join(
            f" ({r.engine}: {res.problem or res.worst_cell})"
            for r, res in zip(reports, row, strict=True) if not res.passed)
        lines.append(f"  {step.name:<{width}}  {step.cells:>6}  " + "  ".join(errors)
                     + f"  {verdict}")
    timing = ", ".join(f"{r.engine} {r.seconds:.1f} s" for r in reports)
    passed = all(r.passed for r in reports)
    lines.append(f"  {'all steps pass in every engine' if passed else 'FAILED'} ({timing})")
    return "\n".join(map(printable, lines))


def printable(text: str) -> str:
    """Text from a user's files or their names on one line: control characters, line
    breaks included, shown as escapes (`\\x1b`, `\\n`)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def terminal_text(text: str) -> str:
    """`text` as the terminal may be given it: every line through `printable`, the line
    breaks kept."""
    return "\n".join(map(printable, text.split("\n")))


def json_for_terminal(text: str) -> str:
    """JSON text whose characters `terminal_text` would escape are JSON escapes instead
    (\\u007f, a pair for one beyond U+FFFF), so the terminal is given valid JSON: outside
    its strings JSON holds only printable characters and line breaks."""
    def escaped(c: str) -> str:
        if c.isprintable() or c == "\n":
            return c
        units = c.encode("utf-16-le", "surrogatepass")
        return "".join(f"\\u{int.from_bytes(units[i:i + 2], 'little'):04x}"
                       for i in range(0, len(units), 2))

    return text if text.isprintable() else "".join(map(escaped, text))


class EscapingStream:
    """A text stream writing to `stream` what it is given through `terminal_text`; all else
    (flush, isatty, encoding, fileno, …) is `stream`'s."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(terminal_text(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def unescaped(stream: TextIO) -> TextIO:
    """The stream under an EscapingStream, for the control sequences the program itself
    sends (the progress line's carriage return and erase)."""
    return stream.stream if isinstance(stream, EscapingStream) else stream


_output_lock = threading.Lock()
_commands_printing = 0
_streams_before: tuple[TextIO, TextIO] | None = None


@contextlib.contextmanager
def terminal_output() -> Iterator[None]:
    """sys.stdout and sys.stderr as EscapingStreams for as long as a command runs (commands
    in several threads: until the last ends); the streams before are put back after
    (main() may be called by a host program)."""
    global _commands_printing, _streams_before
    with _output_lock:
        if not _commands_printing:
            _streams_before = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = EscapingStream(sys.stdout), EscapingStream(sys.stderr)
        _commands_printing += 1
    try:
        yield
    finally:
        with _output_lock:
            _commands_printing -= 1
            if not _commands_printing and _streams_before is not None:
                sys.stdout, sys.stderr = _streams_before
                _streams_before = None


def on_disk(written: list[Path], untouched: list[Path]) -> str:
    """What an interrupted command leaves behind, said in a few words: the files it wrote
    in full, and those it was to write that are as they were."""
    said = []
    if written:
        said.append(f"{_some(written)} {'was' if len(written) == 1 else 'were'} written in full")
    if untouched:
        as_it_was = "is as it was" if len(untouched) == 1 else "are as they were"
        said.append(f"{_some(untouched)} {as_it_was}")
    if written:
        return "; ".join(said)
    return "nothing was written" + (f" ({said[0]})" if said else "")


def _some(paths: list[Path], named: int = 3) -> str:
    """"a", "a and b", "a, b and c", "a, b, c and 4 more files"."""
    shown = [printable(str(p)) for p in paths[:named]]
    if len(paths) > named:
        return f"{', '.join(shown)} and {len(paths) - named} more files"
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def _padded(text: str, width: int) -> str:
    """`text` padded to `width` terminal columns (a CJK character takes two)."""
    return text + " " * (width - _columns(text))


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def format_grades(grades: "list[Grade]") -> tuple[list[str], str]:
    """One line per file (and per student of the manifest who returned none), and the
    summary line."""
    ids = [printable(g.student) for g in grades]
    names = [printable(g.name) for g in grades]
    id_width, name_width = max(map(_columns, ids)), max(map(_columns, names))
    lines = []
    for g, student, name in zip(grades, ids, names, strict=True):
        who = _padded(student, id_width) + (f"  {_padded(name, name_width)}" if name_width
                                            else "")
        if not g.returned:
            lines.append(f"{who}  not returned")
        elif g.problem:
            lines.append(f"{who}  NOT GRADED ({printable(g.problem)})")
        else:
            steps = "  ".join(f"{s} {c}/{t}" for s, (c, t) in g.steps.items())
            typed = f"  typed values {g.typed}/{g.total}" if g.typed else ""
            changed = f"  CHANGED: {printable('; '.join(g.changes))}" if g.changes else ""
            changed += "  FORGED: " + ", ".join(f"{reason} {len(cells)}" for reason, cells
                                                in g.forged.items()) if g.forged else ""
            changed += f"  ({printable('; '.join(g.notes))})" if g.notes else ""
            # the score as grades.csv writes it (one decimal), so the two never disagree
            lines.append(f"{who}  {g.correct}/{g.total} "
                         f"({100 * g.correct / g.total:.1f}%)  {steps}{typed}{changed}")
    files = [g for g in grades if g.returned]
    graded = [g for g in files if not g.problem]
    counted = [g for g in graded if not g.same_as]  # each student once
    scores = [100 * g.correct / g.total for g in counted if g.total]
    roster = {g.student for g in grades if g.on_roster}
    summary = f"graded {len(graded)} of {len(files)} files"
    if len(counted) < len(graded):
        summary += f" ({len(counted)} students)"
    if scores:
        import numpy as np  # imported by grading already

        summary += f"; mean score {np.mean(scores):.1f}% over returned files"
    if roster:  # a student who returned nothing (or nothing gradable) scores 0
        missing = sum(not g.returned for g in grades)
        summary += (f"{',' if scores else ';'} {sum(scores) / len(roster):.1f}% over the "
                    f"roster of {len(roster)} ({missing} not returned, counted as 0)")
    if scores:
        summary += f"; full marks {sum(g.correct == g.total for g in counted)}"
    typed = sum(g.typed > 0 for g in graded)
    if typed:
        summary += f"; typed values in {typed} file(s)"
    forged = sum(bool(g.forged) for g in graded)
    if forged:
        summary += f"; forged answers (scored 0) in {forged} file(s)"
    if grades and all(g.verified for g in grades):
        summary += (f"; verified against the manifest, {sum(bool(g.changes) for g in graded)}"
                    f" file(s) differ from it")
    else:
        summary += ("; NOT VERIFIED (no --manifest): student, inputs, steps and tolerance "
                    "are as each file states them")
    return lines, summary


def format_reproduction(source: str, results: "list[ExampleResult]") -> str:
    """Each example's printed numbers beside the live cells, then every one that differs."""
    lines = [f"Tutorial: {source}"]
    differing = []
    for result in results:
        example, report = result.example, result.report
        lines.append(f"\n{result.path} ({example.kind}; workbook check: "
                     f"{'all steps pass' if report.passed else 'FAILED'})")
        if example.note:
            lines.append(f"  {example.note}")
        lines.append(f"  {'step':<11} {'query':<5} {'col':>3} {'printed':>8} "
                     f"{'spreadsheet':>11}  verdict")
        for row in result.rows:
            live = "missing" if row.live is None else f"{row.live:.4f}"
            verdict = "agree" if row.agrees else "DIFFERS"
            lines.append(f"  {row.step:<11} {row.query:<5} {row.column:>3} "
                         f"{row.printed:>8.3f} {live:>11}  {verdict}")
        differing += [(example, row) for row in result.rows if not row.agrees]
    total = sum(len(result.rows) for result in results)
    lines.append(f"\n{len(differing)} of {total} printed numbers differ from what the "
                 f"tutorial's own formula gives:")
    for example, row in differing:
        live = "missing" if row.live is None else f"{row.live:.3f}"
        lines.append(f"  {example.kind} {row.step} row {row.query} col {row.column}: "
                     f"printed {row.printed:.3f}, correct {live}")
    return "\n".join(lines)
