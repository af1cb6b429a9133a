"""Rotary position embeddings (RoPE): each pair of a row's columns turned by an angle that
grows with the row's position.

    θ[pos, i] = pos · b^(−2i/d_k)                                        rope_angles
    (a, b) → (a·cos θ − b·sin θ,  b·cos θ + a·sin θ)                      rotated
pairs interleaved (x_2i, x_2i+1), as RoFormer and Meta's LLaMA, or half (x_i, x_i+d_k/2),
as GPT-NeoX and transformers' rotate_half. Positions count from 0 and are read from the
row labels (the label set "positions").
"""

from workbook_builder.sheet import Custom, Map, Step
from workbook_builder.sheet.declare import Size

ROPE_CONVENTIONS = ["interleaved", "half"]
ROTATION = "(a, b) → (a·cos θ − b·sin θ, b·cos θ + a·sin θ)"
ANGLES = {"row_labels": "positions", "corner": "pos\\i"}  # a block of angles θ[pos,i]


def rope_angles(base: str) -> list[Step]:
    """ROPE_ANGLE θ = pos · b^(−2i/d_k), b the parameter `base`, then ROPE_COS and
    ROPE_SIN, which `rotated` reads."""
    return [Step("ROPE_ANGLE", f"θ = pos · {{{base}}}^(−2i/{{d_k}})",  # pos, i: the labels
                 Map(f"={{ROW_LABEL}}*POWER({{{base}}},-2*{{COL_LABEL}}/{{d_k}})",
                     rows="seq_len", cols=lambda p: p.d_k // 2),
                 "Rotation angle of pair i at each position.",
                 col_labels=lambda p: list(range(p.d_k // 2)), **ANGLES),
            Step("ROPE_COS", "cos θ", Map("=COS({A})", A="ROPE_ANGLE"), corner="pos\\i"),
            Step("ROPE_SIN", "sin θ", Map("=SIN({A})", A="ROPE_ANGLE"), corner="pos\\i")]


def pair_of(j: int, d: int, convention: str) -> tuple[int, int, int, bool]:
    """(pair index i, column a, column b, is j the second member) of column j."""
    if convention == "interleaved":
        i = j // 2
        return i, 2 * i, 2 * i + 1, j % 2 == 1
    half = d // 2
    i = j % half
    return i, i, i + half, j >= half


def rotated(src: str, first_row_only: bool = False, cols: Size = "d_k",
            convention: str | None = None) -> Custom:
    """Row pos of `src` (or its first row, anchored, at every pos) rotated by the angles of
    position pos: a' = a·cos θ − b·sin θ,  b' = b·cos θ + a·sin θ. One formula per cell.
    `src` may hold several heads of d_k columns side by side, each rotated alike; the
    pairs follow `convention`, else the parameter `rope`."""
    def each(i, j, env):
        x, cos, sin = env[src], env["ROPE_COS"], env["ROPE_SIN"]
        d_k = env.params.d_k
        head = j - j % d_k  # first column of this column's head
        pair, a, b, second = pair_of(j % d_k, d_k, convention or env.params.rope)
        a, b = head + a, head + b
        ref = (lambda c: x.fixed(0, c)) if first_row_only else (lambda c: x.cell(i, c))
        c, s = cos.cell(i, pair), sin.cell(i, pair)
        return f"={ref(b)}*{c}+{ref(a)}*{s}" if second else f"={ref(a)}*{c}-{ref(b)}*{s}"

    return Custom("seq_len", cols, each)
