"""The shared blocks serve a kind that is not written yet: two encoder layers without biases,
stacked with `scoped_sections` (names _L1, _L2, layer 2 reading layer 1's OUTPUT), build and
check in every layout against encoder-block's reference applied layer by layer with zero
biases."""

from dataclasses import dataclass

import numpy as np
import pytest
from conftest import build

from reference.encoder_block import encoder_block_ref
from sheets._blocks.attention import X
from sheets._blocks.layers import encoder_layer_inputs, encoder_layer_sections, scoped_sections
from workbook_builder.checking.check import check_workbook
from workbook_builder.sheet import Kind
from workbook_builder.sheet.kind import KINDS


@dataclass(frozen=True)
class StackParams:
    seq_len: int = 3
    d_model: int = 4
    heads: int = 2
    d_ff: int = 3
    activation: str = "gelu"
    gelu: str = "exact"
    pre_ln: bool = True
    ln_eps: float = 1e-5
    embeddings: bool = False  # what encoder-block's reference reads

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads


LAYERS = [encoder_layer_inputs(f"_L{layer}", bias=False) for layer in (1, 2)]
ZERO_BIASES = {"B_Q": "d_model", "B_K": "d_model", "B_V": "d_model", "B_O": "d_model",
               "B_1": "d_ff", "B_2": "d_model"}


def stack_ref(inputs, p):
    """Each layer is encoder-block's layer with zero bias rows, on the output below."""
    steps, x = {}, inputs["X"]
    for layer, weights in enumerate(LAYERS, start=1):
        given = {name: inputs[item.name] for name, item in weights.items()}
        given |= {name: np.zeros((1, getattr(p, size))) for name, size in ZERO_BIASES.items()}
        computed = encoder_block_ref({**given, "X": x}, p)
        steps |= {f"{name}_L{layer}": block for name, block in computed.items()}
        x = computed["OUTPUT"]
    return steps


@pytest.fixture
def stack_kind():
    class Stack(Kind):
        name, summary, sheet_title = "stack", "two encoder layers", "Stack"
        Params, reference = StackParams, staticmethod(stack_ref)
        inputs = [X, *(item for weights in LAYERS for item in weights.values())]

        @classmethod
        def random_input(cls, name, shape, params, rng):
            if "_GAMMA" in name:
                return np.round(rng.uniform(0.5, 1.5, size=shape), 2)
            return super().random_input(name, shape, params, rng)

        @classmethod
        def sections(cls, p):
            made = []
            for layer, weights in enumerate(LAYERS, start=1):
                below = "X" if layer == 1 else f"OUTPUT_L{layer - 1}"
                sections = encoder_layer_sections(p, weights, p.pre_ln, p.activation, p.gelu,
                                                  p.ln_eps, bias=False,
                                                  leading=[X] if layer == 1 else [])
                made += scoped_sections(sections, f"_L{layer}", f"Layer {layer}", X=below)
            return made

    yield Stack
    del KINDS["stack"]


@pytest.mark.parametrize("layout", ["cells", "blocks", "hand"])
def test_two_stacked_encoder_layers_build_and_check(tmp_path, stack_kind, layout):
    path = build(tmp_path, "stack", {}, layout=layout)
    report = check_workbook(path)
    assert report.passed, report
    names = [step.name for step in report.steps]
    assert names[0] == "LN1_MEAN_L1" and names[-1] == "OUTPUT_L2"
    assert "SCORES_H2_L2" in names and "B_Q_L1" not in names
    equations = [s.equation for s in stack_kind.steps(StackParams())]
    assert "Q = h·W_Q" in equations and "CONCAT·W_O" in equations  # no "+ B" without biases
