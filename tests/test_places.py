"""Placement as data: `place_sheet` decides where everything goes from a kind's declaration
alone, and the writer renders exactly that list (every kind, every layout)."""

import dataclasses

import openpyxl
import pytest
from helpers.books import KINDS, book_in_memory, placement_of

from workbook_builder.sheet.declare import Input, MatMul, Step, section
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.layout import SheetWriter
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.places import (
    COMPACT_WIDTH,
    LAYOUTS,
    MAX_WIDTH,
    HandTooLarge,
    Limits,
    PlanBeyond,
    place_sheet,
)
from workbook_builder.sheet.request import ExerciseSpec


def first_case(kind):
    return make_params(kind, kind.test_cases[0])


def test_placing_needs_no_workbook_and_gives_the_same_list_twice(monkeypatch):
    """Pure: no workbook is made (making one fails here), and two placements of every kind
    in every layout are equal, each a frozen value (it hashes)."""
    def no_workbook(*args, **kwargs):
        raise AssertionError("a placement made a workbook")

    monkeypatch.setattr(openpyxl.Workbook, "__init__", no_workbook)
    with pytest.raises(AssertionError):
        openpyxl.Workbook()
    for kind in KINDS.values():
        params = first_case(kind)
        for layout in LAYOUTS:
            try:
                first = placement_of(kind, params, layout)
            except HandTooLarge:
                assert layout == "hand"
                continue
            again = placement_of(kind, params, layout)
            assert first == again and hash(first) == hash(again), (kind.name, layout)
            assert first.placed and all(dataclasses.is_dataclass(p) for p in first.placed)
            with pytest.raises(dataclasses.FrozenInstanceError):
                first.placed[0].top = 1


def test_a_placement_stops_at_a_limit_without_drawing_the_rest():
    """Sections are drawn as they are placed: a limit crossed in the first stops there."""
    drawn = []

    def sections():
        for n in range(1000):
            drawn.append(n)
            yield section(f"part {n}", [Input(f"X{n}", 3, 40, "x")])

    with pytest.raises(PlanBeyond) as beyond:
        place_sheet(sections(), None, limits=Limits(cells=200))
    assert beyond.value.block.name == "X1" and list(beyond.value.blocks) == ["X0", "X1"]
    assert len(drawn) <= 3  # the compact trial stops at X0, the placement at X1


def test_a_band_wider_than_a_page_wraps_and_each_line_is_a_print_unit():
    """A sheet whose blocks fit COMPACT_WIDTH columns is compact; one with a wider block
    is not. A band wraps before it is MAX_WIDTH columns wide, each line a print unit."""
    small = [section("one", [Input("A", 2, 3, "a"), Input("B", 2, 3, "b")])]
    assert place_sheet(small, None).compact
    assert not place_sheet([section("one", [Input("A", 2, COMPACT_WIDTH, "a")])],
                           None).compact
    wide = [section("one", [Input(f"A{n}", 2, 6, "a") for n in range(4)])]
    placed = place_sheet(wide, None, compact=False)
    blocks = placed.blocks
    assert blocks["A0"].top == blocks["A1"].top < blocks["A2"].top == blocks["A3"].top
    assert blocks["A1"].right <= MAX_WIDTH
    assert len(placed.units) == 2
    assert [p.unit for p in placed.placed if p.role == "input"] == [0, 0, 1, 1]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_the_writer_renders_the_placement(kind_name, layout):
    """For every kind and layout, the workbook as built (an exercise with its self-check
    above the blocks, so they start lower) has every defined name exactly where the
    placement list puts it, every text, title, table and chart there, every hand copy of
    an operand a live formula there, and the placement's print units."""
    kind = KINDS[kind_name]
    params = first_case(kind)
    exercise = ExerciseSpec(tuple(kind.step_names(params)[-1:]))
    try:
        placement = placement_of(kind, params, layout, exercise)
    except HandTooLarge:
        assert layout == "hand"
        pytest.skip(f"{kind_name}'s first test case is beyond the hand layout's sizes")
    inputs = complete_inputs(kind, params, {}, 0)
    wb = book_in_memory(kind, params, inputs, kind.labels(params, None), layout,
                        exercise=exercise)
    ws = wb[kind.sheet_title]
    named = {name: find_name(wb, name, None) for name in wb.defined_names
             if not name.startswith("CHECK_")}
    assert {n: (w.sheet, w.top, w.left, w.bottom, w.right) for n, w in named.items()} == \
        {n: (b.sheet, b.top, b.left, b.bottom, b.right)
         for n, b in placement.blocks.items()}
    for placed in placement.placed:
        if placed.role in ("text", "title", "table", "chart"):
            assert ws.cell(placed.top, placed.left).value, placed
        if placed.role == "copy":
            for row in ws.iter_rows(placed.top, placed.top + placed.rows - 1, placed.left,
                                    placed.left + placed.cols - 1):
                assert all(str(cell.value).startswith("=") for cell in row), placed
    assert (ws.max_row, ws.max_column) >= (placement.bottom, placement.right)


def test_the_writer_takes_its_units_from_the_placement():
    ws = openpyxl.Workbook().active
    sheet = SheetWriter(ws, "cells")
    x, y = Input("X", 2, 2, "x"), Input("Y", 2, 12, "y")
    sections = [section("first", [x]), section("second", [y])]
    sheet.write(sections, {"X": [[1, 2], [3, 4]], "Y": [[0] * 12] * 2})
    assert tuple(sheet.units) == place_sheet(sections, None).units
    assert sheet.placement == place_sheet(sections, None)


def test_a_hand_product_is_placed_with_its_copies_and_counted_with_them():
    """A·B in the hand layout: the result's header is taller and wider by its operands,
    whose copies sit left of and above the result and count as cells."""
    a, b = Input("A", 2, 3, "a"), Input("B", 3, 4, "b", row_labels="d")
    sections = [section("s", [a, b], [Step("C", "C = A·B", MatMul("A", "B"))])]
    cells_layout = place_sheet(sections, None, "cells")
    hand = place_sheet(sections, None, "hand")
    c = next(p for p in hand.placed if p.name == "C")
    assert (c.above, c.before) == (1 + 3, 3 + 1)
    assert [p.name for p in hand.placed if p.role == "copy"] == ["C:A", "C:B"]
    assert hand.copies_of("C")[0].right == c.left - 2  # A's copy, its labels' column apart
    assert hand.copies_of("C")[1].bottom == c.top - 2  # B's copy, above the column labels
    assert hand.cells == cells_layout.cells + 2 * 3 + 3 * 4
