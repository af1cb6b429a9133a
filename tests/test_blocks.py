"""The shared blocks serve kinds that are not written yet: two encoder layers without
biases, stacked with `scoped_sections` (names _L1, _L2, layer 2 reading layer 1's OUTPUT),
build and check in every layout against encoder-block's reference applied layer by layer
with zero biases; a second attention in a layer takes a name prefix."""

from dataclasses import dataclass

import numpy as np
import pytest
from helpers.books import build

from reference.encoder_block import encoder_block_ref
from sheets._blocks.attention import X
from sheets._blocks.heads import concat_heads, head_steps
from sheets._blocks.layers import encoder_layer_inputs, encoder_layer_sections, scoped_sections
from workbook_builder.checking.check import check_workbook
from workbook_builder.sheet import Input, Kind, section
from workbook_builder.sheet.declare import block_shapes
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


def test_a_second_attention_in_one_layer_takes_a_prefix():
    """A decoder layer's cross-attention beside its self-attention: every step of a head
    and the concatenation named CROSS_…, reading queries of one block and keys and values
    of another (the encoder's), checked as declared."""
    inputs = [Input("Q", "seq_len", "d_model", "q"), Input("MEM_K", 5, "d_model", "k"),
              Input("MEM_V", 5, "d_model", "v")]
    steps = [step for h in (0, 1)
             for step in head_steps(h, h, 2, None, k="MEM_K", v="MEM_V", prefix="CROSS_")]
    shapes = block_shapes([section("in", inputs), section("cross", steps),
                           section("mix", concat_heads(2, 2, prefix="CROSS_"))], StackParams())
    assert shapes["CROSS_SCORES_H2"] == (3, 5) and shapes["CROSS_WEIGHTS_H1"] == (3, 5)
    assert shapes["CROSS_CONCAT"] == (3, 4)
    assert not any(name.startswith(("SCORES", "WEIGHTS", "HEAD")) for name in shapes)
