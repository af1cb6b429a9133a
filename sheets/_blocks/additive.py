"""Bahdanau's additive attention score, for `additive` and for a decoder that scores one
step at a time (names with a suffix, its decoder side one row):

    WS = S·W_A (+ b_W)        UH = H·U_A (+ b_U)              side_projection
    PRE(i, j) = WS_i + UH_j   HIDDEN = tanh(PRE)              alignment_pairs
                              one row per (decoder row i, source token j): row i·n + j
    e_ij = HIDDEN(i, j)·v (+ b_v)                             additive_scores
then the row softmax over j and the context c_i = Σ_j α_ij h_j (softmax, attention).
"""

from workbook_builder.sheet import ByRow, Map, MatMul, Step, row_or_cell, rows_of
from workbook_builder.sheet.declare import Labels, Size, size_of


def rows_times(a: Size, b: Size):
    """The size a·b, as a function of the parameters."""
    return lambda p: size_of(a, p) * size_of(b, p)


def side_projection(name: str, equation: str, states: str, weights: str, bias: str | None,
                    rows: Size, row_labels: Labels, explanation: str) -> Step:
    """`name` = states·weights (one side of the score, d_att wide); with the one-row block
    `bias` added, one array formula per row."""
    if bias is None:
        return Step(name, equation, MatMul(states, weights), explanation)

    def row(i: int, j: int | None, env) -> str:  # column j, or the whole row (j None)
        w, b = env[weights], env[bias]
        if j is None:
            return f"=MMULT({env[states].row(i)},{w.whole()})+{b.whole()}"
        return f"=MMULT({env[states].row(i)},{w.col(j)})+{b.cell(0, j)}"

    return Step(name, f"{equation} + b_{weights[0]}", ByRow(rows, "d_att", row),
                explanation, row_labels=row_labels, col_labels="a")


def alignment_pairs(equation: str, dec_rows: Size, src_rows: Size, ws: str = "WS",
                    uh: str = "UH", suffix: str = "", pair_labels: Labels = "pairs") -> list:
    """PRE: row i·n + j = WS_i + UH_j, every (decoder row, source token) pair (n the rows of
    `uh`), and HIDDEN = tanh(PRE), the alignment model's one hidden layer."""
    pre = f"PRE{suffix}"

    def pair(r: int, c: int | None, env) -> str:  # PRE row i·n + j: WS_i + UH_j
        n = env[uh].rows
        return f"={row_or_cell(env[ws], r // n, c)}+{row_or_cell(env[uh], r % n, c)}"

    return [Step(pre, equation, ByRow(rows_times(dec_rows, src_rows), "d_att", pair),
                 "Row 'y→x': decoder step y's projection plus source token x's.",
                 row_labels=pair_labels, col_labels="a", corner="s_i→h_j"),
            Step(f"HIDDEN{suffix}", f"tanh({pre})", Map("=TANH({P})", P=pre),
                 "The one hidden layer of the alignment model.", corner="s_i→h_j")]


def additive_scores(equation: str, dec_rows: Size, src_rows: Size, v: str = "V_A",
                    b_v: str | None = None, suffix: str = "", row_labels: Labels = "tgt",
                    col_labels: Labels = "src") -> Step:
    """SCORES: e_ij = HIDDEN(i, j)·v (+ b_v, the same number in every score of a row, so it
    cancels in the softmax); the whole row i at once: the n rows of HIDDEN for decoder
    row i, times v, transposed."""
    hidden = f"HIDDEN{suffix}"

    def score(i: int, j: int | None, env) -> str:
        n = size_of(src_rows, env.params)
        plus = f"+{env[b_v].fixed(0, 0)}" if b_v else ""
        if j is None:
            return (f"=TRANSPOSE(MMULT({rows_of(env[hidden], i * n, i * n + n - 1)},"
                    f"{env[v].whole()})){plus}")
        return f"=MMULT({env[hidden].row(i * n + j)},{env[v].col(0)}){plus}"

    return Step(f"SCORES{suffix}", equation, ByRow(dec_rows, src_rows, score),
                "Alignment score of decoder step i with source token j.",
                row_labels=row_labels, col_labels=col_labels, corner="s_i\\h_j")
