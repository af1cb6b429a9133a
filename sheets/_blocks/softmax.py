"""The softmax, written once: four visible steps, as teachers teach it.

    m_i  = max_j z_ij             (causal mask M: over the keys j ≤ i only)
    p_ij = exp(z_ij − m_i)        (0 where M_ij = 0)   subtracting m keeps EXP from
    ℓ_i  = Σ_j p_ij                                    overflowing and changes no weight
    a_ij = p_ij / ℓ_i

`softmax_band` is the band itself, over every row of a block, over its last row only (a
language model's next token) or down its last column only (the same, with the vocabulary
down the rows), with the words of the kind that uses it; `softmax_steps` is
the band as attention's weights, named ROW_MAX, EXP, ROW_SUM and WEIGHTS.
"""

from collections.abc import Sequence

from sheets._blocks.attention import QUERY_KEY, weights_chart
from workbook_builder.sheet import BROADCAST, ByRow, Map, Reduce, Rows, Step, row_or_cell
from workbook_builder.sheet.declare import Labels, Size


def softmax_band(source: str, names: Sequence[str], equations: Sequence[str],
                 explanations: Sequence[str], mask: str | None = None,
                 last_row: Size | None = None, corner: str = "",
                 row_labels: Labels | None = None, col_labels: Labels | None = None,
                 last_col: Size | None = None) -> list:
    """The softmax of each row of `source` as four steps named `names` (the max, the
    exponentials, their sum, the result), each with its equation and explanation. A
    causal `mask` (a 0/1 block, 1 where key j ≤ query i) ends each row's max at the
    diagonal and zeroes the masked exponentials (shown grey as –). `last_row`, the width
    of `source`: the softmax of its last row only, one row of that width (its max and sum
    one cell each; no mask). `last_col`, the height of `source`: the softmax of its last
    column only, one column of that height (a block laid out transposed). `corner` and the
    labels along the softmax (`col_labels`; down a column, `row_labels`) are those of the
    exponentials and the result; the labels across it those of all four."""
    if mask and (last_row is not None or last_col is not None):
        raise ValueError("the last row's softmax takes no mask: that row sees every key")
    if last_row is not None and last_col is not None:
        raise ValueError("the softmax runs along the last row or down the last column, "
                         "not both")
    if last_col is not None:
        return _softmax_down_last_column(source, names, equations, explanations, last_col,
                                         corner, row_labels, col_labels)
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


def _softmax_down_last_column(source: str, names: Sequence[str], equations: Sequence[str],
                              explanations: Sequence[str], height: Size, corner: str,
                              along: Labels | None, across: Labels | None) -> list:
    """`softmax_band` down the last column of `source` (`height` rows): the band of the
    last row, transposed. `along` labels the rows of the exponentials and the result,
    `across` the columns of all four."""
    row_max, exp, col_sum, out = names

    def last(env) -> int:
        return env[source].cols - 1

    # m = max_v z_vn;  p_v = exp(z_vn − m);  ℓ = Σ_v p_v   (n the last column)
    largest = ByRow(BROADCAST, BROADCAST, per_cell=True, row=lambda i, j, env:
                    f"=MAX({env[source].col(last(env))})")
    shifted = ByRow(height, 1, lambda i, j, env:
                    f"=EXP({env[source].cell(i, last(env))}-{env[row_max].fixed(0, 0)})",
                    whole=lambda env: f"=EXP({env[source].col(last(env))}-"
                                      f"{env[row_max].fixed(0, 0)})")
    across_labels = {} if across is None else {"col_labels": across}
    tall = {**across_labels, **({} if along is None else {"row_labels": along})}
    return [Step(row_max, equations[0], largest, explanations[0], row_labels=["max"],
                 **across_labels),
            Step(exp, equations[1], shifted, explanations[1], corner=corner, **tall),
            Step(col_sum, equations[2], Reduce("=SUM({P})", P=exp), explanations[2],
                 row_labels=["sum"], **across_labels),
            # a_v = p_v / ℓ
            Step(out, equations[3], Map("={P}/{L}", P=exp, L=col_sum), explanations[3],
                 heatmap=True, corner=corner, **tall)]


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
