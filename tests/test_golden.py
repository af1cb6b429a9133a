"""Golden formula text: the exact formulas of tiny workbooks, compared with files in
tests/golden/. After an intended change, regenerate with UPDATE_GOLDEN=1 and review the diff."""

import os
from pathlib import Path

import openpyxl
import pytest
from helpers.books import build
from helpers.sheets import formulas_of

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "attention_n2_causal_cells": ("attention", {"seq_len": 2, "d_model": 2, "d_k": 1,
                                                "causal": True}, "cells"),
    "attention_n2_causal_blocks": ("attention", {"seq_len": 2, "d_model": 2, "d_k": 1,
                                                 "causal": True}, "blocks"),
    # every product between copies of its operands: X·W_Q + B_Q, Q·Kᵀ, A·V
    "attention_n2_causal_bias_hand": ("attention", {"seq_len": 2, "d_model": 2, "d_k": 1,
                                                    "causal": True, "bias": True}, "hand"),
    "multihead_n2_gqa_cells": ("multihead", {"seq_len": 2, "d_model": 2, "heads": 2,
                                             "kv_heads": 1}, "cells"),
    # the default elu+1 feature map, as it was before --features favor
    "linear_n2_cells": ("linear", {"seq_len": 2, "d_model": 2, "d_k": 2}, "cells"),
    "linear_n2_causal_blocks": ("linear", {"seq_len": 2, "d_model": 2, "d_k": 2,
                                           "causal": True}, "blocks"),
}


def formula_text(path: Path) -> str:
    """One line per formula cell, plus the defined names, in sheet order."""
    lines = [f"{where} {{{text}}}" if array else f"{where} {text}"
             for where, text, array in formulas_of(path)]
    for name, defined in sorted(openpyxl.load_workbook(path).defined_names.items()):
        lines.append(f"name {name} -> {defined.attr_text}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_formula_text_matches_golden(tmp_path, case):
    kind, params, layout = CASES[case]
    got = formula_text(build(tmp_path, kind, params, layout=layout))
    golden = GOLDEN / f"{case}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(got, encoding="utf-8")
    exp = golden.read_text(encoding="utf-8")
    assert got == exp
