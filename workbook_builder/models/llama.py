"""What only LLaMA checkpoints need: RoPE's base where newer configs keep it
(rope_parameters), the refusals for what the llama-block sheet does not compute (scaled
RoPE, biases, a head width other than d_model/heads), and the hidden states entering a
layer: the looked-up embedding rows through the earlier layers, each by llama-block's
NumPy reference."""

from collections.abc import Callable
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models.families import LLAMA_BIASES


def config_sizes(config: dict[str, Any], source: str) -> dict[str, Any]:
    """rope_theta from the config's top level (older files) or its rope_parameters; one
    line for a configuration the sheet would compute wrongly."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise UserError(f"{source}: RoPE type {kind!r} (scaled frequencies) is not on the "
                        f"llama-block sheet; it computes the default RoPE")
    other = next((t for t in config.get("layer_types") or () if t != "full_attention"), None)
    if other is not None:  # Qwen2's sliding-window layers
        raise UserError(f"{source}: config.json's layer_types holds {other!r}; the "
                        f"llama-block sheet computes full causal attention")
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    head_dim = config.get("head_dim")
    if head_dim is not None and hidden and heads and head_dim * heads != hidden:
        raise UserError(f"{source}: head_dim {head_dim} is not hidden_size/heads "
                        f"= {hidden}/{heads}; the sheet's heads are d_model/heads wide")
    theta = config.get("rope_theta", rope.get("rope_theta"))
    return {} if theta is None else {"rope_theta": float(theta)}


def bias_switches(checkpoint, family, base: str) -> dict[str, bool]:
    """Which bias rows the layer has: config.json's attention_bias and mlp_bias (LlamaConfig's
    default false; Qwen2's q/k/v biases always), or for a bare weights file the bias tensors
    of layer 0 it holds."""
    switches = {"qkv_bias": False, "o_bias": False, "mlp_bias": False, **family.constants}
    first = {ours: base + family.layer[bias][0].format(layer=0)
             for ours, bias in (("qkv_bias", "B_Q"), ("o_bias", "B_O"), ("mlp_bias", "B_GATE"))}
    if checkpoint.config is None:
        return {ours: switches[ours] or name in checkpoint.shapes
                for ours, name in first.items()}
    for key, ours in LLAMA_BIASES.items():
        if checkpoint.config.get(key, False):
            switches.update(dict.fromkeys(ours, True))
    unread = next((name for ours, name in first.items()
                   if not switches[ours] and name in checkpoint.shapes), None)
    if unread:
        raise UserError(f"{checkpoint.source}: tensor {unread} is a bias config.json does not "
                        f"turn on ({' / '.join(LLAMA_BIASES)}); refused rather than left out")
    return switches


def shape_sizes(checkpoint, base: str, sizes: dict[str, Any]) -> dict[str, Any]:
    """The number of key/value heads by the shape of k_proj (d_k = d_model/heads wide
    each), for a bare weights file without --kv-heads: the same in every layer."""
    if sizes.get("kv_heads") is not None or not sizes.get("heads"):
        return {}
    shape = checkpoint.shapes.get(base + "layers.0.self_attn.k_proj.weight")
    d_k = sizes["d_model"] // sizes["heads"]
    if shape is None or len(shape) != 2 or not d_k or shape[0] % d_k:
        return {}
    return {"kv_heads": shape[0] // d_k}


def hidden_states(reference: Callable, params: Callable[[int], Any],
                  weights: Callable[[int], dict[str, np.ndarray]], embedded: np.ndarray,
                  layer: int) -> np.ndarray:
    """Layers 0 … layer−1 applied to the embedding rows: `reference` is llama-block's, run
    with `params(n)` on the weights of each layer (`weights(k)`)."""
    x = embedded
    for k in range(layer):
        x = reference({**weights(k), "X": x}, params(len(x)))["OUTPUT"]
    return x
