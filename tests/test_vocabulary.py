"""The vocabulary says what it means: a template is parsed once, when it is declared, and a
bad slot fails there; a kind's templates are checked before anything is written (an
unknown block or parameter, shapes that do not fit); only BROADCAST sizes broadcast; a
recurrence down the rows (`Scan`) reads only its own rows above, and renders alike in every
layout; an input's rule (`WholeNumbers`) refuses what it does not allow."""

from dataclasses import dataclass

import numpy as np
import openpyxl
import pytest
from helpers.books import build
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.checking.check import check_workbook
from workbook_builder.errors import UserError
from workbook_builder.models.examples import make_example
from workbook_builder.registry import load_kinds
from workbook_builder.sheet import (
    BROADCAST,
    Map,
    MatMul,
    MaxAbsDiff,
    Reduce,
    Rows,
    Step,
    WholeNumbers,
    declare,
    row_or_cell,
    section,
)
from workbook_builder.sheet.declare import Input, Scan, check_sections
from workbook_builder.sheet.kind import KINDS, Kind, complete_inputs, make_params
from workbook_builder.sheet.kind_sheet import kind_writer, lay_out
from workbook_builder.sheet.request import BuildRequest


@dataclass(frozen=True)
class ToyParams:
    seq_len: int = 3
    d_model: int = 2


X = Input("X", "seq_len", "d_model", "x")
W = Input("W", "d_model", "d_model", "w")
ONE_ROW = Input("B", 1, "d_model", "b", ["b"])                 # a plain size of one
ROW_BY_FUNCTION = Input("B", lambda p: 1, "d_model", "b", ["b"])  # the same, as a function
BIAS = Input("B", BROADCAST, "d_model", "b", ["b"])              # declared to broadcast


def check(*steps, inputs=(X, W)) -> None:
    check_sections("toy", [section("inputs", list(inputs)), section("steps", list(steps))],
                   ToyParams())


@pytest.mark.parametrize("step, says", [
    (Step("S", "s", Map("={X}+{NOPE}")),
     "kind toy, step S, Map('={X}+{NOPE}'): no block NOPE is placed before this step"),
    (Step("S", "s", Map("={P}*2", P="XX")),
     "kind toy, step S, Map('={P}*2', P='XX'): no block XX is placed before this step"),
    (Step("S", "s", Map("={X}/{d_modle}")),
     "kind toy, step S, Map('={X}/{d_modle}'): {d_modle} names no block and no parameter"),
    (Step("S", "s", Map("={X}+{W}")),
     "kind toy, step S, Map('={X}+{W}'): W is 2×2, which does not broadcast to 3×2"),
    (Step("S", "s", Map("={W}*2", rows="seq_len", cols="d_model")),
     "kind toy, step S, Map('={W}*2'): W is 2×2, which does not broadcast to 3×2"),
    (Step("S", "s", MatMul("X", "X")),
     "kind toy, step S, MatMul(X, X): inner sizes disagree: X gives 2 columns, X has 3 rows"),
    (Step("S", "s", MatMul("X", "W", a_cols=(0, 0))),
     "kind toy, step S, MatMul(X, W, a_cols=(0, 0)): inner sizes disagree: X gives 1 "
     "columns, W has 2 rows"),
    (Step("S", "s", MatMul("X", "W", b_cols=(1, 2))),
     "kind toy, step S, MatMul(X, W, b_cols=(1, 2)): columns 1…2 are not columns of W "
     "(2 columns)"),
    (Step("S", "s", MatMul("X", "W", b_cols=(0, 0), transpose="b")),
     "kind toy, step S, MatMul(X, W, b_cols=(0, 0), transpose='b'): inner sizes disagree: "
     "X gives 2 columns, W gives 1"),
    (Step("S", "s", Rows("=SUM({X})+SUM({W})")),
     "kind toy, step S, Rows('=SUM({X})+SUM({W})'): W has 2 rows, not 3, and is not "
     "declared BROADCAST rows"),
    (Step("S", "s", Reduce("=SUM({Y})")),
     "kind toy, step S, Reduce('=SUM({Y})'): no block Y is placed before this step"),
    (Step("S", "s", MaxAbsDiff("X", "W")),
     "kind toy, step S, MaxAbsDiff(X, W): X is 3×2 but W is 2×2"),
])
def test_a_mistake_in_a_template_names_kind_step_and_template(step, says):
    with pytest.raises(ValueError) as caught:
        check(step)
    assert str(caught.value) == says


@pytest.mark.parametrize("declare_it, says", [
    (lambda: Map("={X}+{W"), "Map('={X}+{W'): a brace that opens no {slot}"),
    (lambda: Map("={X}}"), "Map('={X}}'): a brace that opens no {slot}"),
    (lambda: Map("={P}*2", P="X", Q="W"), "Map('={P}*2', P='X', Q='W'): the alias Q is not "
                                         "a slot of the template"),
    (lambda: Map("={P}*2", P="exp"), "Map('={P}*2', P='exp'): the alias P names 'exp', not "
                                     "a block (upper case)"),
    (lambda: Rows("=SUM({X})+{ROW_LABEL}"), "Rows('=SUM({X})+{ROW_LABEL}'): {ROW_LABEL}: "
                                            "this formula has no labels of its own to read"),
    (lambda: Reduce("=SUM({X)"), "Reduce('=SUM({X)'): a brace that opens no {slot}"),
    (lambda: MatMul("X", "W", transpose="w"), "MatMul(X, W): transpose is None, \"a\" (Aᵀ·B) "
                                              "or \"b\" (A·Bᵀ), not 'w'"),
])
def test_a_bad_slot_fails_where_the_formula_is_declared(declare_it, says):
    """No parameters and no sheet are needed to find these: the template is parsed once,
    when the formula object is made."""
    with pytest.raises(ValueError) as caught:
        declare_it()
    assert says in str(caught.value)


def test_a_declared_template_is_not_parsed_again_when_written(tmp_path, toy_kind,
                                                             monkeypatch):
    """Writing the sheet renders the pieces parsed at declaration, in every layout."""
    toy_kind.steps_declared = [Step("PLUS_B", "X + b", Map("={X}+{B}")),
                               Step("ROW_SUM", "Σ", Rows("=SUM({X})")),
                               Step("TOTAL", "ΣΣ", Reduce("=SUM({X})"))]

    def parse_again(template):
        raise AssertionError(f"parsed again: {template}")

    def sums_ref(inputs, p):
        x = inputs["X"]
        return {"PLUS_B": x + inputs["B"], "ROW_SUM": x.sum(axis=1, keepdims=True),
                "TOTAL": x.sum(keepdims=True)}

    monkeypatch.setattr(toy_kind, "reference", staticmethod(sums_ref))

    monkeypatch.setattr(declare, "parse_template", parse_again)
    for layout in ("cells", "blocks"):
        build(tmp_path, "toy", {"seq_len": 2, "d_model": 2}, layout=layout)


def test_a_step_reading_a_later_block_is_refused():
    with pytest.raises(ValueError, match="step S, MatMul.X, Y.: no block Y is placed"):
        check(Step("S", "s", MatMul("X", "Y")), Step("Y", "y", Map("={X}*2")))


@pytest.mark.parametrize("row", [ONE_ROW, ROW_BY_FUNCTION])
def test_only_a_broadcast_size_broadcasts(row):
    """A size of one, by number or by function, is read cell for cell: combined with a
    larger block it is refused, saying how to make it broadcast."""
    with pytest.raises(ValueError, match=r"B is 1×2, which does not broadcast to 3×2 "
                                         r"\(a single row or column broadcasts only when "
                                         r"declared BROADCAST\)"):
        check(Step("S", "s", Map("={X}+{B}")), inputs=(X, W, row))
    check(Step("S", "s", Map("={X}+{B}")), inputs=(X, W, BIAS))


def toy_ref(inputs, p):
    x = inputs["X"]
    return {"RUNNING": np.cumsum(x, axis=0), "PLUS_B": x + inputs["B"],
            "GAP": np.abs(np.cumsum(x, axis=0) - x).max(keepdims=True).reshape(1, 1)}


class Toy(Kind):
    """A running sum (Scan), a broadcast bias row and a max |A − B| cell."""

    summary, sheet_title = "a running sum", "Toy"
    Params, reference, inputs = ToyParams, staticmethod(toy_ref), (X, BIAS)
    steps_declared: list = []

    @classmethod
    def sections(cls, p):
        return [section("inputs", [X, BIAS]), section("steps", cls.steps_declared)]


def running_sum(t, j, env):  # R_t = R_{t−1} + X_t
    x = row_or_cell(env["X"], t, j)
    return f"={x}" if t == 0 else f"={row_or_cell(env.me, t - 1, j)}+{x}"


SCAN_STEPS = [Step("RUNNING", "R_t = R_{t−1} + X_t", Scan("seq_len", "d_model", running_sum)),
              Step("PLUS_B", "X + b", Map("={X}+{B}")),
              Step("GAP", "max |R − X|", MaxAbsDiff("RUNNING", "X"))]


@pytest.fixture
def toy_kind():
    Toy.name = "toy"  # set after the class: a test kind joins the registry only here
    KINDS["toy"] = Toy
    Toy.steps_declared = SCAN_STEPS
    yield Toy
    del KINDS["toy"]


def test_a_mistake_is_refused_before_anything_of_the_sheet_is_written(toy_kind):
    toy_kind.steps_declared = [Step("RUNNING", "r", Map("={X}+{NOPE}"))]
    ws = openpyxl.Workbook().active
    params = ToyParams()
    inputs = {"X": np.ones((3, 2)), "B": np.ones((1, 2))}
    with pytest.raises(ValueError, match="kind toy, step RUNNING"):
        lay_out(kind_writer(ws, BuildRequest(toy_kind, params, ["a", "b", "c"])), toy_kind,
                inputs)
    assert [c for row in ws.iter_rows() for c in row if c.value is not None] == []


def test_a_build_refuses_a_mistake_before_its_plan_and_writes_no_file(tmp_path, toy_kind):
    """Through `write_workbook` (the size plan reads the sections first): the named
    ValueError, not a KeyError from deep inside, and no file."""
    toy_kind.steps_declared = [Step("RUNNING", "r", Map("={X}+{NOPE}"))]
    with pytest.raises(ValueError, match=r"kind toy, step RUNNING, Map\('=\{X\}\+\{NOPE\}'\): "
                                         r"no block NOPE is placed before this step"):
        build(tmp_path, "toy", {"seq_len": 3, "d_model": 2})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("layout", ["cells", "blocks", "hand"])
def test_a_scan_is_one_rendering_for_every_layout(tmp_path, toy_kind, layout):
    """The running sum checks against NumPy's cumsum in every layout: each cell reads the
    cell above in `cells` and `hand`, each row the row above as one array formula in
    `blocks`; the bias row is read along its one row."""
    path = build(tmp_path, "toy", {"seq_len": 4, "d_model": 3}, layout=layout)
    report = check_workbook(path)
    assert report.passed, report
    ws = openpyxl.load_workbook(path)["Toy"]
    name = ws.parent.defined_names["RUNNING"].attr_text.split("!")[1].replace("$", "")
    first = ws[name.split(":")[0]]
    second = ws.cell(first.row + 1, first.column).value
    if layout == "blocks":
        assert isinstance(second, ArrayFormula)
        assert second.ref == f"{first.column_letter}{first.row + 1}:" \
                             f"{ws.cell(first.row + 1, first.column + 2).column_letter}" \
                             f"{first.row + 1}"
        assert f"{first.column_letter}{first.row}:" in second.text  # the whole row above
    else:
        assert second.startswith(f"={first.coordinate}+")  # the cell above


def kind_cases():
    for name, kind in sorted(load_kinds().items()):
        cases = [*kind.test_cases, *(values for _, values in kind.demo_cases)]
        yield from ((name, values) for values in cases)
        for example in kind.examples:
            yield name, example


@pytest.mark.parametrize("kind_name, values", list(kind_cases()))
def test_every_kind_passes_its_own_check(kind_name, values):
    """No false alarm: every kind's test, demo and example parameters pass."""
    kind = load_kinds()[kind_name]
    if isinstance(values, str):
        try:
            values = make_example(kind, values).params
        except UserError as exc:  # an example reading a model that is not installed
            pytest.skip(f"example {values}: {exc}")
    params = make_params(kind, values)
    list(kind.sections(params))  # checked as drawn


def reads_its_own_row(t, j, env):  # wrong: row t reads row t of itself (a cycle)
    return f"={row_or_cell(env.me, t, j)}+1"


def reads_its_own_column(t, j, env):  # wrong: a column of itself, rows below t too
    return f"=SUM({env.me.col(0)})"


@pytest.mark.parametrize("row, says", [
    (reads_its_own_row, "Scan(reads_its_own_row): row 1 reads row 1 of its own block"),
    (reads_its_own_column, "Scan(reads_its_own_column): row 1 reads row 3 of its own block"),
])
def test_a_scan_reads_only_its_own_rows_above(row, says):
    with pytest.raises(ValueError) as caught:
        check(Step("S", "s", Scan("seq_len", "d_model", row)))
    assert f"kind toy, step S, {says}: a Scan's row t reads only the rows above it" \
        in str(caught.value)
    check(Step("S", "s", Scan("seq_len", "d_model", running_sum)))  # R_{t−1}: allowed


IDS = Input("IDS", "seq_len", 1, "ids", values=WholeNumbers(0, "d_model", "an id"))


class Ids(Kind):
    summary, sheet_title = "ids", "Ids"
    Params, inputs = ToyParams, (IDS,)


@pytest.mark.parametrize("ids, says", [
    ([[0], [1], [2]], "input IDS row 3 holds 2: an id is a whole number 0 … 1"),
    ([[0], [0.5], [1]], "input IDS row 2 holds 0.5: an id is a whole number 0 … 1"),
    ([[-1], [0], [1]], "input IDS row 1 holds -1: an id is a whole number 0 … 1"),
])
def test_an_input_rule_refuses_what_it_does_not_allow(ids, says):
    """Where inputs are completed: given by hand (a file read back is checked by
    `check`, as the kinds' tests show: gpt's token ids, BigBird's picks)."""
    with pytest.raises(UserError) as caught:
        complete_inputs(Ids, ToyParams(), {"IDS": np.array(ids)}, 0)
    assert str(caught.value) == says
    assert complete_inputs(Ids, ToyParams(), {"IDS": np.array([[0], [1], [1]])}, 0)
