"""The `attnsheets` command line: list, build, check, demo, reproduce."""

import argparse
import dataclasses
import json
import sys
import types
from pathlib import Path

from workbook_builder.errors import UserError
from workbook_builder.sheet.layout import LAYOUTS
from workbook_builder.progress import Progress

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _add_param_flags(parser: argparse.ArgumentParser, params_class) -> None:
    """One flag per Params field: seq_len -> --seq-len; bools are switches."""
    for f in dataclasses.fields(params_class):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        help_text = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.type is bool:
            parser.add_argument(flag, dest=f.name, action="store_true",
                                default=argparse.SUPPRESS, help=help_text)
            continue
        base = f.type
        if isinstance(base, types.UnionType):  # e.g. int | None
            base = next(t for t in base.__args__ if t is not type(None))
        choices = f.metadata.get("choices")
        parser.add_argument(flag, dest=f.name, type=base, choices=choices,
                            default=argparse.SUPPRESS, metavar=f.metadata.get("metavar"),
                            help=f"{help_text} (default {default})")


def _parser() -> Parser:
    from workbook_builder import __version__
    from workbook_builder.sheet.registry import load_kinds
    from workbook_builder.teaching_cli import add_commands as add_teaching_commands
    from workbook_builder.teaching_cli import add_edition_flags

    parser = Parser(prog="attnsheets", description="Excel workbooks in which every step of "
                    "attention is a live formula, checked cell by cell against NumPy.")
    parser.add_argument("--version", action="version", version=f"attnsheets {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    commands.add_parser("list", help="list the sheet kinds")

    build = commands.add_parser("build", help="write a workbook of one kind")
    kinds = build.add_subparsers(dest="kind", required=True, metavar="KIND",
                                 parser_class=Parser)
    for name, kind in sorted(load_kinds().items()):
        sub = kinds.add_parser(name, help=kind.summary, description=kind.summary)
        sub.add_argument("-o", "--output", required=True, type=Path, metavar="FILE",
                         help="the .xlsx file to write")
        _add_param_flags(sub, kind.Params)
        sub.add_argument("--seed", type=int, default=0,
                         help="seed for inputs not given with --inputs (default 0)")
        sub.add_argument("--inputs", action="append", default=[], metavar="FILE",
                         help="a JSON file mapping input names to lists of rows, or "
                              "NAME=file.csv; repeatable; inputs not given are drawn "
                              "from the seed")
        sub.add_argument("--tokens", help=kind.tokens_help)
        sub.add_argument("--layout", choices=LAYOUTS, default="cells",
                         help="cells: one formula per cell (default, best to read); "
                              "blocks: one array formula per step (compact, fast)")
        sub.add_argument("--force", action="store_true", help="replace an existing file")
        add_edition_flags(sub)

    check = commands.add_parser("check", help="evaluate a workbook and compare every step "
                                "with the NumPy reference")
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--engine", choices=("formulas", "libreoffice", "all"),
                       default="formulas", help="which spreadsheet engine evaluates the "
                       "formulas: the `formulas` package (default), LibreOffice headless, "
                       "or both side by side")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="no progress line on the terminal")

    pdf = commands.add_parser("pdf", help="export a workbook to a printable PDF "
                              "(needs LibreOffice)")
    pdf.add_argument("file", type=Path, metavar="FILE")
    pdf.add_argument("-o", "--output", type=Path, metavar="OUT.pdf",
                     help="default: FILE with .pdf")
    pdf.add_argument("--force", action="store_true", help="replace an existing PDF")

    demo = commands.add_parser("demo", help="build and check a demo workbook of every kind")
    demo.add_argument("--out", type=Path, default=Path("demo"), metavar="DIR",
                      help="folder for the workbooks (default ./demo)")
    demo.add_argument("--force", action="store_true",
                      help="replace files in DIR even if they were changed since built")
    demo.add_argument("-q", "--quiet", action="store_true",
                      help="no progress line on the terminal")

    reproduce = commands.add_parser("reproduce", help="rebuild a tutorial's worked example "
                                    "and compare it with the numbers the tutorial prints")
    from workbook_builder.reproduce import TUTORIALS

    reproduce.add_argument("tutorial", choices=sorted(TUTORIALS))
    reproduce.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                           help="folder for the workbooks (default .)")
    reproduce.add_argument("--force", action="store_true", help="replace existing files")
    add_teaching_commands(commands, _add_param_flags)
    return parser


def _cmd_list(args) -> int:
    from workbook_builder.sheet.registry import load_kinds

    kinds = load_kinds()
    width = max(map(len, kinds))
    for name, kind in sorted(kinds.items()):
        print(f"{name:<{width}}  {kind.summary}")
    return EXIT_OK


def _cmd_build(args) -> int:
    from workbook_builder.build import explicit_params, parse_tokens, resolve_params, write_workbook
    from workbook_builder.inputs import load_inputs
    from workbook_builder.sheet.registry import get_kind
    from workbook_builder.teaching_cli import exercise_from_args

    kind = get_kind(args.kind)
    tokens = parse_tokens(args.tokens)
    given = load_inputs(args.inputs)
    params = resolve_params(kind, explicit_params(kind, args), given, tokens)
    cells = write_workbook(kind, params, args.output, seed=args.seed, given=given,
                           tokens=tokens, layout=args.layout, force=args.force,
                           lang=args.lang, exercise=exercise_from_args(args))
    print(f"wrote {args.output}: kind {kind.name}, {kind.describe(params)}, "
          f"layout {args.layout}, {cells} formula cells")
    return EXIT_OK


def _cmd_check(args) -> int:
    from workbook_builder.check import check_workbook, format_report, format_side_by_side

    engines = ["formulas", "libreoffice"] if args.engine == "all" else [args.engine]
    progress = Progress(args.quiet)
    try:
        per_file = [[check_workbook(path, engine, progress=progress) for engine in engines]
                    for path in args.files]
    finally:
        progress.clear()
    reports = [r for group in per_file for r in group]
    if args.json:
        data = [r.to_dict() for r in reports]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2, ensure_ascii=False))
    elif len(engines) == 1:
        print("\n".join(format_report(r) for r in reports))
    else:
        print("\n".join(format_side_by_side(group) for group in per_file))
    return EXIT_OK if all(r.passed for r in reports) else EXIT_MISMATCH


def _cmd_pdf(args) -> int:
    from workbook_builder.book import open_workbook, read_spec
    from workbook_builder.libreoffice import export_pdf

    read_spec(open_workbook(args.file), args.file)  # only our workbooks
    output = args.output or args.file.with_suffix(".pdf")
    if output.suffix.lower() != ".pdf":
        raise UserError(f"{output}: the output name must end in .pdf")
    if not output.parent.exists():
        raise UserError(f"{output.parent}: no such folder (create it first)")
    if output.exists() and not args.force:
        raise UserError(f"{output} already exists; pass --force to replace it")
    export_pdf(args.file, output)
    print(f"wrote {output}")
    return EXIT_OK


def _cmd_demo(args) -> int:
    from workbook_builder.demo import run_demo

    return EXIT_OK if run_demo(args.out, args.force, Progress(args.quiet)) else EXIT_MISMATCH


def _cmd_reproduce(args) -> int:
    from workbook_builder.reproduce import run_reproduce

    return EXIT_OK if run_reproduce(args.tutorial, args.out, args.force) else EXIT_MISMATCH


def _cmd_class(args) -> int:
    from workbook_builder.teaching_cli import cmd_class

    return EXIT_OK if cmd_class(args) else EXIT_MISMATCH


def _cmd_grade(args) -> int:
    """Exit 1: some file could not be graded (not ours, or damaged); scores never fail."""
    from workbook_builder.teaching_cli import cmd_grade

    return EXIT_OK if cmd_grade(args) else EXIT_MISMATCH


COMMANDS = {"class": _cmd_class, "grade": _cmd_grade,
            "list": _cmd_list, "build": _cmd_build, "check": _cmd_check,
            "pdf": _cmd_pdf, "demo": _cmd_demo, "reproduce": _cmd_reproduce}


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"attnsheets: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"attnsheets: error: {exc.strerror or exc}"
              f"{': ' + str(exc.filename) if exc.filename else ''}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("attnsheets: interrupted", file=sys.stderr)
        return 130
