"""Prints every demo workbook (`attnsheets demo`'s plan, both layouts) to PDF and measures
its pages: how many, and how full each is. Prints a table.

    .venv/bin/python benchmarks/pages.py [--only STEM,...] [--layout cells|blocks]
                                         [--lang en|zh] [--keep DIR]

Fill of a page (`page_fills`): the page rendered in grey at 30 dpi, the share of the
printable height (inside the 0.6 in top and bottom margins, where header and footer print)
whose pixel rows hold any ink (a pixel darker than 200 of 255). A page of blocks with empty
bands between them is about 0.7; a third of a page, 0.33. The rule the handouts keep: every
page but the last at least half full (tests/helpers/page_fill.py, shared with the handout tests).
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the fill measured as the handout tests measure it

from helpers.page_fill import page_fills  # noqa: E402

HALF = 0.5


def least_fill(fills: list[float]) -> float | None:
    """The emptiest page but the last (None for a one-page PDF)."""
    return min(fills[:-1]) if len(fills) > 1 else None


def main() -> int:
    from workbook_builder.book.pdfs import Handout, export_pdfs
    from workbook_builder.demo import demo_plan, write_demo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="file stems to print, comma-separated "
                        "(e.g. linear_favor,scaling); default every demo workbook")
    parser.add_argument("--layout", choices=["cells", "blocks"], help="one layout only")
    parser.add_argument("--lang", choices=["en", "zh"], default="en")
    parser.add_argument("--keep", type=Path, help="write the workbooks and PDFs here")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    plan = [(name, kind, values, layout) for name, kind, values, layout in demo_plan(False)
            if (args.layout is None or layout == args.layout)
            and (only is None or name.removesuffix(f"_{layout}.xlsx") in only)]
    if not plan:
        parser.error("no demo workbook matches")
    with tempfile.TemporaryDirectory(prefix="attnsheets-pages-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        handouts = []
        for name, kind, values, layout in plan:
            book = folder / name
            write_demo(kind, values, book, layout, lang=args.lang)
            handouts.append(Handout(book, book.with_suffix(".pdf"), args.lang))
        built = time.perf_counter()
        export_pdfs(handouts, force=True)
        printed = time.perf_counter()
        print(f"{len(plan)} workbooks: built in {built - started:.0f} s, "
              f"printed in {printed - built:.0f} s ({args.lang})\n")
        print(f"| {'workbook':<38} | pages | min fill (not last) | fills")
        print(f"|{'-' * 40}|-------|---------------------|------")
        failing = []
        for handout in handouts:
            fills = page_fills(handout.pdf, folder)
            least = least_fill(fills)
            ok = least is None or least >= HALF
            if not ok:
                failing.append(handout.workbook.stem)
            shown = "—" if least is None else f"{least:.2f}" + ("" if ok else " ✗")
            print(f"| {handout.workbook.stem:<38} | {len(fills):>5} | {shown:>19} | "
                  + " ".join(f"{f:.2f}" for f in fills))
        print(f"\n{len(handouts) - len(failing)} of {len(handouts)} keep every page but "
              f"the last at least half full" + (f"; not: {', '.join(failing)}"
                                                 if failing else ""))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
