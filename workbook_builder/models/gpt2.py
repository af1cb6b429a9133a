"""GPT-2 checkpoints as `decoder-block` and `gpt` inputs: sizes from its config.json, the
fused c_attn split into W_Q, W_K, W_V, Conv1D weights read as they are (already X·W), and
the hidden states entering a layer from decoder-block's NumPy reference of the layers
before it."""

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models.config_values import layers_part, refuse_contradicted_flags
from workbook_builder.models.families import CONV1D, GPT2
from workbook_builder.models.files import Checkpoint
from workbook_builder.registry import get_kind
from workbook_builder.sheet.provenance import CheckpointParams, checked_params

# config.json activation_function -> our GELU form (GPT-2's gelu_new is the tanh form)
GELU_OF = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "exact"}
Reader = Callable[[Checkpoint, str, tuple[int, ...]], np.ndarray]


def gpt2_inputs(kind_name: str, checkpoint: Checkpoint, base: str, layer: int,
                ids: list[int] | None, explicit: dict[str, Any],
                read: Reader) -> tuple[dict[str, Any], dict[str, np.ndarray], str,
                                       CheckpointParams]:
    """Parameters, inputs and the sheet's note for `decoder-block` (layer `layer`) or
    `gpt` (layers 0 … --layers − 1, embeddings, final LayerNorm) from a GPT-2 checkpoint;
    `read` gives a tensor of the expected shape or one line naming it."""
    sizes = _sizes(checkpoint, base, explicit)
    count = _layer_count(checkpoint, base)
    if kind_name == "gpt":
        if layer:
            raise UserError("gpt holds the model's first --layers layers; --layer is for "
                            "decoder-block")
        sizes["layers"] = count
    elif layer >= count:
        raise UserError(f"{checkpoint.source}: no layer {layer} (it has layers 0 … "
                        f"{count - 1})")
    if ids is not None:
        sizes["seq_len"] = len(ids)
    if kind_name == "decoder-block":
        sizes["layer_number"] = layer + 1
    # what the checkpoint says cannot be changed by hand (a bare weights file's eps and
    # GELU are GPT-2's defaults: those can)
    decided = dict(sizes) if checkpoint.config is not None else \
        {k: v for k, v in sizes.items() if k in ("d_model", "d_ff", "vocab", "layer_number",
                                                   "seq_len", "layers")}
    kind = get_kind(kind_name)
    vocab = sizes["vocab"]
    fields = {f.name for f in dataclasses.fields(kind.Params)}
    said = {ours: key for key, ours in GPT2.config.items()}
    fixed = refuse_contradicted_flags(checkpoint, {k: v for k, v in decided.items()
                                                   if k in fields}, explicit, {
        **said, "gelu": "activation_function", "layer_number": f"--layer {layer}",
        "scale_by_layer": "scale_attn_by_inverse_layer_idx",
        "seq_len": "the tokens of --text or --token-ids",
        "layers": layers_part(checkpoint, GPT2.layers_key)})
    if "layers" in explicit:  # gpt holds the first --layers layers (all by default)
        sizes["layers"] = explicit["layers"]
    # the vocabulary's direction on the sheet is the user's; a bare weights file's eps
    # and GELU and X's length without tokens too
    free = {"vocab_down_rows", *(() if ids is not None else ("seq_len",)),
            *(k for k in ("ln_eps", "gelu", "heads") if k not in fixed)}
    decided_params = CheckpointParams(fixed, frozenset(free), "GPT-2")
    sizes = {k: v for k, v in sizes.items() if k in fields}
    params = checked_params(kind, {**sizes, **explicit}, fixed, explicit)
    d = params.d_model
    wte = read(checkpoint, base + GPT2.embeddings["WTE"][0], (vocab, d))
    wpe_name = base + GPT2.embeddings["WPE"][0]
    n_positions = checkpoint.dim(wpe_name, 0) if wpe_name in checkpoint.shapes else 0
    if params.seq_len > n_positions:
        raise UserError(f"{checkpoint.source}: {params.seq_len} tokens, but it has "
                        f"{n_positions} positions")
    wpe = read(checkpoint, base + GPT2.embeddings["WPE"][0], (n_positions, d))[:params.seq_len]
    if ids is not None:
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise UserError(f"token id {bad[0]} is outside the vocabulary (0 … {vocab - 1})")
    shapes = kind.input_shapes(params)
    ids_text = "" if ids is None else f", token ids {','.join(map(str, ids))}"
    if kind_name == "gpt":
        _refuse_untied(checkpoint, base, wte)
        inputs = {"WTE": wte, "WPE": wpe,
                  **{name: read(checkpoint, base + GPT2.embeddings[name][0], (d,))[None, :]
                     for name in ("LNF_GAMMA", "LNF_BETA")}}
        for k in range(params.layers):
            sfx = f"_L{k + 1}"
            plain = {name.removesuffix(sfx): shape for name, shape in shapes.items()
                     if name.endswith(sfx)}
            inputs.update({name + sfx: value for name, value in
                           layer_weights(checkpoint, base, k, plain, read).items()})
        if ids is not None:
            inputs["TOKEN_IDS"] = np.array(ids, dtype=float)[:, None]
        where = "X drawn from --seed" if ids is None else "token ids in TOKEN_IDS"
        return sizes, inputs, f"GPT-2 layers 0 … {params.layers - 1}, {where}{ids_text}", \
            decided_params
    inputs = layer_weights(checkpoint, base, layer, shapes, read)
    note = f"GPT-2 layer {layer}"
    if ids is None:
        return sizes, inputs, note + "; X drawn from --seed", decided_params
    x = wte[ids] + wpe
    block = get_kind("decoder-block")
    for k in range(layer):
        x = block.reference({**layer_weights(checkpoint, base, k, shapes, read), "X": x},
                            dataclasses.replace(params, layer_number=k + 1))["OUTPUT"]
    inputs["X"] = x
    before = "" if layer == 0 else " and layers 0 … " + str(layer - 1)
    return sizes, inputs, (f"{note}; X: the hidden states entering layer {layer}, token "
                           f"plus position embedding rows{before} by the NumPy reference "
                           f"(numbers, not formulas){ids_text}"), decided_params


def layer_weights(checkpoint: Checkpoint, base: str, layer: int,
                  shapes: dict[str, tuple[int, int]], read: Reader) -> dict[str, np.ndarray]:
    """Layer `layer`'s weights by their sheet names, as the sheet's `shapes` need them:
    Conv1D weights as stored (in×out), the thirds of c_attn for Q, K and V."""
    d = shapes["W_Q"][0]
    weights = {}
    for ours, (theirs, how) in GPT2.layer.items():
        rows, cols = shapes[ours]
        name = base + theirs.format(layer=layer)
        kind, _, third = how.partition(" ")
        if third:  # the k-th of c_attn's three d-wide parts
            k = int(third.split("/")[0])
            whole = read(checkpoint, name, (d, 3 * d) if kind == CONV1D else (3 * d,))
            part = whole[..., k * d:(k + 1) * d]
            weights[ours] = part if kind == CONV1D else part[None, :]
        elif kind == CONV1D:
            weights[ours] = read(checkpoint, name, (rows, cols))
        else:
            weights[ours] = read(checkpoint, name, (cols,))[None, :]
    return weights


def _sizes(checkpoint: Checkpoint, base: str, explicit: dict[str, Any]) -> dict[str, Any]:
    """Sizes from config.json (a bare weights file: from the shapes, and --heads)."""
    config = checkpoint.config or {}
    sizes = {ours: config[key] for key, ours in GPT2.config.items()
             if config.get(key) is not None}
    if checkpoint.config is not None:  # a missing key: GPT2Config's default
        sizes.setdefault("heads", GPT2.defaults["n_head"])
    sizes.setdefault("ln_eps", GPT2.defaults["layer_norm_epsilon"])
    sizes.setdefault("d_model", checkpoint.dim(base + GPT2.anchor, 0))
    fc = checkpoint.shapes.get(base + GPT2.layer["W_1"][0].format(layer=0))
    if "d_ff" not in sizes and fc is not None and len(fc) == 2:
        sizes["d_ff"] = fc[1]
    wte = checkpoint.shapes.get(base + GPT2.embeddings["WTE"][0])
    if "vocab" not in sizes:
        if wte is None or len(wte) != 2:
            raise UserError(f"{checkpoint.source}: no tensor {base}wte.weight (the token "
                            f"embedding table)")
        sizes["vocab"] = wte[0]
    act = config.get("activation_function", GPT2.defaults["activation_function"])
    if act not in GELU_OF:
        raise UserError(f"{checkpoint.source}: config.json sets activation_function to "
                        f"{json.dumps(act)}; the sheets compute {', '.join(GELU_OF)}")
    sizes["gelu"] = GELU_OF[act]
    # scores also divided by the layer's index + 1 (decoder-block: --layer-number)
    sizes["scale_by_layer"] = bool(config.get("scale_attn_by_inverse_layer_idx", False))
    for key, values in GPT2.fixed.items():
        if config.get(key, values[0]) not in values:
            raise UserError(f"{checkpoint.source}: config.json sets {key} to "
                            f"{json.dumps(config[key])}; the sheets compute GPT-2 with {key} "
                            f"{json.dumps(values[0])}")
    if "heads" not in sizes and "heads" not in explicit:
        raise UserError(f"{checkpoint.source}: no config.json gives the number of heads; "
                        f"pass --heads")
    heads = sizes.get("heads", explicit.get("heads"))
    if isinstance(heads, int) and heads > 0 and sizes["d_model"] % heads:
        said = "--heads" if "heads" not in sizes else "n_head"
        raise UserError(f"{checkpoint.source}: {said} {heads} does not divide the model's "
                        f"width n_embd = {sizes['d_model']}")
    return sizes


def _layer_count(checkpoint: Checkpoint, base: str) -> int:
    config = checkpoint.config or {}
    if GPT2.layers_key in config:
        return int(config[GPT2.layers_key])
    count = 0
    while base + GPT2.anchor.replace("h.0.", f"h.{count}.", 1) in checkpoint.shapes:
        count += 1
    return count


def _refuse_untied(checkpoint: Checkpoint, base: str, wte: np.ndarray) -> None:
    """The sheet's logits multiply by the token embedding table (GPT-2 ties its output
    layer to it); a checkpoint with another output matrix is refused."""
    head = base.removesuffix("transformer.") + "lm_head.weight"
    if head in checkpoint.shapes and not np.array_equal(checkpoint.tensor(head), wte):
        raise UserError(f"{checkpoint.source}: {head} differs from the token embedding "
                        f"table; the gpt sheet's logits use the tied table")
