"""The Python API: build, check, read_blocks, reference, kinds; the notebook display; and the
example notebook in docs/, executed as a user runs it."""

import inspect
import json
from pathlib import Path

import nbformat
import numpy as np
import pytest
from helpers.cli import cli
from helpers.requires import requires_libreoffice
from nbclient import NotebookClient

from workbook_builder import api

ROOT = Path(__file__).resolve().parent.parent
TOKENS = ["我", "爱", "AI"]
IDENTITY = [[1, 0], [0, 1]]
TUTORIAL = {"X": [[1, 0], [0, 1], [1, 1]], "W_Q": IDENTITY, "W_K": IDENTITY, "W_V": IDENTITY}


def softmax_rows(s):
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_kinds_lists_every_kind():
    assert api.kinds() == sorted(api.kinds()) and {"attention", "ssm"} <= set(api.kinds())


def test_read_blocks_gives_dataframes_indexed_by_tokens():
    book = api.build("attention", tokens=TOKENS, inputs=TUTORIAL)
    frames = api.read_blocks(book)
    weights = frames["WEIGHTS"]
    assert list(weights.index) == TOKENS and list(weights.columns) == TOKENS
    x = np.array(TUTORIAL["X"], float)
    expected = softmax_rows(x @ x.T / np.sqrt(2))  # written here from the equation
    np.testing.assert_allclose(weights.to_numpy(float), expected, rtol=1e-12)
    assert list(frames["X"].columns) == ["d1", "d2"]
    assert set(frames) == set(book.steps()) | set(TUTORIAL)


def test_read_blocks_of_a_file_reads_its_large_inputs_as_arrays_in_one_pass(tmp_path,
                                                                             monkeypatch):
    """A file with input blocks past CONSTANT_BLOCK_CELLS (a real layer's weights) is read
    as `check` reads it: one pass over each sheet's XML, those blocks as arrays, never a
    cell object per weight; every block equals what the build computed."""
    import workbook_builder.book.sheet_xml as sheet_xml

    book = api.build("attention", tmp_path / "big.xlsx", seq_len=3, d_model=128, d_k=40,
                     layout="blocks")
    arrays = []
    real_add = sheet_xml.add_constant_block
    monkeypatch.setattr(sheet_xml, "add_constant_block",
                        lambda ws, top, left, values, *rest: arrays.append(values.shape)
                        or real_add(ws, top, left, values, *rest))
    frames = api.read_blocks(str(book.path))
    assert (128, 40) in arrays  # W_Q, W_K, W_V: 5120 cells each
    for name, frame in api.read_blocks(book).items():
        np.testing.assert_array_equal(frames[name].to_numpy(float), frame.to_numpy(float),
                                      err_msg=name)
        assert list(frames[name].index) == list(frame.index)


def test_an_input_kept_as_an_array_block_can_be_changed(tmp_path):
    """A block of 64 × 64 weights is written from the layout's own (read-only) array:
    editing it through the API changes the workbook, and its check follows."""
    book = api.build("multihead", tmp_path / "m.xlsx", seq_len=3, d_model=64, heads=4,
                     layout="blocks")
    before = api.read_blocks(book)["CONCAT"].to_numpy(float)
    book.set_input("W_Q", 0, 0, 4.0)
    assert api.read_blocks(book)["W_Q"].to_numpy(float)[0, 0] == 4.0
    assert not np.allclose(api.read_blocks(book)["CONCAT"].to_numpy(float), before)
    assert api.check(book).passed


def test_an_input_changed_through_the_api_is_checked_from_the_workbook():
    book = api.build("attention", tokens=TOKENS, inputs=TUTORIAL)
    before = api.read_blocks(book)["WEIGHTS"].to_numpy(float)
    book.set_input("X", 0, 0, 2.0)
    after = api.read_blocks(book)["WEIGHTS"].to_numpy(float)
    assert not np.allclose(before, after)
    report = api.check(book)
    frame = report.to_frame()
    assert report.passed and frame["passed"].all()
    assert list(frame.index) == book.steps()
    assert {"cells", "max_abs_error", "worst_cell", "passed"} <= set(frame.columns)
    edited = {**TUTORIAL, "X": [[2, 0], [0, 1], [1, 1]]}
    np.testing.assert_allclose(after, api.reference("attention", edited)["WEIGHTS"],
                               rtol=1e-12)


def test_a_wrong_formula_shows_in_the_report_frame():
    book = api.build("attention", seq_len=3, d_model=2, d_k=2)
    where = api.read_blocks(book)["SCORES"]
    assert where.shape == (3, 3)
    ws = book.workbook["Attention"]
    cell = next(c for row in ws.iter_rows() for c in row
                if isinstance(c.value, str) and c.value.startswith("=SUMPRODUCT("))
    cell.value += "*2"
    book._values = None  # the workbook changed behind the Book's back
    frame = api.check(book).to_frame()
    assert not frame.loc["SCORES", "passed"] and frame.loc["Q", "passed"]


def test_save_is_atomic_refuses_to_overwrite_and_the_file_checks(tmp_path):
    book = api.build("multihead", seq_len=3, d_model=4, heads=2, layout="blocks")
    path = book.save(tmp_path / "mh.xlsx")
    assert api.check(path).passed and api.check(book).passed
    with pytest.raises(api.AttnsheetsError, match="already exists; pass --force"):
        api.build("multihead", tmp_path / "mh.xlsx")
    stored = api.read_blocks(path)["OUTPUT"].to_numpy(float)
    np.testing.assert_allclose(stored, api.read_blocks(book)["OUTPUT"].to_numpy(float))


@pytest.mark.parametrize("call,message", [
    (lambda: api.build("nosuchkind"), "unknown kind 'nosuchkind'"),
    (lambda: api.build("attention", seq_len=0), "--seq-len must be a positive"),
    (lambda: api.build("attention", layout="grid"), "layout must be one of"),
    (lambda: api.build("attention", inputs={"X": [[1, 2]], "W_Q": [[1], [2], [3]]}),
     "inputs disagree on d_model"),
    (lambda: api.check(Path("missing.xlsx")), "no such file"),
    (lambda: api.reference("attention", {"Z": [[1]]}), "has no input 'Z'"),
])
def test_errors_raise_one_type_with_the_command_lines_message(tmp_path, call, message):
    with pytest.raises(api.AttnsheetsError, match=message.replace("'", ".")) as raised:
        call()
    assert "\n" not in str(raised.value)


def _takes_a_path(function) -> bool:
    return any("Path" in str(p.annotation)
               for p in inspect.signature(function).parameters.values())


def test_every_api_function_taking_a_path_takes_a_str(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("roster.csv").write_text("id,name\ns1,Ann\ns2,Bo\n", encoding="utf-8")
    kind = api.get_kind("attention")
    params = api.resolve_params(kind, {"seq_len": 2, "d_model": 2, "d_k": 2}, {}, None)
    api.run_class(kind, params, "roster.csv", "class", api.make_spec("WEIGHTS", None, True))
    book = api.build("attention", "one.xlsx", seq_len=2, d_model=2, d_k=2)
    assert api.check("one.xlsx").passed and book.path == Path("one.xlsx")
    assert set(api.read_blocks("one.xlsx")) >= {"X", "WEIGHTS"}
    assert api.read_spec(api.open_workbook("one.xlsx"), "one.xlsx").kind == "attention"
    api.check_writable("new.xlsx", False)
    assert [r.student for r in api.read_record("class")] == ["s1", "s2"]
    assert api.grade_file("class/attention_s1.xlsx").student == "s1"
    grades = api.grade_all(["class"], "grades.csv", False, manifest="class/manifest.json")
    assert {g.student for g in grades if g.verified} == {"s1", "s2"}
    assert Path("grades.csv").is_file()
    assert api.reproduce("wo-ai-ai", "tutorial", False)
    # and every other public function whose signature names a Path is wrapped the same way
    exported = [getattr(api, name) for name in api.__all__]
    unwrapped = [f.__name__ for f in exported if inspect.isfunction(f) and _takes_a_path(f)
                 and f.__module__ != api.__name__ and not hasattr(f, "__wrapped__")]
    assert unwrapped == []


@pytest.mark.parametrize("call", [
    lambda: api.read_record("no-such-folder"),
    lambda: api.grade_all(["no-such-folder"], None, False),
    lambda: api.read_blocks("no-such.xlsx"),
    lambda: api.open_workbook("no-such.xlsx"),
    lambda: api.reproduce("wo-ai-ai", "one.xlsx", False),
    lambda: api.reproduce("no-such-tutorial", "tutorial", False),
])
def test_a_missing_or_wrong_path_given_as_str_raises_attnsheets_error(tmp_path, monkeypatch,
                                                                      call):
    monkeypatch.chdir(tmp_path)
    Path("one.xlsx").write_text("not a folder", encoding="utf-8")
    with pytest.raises(api.AttnsheetsError) as raised:
        call()
    assert "\n" not in str(raised.value)


def test_the_command_line_prints_the_apis_message(tmp_path):
    with pytest.raises(api.AttnsheetsError) as raised:
        api.build("multihead", d_model=5, heads=2)
    ran = cli("build", "multihead", "-o", tmp_path / "a.xlsx", "--d-model", "5",
              "--heads", "2")
    assert ran.stderr.strip() == f"attnsheets: error: {raised.value}"


def test_notebook_display_of_a_book_and_a_report():
    book = api.build("attention", tokens=TOKENS, inputs=TUTORIAL)
    page = book._repr_html_()
    assert all(name in page for name in book.steps())
    assert "background-color: rgba(248,105,107" in page  # the heatmap shading
    report = api.check(book)._repr_html_()
    assert "all steps pass" in report and "#C6EFCE" in report


@requires_libreoffice
def test_check_a_book_with_libreoffice():
    book = api.build("attention", seq_len=3, d_model=2, d_k=2, causal=True)
    report = api.check(book, "libreoffice")
    assert report.passed and report.engine == "libreoffice"


def test_the_example_notebook_runs_and_shows_every_step_passed():
    """docs/example.ipynb, executed as a user runs it: build attention, read WEIGHTS by
    token, change one input through the API, check, every step passed."""
    notebook = nbformat.read(ROOT / "docs" / "example.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    texts = [o.get("data", {}).get("text/plain", "") for o in outputs]
    assert any("[0.401, 0.198, 0.401]" in t for t in texts)  # the tutorial's row, correct
    frame = next(t for t in texts if "max_abs_error" in t)
    assert frame.count("True") == len(api.build("attention").steps())
    assert "False" not in frame
    committed = json.loads((ROOT / "docs" / "example.ipynb").read_text(encoding="utf-8"))
    assert all(cell.get("outputs") for cell in committed["cells"]
               if cell["cell_type"] == "code")  # committed with its outputs
