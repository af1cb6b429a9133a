"""The per-kind pages of `docs/kinds/`, written from each kind's declaration.

`python -m workbook_builder.docs [FOLDER]` writes, for every registered kind,
FOLDER/<kind>.md (FOLDER defaults to the checkout's `docs/kinds`): the hand-written notes of
FOLDER/prose/<kind>.md, then what the declaration says — the module's equations, the
parameters (the `Params` dataclass: flag, default, help), the `--example` presets, and every
defined name of the kind's default, test and demo cases with its shape, equation and
explanation. FOLDER/README.md lists the kinds after the notes of FOLDER/prose/index.md.
A test fails when a page differs from what this module writes.
"""

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

from workbook_builder import api
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.declare import text_of
from workbook_builder.sheet.kind import Kind, make_params

DEFAULT_FOLDER = Path(__file__).resolve().parent.parent / "docs" / "kinds"
GENERATED = ("<!-- Written by `python -m workbook_builder.docs` from {sources}: edit those, "
             "then run it. -->")
# numbered copies of a block, as the pages write them: SCORES_H2 -> SCORES_Hh
NUMBERED = (("H", "Hh", "head h"), ("B", "Bj", "key block j"), ("D", "Dw", "width w"),
            ("T", "Tt", "step t"))


def documented_name(name: str, suffixes=None) -> str:
    """SCORES_H2 -> SCORES_Hh, S_B3 -> S_Bj, SCORES_D64 -> SCORES_Dw, Q_T3 -> Q_Tt, and a
    stacked layer's SCORES_H2_L1 -> SCORES_Hh_Ll, a second text's SCORES_H2_L1_2 ->
    SCORES_Hh_Ll_2. A kind's own `suffixes` ((letter, documented, meaning), …) replace
    these, and a chain of them is written whole: SCORES_H1_D2_T3 -> SCORES_Hh_Dl_Tt."""
    if suffixes is not None:
        documented = {letter: written for letter, written, _ in suffixes}
        tail = ""
        while (found := re.search(r"_([A-Z])\d+$", name)) and found.group(1) in documented:
            tail, name = f"_{documented[found.group(1)]}{tail}", name[:found.start()]
        return name + tail
    if re.search(r"_L\d+_2$", name):
        return documented_name(name[:-2]) + "_2"
    layer = re.search(r"_L\d+$", name)
    if layer:
        return documented_name(name[:layer.start()]) + "_Ll"
    for numbered, documented, _ in NUMBERED:
        name = re.sub(rf"_{numbered}\d+$", f"_{documented}", name)
    return name


def cell(text: Any) -> str:
    """Text for one cell of a Markdown table: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def kind_cases(kind: type[Kind]) -> list[tuple[str, dict[str, Any]]]:
    """(label, parameters) of the defaults, the test cases and the demo cases, each
    distinct set once."""
    found: list[tuple[str, dict[str, Any]]] = [("defaults", {})]
    labelled = [(f"test {i}", case) for i, case in enumerate(kind.test_cases, 1)]
    labelled += [(f"demo `{stem}`", case) for stem, case in kind.demo_cases]
    for label, case in labelled:
        params = make_params(kind, case)
        if all(make_params(kind, seen) != params for _, seen in found):
            found.append((label, dict(case)))
    return found


def case_blocks(kind: type[Kind], case: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(name, [what, shape, equation, explanation]) of every block of one case, in sheet
    order; shapes of steps come from the NumPy reference of seeded inputs."""
    params = make_params(kind, case)
    shapes = {name: tuple(value.shape) for name, value in
              api.reference(kind.name, {}, **case).items()}
    shapes.update(kind.input_shapes(params))
    blocks = []
    for section in kind.sections(params):
        for band in section.bands:
            for item in band:
                name = getattr(item, "name", None)
                if name is None or name not in shapes:
                    continue
                rows, cols = (shapes[name] + (1, 1))[:2]
                shape = f"{rows}×{cols}"
                if hasattr(item, "formula"):
                    equation = text_of(item.equation, params)
                    blocks.append((name, ["step", shape, f"`{equation}`" if equation else "",
                                          text_of(item.explanation, params)]))
                else:
                    note = f" — {item.note}" if item.note else ""
                    blocks.append((name, ["input", shape, "", item.title + note]))
    return blocks


def names_table(kind: type[Kind], cases: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Every documented name once, in sheet order, from the first case that has it."""
    order: list[str] = []
    rows: dict[str, list[str]] = {}
    for label, case in cases:
        previous = None
        for name, fields in case_blocks(kind, case):
            key = documented_name(name, getattr(kind, "documented_suffixes", None))
            if key not in rows:
                rows[key] = [f"`{key}`", *fields, label]
                order.insert(order.index(previous) + 1 if previous else 0, key)
            previous = key
    lines = ["| name | block | shape | equation | explanation | first in |",
             "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cell(text) for text in rows[key]) + " |" for key in order]
    return lines


def params_table(kind: type[Kind]) -> list[str]:
    lines = ["| flag | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(kind.Params):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "")
        flag = "--" + f.name.replace("_", "-")
        shown = "off" if default is False else "—" if default is None else default
        lines.append(f"| `{flag}` | {cell(shown)} | {cell(f.metadata.get('help', ''))} |")
    return lines


def kind_page(kind: type[Kind], prose: str) -> str:
    module = sys.modules[kind.__module__]
    cases = kind_cases(kind)
    source = f"sheets/{module.__name__.split('.')[-1]}.py"
    lines = [GENERATED.format(sources=f"`{source}` and `prose/{kind.name}.md`"), "",
             prose.strip(), "", "## From the declaration", "",
             f"`attnsheets list`: {kind.summary}.", ""]
    if module.__doc__:
        lines += [f"The equations, as `{source}` states them:", "", "```text",
                  *module.__doc__.strip().splitlines(), "```", ""]
    lines += ["### Parameters", "", f"`attnsheets build {kind.name} -o FILE.xlsx` takes "
              "these flags beside the options every build takes "
              "([commands.md](../commands.md)).", "", *params_table(kind), ""]
    if kind.examples:
        demo = [name for name in kind.examples if name in kind.demo_examples]
        lines += ["### Examples", "", "`--example " + "`, `--example ".join(kind.examples)
                  + "`" + (f"; `attnsheets demo` builds {', '.join(demo)}" if demo else "")
                  + " ([the presets](../workbooks.md#examples-worth-looking-at)).", ""]
    own = getattr(kind, "documented_suffixes", None)
    numbered = ", ".join(f"`_{documented}` {meaning}" for _, documented, meaning in
                         own or NUMBERED) + ("" if own else ", `_Ll` layer l")
    lines += ["### Defined names", "",
              "Every input and step block of the cases below, in sheet order, with its "
              "shape in the first case that has it. Numbered copies are written once, with "
              f"the first copy's equation: {numbered}.", "",
              *names_table(kind, cases), "",
              "Cases (parameters other than the defaults):", ""]
    lines += [f"- {label}: " + (", ".join(f"`{k}={v}`" for k, v in case.items()) or "—")
              for label, case in cases]
    return "\n".join(lines) + "\n"


def index_page(kinds: dict[str, type[Kind]], prose: str) -> str:
    lines = [GENERATED.format(sources="the kinds' declarations and `prose/index.md`"), "",
             "# Sheet kinds", "", "| kind | what it shows |", "|---|---|"]
    lines += [f"| [`{name}`]({name}.md) | {cell(kind.summary)} |"
              for name, kind in sorted(kinds.items())]
    return "\n".join(lines) + "\n\n" + prose.strip() + "\n"


def pages(folder: Path = DEFAULT_FOLDER) -> dict[Path, str]:
    """Every page this module writes, by path, from the notes in folder/prose."""
    kinds = load_kinds()
    prose = folder / "prose"
    written = {folder / "README.md": index_page(
        kinds, (prose / "index.md").read_text(encoding="utf-8"))}
    for name, kind in sorted(kinds.items()):
        notes = prose / f"{name}.md"
        text = notes.read_text(encoding="utf-8") if notes.exists() else \
            f"# `{name}` — {kind.summary}\n"
        written[folder / f"{name}.md"] = kind_page(kind, text)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else DEFAULT_FOLDER
    for path, text in pages(folder).items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
