"""A GPT-2 checkpoint as the inputs of the kv-cache sheet: layer N's attention, whose
fused `c_attn` (a Conv1D, already in X·W orientation, d × 3d) is split into W_Q, W_K, W_V
and its bias into B_Q, B_K, B_V; X is the attention's own input, ln_1 of the hidden states
entering layer N, which a NumPy GPT-2 forward computes from the token ids (embedding rows,
then the earlier blocks: LN → causal attention with biases → residual → LN → MLP with
the tanh GELU → residual)."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from reference.encoder_block import gelu_tanh
from reference.multihead import multihead_ref
from workbook_builder.errors import UserError
from workbook_builder.models.families import Family
from workbook_builder.models.files import Checkpoint, read_checkpoint
from workbook_builder.models.loader import (
    ModelInputs,
    _existing_layer,
    _family,
    _ids_and_labels,
    _prefix,
    _short,
    _tensor,
    check_request,
)

# GPT2Model's names ("transformer." before them inside GPT2LMHeadModel, found as the prefix)
GPT2_ATTENTION = Family(
    name="GPT-2", model_types=("gpt2",), anchor="h.0.attn.c_attn.weight", layer={},
    embeddings={}, config={"n_embd": "d_model", "n_head": "heads"}, layers_key="n_layer",
    post_ln=False)


class _Layers:
    """Tensors of one GPT-2 checkpoint by their short names ("h.0.ln_1.weight")."""

    def __init__(self, checkpoint: Checkpoint, base: str, d: int):
        self.checkpoint, self.base, self.d = checkpoint, base, d

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        return _tensor(self.checkpoint, self.base + name, shape)

    def attention(self, k: int) -> dict[str, np.ndarray]:
        """W_Q, W_K, W_V and B_Q, B_K, B_V: c_attn's columns split in three."""
        d = self.d
        weight = self.get(f"h.{k}.attn.c_attn.weight", (d, 3 * d))
        bias = self.get(f"h.{k}.attn.c_attn.bias", (3 * d,))
        return {**{f"W_{m}": weight[:, i * d:(i + 1) * d] for i, m in enumerate("QKV")},
                **{f"B_{m}": bias[None, i * d:(i + 1) * d] for i, m in enumerate("QKV")}}

    def layer_norm(self, k: int, which: str, h: np.ndarray, eps: float) -> np.ndarray:
        gamma = self.get(f"h.{k}.{which}.weight", (self.d,))
        beta = self.get(f"h.{k}.{which}.bias", (self.d,))
        centered = h - h.mean(axis=1, keepdims=True)
        return centered / np.sqrt((centered ** 2).mean(axis=1, keepdims=True) + eps) * gamma \
            + beta

    def block(self, k: int, h: np.ndarray, heads: int, eps: float) -> np.ndarray:
        """GPT-2 block k: h + attn(ln_1(h)), then + mlp(ln_2(·))."""
        d = self.d
        attn = multihead_ref(
            {"X": self.layer_norm(k, "ln_1", h, eps), **self.attention(k),
             "W_O": self.get(f"h.{k}.attn.c_proj.weight", (d, d)),
             "B_O": self.get(f"h.{k}.attn.c_proj.bias", (d,))[None, :]},
            SimpleNamespace(heads=heads, kv_heads=None, d_model=d, causal=True))["OUTPUT"]
        h = h + attn
        inner = self.checkpoint.shapes.get(self.base + f"h.{k}.mlp.c_fc.weight", (d, 4 * d))[1]
        hidden = self.layer_norm(k, "ln_2", h, eps) @ self.get(f"h.{k}.mlp.c_fc.weight",
                                                               (d, inner)) \
            + self.get(f"h.{k}.mlp.c_fc.bias", (inner,))
        return h + gelu_tanh(hidden) @ self.get(f"h.{k}.mlp.c_proj.weight", (inner, d)) \
            + self.get(f"h.{k}.mlp.c_proj.bias", (d,))


def kv_cache_inputs(kind_name: str, path: str | Path, *, layer: int = 0, prefix: str | None = None,
                    text: str | None = None, token_ids: list[int] | None = None,
                    explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The kv-cache inputs of GPT-2 layer `layer`: its split c_attn, and with `text` or
    `token_ids` X = ln_1 of the hidden states entering it."""
    check_request(text, token_ids, layer)
    checkpoint = read_checkpoint(Path(path))
    family = _family(checkpoint, (GPT2_ATTENTION,))
    base = _prefix(checkpoint, family, prefix)
    config = checkpoint.config or {}
    act = config.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise UserError(f"{checkpoint.source}: activation_function {act!r}; the layers before "
                        f"this one are computed with GPT-2's tanh GELU")
    d = checkpoint.shapes[base + family.anchor][0]
    heads = (explicit or {}).get("heads") or config.get("n_head")
    if heads is None:
        raise UserError(f"{checkpoint.source}: no config.json gives the number of heads; "
                        f"pass --heads")
    _existing_layer(checkpoint, family, base, layer)
    tensors = _Layers(checkpoint, base, d)
    params = {"d_model": d, "heads": heads, "bias": True}
    inputs = tensors.attention(layer)
    where = f"GPT-2 layer {layer} attention of {Path(str(path)).name}"
    if text is None and token_ids is None:
        return ModelInputs(params, inputs, None, f"weights: {where}; X drawn from --seed")
    ids, labels = _ids_and_labels(checkpoint, text, token_ids)
    vocab, _ = checkpoint.shapes.get(base + "wte.weight", (0, d))
    positions = checkpoint.shapes.get(base + "wpe.weight", (0, d))[0]
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise UserError(f"token id {bad[0]} is outside the vocabulary (0 … {vocab - 1})")
    if len(ids) > positions:
        raise UserError(f"{len(ids)} tokens, but the model has {positions} positions")
    eps = float(config.get("layer_norm_epsilon", 1e-5))
    h = tensors.get("wte.weight", (vocab, d))[ids] + \
        tensors.get("wpe.weight", (positions, d))[:len(ids)]
    for k in range(layer):
        h = tensors.block(k, h, heads, eps)
    inputs["X"] = tensors.layer_norm(layer, "ln_1", h, eps)
    params["seq_len"] = len(ids)
    return ModelInputs(params, inputs, labels,
                       f"weights: {where}; X: ln_1 of the hidden states entering layer "
                       f"{layer} (the attention's input), computed by a NumPy GPT-2 forward "
                       f"(numbers, not formulas), token ids {_short(ids)}")
