"""The `attnsheets` command line: list, build, check, pdf, demo, reproduce, class, grade."""

import argparse
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

# light modules only: NumPy, openpyxl, the engines and the kinds are imported by the
# commands that use them (through `api`), so `--help` and `list` start at once
from workbook_builder import __version__
from workbook_builder.cli.kind_table import ENGINE_NAMES, kind_summaries
from workbook_builder.cli.params import (
    add_checkpoint_flags,
    add_param_flags,
    checkpoint_args,
    explicit_params,
)
from workbook_builder.cli.printing import (
    format_report,
    format_reproduction,
    format_side_by_side,
    json_for_terminal,
    on_disk,
    printable,
    terminal_output,
)
from workbook_builder.cli.progress import Progress
from workbook_builder.cli.teaching import (
    add_commands as add_teaching_commands,
)
from workbook_builder.cli.teaching import (
    add_edition_flags,
    cmd_class,
    cmd_grade,
    exercise_from_args,
)
from workbook_builder.errors import UserError as AttnsheetsError  # = api.AttnsheetsError

if TYPE_CHECKING:  # imported by the commands that use it (`_api`); declared for the graph
    from workbook_builder import api  # noqa: F401

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
# 128 + SIGINT, 128 + SIGTERM, as shells do (SIGHUP: 129)
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
# SIGTERM, and SIGHUP (its terminal closed): the program unwinds as for Ctrl-C
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                     if hasattr(signal, name))
DEBUG_VARIABLE = "ATTNSHEETS_DEBUG"  # set to 1: an internal error prints its traceback
# Python's cyclic collector looks at the young objects every 700 new ones (its default);
# a command's imports (NumPy, openpyxl, the engine) and workbook make over 100,000 that live
# as long as the command, each looked at again and again: a tenth of a short command's time.
# Every this many instead, while a command runs (memory peaks are unchanged).
YOUNG_OBJECTS_PER_COLLECTION = 100_000


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is so that every `finally` and `with`
    cleans up (temporary files and folders, office programs) as for Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, frame):  # noqa: ARG001 (signal handler)
    for other in (signal.SIGINT, *STOP_SIGNALS):  # cleaning up: a second signal waits
        signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)


_collection_lock = threading.Lock()
_commands_running = 0
_threshold_before: tuple[int, ...] = ()


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """The collector's first threshold at YOUNG_OBJECTS_PER_COLLECTION for as long as a
    command runs (commands in several threads: until the last ends); what it was before is
    put back after (main() may be called by a host program)."""
    global _commands_running, _threshold_before
    with _collection_lock:
        if not _commands_running:
            _threshold_before = gc.get_threshold()
            gc.set_threshold(max(YOUNG_OBJECTS_PER_COLLECTION, _threshold_before[0]),
                             *_threshold_before[1:])
        _commands_running += 1
    try:
        yield
    finally:
        with _collection_lock:
            _commands_running -= 1
            if not _commands_running:
                gc.set_threshold(*_threshold_before)


@contextlib.contextmanager
def _clean_exit_on_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP unwind the program (cleaning up) for as long as a command
    runs; the handlers before are put back after (main() may be called by a host
    program)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers
        return
    before = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, *STOP_SIGNALS)
              if signal.getsignal(s) is not signal.SIG_IGN}  # e.g. `nohup`: stays ignored
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) that names the flag, kind
    or command meant when one is close to what was typed."""

    # every long flag the parsers of this command line take (a build's: its kind's alone)
    flags_taken: set[str] = set()

    def add_argument(self, *names, **kwargs):
        Parser.flags_taken.update(name for name in names if name.startswith("--"))
        return super().add_argument(*names, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{_did_you_mean(message)} "
                              f"(see --help)\n")


def _did_you_mean(message: str) -> str:
    """"; did you mean --seq-len?" for an unknown flag or an invalid choice close to one
    that exists, else nothing."""
    import difflib
    import re

    unknown = re.match(r"unrecognized arguments: (.*)", message)
    if unknown:
        typed = [word.split("=")[0] for word in unknown.group(1).split()
                 if word.startswith("--")]
        if "--checkpoint" in typed:  # given to a kind no checkpoint fills
            return f"; --checkpoint is for {', '.join(_api().CHECKPOINT_KINDS)}"
        candidates = sorted(Parser.flags_taken)
    else:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        typed = [choice.group(1)] if choice else []
        candidates = re.findall(r"'([^']*)'", choice.group(2)) if choice else []
    for word in typed:
        close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.75)
        if close:
            return f"; did you mean {close[0]}?"
    return ""


def _api():
    """The `api` module, imported by the commands that use it (it brings NumPy, openpyxl
    and the engines)."""
    from workbook_builder import api

    return api


def _command_and_kind(argv: list[str]) -> tuple[str | None, str | None]:
    """The command a command line runs, and the word after it (the kind of `build` and
    `class`), as far as they can be told before parsing."""
    command = next((word for word in argv if not word.startswith("-")), None)
    if command is None:
        return None, None
    after = argv[argv.index(command) + 1:]
    return command, after[0] if after and not after[0].startswith("-") else None


def _parser(argv: list[str] | None = None) -> Parser:
    """The parser of the command line `argv` (default sys.argv[1:]). Setting up every
    kind's flags costs a tenth of a second, so only the command it runs gets what it
    needs: `build attention ...` the sub-command of that kind alone; help, a usage error
    or an unknown kind every kind (their messages list them); other commands none."""
    command, named = _command_and_kind(sys.argv[1:] if argv is None else argv)

    def kinds_of(parser_command: str) -> list[str]:
        if parser_command != command:
            return []
        api = _api()
        if named is not None:
            try:
                return [api.get_kind(named).name]
            except AttnsheetsError:
                pass
        return api.kinds()

    parser = Parser(prog="attnsheets", description="Excel workbooks in which every step of "
                    "attention is a live formula, checked cell by cell against NumPy.")
    parser.add_argument("--version", action="version", version=f"attnsheets {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    commands.add_parser("list", help="list the sheet kinds")

    build = commands.add_parser("build", help="write a workbook of one kind")
    kind_parsers = build.add_subparsers(dest="kind", required=True, metavar="KIND",
                                        parser_class=Parser)
    for name in kinds_of("build"):
        api = _api()
        kind = api.get_kind(name)
        sub = kind_parsers.add_parser(name, help=kind.summary, description=kind.summary)
        sub.add_argument("-o", "--output", required=True, type=Path, metavar="FILE",
                         help="the .xlsx file to write")
        add_param_flags(sub, kind.Params)
        sub.add_argument("--seed", type=int, default=0,
                         help="seed for inputs not given with --inputs (default 0)")
        sub.add_argument("--inputs", action="append", default=[], metavar="FILE",
                         help="a JSON file mapping input names to lists of rows, or "
                              "NAME=file.csv; repeatable; inputs not given are drawn "
                              "from the seed")
        sub.add_argument("--tokens", help=kind.tokens_help)
        sub.add_argument("--example", metavar="NAME",
                         help=f"a preset's sizes, inputs and tokens (flags, --inputs and "
                              f"--tokens given override them): "
                              f"{', '.join(kind.examples) or 'none for this kind'}")
        sub.add_argument("--layout", choices=api.LAYOUTS, default="cells",
                         help="cells: one formula per cell (default, best to read); "
                              "blocks: one array formula per step (compact, fast); "
                              "hand: as cells, every matrix product set between copies "
                              "of its operands (teaching sizes)")
        sub.add_argument("--force", action="store_true", help="replace an existing file")
        sub.add_argument("--check", action="store_true",
                         help="then check the written file as `attnsheets check FILE` does, "
                              "in the same process (one start instead of two)")
        add_checkpoint_flags(sub, name)
        add_edition_flags(sub)

    check = commands.add_parser("check", help="evaluate a workbook and compare every step "
                                "with the NumPy reference")
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--engine", choices=(*ENGINE_NAMES, "all"),
                       default="formulas", help="which spreadsheet engine evaluates the "
                       "formulas: the `formulas` package (default), LibreOffice headless, "
                       "Gnumeric (ssconvert --recalc), or every installed one side by side")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="no progress line on the terminal")

    pdf = commands.add_parser("pdf", help="export workbooks to printable PDFs "
                              "(needs LibreOffice)")
    pdf.add_argument("files", nargs="+", type=Path, metavar="FILE",
                     help="workbooks or folders (a class's folder: its exercises in roster "
                     "order); each gets its PDF beside it")
    pdf.add_argument("-o", "--output", type=Path, metavar="OUT.pdf",
                     help="the PDF of a single workbook (default: FILE with .pdf)")
    pdf.add_argument("--combined", type=Path, metavar="ALL.pdf",
                     help="also one PDF of every workbook, in order (needs pdfunite)")
    pdf.add_argument("--force", action="store_true", help="replace an existing PDF")
    pdf.add_argument("-q", "--quiet", action="store_true",
                     help="no progress line on the terminal")

    demo = commands.add_parser("demo", help="build and check a demo workbook of every kind")
    demo.add_argument("--out", type=Path, default=Path("demo"), metavar="DIR",
                      help="folder for the workbooks (default ./demo)")
    demo.add_argument("--force", action="store_true",
                      help="replace files in DIR even if they were changed since built")
    demo.add_argument("-q", "--quiet", action="store_true",
                      help="no progress line on the terminal")
    demo.add_argument("--no-model", dest="model", action="store_false",
                      help="leave out the real model's layer (all-MiniLM-L6-v2, when "
                           "installed: about two minutes and 2 GB)")

    repro = commands.add_parser("reproduce", help="rebuild a tutorial's worked example "
                                "and compare it with the numbers the tutorial prints")
    # the tutorials are known once their module is imported: only for this command
    repro.add_argument("tutorial", choices=sorted(_api().TUTORIALS) if command == "reproduce"
                       else None)
    repro.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                       help="folder for the workbooks (default .; created if needed)")
    repro.add_argument("--force", action="store_true", help="replace existing files")
    add_teaching_commands(commands, add_param_flags, kinds_of("class"))
    return parser


def _cmd_list(args) -> int:
    summaries = kind_summaries()  # without importing a kind
    width = max(map(len, summaries))
    for name, summary in summaries.items():
        print(f"{name:<{width}}  {summary}")
    return EXIT_OK


def _cmd_build(args) -> int:
    api = _api()
    kind = api.get_kind(args.kind)
    book = api.build(kind.name, args.output, inputs=api.load_inputs(args.inputs),
                     seed=args.seed, tokens=api.parse_tokens(args.tokens),
                     layout=args.layout, lang=args.lang,
                     exercise=exercise_from_args(args), force=args.force,
                     max_cells=args.max_cells, example=args.example,
                     **checkpoint_args(args), **explicit_params(kind, args))
    print(printable(f"wrote {args.output}: kind {kind.name}, {kind.describe(book.params)}, "
                    f"layout {args.layout}, {book.formula_cells} formula cells"))
    if book.sources is not None:
        print(printable(book.sources))
    if args.example is not None:
        print(book.note)
    if not args.check:
        return EXIT_OK
    progress = Progress()
    try:
        report = api.check(args.output, "formulas", progress=progress)
    finally:
        progress.clear()
    print(format_report(report))
    return EXIT_OK if report.passed else EXIT_MISMATCH


def _cmd_check(args) -> int:
    api = _api()
    engines = [args.engine]
    if args.engine == "all":
        engines, missing = api.installed_engines()
        if missing:
            print(f"attnsheets: not installed, so not compared: {', '.join(missing)}",
                  file=sys.stderr)
    progress = Progress(args.quiet)
    per_file, refused, broke = [], 0, 0
    try:
        for path in args.files:  # every file is reported, whatever happened to the others
            try:
                per_file.append([api.check(path, engine, progress=progress)
                                 for engine in engines])
            except AttnsheetsError as exc:
                progress.clear()
                print(f"attnsheets: error: {printable(str(exc))}", file=sys.stderr)
                refused += 1
            except Exception as exc:  # a bug this file brought out: named, the rest checked
                progress.clear()
                print(_internal_error(exc, f"{path}: "), file=sys.stderr)
                broke += 1
    finally:
        progress.clear()
    reports = [r for group in per_file for r in group]
    if reports and args.json:
        import json

        data = [r.to_dict() for r in reports]
        print(json_for_terminal(json.dumps(
            data[0] if len(args.files) * len(engines) == 1 else data, indent=2,
            ensure_ascii=False, allow_nan=False)))  # strict JSON, or a bug
    elif reports and len(engines) == 1 and args.engine != "all":
        print("\n".join(format_report(r) for r in reports))
    elif reports:
        print("\n".join(format_side_by_side(group) for group in per_file))
    if broke or refused:  # the worst outcome sets the exit code
        return EXIT_INTERNAL if broke else EXIT_USAGE
    return EXIT_OK if all(r.passed for r in reports) else EXIT_MISMATCH


def _cmd_pdf(args) -> int:
    api = _api()
    progress = Progress(args.quiet)
    handouts = api.plan_handouts(args.files, args.output)  # only our workbooks
    try:
        api.export_pdfs(handouts, args.force, args.combined,
                    lambda done, total: progress(f"printing: {done}/{total} PDFs"))
    finally:
        progress.clear()
    for handout in handouts:
        print(f"wrote {handout.pdf}")
    if args.combined is not None:
        print(f"wrote {args.combined} ({len(handouts)} workbooks)")
    return EXIT_OK


def _cmd_demo(args) -> int:
    api = _api()
    progress = Progress(args.quiet)
    plan = api.demo_plan(args.model)
    # written by worker processes: an interrupt's line tells them by what the paths hold
    api.expect_writes([args.out / name for name, *_ in plan])
    all_passed = True
    print(f"{'workbook':<44} {'formula cells':>13} {'steps':>6} {'seconds':>8}  result")
    progress(f"building and checking {len(plan)} workbooks on {api.demo_workers()} cores")
    try:
        for number, result in enumerate(api.run_demo(args.out, args.force,
                                                           with_model=args.model), start=1):
            progress.clear()
            all_passed &= result.passed
            verdict = "pass" if result.passed else f"FAIL at {result.first_failure}"
            print(f"{str(result.path):<44} {result.formula_cells:>13} {result.steps:>6} "
                  f"{result.seconds:>8.2f}  {verdict}", flush=True)
            progress(f"[{number}/{len(plan)}] done")
    finally:
        progress.clear()
    print(f"{len(plan)} workbooks in {args.out}: " + ("all checks pass" if all_passed
                                                      else "some checks FAILED"))
    if args.model:
        all_passed &= _real_model_demo(args, progress)
    registered = {name: api.get_kind(name) for name in api.kinds()}
    for name, kind in registered.items():
        note = kind.demo_note(registered)
        if note:
            print(f"\n{name}: {note}")
    return EXIT_OK if all_passed else EXIT_MISMATCH


def _real_model_demo(args, progress: Progress) -> bool:
    """BERT layer 0 of all-MiniLM-L6-v2 when its package is installed, with the token
    each head of "it" attends to most; else one line saying how to get it."""
    api = _api()
    progress("building and checking BERT layer 0 of all-MiniLM-L6-v2 (about two minutes)")
    try:
        demo = api.real_model_demo(args.out, args.force)
    finally:
        progress.clear()
    if demo is None:
        print(f"\nall-MiniLM-L6-v2 (a real BERT) is not installed: pip install {api.MINILM_PIP} "
              f"adds its layer 0 to the demo")
        return True
    result = demo.result
    verdict = "pass" if result.passed else f"FAIL at {result.first_failure}"
    print(f"\n{str(result.path):<44} {result.formula_cells:>13} {result.steps:>6} "
          f"{result.seconds:>8.2f}  {verdict}")
    print('all-MiniLM-L6-v2 layer 0: the token "it" attends most to, per head: ' +
          ", ".join(f"{h} {token!r} {weight:.2f}" for h, token, weight in demo.top_for_it))
    return result.passed


def _cmd_reproduce(args) -> int:
    api = _api()
    results = api.reproduce(args.tutorial, args.out, args.force)
    print(format_reproduction(api.TUTORIALS[args.tutorial].source, results))
    return EXIT_OK if all(r.report.passed for r in results) else EXIT_MISMATCH


def _cmd_class(args) -> int:
    return EXIT_OK if cmd_class(args) else EXIT_MISMATCH


def _cmd_grade(args) -> int:
    """Exit 1: some file could not be graded (not ours, or damaged); scores never fail."""
    return EXIT_OK if cmd_grade(args) else EXIT_MISMATCH


COMMANDS = {"class": _cmd_class, "grade": _cmd_grade,
            "list": _cmd_list, "build": _cmd_build, "check": _cmd_check,
            "pdf": _cmd_pdf, "demo": _cmd_demo, "reproduce": _cmd_reproduce}


def main(argv: list[str] | None = None) -> int:
    # every line below reaches the terminal escaped (`terminal_output`), whoever prints it
    with terminal_output(), _recording_writes() as started:
        try:
            with _clean_exit_on_signals(), _fewer_collections():
                args = _parser(argv).parse_args(argv)
                return COMMANDS[args.command](args)
        except SystemExit as exc:  # argparse: --help, --version, or a usage error it printed
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        except AttnsheetsError as exc:
            print(f"attnsheets: error: {printable(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
        except OSError as exc:
            print(printable(f"attnsheets: error: {exc.strerror or exc}"
                            f"{': ' + str(exc.filename) if exc.filename else ''}"),
                  file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print(f"attnsheets: interrupted; {_left_on_disk(started)}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated as stop:
            said = "hung up" if stop.signum == getattr(signal, "SIGHUP", None) else \
                "terminated"
            with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
                print(f"attnsheets: {said}; {_left_on_disk(started)}", file=sys.stderr)
            return 128 + stop.signum
        except Exception as exc:  # a bug: one line naming it, never a traceback (unless asked)
            print(_internal_error(exc), file=sys.stderr)
            return EXIT_INTERNAL


_command_starts: list[float] = []


@contextlib.contextmanager
def _recording_writes() -> Iterator[float]:
    """The time the command starts, from which its writes are told (`_left_on_disk`);
    what was recorded before the oldest command still running is forgotten after."""
    started = time.monotonic()
    with _collection_lock:
        _command_starts.append(started)
    try:
        yield started
    finally:
        with _collection_lock:
            _command_starts.remove(started)
            oldest = min(_command_starts, default=time.monotonic())
        files = sys.modules.get("workbook_builder.book.files")
        if files is not None:
            files.forget_writes(oldest)


def _left_on_disk(started: float) -> str:
    """What a command stopped part way leaves: the files it wrote in full, those it was to
    write that are as they were. Every file is written whole and moved into place in one
    rename (book/files.py), so these two are all there is."""
    files = sys.modules.get("workbook_builder.book.files")  # not imported: nothing written
    written, untouched = files.writes_since(started) if files is not None else ([], [])
    return on_disk(written, untouched)


def _internal_error(exc: Exception, where: str = "") -> str:
    """A bug as one line naming it (the traceback first, if asked for)."""
    if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
        import traceback

        traceback.print_exc()
    message = " ".join(str(exc).split())
    return printable(f"attnsheets: internal error: {where}{type(exc).__name__}"
                     f"{': ' + message if message else ''} (set {DEBUG_VARIABLE}=1 for the "
                     f"traceback)")
