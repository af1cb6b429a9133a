"""The Python API, for scripts and notebooks; the command line is built on it.

    from workbook_builder import api
    book = api.build("attention", seq_len=3, d_model=2, d_k=2, tokens=["我", "爱", "AI"])
    api.read_blocks(book)["WEIGHTS"]          # a DataFrame indexed by the tokens
    book.set_input("X", 0, 0, 2.5)            # edit an input, as a teacher would
    api.check(book).to_frame()                # one row per step: cells, error, passed
    book.save("attention.xlsx")

Every error a user can cause raises `AttnsheetsError` with the one-line message the command
line prints.
"""

import collections.abc
import functools
import html
import importlib
import inspect
import math
import numbers
import os
import tempfile
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from openpyxl.workbook.workbook import Workbook

from workbook_builder.book.files import (
    check_writable,
    count_formula_cells,
    expect_writes,
    export_pdf,
    open_workbook,
    parse_tokens,
    resolve_params,
    save_atomic,
)
from workbook_builder.book.inputs import load_inputs
from workbook_builder.book.pdfs import Handout, export_pdfs, plan_handouts
from workbook_builder.book.workbook import BookSpec, book_spec, build_workbook, read_spec
from workbook_builder.checking.check import (
    ENGINES,
    CheckReport,
    check_workbook,
    expected_steps,
    installed_engines,
)
from workbook_builder.engines.formulas_engine import CellValues, FormulasModel
from workbook_builder.errors import UserError
from workbook_builder.language.i18n import LANGS
from workbook_builder.models.examples import MINILM_PIP, make_example
from workbook_builder.models.readers import CHECKPOINT_KINDS, TWO_TEXT_KINDS, reader_of
from workbook_builder.registry import get_kind, load_kinds
from workbook_builder.sheet.constants import (
    CONSTANT_BLOCK_CELLS,
    constant_block_at,
    set_number,
)
from workbook_builder.sheet.kind import Kind, complete_inputs
from workbook_builder.sheet.layout import LAYOUTS
from workbook_builder.sheet.limits import (
    DEFAULT_MAX_CELLS,
    check_results_finite,
    check_sizes,
    plan_build,
)
from workbook_builder.sheet.names import NamedRange, find_name
from workbook_builder.sheet.provenance import (
    CheckpointParams,
    checked_against_sources,
    settle,
    sources,
    sources_line,
)
from workbook_builder.sheet.request import ExerciseSpec, make_spec

AttnsheetsError = UserError
Report = CheckReport

__all__ = [
    "AttnsheetsError", "Book", "Report", "build", "check", "kinds", "read_blocks",
    "reference",
    # grading against the teacher's record of a class (manifest.json)
    "StudentRecord", "grade_file", "read_record",
    # what the command line needs besides: it reaches the machinery only through this module
    "CHECKPOINT_KINDS", "DEFAULT_MAX_CELLS", "ENGINES", "LANGS", "LAYOUTS", "MANIFEST",
    "TUTORIALS", "ClassResult", "DemoResult", "checkpoint_inputs",
    "ExampleResult", "ExerciseSpec", "Grade", "Kind", "check_writable", "demo_plan",
    "demo_workers",
    "export_pdf", "export_pdfs", "Handout", "plan_handouts", "get_kind", "grade_all",
    "installed_engines", "load_inputs", "make_spec",
    "open_workbook", "parse_token_ids", "parse_tokens", "read_spec", "reproduce",
    "resolve_params", "run_class", "run_demo", "real_model_demo", "MINILM_PIP",
    "expect_writes",
    "check_catalog", "Findings"]

# what only some commands use (a demo, a class, grading, a checkpoint, a tutorial) is
# imported on first use, so that every command starts fast: name -> its module
_ON_FIRST_USE = {
    **dict.fromkeys(("DemoResult", "demo_plan", "demo_workers",
                     "real_model_demo", "run_demo"), "workbook_builder.demo"),
    **dict.fromkeys(("MANIFEST", "ClassResult", "run_class"),
                    "workbook_builder.teaching.classroom"),
    **dict.fromkeys(("Grade", "grade_all", "grade_file"), "workbook_builder.teaching.grade"),
    **dict.fromkeys(("StudentRecord", "read_record"), "workbook_builder.teaching.record"),
    **dict.fromkeys(("TUTORIALS", "ExampleResult", "reproduce"),
                    "workbook_builder.teaching.reproduce"),
    **dict.fromkeys(("ModelInputs", "parse_token_ids"), "workbook_builder.models.loader"),
    **dict.fromkeys(("check_catalog", "Findings"), "workbook_builder.teaching.catalog"),
}


def __getattr__(name: str) -> Any:
    """The names of `_ON_FIRST_USE`, their module imported when first asked for (functions
    taking paths take them as `str` too)."""
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    if inspect.isfunction(found):
        found = _taking_str_paths(found)
    globals()[name] = found  # asked for once
    return found


def _taking_str_paths(function: Callable) -> Callable:
    """`function` as the API offers it: every argument held to its annotation (one of
    another type is an `AttnsheetsError` naming it, as is a call missing an argument),
    each argument annotated as a Path (or a list of them) also taken as a `str` (or any
    `os.PathLike`), and a missing or unreadable file an `AttnsheetsError`."""
    signature = inspect.signature(function)
    hints = _parameter_hints(function, signature)
    path_params = {name: "list[" in str(param.annotation)
                   for name, param in signature.parameters.items()
                   if "Path" in str(param.annotation)}

    @functools.wraps(function)
    def with_paths(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise UserError(f"{function.__name__}: {error}") from None
        for name, value in bound.arguments.items():
            if name in hints and not _accepts(value, hints[name]):
                shown = repr(value) if len(repr(value)) <= 40 else "…"
                raise UserError(f"{function.__name__}: {name} must be "
                                f"{_described(hints[name])}, not {type(value).__name__} "
                                f"{shown}")
        for name, is_list in path_params.items():
            value = bound.arguments.get(name)
            if value is None:
                continue
            if is_list and not isinstance(value, str | os.PathLike):
                bound.arguments[name] = [Path(v) for v in value]
            elif isinstance(value, str | os.PathLike):  # a Book stays a Book
                bound.arguments[name] = [Path(value)] if is_list else Path(value)
        try:
            return function(*bound.args, **bound.kwargs)
        except FileNotFoundError as error:
            raise UserError(f"{error.filename}: no such file") from None
        except (IsADirectoryError, NotADirectoryError, PermissionError) as error:
            raise UserError(f"{error.filename}: {error.strerror}") from None

    return with_paths


def _parameter_hints(function: Callable, signature: inspect.Signature) -> dict[str, Any]:
    """Each named parameter's annotation, resolved in the function's module; one that names
    what only a type checker imports (or nothing: `**sizes`) is left out, not judged."""
    module = vars(inspect.getmodule(function) or object())
    hints = {}
    for name, param in signature.parameters.items():
        annotation = param.annotation
        if annotation is inspect.Parameter.empty or param.kind in (
                param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, module)  # noqa: S307 - our own annotations
            except Exception:  # a name imported only under TYPE_CHECKING
                continue
        hints[name] = annotation
    return hints


def _accepts(value: Any, hint: Any) -> bool:
    """Whether `value` is of the annotated type (`Any` and what this does not know of:
    yes). A whole number is not a bool, a Path is also a str or any os.PathLike, a list
    holds its items' type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(value, arg) for arg in args)
    if hint is Path:
        return isinstance(value, str | os.PathLike)
    if hint is bool:
        return isinstance(value, bool | np.bool_)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable):
        holder = (list, tuple) if origin in (list, tuple) else origin
        items = args[:1] if origin is not tuple or Ellipsis in args else ()
        return isinstance(value, holder) and not isinstance(value, str) and \
            all(_accepts(item, items[0]) for item in value) if items else \
            isinstance(value, holder) and not isinstance(value, str)
    if origin in (dict, collections.abc.Mapping):
        return isinstance(value, collections.abc.Mapping) and \
            all(_accepts(key, args[0]) for key in value) if args else \
            isinstance(value, collections.abc.Mapping)
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return callable(value)
    if origin is type:
        return isinstance(value, type) and (not args or not isinstance(args[0], type)
                                            or issubclass(value, args[0]))
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _described(hint: Any) -> str:
    """An annotation in words: "str or Path or None", "a list of str"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is None or hint is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        words = " or ".join(_described(arg) for arg in args).split(" or ")
        return " or ".join(dict.fromkeys(words))  # str | Path: "str or Path", once
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable) and args:
        return f"a list of {_described(args[0])}"
    if origin in (dict, collections.abc.Mapping):
        return "a dict" + (f" of {_described(args[0])} keys" if args else "")
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return "a function"
    if origin is type:
        return "a class"
    if hint is Path:
        return "str or Path"
    return getattr(hint, "__name__", str(hint))


# a real model's layer in the `cells` layout (one formula per cell, each reading a whole
# row of d_model or d_ff numbers) takes the `formulas` engine many minutes: past this many
# input cells `build` asks for `blocks`
CELLS_LAYOUT_LIMIT = 200_000

if TYPE_CHECKING:  # pandas is imported on first use: it costs ~0.3 s at start-up
    import pandas as pd

    # the names `__getattr__` imports on first use, for readers of the code and checkers
    from workbook_builder.demo import (
        DemoResult,
        demo_plan,
        demo_workers,
        real_model_demo,
        run_demo,
    )
    from workbook_builder.models.loader import (  # noqa: F401 (imported on first use)
        GivenText,
        ModelInputs,
        TokenIds,
        parse_token_ids,
    )
    from workbook_builder.teaching.catalog import Findings, check_catalog
    from workbook_builder.teaching.classroom import MANIFEST, ClassResult, run_class
    from workbook_builder.teaching.grade import Grade, grade_all, grade_file
    from workbook_builder.teaching.record import StudentRecord, read_record
    from workbook_builder.teaching.reproduce import TUTORIALS, ExampleResult, reproduce


class Book:
    """A workbook of one kind in memory: built, optionally saved, evaluated when asked."""

    def __init__(self, kind: type[Kind], params, workbook: Workbook, spec: BookSpec,
                 path: Path | None = None, values: CellValues | None = None,
                 note: str | None = None, sources: str | None = None):
        self.kind, self.params, self.workbook, self.spec = kind, params, workbook, spec
        self.path = path
        self.note = note  # where the numbers come from (a checkpoint, an example)
        self.sources = sources  # where each parameter comes from (sheet/provenance.py)
        self._values = values

    @property
    def values(self) -> CellValues:
        """Every formula cell's value, from the `formulas` engine (computed once)."""
        if self._values is None:
            self._values = FormulasModel(self.workbook, self.name).evaluate()
        return self._values

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else f"{self.kind.name}.xlsx"

    @property
    def formula_cells(self) -> int:
        return count_formula_cells(self.workbook)

    def save(self, path: str | Path, force: bool = False) -> Path:
        """Write the workbook atomically, each formula's value stored beside it; an existing
        file is replaced only with `force`."""
        path = Path(path)
        check_writable(path, force)
        self._values = save_atomic(self.workbook, path, force=force)
        self.path = path
        return path

    def set_input(self, name: str, i: int, j: int, value: float) -> None:
        """Change one input cell (0-based within the block named `name`), as a teacher edits
        a yellow cell; the formulas and `check` follow it."""
        if name not in self.kind.input_shapes(self.params):
            raise UserError(f"kind {self.kind.name} has no input {name!r}")
        where = find_name(self.workbook, name, Path(self.name))
        if not (0 <= i < where.shape[0] and 0 <= j < where.shape[1]):
            raise UserError(f"input {name} is {where.shape[0]}×{where.shape[1]}; it has no "
                            f"cell ({i}, {j})")
        if not math.isfinite(value):
            raise UserError(f"input {name}: a cell holds a finite number, not {value}")
        set_number(self.workbook[where.sheet], where.top + i, where.left + j, float(value))
        self._values = None

    def steps(self) -> list[str]:
        return self.kind.step_names(self.params)

    def _repr_html_(self) -> str:
        frames = read_blocks(self)
        parts = [f"<p><b>{html.escape(self.kind.name)}</b> "
                 f"{html.escape(self.kind.describe(self.params))}; layout "
                 f"{self.spec.layout}; {self.formula_cells} formula cells</p>"]
        for name in self.steps():
            parts.append(f"<div style='display:inline-block;margin:0 1em 1em 0;"
                         f"vertical-align:top'><b>{html.escape(name)}</b>"
                         f"{_heatmap_html(frames[name])}</div>")
        return "".join(parts)

    def __repr__(self) -> str:
        where = f" at {self.path}" if self.path else " (not saved)"
        return f"<Book {self.kind.name} {self.kind.describe(self.params)}{where}>"


def kinds() -> list[str]:
    """The names of the sheet kinds."""
    return sorted(load_kinds())


def build(kind: str, path: str | Path | None = None, *,
          inputs: dict[str, Any] | None = None, seed: int = 0,
          tokens: list[str] | str | None = None, layout: str = "cells", lang: str = "en",
          exercise: str | ExerciseSpec | None = None, force: bool = False,
          max_cells: int = DEFAULT_MAX_CELLS,
          checkpoint: str | Path | None = None, layer: int = 0, prefix: str | None = None,
          text: str | None = None, token_ids: list[int] | str | None = None,
          text2: str | None = None, token_ids2: list[int] | str | None = None,
          tokenizer: str | Path | None = None, example: str | None = None,
          **sizes: Any) -> Book:
    """A workbook of `kind`. Sizes are the kind's parameters (seq_len=…, d_k=…); sizes not
    given come from the inputs given, the tokens, then the defaults. Inputs not given are
    drawn from `seed`. With `path` the workbook is saved (atomically; replacing a file only
    with `force`). With `checkpoint` (a model folder, .zip, .safetensors, .pt/.bin or .npz)
    the weights of layer `layer` come from it and its config, and `text` (tokenised by its
    tokenizer.json) or `token_ids` give X (`encoder`: the token ids; `text2` or
    `token_ids2` a second text, embedded beside the first; `tokenizer` a tokenizer.json
    for a checkpoint without one). `example` names one of the
    kind's presets (`Kind.examples`): its sizes, inputs and tokens, each overridden by
    what is given by hand; the book's `note` says where its numbers come from. A sheet
    beyond Excel's grid or of more than `max_cells` cells, and inputs whose results
    overflow, are refused before anything is built."""
    kind_class = get_kind(kind)
    if layout not in LAYOUTS:
        raise UserError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if lang not in LANGS:
        raise UserError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    labels_given = parse_tokens(tokens) if isinstance(tokens, str) else tokens
    given = _number_tables(inputs)
    flags = dict(sizes)
    model = checkpoint_inputs(kind_class.name, sizes, checkpoint, layer, prefix, text,
                              token_ids, text2, token_ids2, tokenizer)
    preset = None
    if example is not None:
        if model is not None:
            raise UserError("--example and --checkpoint cannot be combined: each gives the "
                            "inputs")
        preset = make_example(kind_class, example)
    note = None
    if model is not None:
        given, sizes, note = {**model.inputs, **given}, {**model.params, **sizes}, model.note
        labels_given = labels_given or model.labels
    if preset is not None:
        given = {**{k: np.asarray(v, dtype=float) for k, v in preset.inputs.items()}, **given}
        sizes, note = {**preset.params, **sizes}, preset.note
        labels_given = labels_given or preset.tokens
    fixed = None if model is None else model.decided.fixed
    params = checked_against_sources(
        lambda values: resolve_params(kind_class, values, given, labels_given), sizes, fixed,
        flags)
    inferred = {**(kind_class.params_from_tokens(labels_given) if labels_given else {}),
                **kind_class.infer_params(given)}
    said = sources_line(params, sources(kind_class, params, flags=flags, fixed=fixed,
                                        example=None if preset is None else preset.params,
                                        inferred=inferred))
    if isinstance(exercise, str):
        exercise = make_spec(exercise, None, True)
    check_sizes(kind_class, params, max_cells)  # before anything is allocated
    if checkpoint is not None and layout == "cells":
        cells = sum(r * c for r, c in kind_class.input_shapes(params).values())
        if cells > CELLS_LAYOUT_LIMIT:
            raise UserError(f"{kind_class.name}: this sheet has {cells:,} input cells, too "
                            f"many for the cells layout (one formula per cell); build it "
                            f"with --layout blocks")
    # saved at once: large input blocks go to the file without a cell object each
    request = plan_build(kind_class, params, labels_given, max_cells=max_cells, layout=layout,
                         lang=lang, exercise=exercise, note=note, sources=said,
                         array_block_cells=None if path is None else CONSTANT_BLOCK_CELLS)
    complete = complete_inputs(kind_class, params, given, seed)
    check_results_finite(request, complete)
    workbook = build_workbook(request, complete)
    book = Book(kind_class, params, workbook, book_spec(request), note=note, sources=said)
    if path is not None:
        book.save(path, force=force)
    return book


def _number_tables(inputs: dict[str, Any] | None) -> dict[str, np.ndarray]:
    """Each input given as an array of floats, or one line naming the one that is not a
    table of numbers (text, rows of unequal length)."""
    tables = {}
    for name, value in (inputs or {}).items():
        try:
            tables[name] = np.asarray(value, dtype=float)
        except (TypeError, ValueError) as error:
            raise UserError(f"input {name} must be a table of numbers, rows of one length "
                            f"({' '.join(str(error).split())[:80]})") from None
    return tables


def checkpoint_inputs(kind: str, sizes: dict[str, Any], checkpoint: str | Path | None = None,
                      layer: int = 0, prefix: str | None = None, text: str | None = None,
                      token_ids: list[int] | str | None = None, text2: str | None = None,
                      token_ids2: list[int] | str | None = None,
                      tokenizer: str | Path | None = None) -> "ModelInputs | None":
    """What a checkpoint gives a build of `kind` (parameters, inputs, labels, a note for
    the sheet), or None without one; `sizes` are the flags given by hand."""
    ids, ids2 = token_ids, token_ids2
    if token_ids2 is not None or text2 is not None or isinstance(token_ids, str):
        from workbook_builder.models.loader import GivenText, TokenIds, parse_token_ids

        # the second text's ids and text carry their flag, which messages about them name
        ids = parse_token_ids(token_ids) if isinstance(token_ids, str) else token_ids
        ids2 = parse_token_ids(token_ids2, "--token-ids2") if isinstance(token_ids2, str) \
            else None if token_ids2 is None else TokenIds(token_ids2, "--token-ids2")
        text2 = None if text2 is None else GivenText(text2, getattr(text2, "flag", "--text2"))
    second = {} if text2 is None and ids2 is None else {"text2": text2, "token_ids2": ids2}
    if tokenizer is not None:
        if kind not in TWO_TEXT_KINDS:
            raise UserError(f"--tokenizer is for {', '.join(TWO_TEXT_KINDS)}, not {kind}")
        second["tokenizer"] = Path(tokenizer)
    if second and kind not in TWO_TEXT_KINDS:
        raise UserError(f"--text2 and --token-ids2 are for {', '.join(TWO_TEXT_KINDS)}, "
                        f"not {kind}")
    if checkpoint is None:
        if second:
            raise UserError("--text2, --token-ids2 and --tokenizer need --checkpoint")
        if text is not None or ids is not None or layer or prefix is not None:
            raise UserError("--text, --token-ids, --layer and --prefix need --checkpoint")
        return None
    reader = reader_of(kind)
    if reader is None:
        raise UserError(f"--checkpoint fills {', '.join(CHECKPOINT_KINDS)}, not {kind}")
    model = reader.load()(kind, checkpoint, layer=layer, prefix=prefix, text=text,
                          token_ids=ids, explicit=sizes, **second)
    # every reader's decisions settled against the flags here, once (sheet/provenance.py)
    decided = model.decided
    model.decided = CheckpointParams(settle(get_kind(kind), decided, sizes), decided.free,
                                     decided.family)
    return model


def check(path_or_book: str | Path | Book, engine: str = "formulas",
          progress: Callable[[str], None] | None = None) -> Report:
    """Re-derive every step from the inputs the workbook holds now and compare, cell by
    cell, with the NumPy reference; `engine` names the spreadsheet engine that evaluates the
    formulas (`ENGINES`); `progress` hears what is being done."""
    if engine not in ENGINES:
        raise UserError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if not isinstance(path_or_book, Book):
        return check_workbook(Path(path_or_book), engine,
                              **({"progress": progress} if progress else {}))
    book = path_or_book
    if engine == "formulas":
        return check_workbook(Path(book.name), engine, values=book.values,
                              workbook=book.workbook)
    with tempfile.TemporaryDirectory(prefix="attnsheets-api-") as folder:
        path = Path(folder) / book.name
        save_atomic(book.workbook, path, with_values=False)
        return check_workbook(path, engine)


def read_blocks(path_or_book: str | Path | Book) -> "dict[str, pd.DataFrame]":
    """Every named block (inputs and steps) as a DataFrame: row labels (tokens) as the
    index, column labels as the columns. From a file, the values it stores (as Excel,
    LibreOffice or the build saved them), read in one pass by the reader `check` uses (its
    large input blocks as arrays); from a Book, the `formulas` engine's values."""
    if isinstance(path_or_book, Book):
        workbook, values = path_or_book.workbook, path_or_book.values
    else:
        path = Path(path_or_book)
        workbook = open_workbook(path, data_only=True, array_blocks=True)
        read_spec(workbook, path)  # only our workbooks
        values = {}  # the cells hold the stored values
    import pandas as pd

    frames = {}
    for name in sorted(workbook.defined_names):
        where = find_name(workbook, name, Path("book"))
        ws = workbook[where.sheet]
        rows, cols = where.shape
        frames[name] = pd.DataFrame(
            _block_rows(ws, where, values),
            index=[ws.cell(where.top + i, where.left - 1).value for i in range(rows)],
            columns=[ws.cell(where.top - 1, where.left + j).value for j in range(cols)])
    return frames


def _block_rows(ws, where: NamedRange, values: CellValues) -> "list[list[Any]] | np.ndarray":
    """The block's cells row by row: an array block's numbers, else each cell's value
    (the engine's value where `values` has one)."""
    block = constant_block_at(ws, where.top, where.left, where.bottom, where.right)
    if block is not None:  # its float array as it is, unless some cells read as ints
        return block.rows() if block.integers.any() else block.values
    sheet = where.sheet.upper()
    rows = ws.iter_rows(min_row=where.top, max_row=where.bottom, min_col=where.left,
                        max_col=where.right, values_only=True)
    return [[value if (got := values.get((sheet, where.top + i, where.left + j))) is None
             else got for j, value in enumerate(row)] for i, row in enumerate(rows)]


def reference(kind: str, inputs: dict[str, Any], seed: int = 0,
              **sizes: Any) -> dict[str, np.ndarray]:
    """The NumPy reference's value of every step, in sheet order, for these inputs (sizes
    not given are inferred from them; inputs not given are drawn from `seed`)."""
    kind_class = get_kind(kind)
    given = _number_tables(inputs)
    params = resolve_params(kind_class, sizes, given, None)
    return expected_steps(kind_class, params, complete_inputs(kind_class, params, given, seed))


def _heatmap_html(frame: "pd.DataFrame") -> str:
    """A small table, each number shaded white to red by its place between the block's
    minimum and maximum."""
    import pandas as pd

    numbers = frame.apply(pd.to_numeric, errors="coerce")
    low, high = np.nanmin(numbers.values), np.nanmax(numbers.values)
    span = (high - low) or 1.0

    def shade(column) -> list[str]:
        return [f"background-color: rgba(248,105,107,{0.85 * (v - low) / span:.2f})"
                if np.isfinite(v) else "" for v in column]

    return numbers.style.apply(shade).format("{:.4f}", na_rep="—").to_html()


# every public function, and the machinery's the command line reaches through this
# module, holds its arguments to their types (the names of _ON_FIRST_USE: in __getattr__)
for _name in __all__:
    if inspect.isfunction(globals().get(_name)):
        globals()[_name] = _taking_str_paths(globals()[_name])
Book.save = _taking_str_paths(Book.save)
Book.set_input = _taking_str_paths(Book.set_input)
