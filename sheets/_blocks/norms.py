"""Normalising each row: LayerNorm in four visible steps and RMSNorm in two.

    LN(r)  = (r − μ)/√(σ² + eps)·γ + β    μ = Σ_j r_j / d,  σ² = Σ_j (r_j − μ)² / d (biased)
    RMS(r) = r/√(ms + eps)·w              ms = Σ_j r_j² / d  (no mean subtracted, no shift)
"""

from sheets._blocks.literals import excel_number
from workbook_builder.sheet import BROADCAST, Input, Map, Rows, Step, section


def layer_norm_inputs(ln: str, sfx: str = "", when=None) -> tuple[Input, Input]:
    """γ and β of LayerNorm `ln` (one row each, read by every row: BROADCAST), named
    {ln}_GAMMA{sfx} and {ln}_BETA{sfx}; present when `when` says so."""
    return (Input(f"{ln}_GAMMA{sfx}", BROADCAST, "d_model", "γ (scale)", ["γ"], "d", when=when),
            Input(f"{ln}_BETA{sfx}", BROADCAST, "d_model", "β (shift)", ["β"], "d", when=when))


def layer_norm(ln: str, src: str, out: str, eps: float) -> list[Step]:
    """LN(r) = (r − μ)/√(σ² + eps)·γ + β over each row of `src`, as four visible steps
    {ln}_MEAN, {ln}_CENTERED, {ln}_VAR and `out`, reading {ln}_GAMMA and {ln}_BETA; eps is
    written into the formula (nn.LayerNorm's 1e-5, BERT's 1e-12)."""
    eps_text = excel_number(eps)
    return [
        # μ_i = Σ_j r_ij / d
        Step(f"{ln}_MEAN", "μ = Σ_j r_j / d", Rows("=SUM({R})/{d_model}", R=src),
             col_labels=["μ"]),
        # c_ij = r_ij − μ_i
        Step(f"{ln}_CENTERED", "c = r − μ", Map("={R}-{M}", R=src, M=f"{ln}_MEAN")),
        # σ²_i = Σ_j c_ij² / d   (biased, as LayerNorm)
        Step(f"{ln}_VAR", "σ² = Σ_j c_j² / d",
             Rows("=SUMPRODUCT({C},{C})/{d_model}", C=f"{ln}_CENTERED"),
             "Biased variance (divide by d, not d − 1), as nn.LayerNorm.", col_labels=["σ²"]),
        # out_ij = c_ij / √(σ²_i + eps) · γ_j + β_j
        Step(out, f"c / √(σ² + {eps_text}) · γ + β",
             Map(f"={{C}}/SQRT({{V}}+{eps_text})*{{G}}+{{B}}", C=f"{ln}_CENTERED",
                 V=f"{ln}_VAR", G=f"{ln}_GAMMA", B=f"{ln}_BETA"),
             f"{ln}: each row rescaled to mean 0 and variance 1, then by γ and β."),
    ]


def layer_norm_section(ln: str, src: str, out: str, eps: float, gamma: Input, beta: Input):
    """γ and β of `ln`, then its four steps (`layer_norm`), under one title."""
    return section(f"{ln} — LayerNorm over each row: mean, centre, variance, scale",
                   [gamma, beta], layer_norm(ln, src, out, eps))


RMS_WHY = ("Mean of the squares of each row: no mean is subtracted, unlike LayerNorm.",
           "Each row scaled to root-mean-square 1, then by the weight w (no shift).")


def rms_norm(src: str, ms: str, out: str, weight: str, eps: float, symbols=("r", "w"),
             explanations=RMS_WHY) -> list[Step]:
    """RMS(r) = r/√(ms + eps)·w over each row of `src`: `ms` = Σ_j r_j² / d, then `out`,
    reading the one-row block `weight` (eps inside the root, as transformers). `symbols`
    name r and w in the equations."""
    eps_text, (r, w) = excel_number(eps), symbols
    return [
        # ms_i = Σ_j r_ij² / d
        Step(ms, f"ms = Σ_j {r}_j² / d", Rows("=SUMPRODUCT({R},{R})/{d_model}", R=src),
             explanations[0], col_labels=["ms"]),
        # out_ij = r_ij / √(ms_i + eps) · w_j
        Step(out, f"{r} / √(ms + {eps_text}) · {w}",
             Map(f"={{R}}/SQRT({{M}}+{eps_text})*{{W}}", R=src, M=ms, W=weight),
             explanations[1]),
    ]
