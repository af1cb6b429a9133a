"""The live cost table: cells held and multiply-adds as functions of the length n, at this
sheet's n and at 1k, 4k and 32k tokens, every cell a formula of the sizes."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbook_builder.sheet import Custom, Step
from workbook_builder.sheet.declare import (
    Section,
    Size,
    Table,
    fill_template,
    parse_template,
    section,
    size_of,
)

# every table's lengths: this sheet's n, then 1k, 4k and 32k tokens
COST_LENGTHS = (1024, 4096, 32768)
COST_ROWS = ["sheet", "1k", "4k", "32k"]
# whole numbers below a million as they are, larger ones as 6.87E+10 (columns are narrow)
COST_FORMAT = "[<1000000]0;0.00E+00"


@dataclass(frozen=True)
class Cost:
    """One column of a cost table: the block `name` (4×1, one row per length), its
    equation, and a formula template in which {n} is the row's length, {d_k}, {B}, … a
    cell of COST_SIZES and {COST_…} the same row of an earlier column; `template` may be
    a function of the parameters. `counts` labels the column (what is counted)."""

    name: str
    equation: str
    template: str | Callable[[Any], str]
    explanation: str
    counts: str = "MACs"


def _cost_formula(cost: Cost, i: int, env, sizes: Sequence[str]) -> str:
    """Row i of a cost column: the template with its slots made cell references."""
    template = cost.template(env.params) if callable(cost.template) else cost.template

    def ref(slot: str) -> str:
        if slot == "n":
            return env["COST_N"].cell(i, 0)
        if slot.startswith("COST_"):
            return env[slot].cell(i, 0)
        return env["COST_SIZES"].fixed(0, sizes.index(slot))

    return fill_template(parse_template(template), ref)


def cost_section(title: str, sizes: Mapping[str, Size], costs: Sequence[Cost]) -> Section:
    """A live cost table: COST_SIZES (the sheet's sizes as numbers; the first is the
    length), COST_N (this sheet's length, then 1k, 4k, 32k) and one column per Cost, each
    a formula of its row's length and the sizes, so editing a size or a length
    recalculates the table."""
    labels, values = list(sizes), list(sizes.values())
    length = labels[0]
    sizes_step = Step(
        "COST_SIZES", "sizes of this sheet",
        Custom(1, len(labels), each=lambda _, j, env: f"={size_of(values[j], env.params)}"),
        "This sheet's sizes, written as numbers: every cost below reads them, so typing "
        "another value shows what it would cost.", row_labels=["size"], col_labels=labels,
        number_format="0")
    lengths = Step(
        "COST_N", f"{length} = sheet, 1k, 4k, 32k",
        Custom(4, 1, each=lambda i, _, env: f"={env['COST_SIZES'].fixed(0, 0)}" if i == 0
               else f"={COST_LENGTHS[i - 1]}"),
        "The lengths the costs are computed at; type another length to see its cost.",
        row_labels=COST_ROWS, col_labels=[length], number_format=COST_FORMAT)
    columns = [Step(c.name, c.equation,
                    Custom(4, 1, each=lambda i, _, env, c=c: _cost_formula(c, i, env, labels)),
                    c.explanation, row_labels=COST_ROWS, col_labels=[c.counts],
                    number_format=COST_FORMAT) for c in costs]
    notes = Table((("multiply-add = one product a·b added into a sum", ""),
                   ("the projections X·W are left out: they grow only linearly in n", "")))
    return section(title, [sizes_step, notes], [lengths, *columns])
