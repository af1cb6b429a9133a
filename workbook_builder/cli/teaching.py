"""Command-line pieces of the teacher edition: --lang/--exercise flags, `class`, `grade`.

Kept apart from main.py so that file only wires them in."""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from workbook_builder.cli.kind_table import ENGINE_NAMES
from workbook_builder.cli.params import add_checkpoint_flags, checkpoint_args, explicit_params
from workbook_builder.cli.printing import format_grades, printable
from workbook_builder.errors import UserError as AttnsheetsError  # = api.AttnsheetsError

if TYPE_CHECKING:  # the machinery (`api`) is imported by the commands that use it
    from workbook_builder.api import ExerciseSpec


def add_edition_flags(parser: argparse.ArgumentParser, exercise_required: bool = False) -> None:
    from workbook_builder.api import DEFAULT_MAX_CELLS, LANGS

    parser.add_argument("--lang", choices=LANGS, default="en",
                        help="language of labels, step headers and explanations (default en)")
    parser.add_argument("--exercise", metavar="STEP[,STEP…]", required=exercise_required,
                        help="leave these step blocks (by name, e.g. WEIGHTS,OUTPUT) empty "
                             "for the student, with live self-checks")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="a filled cell is correct within ± this (default 0.001)")
    parser.add_argument("--no-self-check", dest="self_check", action="store_false",
                        help="a bare exercise: no hidden answers, no ✓/✗, no CHECK_ names")
    parser.add_argument("--max-cells", type=int, default=DEFAULT_MAX_CELLS, metavar="N",
                        help=f"refuse a workbook of more than N formula and input cells "
                             f"(default {DEFAULT_MAX_CELLS:,}; an exercise's hidden key "
                             f"counts too)")


def exercise_from_args(args) -> "ExerciseSpec | None":
    """An ExerciseSpec, or None for a complete workbook (exercise options then refused)."""
    if args.exercise is None:
        if args.tolerance is not None or not args.self_check:
            raise AttnsheetsError("--tolerance and --no-self-check need --exercise")
        return None
    from workbook_builder.api import make_spec

    return make_spec(args.exercise, args.tolerance, args.self_check)


def add_commands(commands, add_param_flags, class_kinds: list[str]) -> None:
    """`class` (a sub-command for each of `class_kinds`) and `grade`."""
    klass = commands.add_parser(
        "class", help="one exercise workbook and one answer key per student of a roster")
    kind_parsers = klass.add_subparsers(dest="kind", required=True, metavar="KIND",
                                        parser_class=type(klass))
    for name in class_kinds:
        from workbook_builder.api import LAYOUTS, get_kind

        kind = get_kind(name)
        sub = kind_parsers.add_parser(name, help=kind.summary, description=kind.summary)
        sub.add_argument("--roster", required=True, type=Path, metavar="ROSTER.csv",
                         help="CSV with a header row and a student id column (id, "
                              "student_id, student or 学号; a name/姓名 column is optional)")
        sub.add_argument("--out", required=True, type=Path, metavar="DIR",
                         help="folder for the workbooks and manifest.csv (created if needed)")
        sub.add_argument("--id-column", metavar="COLUMN",
                         help="the roster column holding the student id")
        add_param_flags(sub, kind.Params)
        sub.add_argument("--seed", type=int, default=0,
                         help="class seed mixed into every student's seed (default 0); "
                              "change it for a fresh set of inputs")
        sub.add_argument("--tokens", help=kind.tokens_help)
        sub.add_argument("--layout", choices=LAYOUTS, default="cells",
                         help="cells (default), blocks or hand, as for build")
        add_edition_flags(sub, exercise_required=True)
        sub.add_argument("--answers", choices=("formulas", "values", "either"), default=None,
                         help="what grade takes: formulas (recalculated on fresh inputs), "
                              "values (typed numbers) or either; default either for an "
                              "exercise of at most 64 answer cells, else formulas")
        sub.add_argument("--force", action="store_true",
                         help="replace the files of an earlier run in DIR")
        add_checkpoint_flags(sub, name)

    grade = commands.add_parser("grade", help="score returned exercise workbooks")
    grade.add_argument("paths", nargs="+", type=Path, metavar="FILE_OR_DIR",
                       help="workbooks, or folders of them (*_key.xlsx skipped)")
    grade.add_argument("--out", type=Path, metavar="grades.csv",
                       help="write one row per file to this CSV")
    grade.add_argument("--force", action="store_true", help="replace an existing CSV")
    grade.add_argument("--manifest", type=Path, metavar="manifest.json",
                       help="the class's manifest.json (or its folder): grade every file "
                            "against the teacher's record and report what was changed")
    grade.add_argument("--engine", choices=ENGINE_NAMES, default=None,
                       help="without --manifest: recalculate formula cells with this engine "
                            "instead of reading the values saved in the file (with it, every "
                            "file is recalculated by the formulas engine)")
    grade.add_argument("--answers", choices=("formulas", "values", "either"), default=None,
                       help="with --manifest: the answers that score, instead of what the "
                            "class recorded: formulas, values (typed numbers) or either")


def cmd_class(args) -> bool:
    """True if every workbook verified against the reference."""
    from workbook_builder import api
    from workbook_builder.api import checkpoint_inputs, get_kind, parse_tokens, resolve_params

    kind = get_kind(args.kind)
    tokens = parse_tokens(args.tokens)
    sizes, given = explicit_params(kind, args), {}
    # a checkpoint gives every student the same weights (and X, with --text or --token-ids)
    model = checkpoint_inputs(kind.name, sizes, **checkpoint_args(args))
    if model is not None:
        sizes, given, tokens = {**model.params, **sizes}, model.inputs, tokens or model.labels
    params = resolve_params(kind, sizes, given, tokens)
    exercise = exercise_from_args(args)
    result = api.run_class(kind, params, args.roster, args.out, exercise, layout=args.layout,
                       lang=args.lang, tokens=tokens, class_seed=args.seed, force=args.force,
                       id_column=args.id_column, max_cells=args.max_cells, given=given,
                       note=model.note if model is not None else None,
                       answers=args.answers)
    print(f"wrote {result.students} exercise workbooks, {result.students} answer keys and "
          f"{api.MANIFEST} to {result.out} ({kind.name}, {kind.describe(params)}, exercise "
          f"{','.join(exercise.steps)}, {result.seconds:.1f} s)")
    if result.problems:
        print(f"VERIFICATION FAILED for {len(result.problems)} block(s); first: "
              f"{result.problems[0]}")
        return False
    keys = "every answer key" + (" and every hidden self-check key" if exercise.self_check
                                 else "")
    print(f"verified: {keys} equals the NumPy reference for that student's inputs")
    takes = {"formulas": "formulas only (each recalculated on fresh inputs; typed numbers "
                         "score 0)",
             "values": "typed numbers and formulas, each by its value on the student's "
                       "inputs",
             "either": "typed numbers, and formulas recalculated on fresh inputs"}
    print(f"grade takes {takes[result.answers]} (--answers {result.answers})")
    if result.answers != "formulas" and exercise.self_check:
        print("note: typed numbers score and each exercise holds its self-checks' answer "
              "key, which a student can read: for a graded class pass --no-self-check "
              "(or --answers formulas)")
    return True


def cmd_grade(args) -> bool:
    """True if every file could be graded and none differs from the manifest (scores never
    fail the command)."""
    from workbook_builder import api

    grades = api.grade_all(args.paths, args.out, args.force, args.engine, args.manifest,
                           args.answers)
    files = [grade for grade in grades if grade.returned]
    for grade in files:
        if grade.problem:
            print(f"attnsheets: {printable(grade.problem)}", file=sys.stderr)
        elif grade.changes:
            print(f"attnsheets: {printable(str(grade.file))}: "
                  f"{printable('; '.join(grade.changes))}", file=sys.stderr)
        if grade.findings and not grade.problem:
            print(f"attnsheets: {printable(str(grade.file))}: "
                  f"{printable('; '.join(grade.findings))}", file=sys.stderr)
        if grade.notes:
            print(f"attnsheets: warning: {printable(str(grade.file))}: "
                  f"{printable('; '.join(grade.notes))}", file=sys.stderr)
    lines, summary = format_grades(grades)
    folders = " (subfolders included)" if any(Path(p).is_dir() for p in args.paths) else ""
    print(printable(f"found {len(files)} workbook(s) to grade in "
                    f"{', '.join(map(str, args.paths))}{folders}"))
    print("\n".join(lines))
    print(printable(summary + (f"; wrote {args.out}" if args.out is not None else "")))
    return all(not g.problem and not g.changes and not g.forged for g in grades)
