"""The Python API's promise (docs/python.md): every error a user can cause is an
`AttnsheetsError` with one line, never a bare ValueError, TypeError, AttributeError or
FileNotFoundError. Every public function is given an argument of a wrong type, one
parameter at a time; then the inputs, languages, exercises, paths and cell edits a user
got wrong."""

import collections.abc
import inspect
import types
import typing
from pathlib import Path

import openpyxl
import pytest

from workbook_builder import api

BOOK = api.build("attention", seq_len=2, d_model=2, d_k=2)
WRONG = object()  # of no type any parameter takes


def public_functions() -> dict[str, collections.abc.Callable]:
    """Every function the API offers by name, and the methods of a Book."""
    found = {name: getattr(api, name) for name in api.__all__}
    found = {name: f for name, f in found.items() if inspect.isfunction(f)}
    return {**found, "Book.save": BOOK.save, "Book.set_input": BOOK.set_input}


def of_type(hint):
    """A value of the annotated type (None where it may be None)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return None if type(None) in args else of_type(args[0])
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable):
        return []
    if origin in (dict, collections.abc.Mapping):
        return {}
    if origin is collections.abc.Callable:
        return print
    if origin is type:
        return api.get_kind("attention")
    simple = {str: "x", int: 1, float: 1.0, bool: False, Path: "x",
              openpyxl.Workbook: openpyxl.Workbook(),
              api.ExerciseSpec: api.make_spec("Q", None, True)}
    assert hint in simple, f"no value of type {hint} to call with"
    return simple[hint]


def calls() -> list[tuple[str, str]]:
    """(function, parameter) of every annotated parameter of every public function."""
    found = []
    for name, function in public_functions().items():
        for param in inspect.signature(function).parameters.values():
            if param.annotation not in (inspect.Parameter.empty, typing.Any) and \
                    param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                found.append((name, param.name))
    return found


def test_the_walk_reaches_every_public_function():
    named = {name for name, _ in calls()}
    assert {"build", "check", "read_blocks", "reference", "grade_all", "grade_file",
            "read_record", "Book.save", "Book.set_input", "run_class"} <= named, named


@pytest.mark.parametrize("function,parameter", calls())
def test_every_public_function_given_a_wrong_type_raises_attnsheets_error(
        function, parameter, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a call that went ahead would write "x" here
    called = public_functions()[function]
    arguments = {}
    for param in inspect.signature(called).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name == parameter:
            arguments[param.name] = WRONG
        elif param.default is inspect.Parameter.empty:
            annotation = param.annotation
            if isinstance(annotation, str):  # resolved in the function's own module
                annotation = eval(annotation, vars(inspect.getmodule(called)))
            arguments[param.name] = None if annotation is inspect.Parameter.empty else \
                of_type(annotation)
    with pytest.raises(api.AttnsheetsError, match=f"{parameter} must be .*, not object"):
        called(**arguments)


@pytest.mark.parametrize("call,says", [
    (lambda: api.build("attention", inputs={"X": "abc"}), "input X must be a table of numbers"),
    (lambda: api.build("attention", inputs={"X": [[1, 2], [3]]}),
     "input X must be a table of numbers"),
    (lambda: api.build("attention", inputs=[1, 2]), "inputs must be a dict"),
    (lambda: api.reference("attention", {"X": [[1], [1, 2]]}),
     "input X must be a table of numbers"),
    (lambda: api.reference("attention", None), "inputs must be a dict"),
    (lambda: api.build("attention", lang="xx"), "lang must be one of en, zh"),
    (lambda: api.build("attention", lang=5), "lang must be str"),
    (lambda: api.build("attention", exercise=5), "exercise must be str or ExerciseSpec"),
    (lambda: api.build("attention", tokens=5), "tokens must be"),
    (lambda: api.build("attention", 5), "path must be str or Path"),
    (lambda: api.build("encoder-block", checkpoint=5), "checkpoint must be str or Path"),
    (lambda: api.check(5), "path_or_book must be str or Path or Book"),
    (lambda: api.read_blocks(5), "path_or_book must be str or Path or Book"),
    (lambda: api.grade_file(5), "path must be str or Path"),
    (lambda: api.read_record(5), "path must be str or Path"),
    (lambda: api.grade_all(5, None, False), "paths must be a list of str or Path"),
    (lambda: BOOK.save(5), "path must be str or Path"),
    (lambda: BOOK.set_input("W_Q", 0.5, 0, 1.0), "i must be int, not float 0.5"),
    (lambda: BOOK.set_input("W_Q", "0", 0, 1.0), "i must be int, not str"),
    (lambda: BOOK.set_input("W_Q", 0, 0, "abc"), "value must be float, not str"),
    (lambda: BOOK.set_input("W_Q", 0, 0, float("nan")), "a cell holds a finite number"),
    (lambda: BOOK.set_input("W_Q", 0, True, 1.0), "j must be int, not bool"),
], ids=["inputs-text", "inputs-ragged", "inputs-list", "reference-ragged", "reference-none",
        "lang-unknown", "lang-number", "exercise-number", "tokens-number", "path-number",
        "checkpoint-number", "check-number", "read-blocks-number", "grade-file-number",
        "read-record-number", "grade-all-number", "save-number", "set-input-half",
        "set-input-text-row", "set-input-text-value", "set-input-nan", "set-input-bool"])
def test_what_a_user_got_wrong_is_an_attnsheets_error(call, says):
    with pytest.raises(api.AttnsheetsError) as raised:
        call()
    assert says in str(raised.value) and "\n" not in str(raised.value), raised.value
