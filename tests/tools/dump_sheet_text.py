"""Every text a Chinese workbook holds, for every demo and example case in every layout and
as a student's exercise, written as JSON: run it on two checkouts and compare the files to
see whether a change to the translations changed what a sheet says.

    PYTHONPATH=CHECKOUT python tests/tools/dump_sheet_text.py OUT.json [--lang zh]
    python tests/tools/dump_sheet_text.py --compare A.json B.json

It uses only the builder's public functions, so it runs on older checkouts too.
"""

import json
import sys

import numpy as np

LAYOUTS = ("cells", "blocks", "hand")


def cases():
    """(name, kind, params, inputs, tokens, layout, exercise, student, note)."""
    try:  # the house since the build request; before it, the older paths
        from workbook_builder.models.examples import make_example
        from workbook_builder.registry import load_kinds
        from workbook_builder.sheet.request import ExerciseSpec
    except ImportError:
        from workbook_builder.sheet.registry import load_kinds
        from workbook_builder.teaching.exercise import ExerciseSpec

        def make_example(kind, name):
            return kind.example(name)
    from workbook_builder.sheet.kind import complete_inputs, make_params

    for kind_name, kind in sorted(load_kinds().items()):
        setups = []
        for example in kind.examples:
            preset = make_example(kind, example)
            given = {k: np.asarray(v, dtype=float) for k, v in preset.inputs.items()}
            setups.append((f"example-{example}", preset.params, given, preset.tokens,
                           preset.note))
        setups += [(stem, values, {}, None, None) for stem, values in kind.demo_cases]
        for n, (stem, values, given, tokens, note) in enumerate(setups):
            params = make_params(kind, values)
            inputs = complete_inputs(kind, params, given, 0)
            labels = kind.labels(params, tokens)
            for layout in LAYOUTS:
                yield (f"{kind_name}/{stem}/{layout}", kind, params, inputs, labels, layout,
                       None, None, note)
                if n == 0:  # a student's exercise on the first case: the last two steps
                    steps = tuple(kind.step_names(params)[-2:])
                    yield (f"{kind_name}/{stem}/{layout}/exercise", kind, params, inputs,
                           labels, layout, ExerciseSpec(steps), "s01", note)


def texts(wb) -> dict[str, str]:
    out = {}
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, str) and cell.data_type == "s":
                    out[f"{ws.title}!{cell.coordinate}"] = cell.value
                if cell.comment is not None:
                    out[f"{ws.title}!{cell.coordinate}#note"] = cell.comment.text
        for i, chart in enumerate(ws._charts):
            for axis in ("x_axis", "y_axis"):
                title = getattr(chart, axis).title
                if title is not None:
                    out[f"{ws.title}#chart{i}.{axis}"] = repr(title.tx.rich.p)
            if chart.legend is not None:
                out[f"{ws.title}#chart{i}.legend"] = repr(chart.legend)
        out[f"{ws.title}#footer"] = repr(ws.oddFooter.center.text)
        out[f"{ws.title}#header"] = repr(ws.oddHeader.left.text)
    return out


def build(kind, params, inputs, labels, layout, **request):
    """The workbook in memory, through the build request or, in an older checkout, the
    arguments build_workbook took before it."""
    from workbook_builder.book.workbook import build_workbook
    try:
        from workbook_builder.sheet.request import BuildRequest
    except ImportError:
        return build_workbook(kind, params, inputs, labels, layout, **request)
    return build_workbook(BuildRequest(kind, params, labels, layout, **request), inputs)


def dump(path: str, lang: str) -> None:

    result = {}
    for name, kind, params, inputs, labels, layout, exercise, student, note in cases():
        try:
            wb = build(kind, params, inputs, labels, layout, lang=lang, exercise=exercise,
                       student=student, note=note, student_name="Ann" if student else "")
            result[name] = texts(wb)
        except Exception as e:  # noqa: BLE001 - a case this layout refuses is recorded
            result[name] = {"error": f"{type(e).__name__}: {e}"}
    with open(path, "w") as f:
        json.dump(result, f, ensure_ascii=False, indent=0, sort_keys=True)
    cells = sum(len(v) for v in result.values())
    print(f"{len(result)} workbooks, {cells} texts -> {path}")


def compare(a_path: str, b_path: str) -> int:
    a, b = (json.load(open(p)) for p in (a_path, b_path))
    diffs = 0
    for case in sorted(set(a) | set(b)):
        x, y = a.get(case, {}), b.get(case, {})
        for where in sorted(set(x) | set(y)):
            if x.get(where) != y.get(where):
                diffs += 1
                if diffs <= 40:
                    print(f"{case} {where}:\n  - {x.get(where)!r}\n  + {y.get(where)!r}")
    texts_compared = sum(len(v) for v in a.values())
    print(f"{len(a)} workbooks, {texts_compared} texts compared, {diffs} differ")
    return diffs


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    dump(sys.argv[1], sys.argv[sys.argv.index("--lang") + 1] if "--lang" in sys.argv else "zh")
