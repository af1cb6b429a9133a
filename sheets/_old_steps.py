"""Formula helpers shared by the attention-family kinds: matrix products and the four
visible steps of a row softmax. Each writes one named step block."""

from collections.abc import Sequence

from workbook_builder.sheet.layout import Block, SheetWriter


class ValueWidth:
    """Mixed into Params that have d_k and an optional d_v: W_V's width defaults to d_k."""

    @property
    def value_width(self) -> int:
        return self.d_k if self.d_v is None else self.d_v


def dims(prefix: str, count: int, first: int = 1) -> list[str]:
    return [f"{prefix}{first + j}" for j in range(count)]


def matmul(sheet: SheetWriter, name: str, equation: str, a: Block, b: Block,
           row_labels: Sequence, col_labels: Sequence, explanation: str = "",
           a_cols: tuple[int, int] | None = None, b_cols: tuple[int, int] | None = None,
           heatmap: bool = False) -> Block:
    """C = A·B over column slices a_cols of A and b_cols of B (inclusive, 0-based).
    Cell (i, j) is MMULT(row i of A, column j of B)."""
    a0, a1 = a_cols or (0, a.cols - 1)
    b0, b1 = b_cols or (0, b.cols - 1)
    return sheet.step_block(
        name, equation, a.rows, b1 - b0 + 1, row_labels, col_labels,
        cells=lambda i, j: f"=MMULT({a.row(i, a0, a1)},{b.col(b0 + j)})",
        array=lambda me: f"=MMULT({a.cols_range(a0, a1)},{b.cols_range(b0, b1)})",
        explanation=explanation, heatmap=heatmap)


def matmul_transposed(sheet: SheetWriter, name: str, equation: str, a: Block, b: Block,
                      row_labels: Sequence, col_labels: Sequence, explanation: str = "",
                      a_cols: tuple[int, int] | None = None,
                      b_cols: tuple[int, int] | None = None) -> Block:
    """C = A·Bᵀ: cell (i, j) is the dot product of row i of A with row j of B."""
    a0, a1 = a_cols or (0, a.cols - 1)
    b0, b1 = b_cols or (0, b.cols - 1)
    return sheet.step_block(
        name, equation, a.rows, b.rows, row_labels, col_labels,
        cells=lambda i, j: f"=SUMPRODUCT({a.row(i, a0, a1)},{b.row(j, b0, b1)})",
        array=lambda me: f"=MMULT({a.cols_range(a0, a1)},"
                         f"TRANSPOSE({b.cols_range(b0, b1)}))",
        explanation=explanation)


def scale(sheet: SheetWriter, name: str, scores: Block, d_k: int, labels: Sequence,
          explanation: str, col_labels: Sequence | None = None) -> Block:
    """S / √d_k, with d_k written into the formula as the tutorial writes it. Columns are
    labelled like the rows unless `col_labels` is given (queries ≠ keys)."""
    return sheet.step_block(
        name, f"S / √d_k   (d_k = {d_k})", scores.rows, scores.cols, labels,
        labels if col_labels is None else col_labels,
        cells=lambda i, j: f"={scores.cell(i, j)}/SQRT({d_k})",
        array=lambda me: f"={scores.whole()}/SQRT({d_k})",
        explanation=explanation)


def causal_mask(sheet: SheetWriter, n: int) -> Block:
    """1 where key position ≤ query position (PyTorch `is_causal`), else 0. The row and
    column labels are the positions the formula compares."""
    positions = list(range(1, n + 1))

    def cell(i: int, j: int) -> str:
        me = sheet.current
        return f"=IF({me.col_label(j)}<={me.row_label(i)},1,0)"

    return sheet.step_block(
        "MASK", "1 if key j ≤ query i else 0", n, n, positions, positions, cells=cell,
        array=lambda me: f"=IF({me.col_labels()}<={me.row_labels()},1,0)",
        corner="query\\key",
        explanation="Causal mask: a token may attend only to itself and earlier tokens. "
                    "Masked entries are left out of the row max and sum below, so no −∞ "
                    "is needed.")


def softmax_steps(sheet: SheetWriter, scaled: Block, mask: Block | None, labels: Sequence,
                  suffix: str = "", col_labels: Sequence | None = None,
                  over: str = "keys") -> Block:
    """The row softmax as visible steps: row max, shifted exp, row sum, divide.
    Rows are labelled `labels`, columns `col_labels` (default: the same). Returns the
    WEIGHTS block."""
    n = scaled.rows
    col_labels = labels if col_labels is None else col_labels

    def allowed_last(i: int) -> int:
        return i if mask is not None else scaled.cols - 1  # causal: keys 0..i

    # m_i = max_{j allowed} s_ij   (subtracting it keeps EXP from overflowing)
    row_max = sheet.step_block(
        "ROW_MAX" + suffix, "m = max_j S_ij", n, 1, labels, ["max"],
        cells=lambda i, j: f"=MAX({scaled.row(i, 0, allowed_last(i))})",
        explanation="Largest allowed score of each row; subtracting it before EXP is the "
                    "stable softmax and changes no weight.")

    # p_ij = exp(s_ij − m_i), 0 where masked
    def exp_cell(i: int, j: int) -> str:
        shifted = f"EXP({scaled.cell(i, j)}-{row_max.row(i)})"
        if mask is None:
            return f"={shifted}"
        return f"=IF({mask.cell(i, j)}=1,{shifted},0)"

    def exp_array(me: Block) -> str:
        shifted = f"EXP({scaled.whole()}-{row_max.whole()})"
        return f"={shifted}" if mask is None else f"=IF({mask.whole()}=1,{shifted},0)"

    exp = sheet.step_block(
        "EXP" + suffix, "P = exp(S − m)" + (" · mask" if mask is not None else ""), n,
        scaled.cols, labels, col_labels, cells=exp_cell, array=exp_array,
        explanation="Exponential of each shifted score; masked entries are 0.")

    # ℓ_i = Σ_j p_ij
    row_sum = sheet.step_block(
        "ROW_SUM" + suffix, "ℓ = Σ_j P_ij", n, 1, labels, ["sum"],
        cells=lambda i, j: f"=SUM({exp.row(i)})",
        explanation="Row sums of the exponentials: the softmax denominator.")

    # a_ij = p_ij / ℓ_i
    return sheet.step_block(
        "WEIGHTS" + suffix, "A = P / ℓ", n, scaled.cols, labels, col_labels,
        cells=lambda i, j: f"={exp.cell(i, j)}/{row_sum.row(i)}",
        array=lambda me: f"={exp.whole()}/{row_sum.whole()}", heatmap=True,
        explanation=f"Attention weights: each row is a probability distribution over the "
                    f"{over} (sums to 1).")
