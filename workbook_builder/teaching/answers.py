"""A returned exercise's answers followed and recalculated: what each answer formula reads,
and its value on the inputs the teacher's record gave the student and on fresh ones.

A file's cached values are the student's to forge (`=ROW()*0` saved with the answer as its
value), and so is a formula: `=N(0.4213)` is a typed number, `='Key'!B107` reads the key
the self-checks carry, `=[1]Train!B107` another workbook. So every answer cell is judged
by what it is and what it does:

- what it reads: each formula is followed through the cells, ranges and defined names it
  refers to; a reference to the answer key (the exercise's `Key` sheet, or any hidden
  sheet), a reference the grade cannot follow (`INDIRECT`, `OFFSET`) or one to another
  workbook is named (`reads the answer key`, `reads another file`) and scores 0;
- what it computes: the file is recalculated by the `formulas` engine (its hidden sheets
  and those named references left out) with the recorded inputs written into its input
  blocks, and again with fresh inputs drawn from the record's seed (the same shapes, other
  numbers). A formula scores where it equals the reference's answer for every set; one
  that equals it only for the recorded inputs, one that reads no input at all, or one
  whose saved value is the answer while its recalculated value is not, is a
  `copied or typed value`.

A typed number cannot be recalculated: the class says whether it counts
(`ANSWER_MODES`). Numbers under an array formula that starts outside their block are
typed numbers too (the array formula is left out of the calculation).
"""

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.engines.formulas_engine import FormulasModel
from workbook_builder.engines.internals.of_formulas import readable_formula
from workbook_builder.errors import UserError
from workbook_builder.sheet.cells import is_formula_cell
from workbook_builder.sheet.names import NamedRange
from workbook_builder.sheet.refs import cell_ref, column_number, name_destinations, parse_range
from workbook_builder.xlsx.of_openpyxl import stored_cells

# formulas: only formulas score, each right on the recorded and on fresh inputs; values:
# every answer is judged by its value on the recorded inputs (a typed number, or what a
# formula computes there); either: typed numbers score, formulas must be right on fresh
# inputs too. Forged answers (FORGED) score 0 in every mode.
ANSWER_MODES = ("formulas", "values", "either")
SMALL_EXERCISE = 64  # answer cells a student may compute on paper: typed values count
FRESH_SETS = 2  # fresh input sets besides the recorded one
COPIED = "copied or typed value"
READS_KEY = "reads the answer key"
READS_FILE = "reads another file"
FORGED = (COPIED, READS_KEY, READS_FILE)


def default_answers(answer_cells: int) -> str:
    """The answers a class takes when the teacher does not say: typed values count in an
    exercise small enough to compute on paper, else only formulas."""
    return "either" if answer_cells <= SMALL_EXERCISE else "formulas"


def fresh_seed(seed: int, k: int) -> int:
    """The seed of the k-th fresh input set of a student (stable across machines)."""
    digest = hashlib.sha256(f"attnsheets-fresh:{k}:{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass
class AnswerTally:
    """What one file's answer cells are, and which scored 0 as forged."""

    formulas: int = 0  # answer cells holding a formula that follows the inputs
    typed: int = 0  # answer cells holding a number (or a formula of no input)
    forged: dict[str, list[str]] = field(default_factory=dict)  # reason -> cells

    def name(self, reason: str, address: str) -> None:
        self.forged.setdefault(reason, []).append(address)


_STRING = re.compile(r'"(?:[^"]|"")*"')
_EXTERNAL = re.compile(r"\[[^\]]*\]")
_UNFOLLOWED = re.compile(r"\b(INDIRECT|OFFSET)\s*\(", re.I)
# a reference with an optional sheet: a cell, a range, whole columns or whole rows
_REFERENCE = re.compile(
    r"(?<![\w.$'!\]])(?P<sheet>'(?:[^']|'')+'!|[A-Za-z_][\w.]*!)?"
    r"(?P<ref>\$?[A-Za-z]{1,3}\$?\d+(?::\$?[A-Za-z]{1,3}\$?\d+)?"
    r"|\$?[A-Za-z]{1,3}:\$?[A-Za-z]{1,3}|\$?\d+:\$?\d+)(?![\w(!.$])")
_IDENTIFIER = re.compile(r"(?<![\w.$'!\]])(?P<name>[A-Za-z_\\][\w.]*)(?![\w(!.])")
_CELL = re.compile(r"\$?([A-Za-z]{1,3})\$?(\d+)")
MAX_ROWS, MAX_COLS = 1_048_576, 16_384
MAX_ARRAY_CELLS = 1 << 20  # an array formula over more is no answer of ours: not followed


def _box(ref: str) -> tuple[int, int, int, int] | None:
    """(top, left, bottom, right) of A1, A1:B2, A:B or 3:7."""
    ref = ref.replace("$", "").upper()
    first, _, last = ref.partition(":")
    last = last or first
    if first.isdigit() and last.isdigit():
        return min(int(first), int(last)), 1, max(int(first), int(last)), MAX_COLS
    if first.isalpha() and last.isalpha():
        a, b = column_number(first), column_number(last)
        return 1, min(a, b), MAX_ROWS, max(a, b)
    corners = [_CELL.fullmatch(part) for part in (first, last)]
    if not all(corners):
        return None
    (c1, r1), (c2, r2) = [(column_number(m.group(1)), int(m.group(2))) for m in corners]
    return min(r1, r2), min(c1, c2), max(r1, r2), max(c1, c2)


def _sheet_of(text: str) -> str:
    name = text[:-1]
    return name[1:-1].replace("''", "'") if name.startswith("'") else name


class AnswerReader:
    """A returned workbook's formulas, followed: for any cell, whether what it computes
    reads the key, another file, and any input cell."""

    def __init__(self, wb: Workbook, key_sheet: str | None, inputs: list[NamedRange],
                 answer_blocks: list[NamedRange]):
        self.wb = wb
        self.titles = {ws.title.upper(): ws.title for ws in wb.worksheets}
        # the answer key: the exercise's key sheet in any state (or deleted: a reference
        # to it still says what it was written for), and every hidden sheet
        self.hidden = {ws.title for ws in wb.worksheets if ws.sheet_state != "visible"}
        if key_sheet is not None:
            self.hidden.add(key_sheet)
        self._hidden_upper = {title.upper() for title in self.hidden}
        self.inputs = inputs
        self.formulas: dict[str, dict[tuple[int, int], str]] = {}
        self.arrays: dict[str, list[tuple[int, int, int, int, int, int]]] = {}
        for ws in wb.worksheets:
            cells, arrays = {}, []
            for cell in stored_cells(ws):
                value = cell.value
                if isinstance(value, ArrayFormula):
                    cells[(cell.row, cell.column)] = value.text or ""
                    box = parse_range(value.ref) if value.ref else \
                        (cell.row, cell.column, cell.row, cell.column)
                    arrays.append((*box, cell.row, cell.column))
                elif is_formula_cell(cell) and isinstance(value, str):
                    cells[(cell.row, cell.column)] = value
            self.formulas[ws.title] = cells
            self.arrays[ws.title] = arrays
        # an array formula overlapping an answer block but not inside it covers numbers
        # typed there: it is left out of the calculation
        self.dropped: set[tuple[str, int, int]] = set()
        for title, arrays in self.arrays.items():
            for top, left, bottom, right, r, c in arrays:
                for block in answer_blocks:
                    if block.sheet != title:
                        continue
                    overlaps = top <= block.bottom and block.top <= bottom and \
                        left <= block.right and block.left <= right
                    inside = block.top <= top and bottom <= block.bottom and \
                        block.left <= left and right <= block.right
                    if overlaps and not inside:
                        self.dropped.add((title, r, c))
        # every computed cell -> the cell whose formula computes it, by sheet and row
        self.computed: dict[str, dict[int, dict[int, tuple[int, int]]]] = {}
        for title, cells in self.formulas.items():
            rows = self.computed[title] = {}
            for (r, c) in cells:
                if (title, r, c) not in self.dropped:
                    rows.setdefault(r, {})[c] = (r, c)
            for top, left, bottom, right, r, c in self.arrays[title]:
                if (title, r, c) in self.dropped or (bottom - top + 1) * (right - left + 1) \
                        > MAX_ARRAY_CELLS:
                    continue
                for i in range(top, bottom + 1):
                    for j in range(left, right + 1):
                        rows.setdefault(i, {})[j] = (r, c)
        self._names = {name.upper(): defined for name, defined in wb.defined_names.items()}
        self._memo: dict[tuple[str, int, int], tuple[str | None, bool]] = {}
        self._direct: dict[tuple[str, int, int], str | None] = {}
        self._ref_memo: dict[tuple[str, int, int], list] = {}
        self._in_range: dict[tuple[str, tuple], list[tuple[str, int, int]]] = {}

    def formula_at(self, sheet: str, row: int, col: int) -> tuple[int, int] | None:
        """The cell whose formula computes (row, col): its own, or its array formula's."""
        return self.computed.get(sheet, {}).get(row, {}).get(col)

    def direct_reason(self, sheet: str, row: int, col: int) -> str | None:
        """What a formula's own text reads that the grade does not follow."""
        key = (sheet, row, col)
        if key not in self._direct:
            self._direct[key] = self._reason_of(self.formulas[sheet][(row, col)])
        return self._direct[key]

    def _reason_of(self, formula: str) -> str | None:
        text = _STRING.sub('""', formula)
        if _EXTERNAL.search(text):
            return READS_FILE
        if _UNFOLLOWED.search(text):
            return READS_KEY
        for match in _REFERENCE.finditer(text):
            if match.group("sheet") and \
                    _sheet_of(match.group("sheet")).upper() in self._hidden_upper:
                return READS_KEY
        for match in _IDENTIFIER.finditer(text):
            defined = self._names.get(match.group("name").upper())
            if defined is not None and any(s.upper() in self._hidden_upper
                                           for s, _ in name_destinations(defined)):
                return READS_KEY
        return None

    def _title(self, sheet: str) -> str:
        return self.titles.get(sheet.upper(), sheet)

    def _references(self, sheet: str, formula: str):
        """(sheet, box) of each range the formula reads, defined names resolved."""
        text = _STRING.sub('""', formula)
        for match in _REFERENCE.finditer(text):
            where = self._title(_sheet_of(match.group("sheet"))) if match.group("sheet") \
                else sheet
            box = _box(match.group("ref"))
            if box is not None:
                yield where, box
        for match in _IDENTIFIER.finditer(text):
            defined = self._names.get(match.group("name").upper())
            if defined is None:
                continue
            for where, ref in name_destinations(defined):
                box = _box(ref)
                if box is not None:
                    yield self._title(where), box

    def follow(self, sheet: str, row: int, col: int) -> tuple[str | None, bool]:
        """(what the cell's formula reads that scores 0, or None; whether it reads any
        input cell), through every formula it depends on."""
        start = self.formula_at(sheet, row, col)
        if start is None:
            return None, False
        root = (sheet, *start)
        # depth first in post-order, without recursion (a chain down a sheet can be
        # thousands long); a cell met again on its own path closes a cycle (the engine
        # leaves such cells without a value): it adds nothing there
        visiting: set[tuple[str, int, int]] = set()
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in self._memo:
                continue
            if expanded:
                reason, reads_input = self.direct_reason(*node), False
                if reason is None:
                    reads_input = any(self._holds_input(*ref) for ref in self._refs(node))
                    for child in self._children(node):
                        got = self._memo.get(child, (None, False))
                        reason, reads_input = reason or got[0], reads_input or got[1]
                self._memo[node] = reason, reads_input
                continue
            if node in visiting:
                continue
            visiting.add(node)
            stack.append((node, True))
            if self.direct_reason(*node) is None:
                stack += [(child, False) for child in self._children(node)
                          if child not in self._memo and child not in visiting]
        return self._memo[root]

    def _refs(self, node: tuple[str, int, int]) -> list:
        if node not in self._ref_memo:
            self._ref_memo[node] = list(self._references(node[0],
                                                         self.formulas[node[0]][node[1:]]))
        return self._ref_memo[node]

    def _children(self, node: tuple[str, int, int]) -> list[tuple[str, int, int]]:
        """The formula cells the node's formula reads."""
        return sorted({cell for where, box in self._refs(node)
                       for cell in self._formula_cells_in(where, box)} - {node})

    def _formula_cells_in(self, sheet: str, box) -> list[tuple[str, int, int]]:
        """The cells computed by formulas in the range (by the cell holding the formula);
        many formulas read the same range (a row of a step, a whole block): found once."""
        found = self._in_range.get((sheet, box))
        if found is None:
            found = self._in_range[(sheet, box)] = self._find_formula_cells(sheet, box)
        return found

    def _find_formula_cells(self, sheet: str, box) -> list[tuple[str, int, int]]:
        top, left, bottom, right = box
        rows = self.computed.get(sheet, {})
        found = set()
        lines = range(top, bottom + 1) if bottom - top < len(rows) else \
            [r for r in rows if top <= r <= bottom]
        for r in lines:
            cols = rows.get(r)
            if not cols:
                continue
            if right - left < len(cols):
                found.update((sheet, *cols[c]) for c in range(left, right + 1) if c in cols)
            else:
                found.update((sheet, *a) for c, a in cols.items() if left <= c <= right)
        return list(found)

    def _holds_input(self, sheet: str, box) -> bool:
        top, left, bottom, right = box
        return any(b.sheet == sheet and b.top <= bottom and top <= b.bottom and
                   b.left <= right and left <= b.right for b in self.inputs)

    def calculation(self, book: str, inputs: dict[str, np.ndarray]) -> FormulasModel:
        """The workbook as the grade calculates it: without its hidden sheets (and the key),
        the formulas that read them or another file, and array formulas over typed
        answers; the recorded inputs in its input blocks. Changes `wb`: call last."""
        wb = self.wb
        for title, cells in self.formulas.items():
            if title in self.hidden:
                continue
            ws = wb[title]
            for (r, c) in list(cells):
                if (title, r, c) in self.dropped or self.direct_reason(title, r, c):
                    value = ws.cell(r, c).value
                    ws.cell(r, c).value = None
                    if isinstance(value, ArrayFormula) and (title, r, c) not in self.dropped:
                        top, left, bottom, right = parse_range(value.ref)
                        for i in range(top, bottom + 1):
                            for j in range(left, right + 1):
                                ws.cell(i, j).value = None
        for block in self.inputs:  # an input turned into a formula: the recorded number
            cells = self.formulas.get(block.sheet, {})
            values = inputs[block.name]
            for (r, c) in list(cells):
                if block.top <= r <= block.bottom and block.left <= c <= block.right:
                    wb[block.sheet].cell(r, c).value = float(values[r - block.top,
                                                                    c - block.left])
        for title in sorted(self.hidden & set(wb.sheetnames)):
            wb.remove(wb[title])
        try:
            return FormulasModel(wb, book, bounded=True)
        except UserError:  # a formula the engine cannot read: that cell computes nothing
            if not self._clear_unreadable():
                raise
            return FormulasModel(wb, book, bounded=True)

    def _clear_unreadable(self) -> bool:
        """Clear every formula the engine cannot parse (`=1+`); whether there was one."""
        cleared = False
        for ws in self.wb.worksheets:
            for cell in stored_cells(ws):
                value = cell.value
                text = value.text if isinstance(value, ArrayFormula) else value
                if is_formula_cell(cell) and isinstance(text, str) and \
                        not readable_formula(text):
                    cell.value, cleared = None, True
        return cleared


@dataclass
class AnswerSets:
    """The input sets a file is recalculated with: the recorded one first, then fresh."""

    inputs: list[dict[str, np.ndarray]]
    expected: list[dict[str, np.ndarray]]


def input_cells(places: list[NamedRange], inputs: dict[str, np.ndarray]) -> dict:
    return {(b.sheet, b.top + i, b.left + j): float(v)
            for b in places for (i, j), v in np.ndenumerate(inputs[b.name])}


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and \
        bool(np.isfinite(value))


def score_answers(reader: AnswerReader, model_of: Callable[[], FormulasModel],
                  places: list[NamedRange], steps: dict[str, NamedRange],
                  sets: AnswerSets, tolerance: float, mode: str, saved: Callable[[], Any]
                  ) -> tuple[dict[str, tuple[int, int]], AnswerTally]:
    """Each step's (correct, cells), and what its cells are. `saved(sheet, row, col)`: a
    cell's value as the file saved it (None if it has none)."""
    wb = reader.wb
    kinds: dict[tuple[str, int, int], str] = {}
    typed_values: dict[tuple[str, int, int], Any] = {}
    for where in steps.values():
        ws = wb[where.sheet]
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                key = (where.sheet, where.top + i, where.left + j)
                value = ws.cell(*key[1:]).value
                if reader.formula_at(*key) is not None:
                    kinds[key] = "formula"
                elif is_number(value):
                    kinds[key] = "typed"
                    typed_values[key] = value
                else:
                    kinds[key] = "blank"
    follows = {key: reader.follow(*key) for key, kind in kinds.items() if kind == "formula"}
    n_sets = 1 if mode == "values" else len(sets.inputs)
    wanted = {}
    for step, where in steps.items():
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                wanted[(where.sheet, where.top + i, where.left + j)] = \
                    [float(sets.expected[s][step][i, j]) for s in range(n_sets)]

    def right(value, want) -> bool:
        return is_number(value) and abs(float(value) - want) <= tolerance

    def steady(key) -> bool:  # the answer is the same for every input set
        want = wanted[key]
        return n_sets > 1 and all(abs(w - want[0]) <= tolerance for w in want)

    # formulas of no input whose answer depends on the inputs: numbers in disguise
    disguised = {key for key, (reason, reads_input) in follows.items()
                 if reason is None and not reads_input and not steady(key)}
    values: list[dict] = []
    if any(reason is None for reason, _ in follows.values()):
        model = model_of()
        for s in range(n_sets):
            overrides = input_cells(places, sets.inputs[s])
            if s:  # a number right for the recorded inputs stands for the right one here
                # (a later step computed from it is judged on its own formula)
                recorded = values[0]
                overrides.update({key: wanted[key][s] for key, v in typed_values.items()
                                  if right(v, wanted[key][0])})
                overrides.update({key: wanted[key][s] for key in disguised
                                  if right(recorded.get((key[0].upper(), *key[1:])),
                                           wanted[key][0])})
            got = model.evaluate({(sh.upper(), r, c): v for (sh, r, c), v in overrides.items()},
                                 input_blocks=False)
            values.append(got)
    tally = AnswerTally()
    scores = {}
    for step, where in steps.items():
        correct = 0
        for i in range(where.shape[0]):
            for j in range(where.shape[1]):
                key = (where.sheet, where.top + i, where.left + j)
                address = f"{where.sheet}!{cell_ref(key[1], key[2])}"
                want = wanted[key]
                kind = kinds[key]
                if kind == "blank":
                    continue
                if kind == "formula":
                    reason = follows[key][0]
                    if reason is not None:
                        tally.name(reason, address)
                        continue
                    got = [v.get((key[0].upper(), key[1], key[2])) for v in values]
                    if key in disguised:
                        typed_values[key] = got[0]
                    else:
                        tally.formulas += 1
                        if all(right(g, w) for g, w in zip(got, want, strict=True)):
                            correct += 1
                        elif right(got[0], want[0]) or right(saved(*key), want[0]):
                            tally.name(COPIED, address)  # the recorded inputs only, or stale
                        continue
                tally.typed += 1
                value = typed_values[key]
                if mode == "formulas" and not steady(key):
                    tally.name(COPIED, address)
                elif right(value, want[0]):
                    correct += 1
                elif key in disguised and right(saved(*key), want[0]):
                    tally.name(COPIED, address)  # its saved value is not what it computes
        scores[step] = correct, where.shape[0] * where.shape[1]
    return scores, tally
