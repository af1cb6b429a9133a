"""The softmax, written once: four visible steps, as teachers teach it.

    m_i  = max_j z_ij             (causal mask M: over the keys j ≤ i only)
    p_ij = exp(z_ij − m_i)        (0 where M_ij = 0)   subtracting m keeps EXP from
    ℓ_i  = Σ_j p_ij                                    overflowing and changes no weight
    a_ij = p_ij / ℓ_i

`softmax_band` is the band itself, over every row of a block or over its last row only (a
language model's next token), with the words of the kind that uses it; `softmax_steps` is
the band as attention's weights, named ROW_MAX, EXP, ROW_SUM and WEIGHTS.
"""

from collections.abc import Sequence

from sheets._blocks.attention import QUERY_KEY, weights_chart
from workbook_builder.sheet import BROADCAST, ByRow, Map, Reduce, Rows, Step, row_or_cell
from workbook_builder.sheet.declare import Labels, Size


def softmax_band(source: str, names: Sequence[str], equations: Sequence[str],
                 explanations: Sequence[str], mask: str | None = None,
                 last_row: Size | None = None, corner: str = "",
                 row_labels: Labels | None = None, col_labels: Labels | None = None) -> list:
    """The softmax of each row of `source` as four steps named `names` (the max, the
    exponentials, their sum, the result), each with its equation and explanation. A
    causal `mask` (a 0/1 block, 1 where key j ≤ query i) ends each row's max at the
    diagonal and zeroes the masked exponentials (shown grey as –). `last_row`, the width
    of `source`: the softmax of its last row only, one row of that width (its max and sum
    one cell each; no mask). `corner` and `col_labels` are those of the exponentials and
    the result; `row_labels` those of all four."""
    if mask and last_row is not None:
        raise ValueError("the last row's softmax takes no mask: that row sees every key")
    row_max, exp, row_sum, out = names
    if last_row is None:
        # m_i = max_{j allowed} z_ij;  p = exp(z − m), 0 where masked;  ℓ_i = Σ_j p_ij
        largest = Rows("=MAX({S})", upto=(lambda i: i) if mask else None, S=source)
        shifted = Map("=IF({K}=1,EXP({S}-{M}),0)" if mask else "=EXP({S}-{M})",
                      labels_from=source, S=source, M=row_max,
                      **({"K": mask} if mask else {}))
        total = Rows("=SUM({P})", P=exp)
    else:
        def last(env) -> int:
            return env[source].rows - 1

        # m = max_j z_nj;  p_j = exp(z_nj − m);  ℓ = Σ_j p_j   (n the last row)
        largest = ByRow(BROADCAST, BROADCAST, per_cell=True, row=lambda i, j, env:
                        f"=MAX({env[source].row(last(env))})")
        shifted = ByRow(BROADCAST, last_row, lambda i, j, env:
                        f"=EXP({row_or_cell(env[source], last(env), j)}-"
                        f"{env[row_max].fixed(0, 0)})")
        total = Reduce("=SUM({P})", P=exp)
    labels = {} if row_labels is None else {"row_labels": row_labels}
    wide = {**labels, **({} if col_labels is None else {"col_labels": col_labels})}
    masked = {"masked_by": mask} if mask else {}
    return [Step(row_max, equations[0], largest, explanations[0], col_labels=["max"],
                 **labels),
            Step(exp, equations[1], shifted, explanations[1], corner=corner, **wide,
                 **masked),
            Step(row_sum, equations[2], total, explanations[2], col_labels=["sum"], **labels),
            # a_ij = p_ij / ℓ_i
            Step(out, equations[3], Map("={P}/{L}", P=exp, L=row_sum), explanations[3],
                 heatmap=True, corner=corner, **wide, **masked)]


def softmax_steps(scaled: str = "SCALED", mask: str | None = None, suffix: str = "",
                  over: str = "keys", of: str = "(S/√d_k)", corner: str = QUERY_KEY,
                  chart: bool = False, prefix: str = "") -> list:
    """Attention's weights: the softmax of each row of the block `scaled`, written `of` in
    the equations, as prefix + ROW_MAX, EXP, ROW_SUM and WEIGHTS + suffix, causal with
    `mask`; with `chart`, the weights' chart beside them."""
    names = [f"{prefix}{name}{suffix}" for name in ("ROW_MAX", "EXP", "ROW_SUM", "WEIGHTS")]
    equations = [f"m_i = max_{{j ≤ i}} {of}_ij" if mask else f"m_i = max_j {of}_ij",
                 f"P_ij = exp({of}_ij − m_i)" + (" · M_ij" if mask else ""),
                 "ℓ_i = Σ_j P_ij", "A_ij = P_ij / ℓ_i"]
    explanations = ["Largest allowed score of each row; subtracting it before EXP is the "
                    "stable softmax and changes no weight.",
                    "Exponential of each shifted score; masked entries are 0.",
                    "Row sums of the exponentials: the softmax denominator.",
                    f"Attention weights: each row is a probability distribution over the "
                    f"{over} (sums to 1)."]
    return softmax_band(scaled, names, equations, explanations, mask, corner=corner) + \
        ([weights_chart(names[-1])] if chart else [])
