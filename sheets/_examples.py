"""`--example NAME` presets the attention kinds share: `hand` (small integers a student
checks with a calculator, every query visibly peaked on one key), `wo-ai-ai` (the
tutorial's 我/爱/AI, the numbers `reproduce` uses, sheets/_tutorials.py) and `sentence` (the
seed tutorial's sentence through a real model's layer 0: declared here, made where models
are read, workbook_builder/models/examples.py)."""

from collections.abc import Callable

from sheets._tutorials import TUTORIALS
from workbook_builder.sheet import Example
from workbook_builder.sheet.kind import ModelExample

# X: four tokens of three features; Q·Kᵀ (before ÷√2) has one large score per row, on a
# different key each time, so every row of WEIGHTS has its maximum ≥ 0.6:
#   S = [[-2, 2, -2, 0], [5, -1, 1, 4], [-1, -1, 1, -2], [3, 1, -1, 4]]
HAND_QKV = {
    "X": [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]],
    "W_Q": [[2, 0], [-1, 2], [-1, -1]],
    "W_K": [[-1, 2], [1, 0], [-1, 0]],
    "W_V": [[1, 0], [0, 1], [1, 1]],
}
HAND_QKV_SIZES = {"seq_len": 4, "d_model": 3, "d_k": 2}
HAND_NOTE = "example hand: small integers; every query attends mostly to one key"

# two heads of d_k = 1 (no √d_k to take): Q_h·K_hᵀ is an outer product of two columns,
# each head peaked (row maximum ≥ 0.7) on other keys
HAND_MULTIHEAD = {
    "X": [[1, 1], [-1, 0], [2, 0]],
    "W_Q": [[-1, -1], [0, 0]],
    "W_K": [[-1, 1], [0, 0]],
    "W_V": [[1, 0], [0, 1]],
    "W_O": [[1, 0], [0, 1]],
}

def hand_qkv(**params) -> Callable[[], Example]:
    """The shared hand-checkable X, W_Q, W_K, W_V, with a kind's own extra sizes."""
    return lambda: Example({**HAND_QKV_SIZES, **params}, dict(HAND_QKV), None, HAND_NOTE)


def hand_multihead() -> Example:
    return Example({"seq_len": 3, "d_model": 2, "heads": 2}, dict(HAND_MULTIHEAD), None,
                   HAND_NOTE)


def sentence_qkv(bias: bool, **params) -> ModelExample:
    """One head of all-MiniLM-L6-v2's layer 0 on the sentence when its package is
    installed (`bias`: with the head's bias rows), else a stated stand-in; the kind's own
    extra sizes in `params`."""
    return ModelExample("sentence", {"bias": bias, "params": params})


def wo_ai_ai(kind: str, **params) -> Callable[[], Example]:
    """The tutorial's 我/爱/AI example of `kind` (`reproduce wo-ai-ai` holds its numbers;
    a kind with attention's inputs reuses attention's)."""
    def make() -> Example:
        tutorial = TUTORIALS["wo-ai-ai"]
        example = next(e for e in tutorial.examples if e.kind == kind)
        return Example({**example.params, **params}, dict(example.inputs),
                       list(tutorial.tokens), "example wo-ai-ai: " + tutorial.source)
    return make
