"""A Mamba checkpoint's layer as the inputs of `mamba-block`: sizes from the tensors' shapes,
eps from config.json, weights by the MAMBA name table (families.py), and X the embedding rows
of the tokens carried through the earlier blocks by the kind's own NumPy reference."""

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models.config_values import refuse_contradicted_flags
from workbook_builder.models.families import MAMBA
from workbook_builder.models.files import Checkpoint, read_checkpoint
from workbook_builder.models.loader import (
    ModelInputs,
    _existing_layer,
    _family,
    _ids_and_labels,
    _layer_inputs,
    _prefix,
    _short,
    check_request,
    refuse_unused_tensors,
)
from workbook_builder.registry import get_kind
from workbook_builder.sheet.provenance import CheckpointParams, checked_params


def model_inputs(kind_name: str, path: str | Path, *, layer: int = 0,
                 prefix: str | None = None, text: str | None = None,
                 token_ids: list[int] | None = None,
                 explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `mamba-block` (`kind_name`) for block `layer`, as loader.model_inputs
    for the other kinds; with token ids or text, X is the hidden states entering it, else X
    is left to the seed."""
    check_request(text, token_ids, layer)
    explicit = explicit or {}
    checkpoint = read_checkpoint(Path(path))
    family = _family(checkpoint, (MAMBA,))
    base = _prefix(checkpoint, family, prefix)
    refuse_unused_tensors(checkpoint, family, base, kind_name)
    config = checkpoint.config or {}
    for key, values in family.fixed.items():
        if config.get(key, values[0]) not in values:
            raise UserError(f"{checkpoint.source}: config.json sets {key} to "
                            f"{json.dumps(config[key])}; the mamba-block sheet computes Mamba "
                            f"with {key} {json.dumps(values[0])}")
    _existing_layer(checkpoint, family, base, layer)
    sizes = _sizes(checkpoint, base, config)
    ids, labels = _ids_and_labels(checkpoint, text, token_ids)
    if ids is not None:
        sizes["seq_len"] = len(ids)
    # sizes by the shapes, eps by config.json: not to be changed by hand
    fixed = refuse_contradicted_flags(checkpoint, sizes, explicit, {
        "ln_eps": "layer_norm_epsilon", "seq_len": "the tokens of --text or --token-ids",
        **dict.fromkeys(("d_model", "d_inner", "d_state", "dt_rank", "conv_kernel"),
                        "the shapes of its tensors")})
    decided = CheckpointParams(fixed, frozenset(() if ids is not None else ("seq_len",)),
                               "Mamba")
    kind = get_kind(kind_name)
    params = checked_params(kind, {**sizes, **explicit}, fixed, explicit)
    conv_bias = config.get("use_conv_bias", True)
    unread = base + MAMBA.layer["CONV_B"][0].format(layer=0)
    if not conv_bias and unread in checkpoint.shapes:
        raise UserError(f"{checkpoint.source}: tensor {unread} is a bias config.json's "
                        f"use_conv_bias false leaves out; refused rather than left out")
    inputs = block_inputs(checkpoint, base, layer, kind.input_shapes(params), conv_bias)
    where = f"Mamba layer {layer} of {Path(str(path)).name}"
    if ids is None:
        return ModelInputs(sizes, inputs, None, f"weights: {where}; X drawn from --seed",
                           decided)
    x = _embedding_rows(checkpoint, base, ids, params.d_model)
    for k in range(layer):  # the blocks before this one, by the sheet's own reference
        weights = block_inputs(checkpoint, base, k, kind.input_shapes(params), conv_bias)
        x = kind.reference({**weights, "X": x}, params)["OUTPUT"]
    inputs["X"] = x
    before = "" if layer == 0 else " through layer 0" if layer == 1 else \
        f" through layers 0 … {layer - 1}"
    return ModelInputs(sizes, inputs, labels,
                       f"weights: {where}; X: the embedding rows of the token ids "
                       f"{_short(ids)}{before} (numbers, computed by the NumPy reference, "
                       f"not formulas)", decided)


def _sizes(checkpoint: Checkpoint, base: str, config: dict) -> dict[str, Any]:
    """Every size from the shapes of layer 0 (so a bare weights file needs no flags), eps
    from config.json (else Mamba's 1e-05)."""
    def shape(what: str, dims: int) -> tuple[int, ...]:
        name = base + MAMBA.layer[what][0].format(layer=0)
        got = checkpoint.shapes.get(name)
        if got is None or len(got) != dims:
            raise UserError(f"{checkpoint.source}: no {dims}-dimensional tensor {name}")
        return tuple(got)

    double_inner, d_model = shape("W_IN", 2)
    sizes = {"d_model": d_model, "d_inner": double_inner // 2,
             "d_state": shape("A_LOG", 2)[1], "dt_rank": shape("W_DELTA", 2)[1],
             "conv_kernel": shape("CONV_W", 3)[2]}
    rank = config.get("time_step_rank")
    if rank is not None and (isinstance(rank, bool) or rank != sizes["dt_rank"]) and not (
            rank == "auto" and math.ceil(d_model / 16) == sizes["dt_rank"]):
        raise UserError(f"{checkpoint.source}: config.json's time_step_rank {rank!r} does "
                        f"not fit dt_proj.weight ({sizes['dt_rank']} columns)")
    if "layer_norm_epsilon" in config:
        sizes["ln_eps"] = float(config["layer_norm_epsilon"])
    return sizes


def block_inputs(checkpoint: Checkpoint, base: str, layer: int,
                 shapes: dict[str, tuple[int, int]], conv_bias: bool) -> dict[str, np.ndarray]:
    """The sheet's weights of block `layer`; a conv1d without bias (use_conv_bias false)
    adds zeros."""
    if conv_bias:
        return _layer_inputs(checkpoint, MAMBA, base, layer, shapes)
    without = {name: shape for name, shape in shapes.items() if name != "CONV_B"}
    return {**_layer_inputs(checkpoint, MAMBA, base, layer, without),
            "CONV_B": np.zeros(shapes["CONV_B"])}


def _embedding_rows(checkpoint: Checkpoint, base: str, ids: list[int],
                    d_model: int) -> np.ndarray:
    """The embedding table's row of each token (older checkpoints call it `embedding`)."""
    name = base + MAMBA.embeddings["X"][0]
    if name not in checkpoint.shapes and base + "embedding.weight" in checkpoint.shapes:
        name = base + "embedding.weight"
    shape = checkpoint.shapes.get(name)
    if shape is None or len(shape) != 2 or shape[1] != d_model:
        raise UserError(f"{checkpoint.source}: no tensor {name} (vocabulary×{d_model})")
    bad = [i for i in ids if not 0 <= i < shape[0]]
    if bad:
        raise UserError(f"token id {bad[0]} is outside the vocabulary (0 … {shape[0] - 1})")
    return checkpoint.rows(name, list(ids))
