"""Token ids to embedding rows, live: editing an id recomputes everything after it.

    E_i = TABLE[t_i, ·]  = INDEX(TABLE, t_i + 1, ·)   one formula per cell (ids count from 0)
                         = [t = v]·TABLE              one-hot rows times the table (`blocks`)
"""

from workbook_builder.sheet import ByRow, Input, Step, WholeNumbers


def ids_from_0(size: str):
    """0 … size − 1, the labels of a table's rows (token ids) or of positions from 0."""
    return lambda p: list(range(getattr(p, size)))


def token_ids_input(name: str = "TOKEN_IDS", title: str = "token ids",
                    rows: str = "seq_len", vocab: str = "vocab",
                    row_labels="tokens") -> Input:
    """A column of token ids, one per row, each a whole number 0 … vocab − 1 (refused
    otherwise wherever inputs are given or read back)."""
    return Input(name, rows, 1, title, row_labels, ["id"],
                 values=WholeNumbers(0, vocab, "a token id"))


def token_lookup(name: str = "TOK_EMB", ids: str = "TOKEN_IDS", table: str = "WTE",
                 rows: str = "seq_len", cols: str = "d_model",
                 equation: str = "WTE[id, ·] = [id = v]·WTE",
                 explanation: str = "Each token's row of the embedding table, looked up by "
                                    "its id.") -> Step:
    """`name` = row t_i of `table` for each id t_i of the one-column block `ids`. In
    `cells` one INDEX per cell, reading column j of the table only (the `formulas` engine
    turns every cell of INDEX's range into a reference first); in `blocks` one matrix
    product of the one-hot rows, 1 where t_i is the table's row label v (its ids), and the
    table: as fast as any other product in every engine."""
    def cell(i: int, j: int, env) -> str:
        # E_ij = TABLE[t_i, j]: INDEX counts from 1
        return f"=INDEX({env[table].col(j)},{env[ids].cell(i, 0)}+1,1)"

    def one_hot_times_table(env) -> str:
        # E = [t = v]·TABLE
        return (f"=MMULT(IF({env[ids].whole()}=TRANSPOSE({env[table].row_labels()}),1,0),"
                f"{env[table].whole()})")

    return Step(name, equation, ByRow(rows, cols, cell, whole=one_hot_times_table),
                explanation, col_labels="d")
