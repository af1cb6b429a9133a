"""A workbook's defined names and sheets, held to where the layout puts every block.

`check` and `grade` read the cells a name covers, and a name is one edit of
`xl/workbook.xml`: pointed at the same cells of a hidden copy of the sheet (or of an
exercise's hidden key), it would have them compare numbers nobody sees. So where every
name must point is computed again from the recorded kind and parameters, by the
placement the writer renders (`place_sheet`, read through `planned_places`), and the cells
read are those, on the sheet a reader sees; a name pointing anywhere else, into a hidden
sheet, or a sheet added or hidden, is a problem that names it.
"""

from dataclasses import dataclass, field
from pathlib import Path

from openpyxl.workbook.workbook import Workbook

from workbook_builder.book.workbook import ABOUT
from workbook_builder.sheet.exercise import KEY_SHEET
from workbook_builder.sheet.limits import planned_places
from workbook_builder.sheet.names import NamedRange
from workbook_builder.sheet.refs import name_destinations, parse_range, quote_sheet, range_ref
from workbook_builder.sheet.request import BuildRequest

TUTORIAL_SHEET = "Tutorial"  # `reproduce` puts the tutorial's numbers beside the sheet


@dataclass
class Placement:
    """Where the layout puts every name, and what differs in the file."""

    places: dict[str, NamedRange]
    misplaced: dict[str, str] = field(default_factory=dict)  # name -> what is wrong
    sheets: list[str] = field(default_factory=list)  # sheets added, hidden or missing

    @property
    def problems(self) -> list[str]:
        return self.sheets + list(self.misplaced.values())


def hold_to_layout(wb: Workbook, request: BuildRequest, path: Path | None = None,
                   key_any_state: bool = False) -> Placement:
    """The workbook's names and sheets compared with what the writer makes for the
    request (its kind, parameters, layout and exercise). `key_any_state`: an exercise's
    Key sheet may be there or not, in any state (grading: Gnumeric saves it visible; the
    record does not say whether it had one)."""
    kind, exercise = request.kind, request.exercise
    blocks = planned_places(request)
    states = {ws.title: ws.sheet_state for ws in [*wb.worksheets, *wb.chartsheets]}
    key = exercise is not None and (exercise.self_check or key_any_state)
    main = _kind_sheet(kind.sheet_title, states, key)
    places = {name: NamedRange(name, main if b.sheet == kind.sheet_title else b.sheet,
                               b.top, b.left, b.bottom, b.right)
              for name, b in blocks.items()}
    placement = Placement(places)
    shown = [main, ABOUT]  # every other sheet but the hidden key is not ours
    for title in [main, ABOUT]:
        if title not in states:
            placement.sheets.append(f"sheet {title!r} is missing")
    for title, state in states.items():
        if title in shown or title == TUTORIAL_SHEET:
            if state != "visible":
                placement.sheets.append(f"sheet {title!r} is {_hidden(state)}")
        elif not (key and title == KEY_SHEET):
            expected = ", ".join(repr(t) for t in shown + [KEY_SHEET] * key)
            placement.sheets.append(f"sheet {title!r} added (a workbook of kind "
                                    f"{kind.name} has {expected})")
    for name, planned in places.items():
        problem = _name_problem(wb, planned, states)
        if problem:
            placement.misplaced[name] = problem
    return placement


def _kind_sheet(title: str, states: dict[str, str], key: bool) -> str:
    """The kind's sheet: `title`, or the one sheet besides About (and the tutorial and the
    key) when a teacher renamed it; the cells read are the layout's, on that sheet."""
    if title in states:
        return title
    others = [t for t in states if t not in (ABOUT, TUTORIAL_SHEET) and
              not (key and t == KEY_SHEET)]
    return others[0] if len(others) == 1 else title


def _hidden(state: str) -> str:
    return "very hidden" if state == "veryHidden" else "hidden"


def _name_problem(wb: Workbook, planned: NamedRange, states: dict[str, str]) -> str:
    """What is wrong with the defined name of `planned` ("" when it covers it, on a sheet
    shown)."""
    name = planned.name
    where = _address(planned.sheet, planned.top, planned.left, planned.bottom, planned.right)
    defined = wb.defined_names.get(name)
    if defined is None:
        return f"defined name {name} is missing; the layout puts it at {where}"
    try:
        [(sheet, ref)] = name_destinations(defined)
        top, left, bottom, right = parse_range(ref.replace("$", ""))
    except Exception:  # empty, several ranges, a whole column, a formula: not one range
        return f"defined name {name} does not point at one range; the layout puts it at " \
               f"{where}"
    got = _address(sheet, top, left, bottom, right)
    state = states.get(sheet)
    if state is None:
        return f"defined name {name} points at {got}, a sheet that does not exist; the " \
               f"layout puts it at {where}"
    shown = "" if state == "visible" else f" (a {_hidden(state)} sheet)"
    if (sheet, top, left, bottom, right) != (planned.sheet, planned.top, planned.left,
                                             planned.bottom, planned.right):
        return f"defined name {name} points at {got}{shown}; the layout puts it at {where}"
    if shown:
        return f"defined name {name} points at {got}, on a {_hidden(state)} sheet"
    return ""


def _address(sheet: str, top: int, left: int, bottom: int, right: int) -> str:
    return f"{quote_sheet(sheet)}!{range_ref(top, left, bottom, right)}"
