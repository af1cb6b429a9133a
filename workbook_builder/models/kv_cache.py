"""A GPT-2 checkpoint as the inputs of the kv-cache sheet: layer N's attention weights, the
three thirds of its fused `c_attn` (a Conv1D, already in X·W orientation) and of its bias,
as the decoder-block reader splits them; with token ids, X is the attention's own input,
ln_1 of the hidden states entering layer N (the decoder-block reference's LN1_OUT, after
its reference of the layers before)."""

import dataclasses
from pathlib import Path
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.models.families import GPT2
from workbook_builder.models.files import read_checkpoint
from workbook_builder.models.gpt2 import gpt2_inputs
from workbook_builder.models.loader import (
    LAYER_FLAGS,
    ModelInputs,
    _family,
    _ids_and_labels,
    _prefix,
    _short,
    _tensor,
    check_request,
    refuse_unused_tensors,
)
from workbook_builder.registry import get_kind
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.provenance import CheckpointParams, Fixed

ATTENTION_INPUTS = ("W_Q", "W_K", "W_V", "B_Q", "B_K", "B_V")


def kv_cache_inputs(kind_name: str, path: str | Path, *, layer: int = 0, prefix: str | None = None,
                    text: str | None = None, token_ids: list[int] | None = None,
                    explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The kv-cache inputs of GPT-2 layer `layer`: its split c_attn, and with `text` or
    `token_ids` X = ln_1 of the hidden states entering it."""
    check_request(text, token_ids, layer)
    checkpoint = read_checkpoint(Path(path))
    base = _prefix(checkpoint, _family(checkpoint, (GPT2,)), prefix)
    refuse_unused_tensors(checkpoint, GPT2, base, kind_name)
    ids, labels = _ids_and_labels(checkpoint, text, token_ids)
    block = get_kind("decoder-block")
    # flags that shape every layer (--heads, --ln-eps, …) shape the layers before this one
    fields = {f.name for f in dataclasses.fields(block.Params)}
    layer_flags = {k: v for k, v in (explicit or {}).items() if k in LAYER_FLAGS and k in fields}
    sizes, block_inputs, _, block_decided = gpt2_inputs("decoder-block", checkpoint, base,
                                                        layer, ids, layer_flags, _tensor)
    if sizes.get("scale_by_layer"):
        raise UserError(f"{checkpoint.source}: config.json sets "
                        f"scale_attn_by_inverse_layer_idx to true; the kv-cache sheet divides "
                        f"the scores by √d_k only (decoder-block computes it)")
    block_params = make_params(block, {**sizes, **layer_flags})
    inputs = {name: block_inputs[name] for name in ATTENTION_INPUTS}
    params = {"d_model": block_params.d_model, "heads": block_params.heads, "bias": True}
    # the decoder block's decisions that are the attention's, and its biases
    fixed = {name: held for name, held in block_decided.fixed.items()
             if name in ("d_model", "heads", "seq_len")}
    fixed["bias"] = Fixed(True, "the biases of GPT-2's c_attn")
    decided = CheckpointParams(fixed, block_decided.free & {"seq_len", "heads"}, "GPT-2")
    where = f"GPT-2 layer {layer} attention of {Path(str(path)).name}"
    if ids is None:
        return ModelInputs(params, inputs, None, f"weights: {where}; X drawn from --seed",
                           decided)
    inputs["X"] = block.reference(block_inputs, block_params)["LN1_OUT"]
    params["seq_len"] = len(ids)
    return ModelInputs(params, inputs, labels,
                       f"weights: {where}; X: ln_1 of the hidden states entering layer "
                       f"{layer} (the attention's input), computed by the decoder-block "
                       f"NumPy reference (numbers, not formulas), token ids {_short(ids)}",
                       decided)
