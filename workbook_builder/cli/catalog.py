"""`python -m workbook_builder.cli.catalog check`: the translation catalogs against what the
sheets really write (workbook_builder/teaching/catalog.py). Exit 0: all is well; 1: text
missing or entries unused; 2: the catalog cannot be read."""

import argparse
import sys

from workbook_builder import api


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workbook_builder.cli.catalog",
        description="List English a sheet writes with no catalog entry, and entries no "
                    "sheet uses.")
    parser.add_argument("command", choices=["check"])
    parser.add_argument("--lang", default="zh", choices=[x for x in api.LANGS if x != "en"])
    parser.add_argument("--catalog", metavar="FILE.po",
                        help="check this .po file (e.g. a translator's copy) instead of the "
                             "one shipped for --lang")
    args = parser.parse_args(argv)
    try:
        found = api.check_catalog(args.lang, args.catalog)
    except api.UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for text, where in sorted(found.missing.items()):
        print(f"missing: {text!r}  ({len(where)} cases, e.g. {min(where)})")
    for section, key in found.unused:
        print(f"unused: msgctxt {section!r} msgid {key!r}")
    print(f"{found.cases} workbooks, {found.texts} texts asked for, "
          f"{len(found.used)} entries used, {len(found.missing)} missing, "
          f"{len(found.unused)} unused")
    return 1 if found.missing or found.unused else 0


if __name__ == "__main__":
    sys.exit(main())
