"""Are two trees' workbooks the same, cell for cell? Run `dump` under each tree's PYTHONPATH,
then `diff` the two dumps.

    PYTHONPATH=/path/a python benchmarks/same_workbooks.py dump a.pickle
    PYTHONPATH=/path/b python benchmarks/same_workbooks.py dump b.pickle
    python benchmarks/same_workbooks.py diff a.pickle b.pickle

Every demo case (`demo_plan`) is built in memory in every layout, in English and Chinese, and
as a class builds it (an exercise with its hidden key and self-check, one without, and the
answer key, each for a named student); every kind's `test_cases` in every layout, and once
as a Chinese exercise. Per sheet it records every stored cell (value or
formula, style), merged ranges, row heights, column widths, print settings, conditional
formats and blocks kept as arrays; per workbook the defined names, the size plan
(`check_fits`), the planned places of every name, and every part of the saved file but its
timestamps (charts, drawings, comments). A build refused is recorded by its message.
"""

import hashlib
import io
import pickle
import sys
import zipfile


def _cell(cell) -> tuple:
    from openpyxl.worksheet.formula import ArrayFormula
    value = cell.value
    if isinstance(value, ArrayFormula):
        value = ("array", value.ref, value.text)
    font, fill = cell.font, cell.fill
    return (value, cell.number_format, font.name, font.sz, font.b, font.i,
            font.color.rgb if font.color is not None else None,
            fill.fgColor.rgb if fill is not None else None, cell.border.left.style,
            cell.alignment.wrap_text, cell.alignment.horizontal, cell.alignment.vertical,
            cell.comment.text if cell.comment else None)


def _sheet(ws) -> dict:
    from workbook_builder.sheet.constants import constant_blocks
    cells = {}
    for row in ws.iter_rows():
        for cell in row:
            if cell.value is not None or cell.has_style:
                cells[cell.coordinate] = _cell(cell)
    setup = ws.page_setup
    return {
        "cells": cells,
        "merged": [str(r) for r in ws.merged_cells.ranges],
        "row_heights": {r: d.height for r, d in ws.row_dimensions.items()
                        if d.height is not None},
        "col_widths": {c: d.width for c, d in ws.column_dimensions.items()},
        "print": (ws.print_area, ws.print_title_rows, ws.print_title_cols,
                  setup.orientation, setup.scale, setup.fitToWidth, setup.fitToHeight,
                  setup.paperSize, ws.sheet_properties.pageSetUpPr.fitToPage
                  if ws.sheet_properties.pageSetUpPr else None,
                  ws.print_options.gridLines, ws.print_options.horizontalCentered,
                  tuple(vars(ws.page_margins).items()),
                  ws.oddHeader.left.text, ws.oddHeader.center.text, ws.oddHeader.right.text,
                  ws.oddFooter.left.text, ws.oddFooter.center.text, ws.oddFooter.right.text,
                  [(b.id, b.min, b.max) for b in ws.row_breaks.brk],
                  [(b.id, b.min, b.max) for b in ws.col_breaks.brk],
                  ws.freeze_panes, ws.sheet_state),
        "conditional": [(str(rng.sqref), [(r.type, r.formula, r.priority) for r in rules])
                        for rng, rules in ws.conditional_formatting._cf_rules.items()],
        "arrays": [(b.top, b.left, b.values.tolist(), b.integers.tolist())
                   for b in constant_blocks(ws)],
    }


def _parts(wb) -> dict[str, str]:
    """Every part of the file openpyxl writes, as a hash (timestamps left out)."""
    buffer = io.BytesIO()
    wb.save(buffer)
    with zipfile.ZipFile(buffer) as z:
        return {n: hashlib.sha256(z.read(n)).hexdigest() for n in sorted(z.namelist())
                if n != "docProps/core.xml"}


def _workbook(wb) -> dict:
    return {"sheets": {ws.title: _sheet(ws) for ws in wb.worksheets},
            "names": sorted((n, d.attr_text) for n, d in wb.defined_names.items()),
            "parts": _parts(wb)}


def cases():
    from workbook_builder.demo import demo_plan
    from workbook_builder.sheet.request import ExerciseSpec
    seen = set()
    for name, kind, values, _ in demo_plan(with_model=True):
        stem = name.rsplit("_", 1)[0]
        if stem in seen:
            continue
        seen.add(stem)
        for layout in ("cells", "blocks", "hand"):
            yield stem, kind, values, layout, "en", None, None
            yield stem, kind, values, layout, "zh", None, None
            yield stem, kind, values, layout, "en", "self-check", "s01"
            yield stem, kind, values, layout, "zh", "key", "s01"
            if layout == "cells":
                yield stem, kind, values, layout, "en", "plain", "s02"
    for kind in sorted({kind for _, kind, _, _ in demo_plan(with_model=True)},
                       key=lambda k: k.name):
        for number, values in enumerate(kind.test_cases):
            stem = f"{kind.name}_test{number}"
            for layout in ("cells", "blocks", "hand"):
                yield stem, kind, values, layout, "en", None, None
            yield stem, kind, values, "cells", "zh", "self-check", "s01"
    del ExerciseSpec


def build(kind, values, layout, lang, edition, student):
    import numpy as np

    from workbook_builder.book.workbook import build_workbook
    from workbook_builder.models.examples import make_example
    from workbook_builder.sheet.kind import complete_inputs, make_params
    from workbook_builder.sheet.limits import check_fits, check_sizes, planned_places
    from workbook_builder.sheet.request import BuildRequest, ExerciseSpec
    given, tokens, note = {}, None, None
    if "example" in values:
        preset = make_example(kind, values["example"])
        given = {k: np.asarray(v, dtype=float) for k, v in preset.inputs.items()}
        params, tokens, note = make_params(kind, preset.params), preset.tokens, preset.note
    else:
        params = make_params(kind, values)
    steps = kind.step_names(params)
    exercise = None
    if edition in ("self-check", "plain"):
        exercise = ExerciseSpec([steps[0], steps[len(steps) // 2], steps[-1]], 1e-3,
                                edition == "self-check")
    check_sizes(kind, params)
    labels = kind.labels(params, tokens)
    request = BuildRequest(kind, params, labels, layout, lang, exercise, student,
                           "Ann" if student else "", note, None if exercise else 64)
    extent = check_fits(request)
    places = planned_places(request)
    inputs = complete_inputs(kind, params, given, 0)
    wb = build_workbook(request, inputs)
    return {"extent": extent, "places": sorted((n, vars(b)) for n, b in places.items()),
            **_workbook(wb)}


def dump(out: str) -> None:
    from workbook_builder.errors import UserError
    results = {}
    for stem, kind, values, layout, lang, edition, student in cases():
        key = (stem, layout, lang, edition)
        try:
            results[key] = build(kind, values, layout, lang, edition, student)
        except UserError as refused:
            results[key] = {"refused": str(refused)}
        print(*key, "refused" if "refused" in results[key] else "built", flush=True)
    with open(out, "wb") as f:
        pickle.dump(results, f)


def _differences(a, b, where: str):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                yield f"{where}/{k}: only in {'second' if k not in a else 'first'}"
            else:
                yield from _differences(a[k], b[k], f"{where}/{k}")
    elif a != b:
        yield f"{where}: {str(a)[:200]} != {str(b)[:200]}"


def diff(first: str, second: str) -> int:
    with open(first, "rb") as f:
        a = pickle.load(f)
    with open(second, "rb") as f:
        b = pickle.load(f)
    count = 0
    for line in _differences(a, b, ""):
        count += 1
        if count <= 50:
            print(line)
    built = sum("refused" not in v for v in a.values())
    print(f"{len(a)} builds ({built} built, {len(a) - built} refused alike or not); "
          f"{count} differences")
    return count


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        sys.exit(1 if diff(sys.argv[2], sys.argv[3]) else 0)
