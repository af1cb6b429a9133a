"""Every kind of .xlsx file attnsheets writes, written into one folder: the files the
Excel-compatibility tests (tests/test_excel_rules.py) validate. Besides the demo workbooks
(`attnsheets demo`, the `cells` and `blocks` layouts) and `reproduce wo-ai-ai`, which the
session fixtures of conftest.py write: the `hand` layout and Chinese labels of every kind,
the `--example` presets the demo leaves out, a class's exercises and answer keys in each
layout, and workbooks built from tiny random checkpoints of every model family read."""

from pathlib import Path

from helpers.cli import cli
from helpers.models import tiny_checkpoints
from workbook_builder.demo import demo_plan, write_demo
from workbook_builder.errors import UserError
from workbook_builder.registry import load_kinds

# (kind, checkpoint maker, build flags): a workbook of each model family the loader reads
CHECKPOINT_BOOKS = [
    ("encoder-block", "bert", ["--layer", "1", "--text", "the animal was tired"]),
    ("multihead", "bert", ["--layer", "0", "--seq-len", "3", "--layout", "blocks"]),
    ("decoder-block", "gpt2", ["--token-ids", "5,17,3"]),
    ("gpt", "gpt2", ["--token-ids", "5,17,3", "--layout", "blocks"]),
    ("kv-cache", "gpt2", ["--token-ids", "5,17,3"]),
    ("llama-block", "llama", ["--seq-len", "3"]),
    ("mamba-block", "mamba", ["--seq-len", "4", "--layout", "blocks"]),
]


def built_by_cli(*args) -> None:
    ran = cli(*args)
    assert ran.returncode == 0, f"attnsheets {' '.join(map(str, args))}: {ran.stderr}"


def layouts_and_languages(folder: Path) -> list[Path]:
    """Every demo workbook in the `hand` layout (where the kind allows it at that size),
    and each kind's first demo workbook with Chinese labels in every layout."""
    written, first_of_kind = [], {}
    for name, kind, values, layout in demo_plan(with_model=False):
        if layout != "cells":
            continue
        stem = name.removesuffix("_cells.xlsx")
        jobs = [("hand", "en")]
        if kind.name not in first_of_kind:
            first_of_kind[kind.name] = stem
            jobs += [("cells", "zh"), ("blocks", "zh"), ("hand", "zh")]
        for layout_name, lang in jobs:
            path = folder / f"{stem}_{layout_name}_{lang}.xlsx"
            try:
                write_demo(kind, values, path, layout_name, lang=lang)
            except UserError:  # the hand layout is for teaching sizes only
                continue
            written.append(path)
    return written


def presets_outside_the_demo(folder: Path) -> list[Path]:
    """`build KIND --example NAME` for the presets `attnsheets demo` does not build."""
    written = []
    for kind_name, kind in sorted(load_kinds().items()):
        for example in kind.examples:
            if example not in kind.demo_examples:
                path = folder / f"{kind_name}_{example}_example.xlsx"
                built_by_cli("build", kind_name, "--example", example, "-o", path)
                written.append(path)
    return written


def class_books(folder: Path) -> list[Path]:
    """`attnsheets class`: exercises and keys, with self-checks (cells, Chinese blocks)
    and bare (hand)."""
    roster = folder / "roster.csv"
    roster.write_text("id\ns01\n李雷\n", encoding="utf-8")
    runs = [("cells", ["--exercise", "WEIGHTS,OUTPUT"]),
            ("blocks", ["--exercise", "SCORES,OUTPUT", "--lang", "zh"]),
            ("hand", ["--exercise", "WEIGHTS", "--no-self-check"])]
    written = []
    for layout, flags in runs:
        out = folder / f"class_{layout}"
        built_by_cli("class", "attention", "--roster", roster, "--out", out, "--seq-len", "3",
                     "--layout", layout, *flags)
        written += sorted(out.glob("*.xlsx"))
    return written


def checkpoint_books(folder: Path, checkpoints: dict[str, Path]) -> list[Path]:
    """A workbook from each tiny checkpoint (`checkpoints`: maker name -> folder)."""
    written = []
    for kind_name, maker, flags in CHECKPOINT_BOOKS:
        path = folder / f"{kind_name}_{maker}_checkpoint.xlsx"
        built_by_cli("build", kind_name, "--checkpoint", checkpoints[maker], *flags, "-o", path)
        written.append(path)
    return written




def write_every_kind_of_file(folder: Path) -> list[Path]:
    """The files above (not the demo's or reproduce's), written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written = layouts_and_languages(folder) + presets_outside_the_demo(folder) + \
        class_books(folder)
    checkpoints = tiny_checkpoints(folder / "models")
    if checkpoints:
        written += checkpoint_books(folder, checkpoints)
    return written
