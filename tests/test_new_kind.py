"""A new kind is one declaration and one reference: attention with a softmax temperature τ,
defined here in about thirty lines, builds and checks in every layout with no other file
touched."""

from dataclasses import dataclass, field

import numpy as np
import pytest
from helpers.books import build

from sheets._blocks.attention import CAUSAL_MASK, QKV_INPUTS, AttentionParams, projections
from sheets._blocks.softmax import softmax_steps
from workbook_builder.checking.check import check_workbook
from workbook_builder.sheet import Kind, Map, MatMul, Step, section
from workbook_builder.sheet.kind import KINDS


def tempered_attention_ref(inputs, p):
    """softmax(Q·Kᵀ/(√d_k·τ))·V, written from the equation."""
    q, k, v = (inputs["X"] @ inputs[w] for w in ("W_Q", "W_K", "W_V"))
    s = q @ k.T / (np.sqrt(p.d_k) * p.temperature)
    allowed = np.tril(np.ones(s.shape, bool)) if p.causal else np.ones(s.shape, bool)
    m = np.where(allowed, s, -np.inf).max(axis=1, keepdims=True)
    e = np.where(allowed, np.exp(s - m), 0.0)
    out = {"Q": q, "K": k, "V": v, "SCORES": q @ k.T, "TEMPERED": s}
    out |= {"MASK": allowed.astype(float)} if p.causal else {}
    return out | {"ROW_MAX": m, "EXP": e, "ROW_SUM": e.sum(1, keepdims=True),
                  "WEIGHTS": e / e.sum(1, keepdims=True), "OUTPUT": e / e.sum(1, keepdims=True) @ v}


@pytest.fixture
def tempered_kind():
    @dataclass(frozen=True)
    class TemperedParams(AttentionParams):
        temperature: float = field(default=2.0, metadata={"help": "softmax temperature τ"})

    class TemperedAttention(Kind):
        name, summary, sheet_title = "tempered", "attention with a temperature", "Tempered"
        Params, reference, inputs = TemperedParams, staticmethod(tempered_attention_ref), QKV_INPUTS

        @classmethod
        def sections(cls, p):
            mask = "MASK" if p.causal else None
            return [section("Inputs", QKV_INPUTS), section("Projections", projections()),
                    section("Scores over √d_k·τ", [
                        Step("SCORES", "S = Q·Kᵀ", MatMul("Q", "K", transpose="b")),
                        Step("TEMPERED", "S / (√d_k·τ)",
                             Map("={S}/(SQRT({d_k})*{temperature})", S="SCORES")),
                        *([CAUSAL_MASK] if mask else [])]),
                    section("Softmax", softmax_steps("TEMPERED", mask)),
                    section("Output", Step("OUTPUT", "O = A·V", MatMul("WEIGHTS", "V")))]

    yield TemperedAttention
    del KINDS["tempered"]  # the registry is the process's: leave it as it was


@pytest.mark.parametrize("layout", ["cells", "blocks", "hand"])
@pytest.mark.parametrize("causal", [False, True])
def test_a_kind_declared_in_thirty_lines_builds_and_checks(tmp_path, tempered_kind, layout,
                                                           causal):
    path = build(tmp_path, "tempered", {"seq_len": 4, "d_model": 3, "d_k": 2,
                                        "temperature": 0.5, "causal": causal}, layout=layout)
    report = check_workbook(path)
    assert report.passed and [s.name for s in report.steps][-1] == "OUTPUT"
    assert tempered_kind.step_names(tempered_kind.Params(causal=causal))[:5] == \
        ["Q", "K", "V", "SCORES", "TEMPERED"]


def test_a_wrong_temperature_in_the_sheet_is_caught(tmp_path, tempered_kind):
    """The check is not vacuous for the new kind: the reference disagrees with τ = 1."""
    path = build(tmp_path, "tempered", {"seq_len": 3, "d_model": 2, "d_k": 2,
                                        "temperature": 1.0})
    import openpyxl

    from workbook_builder.book.files import save_atomic
    wb = openpyxl.load_workbook(path)
    about = wb["About"]
    row = next(r for r in range(1, 20) if about.cell(r, 1).value == "params")
    about.cell(row, 2).value = about.cell(row, 2).value.replace('"temperature": 1.0',
                                                                '"temperature": 3.0')
    save_atomic(wb, path, with_values=False, force=True)
    failed = [s.name for s in check_workbook(path).steps if not s.passed]
    assert failed[0] == "TEMPERED" and "OUTPUT" in failed
