"""The cost tables of multihead, flash, sliding-window, linear and ssm: at the sheet's own n
each column equals a count taken from the built workbook itself (cells of the score or
state blocks, products in the formulas of the steps that mix tokens), the rows at
1k, 4k, 32k grow as the tutorial says (n², n·B, n·w, n), and the table is live: editing a
size recalculates it."""

import re

import numpy as np
import openpyxl
import pytest
from helpers.books import KINDS, build
from helpers.sheets import cells_in

from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.sheet.names import find_name

COSTED = ("multihead", "flash", "sliding-window", "linear", "ssm")
# every demo case of the five kinds (built once per run) whose sheet has a cost table (linear's
# Performer sheets estimate softmax instead: the table is on the exact-kernel sheet), and
# edge cases beside them
DEMOS = [(kind, stem, values) for kind in COSTED for stem, values in KINDS[kind].demo_cases
         if values.get("features", "elu") == "elu"]
EDGES = [
    ("flash", {"seq_len": 6, "d_model": 2, "d_k": 2, "block_size": 4, "causal": True}),
    ("flash", {"seq_len": 3, "d_model": 2, "d_k": 2, "block_size": 3, "causal": True}),
    ("sliding-window", {"seq_len": 4, "d_model": 2, "d_k": 2, "d_v": 3, "window": 6}),
    ("sliding-window", {"seq_len": 8, "d_model": 2, "d_k": 3, "window": 2,
                        "global_tokens": "0,1,7"}),
    ("sliding-window", {"seq_len": 4, "d_model": 2, "d_k": 2, "window": 0,
                        "global_tokens": "3"}),
    ("ssm", {"seq_len": 1, "d_model": 3, "d_state": 2, "gate": True}),
]

def products(formula: str) -> int:
    """Multiplications a cell formula does: one per term of each SUMPRODUCT or MMULT
    (the cells of its first range) and one per `*`."""
    terms = sum(cells_in(first) for first in
                re.findall(r"(?:SUMPRODUCT|MMULT)\(([^,()]+),", formula))
    return terms + formula.count("*")


class Book:
    """A built workbook (cells layout): its formulas and the values its build stored."""

    def __init__(self, path):
        self.formulas = openpyxl.load_workbook(path)
        self.values = openpyxl.load_workbook(path, data_only=True)
        self.path = path

    def names(self, pattern: str) -> list[str]:
        return [n for n in self.formulas.defined_names if re.fullmatch(pattern, n)]

    def grid(self, name: str, values: bool = False) -> list[list]:
        wb = self.values if values else self.formulas
        where = find_name(wb, name, self.path)
        ws = wb[where.sheet]
        return [[ws.cell(where.top + i, where.left + j).value for j in range(where.shape[1])]
                for i in range(where.shape[0])]

    def labels(self, name: str) -> tuple[list, list]:
        where = find_name(self.formulas, name, self.path)
        ws = self.formulas[where.sheet]
        rows, cols = where.shape
        return ([ws.cell(where.top + i, where.left - 1).value for i in range(rows)],
                [ws.cell(where.top - 1, where.left + j).value for j in range(cols)])

    def cells(self, *names: str) -> int:
        return sum(len(g) * len(g[0]) for g in map(self.grid, names))

    def products(self, *patterns: str) -> int:
        names = [n for p in patterns for n in self.names(p)]
        assert names, patterns
        return sum(products(text) for n in names for row in self.grid(n) for text in row)

    def cost(self, name: str) -> list[float]:
        return [row[0] for row in self.grid(name, values=True)]


def counted(kind: str, p: dict, book: Book) -> dict[str, int]:
    """Each cost column at the sheet's n, counted on the workbook itself."""
    if kind == "multihead":
        return {"COST_HELD": book.cells(*book.names(r"SCORES_H\d+")),
                "COST_KV": book.cells("K", "V"),
                "COST_MACS": book.products(r"SCORES_H\d+", r"HEAD_H\d+")}
    if kind == "flash":
        blocks = book.names(r"S_B\d+")
        got = {"COST_BLOCKS": len(blocks), "COST_HELD": max(map(book.cells, blocks)),
               "COST_STD_HELD": book.cells("SCORES"),
               "COST_MACS": book.products(r"S_B\d+", r"ACC_B\d+", r"L_B\d+"),
               "COST_STD_MACS": book.products("SCORES", "OUTPUT_STD")}
        if p.get("causal"):  # the score cells that compute (skipped rows hold "=0")
            got["COST_PAIRS"] = sum(text != "=0" for b in blocks for row in book.grid(b)
                                    for text in row)
        return got
    if kind == "sliding-window":
        mask = np.array(book.grid("MASK", values=True), dtype=float)
        allowed = int(mask.sum())
        scores = book.grid("SCORES")
        d_v = len(book.grid("OUTPUT")[0])
        # each allowed score's dot product, and each output's terms whose weight is allowed
        macs = sum(products(scores[i][j]) for i, j in zip(*np.nonzero(mask), strict=True))
        macs += int(mask.sum(axis=1) @ np.full(len(mask), d_v))
        got = {"COST_HELD": allowed, "COST_MACS": macs,
               "COST_STD_HELD": book.cells("SCORES"),
               "COST_STD_MACS": book.products("SCORES", "OUTPUT")}
        if p.get("global_tokens") or p.get("random"):
            rows, cols = book.labels("MASK")  # positions
            got["COST_BAND"] = sum(abs(int(i) - int(j)) <= p["window"] for i in rows
                                   for j in cols)
            extra = allowed - got["COST_BAND"]
            if p.get("random"):  # the 1s of RANDOM, each row shared by its block's queries
                picks = np.array(book.grid("RANDOM", values=True), dtype=float)
                block = p.get("block_size", 2)
                globals_ = {int(g) for g in str(p.get("global_tokens", "")).split(",") if g}
                got["COST_RANDOM"] = int(sum(picks[i // block].sum() for i in range(len(rows))
                                             if i not in globals_))
                extra -= got["COST_RANDOM"]
            if p.get("global_tokens"):
                got["COST_GLOBAL"] = extra
        return got
    if kind == "linear":
        per = p["seq_len"] if p.get("causal") else 1  # causal: STATE and Z stack n rows
        state = "STATE" if p.get("causal") else "KV"
        return {"COST_HELD": book.cells(state, "Z") // per,
                "COST_MACS": book.products(state, "Z", "NUMER", "DENOM")}
    if kind == "ssm":
        return {"COST_HELD": book.cells("H") // p["seq_len"],
                "COST_MACS": book.products("H", "Y")}
    raise AssertionError(kind)


# columns with nothing on the sheet to count: linear computes no softmax attention
UNCOUNTED = {"linear": {"COST_STD_HELD", "COST_STD_MACS"}}


def check_counts(kind: str, params: dict, book: Book) -> None:
    got = counted(kind, params, book)
    table = {name: book.cost(name)[0] for name in book.names(r"COST_\w+")
             if name not in ("COST_SIZES", "COST_N")}
    print(kind, params, {k: (table[k], got.get(k)) for k in table})
    assert set(table) == set(got) | UNCOUNTED.get(kind, set())
    assert book.cost("COST_N") == [params["seq_len"], 1024, 4096, 32768]
    for name, count in got.items():
        assert table[name] == count, name


@pytest.mark.parametrize("kind,stem,params", DEMOS, ids=[stem for _, stem, _ in DEMOS])
def test_the_table_at_the_sheets_n_counts_the_sheet(demo, kind, stem, params):
    check_counts(kind, params, Book(demo.out / f"{stem}_cells.xlsx"))


@pytest.mark.parametrize("kind,params", EDGES, ids=[f"{k}-{i}" for i, (k, _) in
                                                     enumerate(EDGES)])
def test_the_table_counts_the_sheet_at_the_edges(tmp_path, kind, params):
    """B = n and B not dividing n, causal; a window wider than the sheet; global tokens
    next to each other and at the ends; w = 0; a one-step scan."""
    check_counts(kind, params, Book(build(tmp_path, kind, params)))


GROWTH = [  # (demo workbook, column, ratio from n = 4k to 32k, relative tolerance)
    ("multihead", "COST_HELD", 64, 0),
    ("multihead", "COST_MACS", 64, 0),
    ("multihead", "COST_KV", 8, 0),
    ("multihead_gqa_causal", "COST_KV", 8, 0),
    ("flash", "COST_HELD", 8, 0),
    ("flash", "COST_STD_HELD", 64, 0),
    ("flash", "COST_MACS", 64, 1e-3),
    ("flash_causal", "COST_MACS", 64, 1e-3),
    ("sliding_window", "COST_HELD", 8, 1e-3),
    ("sliding_window_global", "COST_HELD", 8, 1e-3),
    ("sliding_window", "COST_STD_MACS", 64, 0),
    ("linear", "COST_HELD", 1, 0),
    ("linear_causal", "COST_MACS", 8, 0),
    ("ssm", "COST_HELD", 1, 0),
    ("ssm_gated", "COST_MACS", 8, 1e-3),
]


@pytest.fixture(scope="module")
def demo_books(demo):
    return {path.name.removesuffix("_cells.xlsx"): Book(path) for path in demo.books
            if path.name.endswith("_cells.xlsx")}


@pytest.mark.slow  # every demo workbook read whole; each table counts its sheet above
@pytest.mark.parametrize("stem,column,ratio,tolerance", GROWTH,
                         ids=[f"{g[0]}-{g[1]}" for g in GROWTH])
def test_the_tables_grow_as_the_tutorial_says(demo_books, stem, column, ratio, tolerance):
    """n → 8n multiplies standard attention's scores and multiply-adds by 64 (O(n²)),
    FlashAttention's held scores by 8 (n·B) but not its arithmetic, the band's by 8
    (O(n·w)), and linear attention's and the scan's work by 8 with a state that does not
    grow."""
    at_4k, at_32k = demo_books[stem].cost(column)[2:]
    print(f"{stem} {column}: {at_4k:.6g} → {at_32k:.6g}, ×{at_32k / at_4k:.4f}")
    assert at_32k / at_4k == pytest.approx(ratio, rel=tolerance, abs=0)


@pytest.mark.slow  # every demo workbook read whole
@pytest.mark.parametrize("stem", ["flash", "flash_causal"])
def test_flash_multiplies_no_less_than_standard_attention_at_large_n(demo_books, stem):
    """Exact, so no fewer multiply-adds than standard attention at large n; the online
    softmax adds its rescaling (causal skipping saves about half of both)."""
    book = demo_books[stem]
    flash, standard = book.cost("COST_MACS")[1:], book.cost("COST_STD_MACS")[1:]
    if stem == "flash":
        assert all(f > s for f, s in zip(flash, standard, strict=True))
    else:
        assert all(0.5 * s < f < 0.75 * s for f, s in zip(flash, standard, strict=True))


def test_the_table_is_live(tmp_path):
    """Type another head count and another length: the formulas recompute."""
    path = build(tmp_path, "multihead", {"seq_len": 4, "d_model": 4, "heads": 2})
    wb = openpyxl.load_workbook(path)
    sizes, lengths = find_name(wb, "COST_SIZES", path), find_name(wb, "COST_N", path)
    ws = wb[sizes.sheet]
    ws.cell(sizes.top, sizes.left + 1).value = 8          # H = 8
    ws.cell(lengths.top + 1, lengths.left).value = 2048    # the 1k row becomes 2k
    wb.save(path)
    values = evaluate_with_formulas(path)
    held = find_name(wb, "COST_HELD", path)
    got = [values[(held.sheet.upper(), held.top + i, held.left)] for i in range(4)]
    assert got == [8 * 4**2, 8 * 2048**2, 8 * 4096**2, 8 * 32768**2]


@pytest.mark.parametrize("gate", [False, True])
def test_the_ssm_note_counts_the_formula_cells_with_the_cost_table(tmp_path, gate):
    """The ssm sheet says L·(3·D·N + 3·D + 2·N) + D·N (+ 2·L·D gated) + 15 in the cost
    table: 3 sizes and three columns of 4 lengths."""
    big_l, d, n = 5, 3, 2
    path = build(tmp_path, "ssm", {"seq_len": big_l, "d_model": d, "d_state": n, "gate": gate})
    cells = sum(1 for ws in openpyxl.load_workbook(path).worksheets for row in ws.iter_rows()
                for c in row if isinstance(c.value, str) and c.value.startswith("="))
    assert cells == big_l * (3 * d * n + 3 * d + 2 * n) + d * n + 2 * big_l * d * gate + 15
