"""A checkpoint's layer as a kind's inputs: sizes from its config, weights by its family's
name table (nn.Linear weights transposed into X·W), tokens from its own tokenizer, and the
hidden states entering the layer from the NumPy reference of the layers before it."""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models import llama
from workbook_builder.models.families import (
    ACTIVATIONS,
    CONV,
    GPT2,
    KIND_FAMILIES,
    LINEAR,
    MATRIX,
    SIGNATURES,
    TABLE,
    Family,
)
from workbook_builder.models.files import Checkpoint, read_checkpoint
from workbook_builder.models.gpt2 import gpt2_inputs
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.registry import get_kind

MODELS_EXTRA = "pip install 'attnsheets[models]'"
# flags that shape every layer, so also the layers computed before the one on the sheet
LAYER_FLAGS = ("heads", "ln_eps", "activation", "gelu", "kv_heads", "rms_eps", "rope_theta")


@dataclass
class ModelInputs:
    """What a checkpoint gives a build: parameters, input blocks, row labels, and a line
    saying where X comes from (written on the sheet)."""

    params: dict[str, Any]
    inputs: dict[str, np.ndarray]
    labels: list[str] | None
    note: str


def model_inputs(kind_name: str, path: str | Path, *, layer: int = 0,
                 prefix: str | None = None, text: str | None = None,
                 token_ids: list[int] | None = None,
                 explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `kind_name` for layer `layer` of the checkpoint at `path`. With
    `text` or `token_ids`, X is the real hidden states entering the layer (encoder-block
    at layer 0: the embedding step itself, live on the sheet); without, X is left to the
    seed."""
    if kind_name not in KIND_FAMILIES:
        raise UserError(f"--checkpoint fills {' and '.join(KIND_FAMILIES)}, not {kind_name}")
    check_request(text, token_ids, layer)
    checkpoint = read_checkpoint(Path(path))
    family = _family(checkpoint, KIND_FAMILIES[kind_name])
    base = _prefix(checkpoint, family, prefix)
    if family is GPT2:  # fused Conv1D weights and whole models: models/gpt2.py
        ids, labels = _ids_and_labels(checkpoint, text, token_ids)
        params, inputs, note = gpt2_inputs(kind_name, checkpoint, base, layer, ids,
                                           explicit or {}, _tensor)
        return ModelInputs(params, inputs, labels, f"weights: {Path(str(path)).name}; {note}")
    sizes = _sizes(checkpoint, family, base, explicit or {})
    if family.name == "LLaMA":
        sizes.update(llama.config_sizes(checkpoint.config or {}, checkpoint.source))
    # flags given by hand win, in the layers before this one too
    sizes.update({k: v for k, v in (explicit or {}).items() if k in LAYER_FLAGS})
    _existing_layer(checkpoint, family, base, layer)
    ids, labels = _ids_and_labels(checkpoint, text, token_ids)
    kind = get_kind(kind_name)
    fields = {f.name for f in dataclasses.fields(kind.Params)}
    params = {k: v for k, v in sizes.items() if k in fields}
    if "bias" in fields:
        params["bias"] = True
    embedding_step = ids is not None and layer == 0 and "embeddings" in fields
    if "embeddings" in fields:
        params["embeddings"] = embedding_step
    if ids is not None:
        params["seq_len"] = len(ids)
    checked = make_params(kind, {**params, **(explicit or {})})
    inputs = _layer_inputs(checkpoint, family, base, layer, kind.input_shapes(checked))
    where = f"{family.name} layer {layer} of {Path(str(path)).name}"
    if ids is None:
        return ModelInputs(params, inputs, None, f"weights: {where}; X drawn from --seed")
    embedded = _embedding_inputs(checkpoint, family, base, ids)
    if embedding_step:
        inputs.update(embedded)
        return ModelInputs(params, inputs, labels, f"weights: {where}; X is the embedding "
                           f"step of the token ids {_short(ids)}")
    inputs["X"] = _hidden_states(checkpoint, family, base, sizes, embedded, layer)
    before = "the embedding step" + ("" if layer == 0 else " and layer 0" if layer == 1
                                     else f" and layers 0 … {layer - 1}")
    return ModelInputs(params, inputs, labels,
                       f"weights: {where}; X: the hidden states entering layer {layer}, "
                       f"computed by the NumPy reference of {before} (numbers, not "
                       f"formulas), token ids {_short(ids)}")


def _existing_layer(checkpoint: Checkpoint, family: Family, base: str, layer: int) -> None:
    """Refuses a `layer` the checkpoint does not have."""
    layers = _layer_count(checkpoint, family, base)
    if layer >= layers:
        raise UserError(f"{checkpoint.source}: no layer {layer} (it has layers 0 … "
                        f"{layers - 1})")


def _ids_and_labels(checkpoint: Checkpoint, text: str | None,
                    token_ids: list[int] | None) -> tuple[list[int] | None, list[str] | None]:
    """The token ids and their labels, from --text or --token-ids (None, None: neither)."""
    if text is not None:
        return _tokenize(checkpoint, text)
    if token_ids is not None:
        return list(token_ids), _labels_of(checkpoint, token_ids)
    return None, None


def check_request(text: str | None, token_ids: list[int] | None, layer: int) -> None:
    """What every family's reader refuses before opening the checkpoint."""
    if text is not None and token_ids is not None:
        raise UserError("give --text or --token-ids, not both")
    if layer < 0:
        raise UserError(f"--layer must be 0 or more, got {layer}")


def _short(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def _family(checkpoint: Checkpoint, families: tuple[Family, ...]) -> Family:
    """The family whose table fits; a config naming another model type, or tensors that
    belong to another family, are one line."""
    names = " or ".join(f.name for f in families)
    model_type = (checkpoint.config or {}).get("model_type")
    for family in families:
        if model_type is None or model_type in family.model_types:
            if any(name.endswith(family.anchor) for name in checkpoint.shapes):
                return family
    if model_type is not None and not any(model_type in f.model_types for f in families):
        raise UserError(f"{checkpoint.source}: config.json says model_type {model_type!r}; "
                        f"this kind reads {names} checkpoints")
    other = next((family for family, name in SIGNATURES.items()
                  if any(n.endswith(name) for n in checkpoint.shapes)), None)
    looks = f" (it looks like {other})" if other else ""
    raise UserError(f"{checkpoint.source}: no tensor named …{families[0].anchor}: not a "
                    f"{names} checkpoint{looks}")


def _prefix(checkpoint: Checkpoint, family: Family, prefix: str | None) -> str:
    """The part before the family's names ("", "bert.", …): --prefix, or the one place the
    anchor tensor is found."""
    if prefix is not None:
        base = prefix if prefix == "" or prefix.endswith(".") else prefix + "."
        if base + family.anchor not in checkpoint.shapes:
            raise UserError(f"{checkpoint.source}: no tensor {base + family.anchor} "
                            f"(--prefix {prefix!r})")
        return base
    found = sorted(name[:-len(family.anchor)] for name in checkpoint.shapes
                   if name.endswith(family.anchor))
    if len(found) > 1:
        raise UserError(f"{checkpoint.source}: {family.name} weights under several prefixes "
                        f"({', '.join(repr(f) for f in found)}); pick one with --prefix")
    return found[0]


def _sizes(checkpoint: Checkpoint, family: Family, base: str,
           explicit: dict[str, Any]) -> dict[str, Any]:
    """Sizes from config.json; a bare weights file gives d_model and d_ff by its shapes
    and needs --heads."""
    config = checkpoint.config or {}
    sizes = {ours: config[key] for key, ours in family.config.items() if key in config}
    act = config.get("hidden_act")
    if act is not None:
        if act not in ACTIVATIONS:
            raise UserError(f"{checkpoint.source}: hidden_act {act!r} is not one of "
                            f"{', '.join(ACTIVATIONS)}")
        sizes["activation"], sizes["gelu"] = ACTIVATIONS[act]
    if family.config and "d_model" not in sizes:
        sizes["d_model"] = checkpoint.dim(base + family.anchor, 1)
    w_1 = family.layer.get("W_1")
    if w_1 and "d_ff" not in sizes:
        name = base + w_1[0].format(layer=0)
        if name in checkpoint.shapes:
            sizes["d_ff"] = checkpoint.dim(name, 0)
    if "heads" not in sizes and "heads" not in explicit:
        raise UserError(f"{checkpoint.source}: no config.json gives the number of heads; "
                        f"pass --heads")
    return sizes


def _layer_count(checkpoint: Checkpoint, family: Family, base: str) -> int:
    config = checkpoint.config or {}
    if family.layers_key in config:
        return int(config[family.layers_key])
    anchor = base + family.anchor
    count = 0
    while anchor.replace(".0.", f".{count}.", 1) in checkpoint.shapes:
        count += 1
    return count


def _tensor(checkpoint: Checkpoint, name: str, expected: tuple[int, ...]) -> np.ndarray:
    """A tensor of the shape the sheet needs, or one line naming it and that shape."""
    if name not in checkpoint.shapes:
        raise UserError(f"{checkpoint.source}: no tensor {name} (expected shape "
                        f"{_shape(expected)})")
    got = tuple(checkpoint.shapes[name])
    if got != expected:
        raise UserError(f"{checkpoint.source}: tensor {name} has shape {_shape(got)}, "
                        f"expected {_shape(expected)}")
    return checkpoint.tensor(name)


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape)) if shape else "a scalar"


def _layer_inputs(checkpoint: Checkpoint, family: Family, base: str, layer: int,
                  shapes: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """Every input of the sheet the family's layer table fills, in X·W orientation."""
    inputs = {}
    for ours, (theirs, how) in family.layer.items():
        if ours not in shapes:
            continue
        rows, cols = shapes[ours]
        name = base + theirs.format(layer=layer)
        if how == LINEAR:  # nn.Linear stores out×in; the sheets multiply X·W, W in×out
            inputs[ours] = _tensor(checkpoint, name, (cols, rows)).T
        elif how == MATRIX:
            inputs[ours] = _tensor(checkpoint, name, (rows, cols))
        elif how == CONV:  # channels×1×k -> k×channels
            inputs[ours] = _tensor(checkpoint, name, (cols, 1, rows))[:, 0, :].T
        else:
            inputs[ours] = _tensor(checkpoint, name, (cols,))[None, :]
    return inputs


def _embedding_inputs(checkpoint: Checkpoint, family: Family, base: str,
                      ids: list[int]) -> dict[str, np.ndarray]:
    """The rows looked up for each token: word row by id, position row by place, the
    token-type row of segment 0; and the embedding LayerNorm's γ and β."""
    word_name, _ = family.embeddings["WORD_EMB"]
    word_shape = checkpoint.shapes.get(base + word_name)
    if word_shape is None or len(word_shape) != 2:
        raise UserError(f"{checkpoint.source}: no tensor {base + word_name} "
                        f"(vocabulary×d_model): the embedding step needs it")
    vocab, d = word_shape
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise UserError(f"token id {bad[0]} is outside the vocabulary (0 … {vocab - 1})")
    lookups = {"WORD_EMB": ids, "POS_EMB": list(range(len(ids))),
               "TYPE_EMB": [0] * len(ids)}
    inputs = {}
    for ours, (theirs, how) in family.embeddings.items():
        name = base + theirs
        if how == TABLE:
            shape = checkpoint.shapes.get(name)
            if shape is None or len(shape) != 2 or shape[1] != d:
                raise UserError(f"{checkpoint.source}: no tensor {name} (rows×{d})")
            rows = lookups[ours]
            if max(rows) >= shape[0]:
                raise UserError(f"{len(ids)} tokens need {max(rows) + 1} rows of {name}; it "
                                f"has {shape[0]}")
            inputs[ours] = checkpoint.tensor(name)[rows]
        else:
            inputs[ours] = _tensor(checkpoint, name, (d,))[None, :]
    return inputs


def _hidden_states(checkpoint: Checkpoint, family: Family, base: str, sizes: dict,
                   embedded: dict[str, np.ndarray], layer: int) -> np.ndarray:
    """The embedding step, then layers 0 … layer−1, each by encoder-block's NumPy
    reference: the hidden states entering `layer`."""
    if family.name == "LLaMA":  # no embedding step of its own: the looked-up rows
        kind = get_kind("llama-block")
        fields = {f.name for f in dataclasses.fields(kind.Params)}
        values = {k: v for k, v in sizes.items() if k in fields}

        def params(n: int):
            return make_params(kind, {**values, "seq_len": n})

        return llama.hidden_states(
            kind.reference, params, lambda k: _layer_inputs(
                checkpoint, family, base, k, kind.input_shapes(params(1))),
            embedded["WORD_EMB"], layer)
    encoder = get_kind("encoder-block")
    n = len(embedded["WORD_EMB"])
    fields = {f.name for f in dataclasses.fields(encoder.Params)}
    values = {k: v for k, v in sizes.items() if k in fields}
    params = make_params(encoder, {**values, "seq_len": n, "embeddings": True,
                                   "pre_ln": not family.post_ln})
    shapes = encoder.input_shapes(params)
    first = _layer_inputs(checkpoint, family, base, 0, shapes)
    x = encoder.reference({**first, **embedded}, params)["X"]
    plain = dataclasses.replace(params, embeddings=False)
    for k in range(layer):
        weights = _layer_inputs(checkpoint, family, base, k, shapes)
        x = encoder.reference({**weights, "X": x}, plain)["OUTPUT"]
    return x


def _tokenizer(checkpoint: Checkpoint):
    if checkpoint.tokenizer_problem is not None:
        raise UserError(f"{checkpoint.tokenizer_problem}; give --token-ids instead of --text")
    if checkpoint.tokenizer_json is None:
        raise UserError(f"{checkpoint.source}: no tokenizer.json beside the weights; give "
                        f"--token-ids instead of --text")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError(f"--text needs the tokenizers package ({MODELS_EXTRA})") from None
    try:
        tokenizer = Tokenizer.from_str(checkpoint.tokenizer_json)
    except Exception as exc:  # the Rust side raises its own exception type
        raise UserError(f"{checkpoint.source}: tokenizer.json is not readable ({exc})") \
            from None
    tokenizer.no_padding()  # a saved tokenizer may pad every text to a fixed length
    return tokenizer


def _tokenize(checkpoint: Checkpoint, text: str) -> tuple[list[int], list[str]]:
    if not text.strip():
        raise UserError("--text is empty")
    tokenizer = _tokenizer(checkpoint)
    try:
        encoding = tokenizer.encode(text)
    except Exception as exc:  # the Rust side raises its own exception type
        raise UserError(f"{checkpoint.source}: its tokenizer.json cannot encode --text "
                        f"({' '.join(str(exc).split()) or type(exc).__name__})") from None
    if not encoding.ids:
        raise UserError(f"--text {text!r} gives no tokens with this checkpoint's tokenizer")
    return list(encoding.ids), list(encoding.tokens)


def _labels_of(checkpoint: Checkpoint, ids: list[int]) -> list[str]:
    """Each id's token from the checkpoint's tokenizer, else "#id"."""
    if checkpoint.tokenizer_json is None:
        return [f"#{i}" for i in ids]
    try:
        tokenizer = _tokenizer(checkpoint)
    except UserError:  # labels only: ids alone still build
        return [f"#{i}" for i in ids]
    return [tokenizer.id_to_token(i) or f"#{i}" for i in ids]


def parse_token_ids(text: str | None) -> list[int] | None:
    """"101,1996,102" -> [101, 1996, 102]."""
    if text is None:
        return None
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"--token-ids must be whole numbers separated by commas, got "
                        f"{text!r}") from None
    if not ids:
        raise UserError("--token-ids is empty")
    return ids
