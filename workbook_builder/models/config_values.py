"""The type of every config.json value a family reads, checked once when the file is read:
a value of another type (`"num_hidden_layers": "abc"`, `"hidden_act": ["gelu"]`,
`"rope_scaling": [1]`) is one line naming the key and what it holds, before any family's
code meets it. A family that reads a new key adds it to CONFIG_TYPES."""

import math
from typing import Any

from workbook_builder.errors import UserError

SIZE, NUMBER, TEXT, FLAG, OBJECT = "size", "number", "text", "flag", "object"
_WORDS = {SIZE: "a whole number, 1 or more", NUMBER: "a number", TEXT: "a text",
          FLAG: "true or false", OBJECT: "an object ({…})"}

# key (an object's key inside another as "outer.inner") -> its type
CONFIG_TYPES = {
    "model_type": TEXT, "hidden_act": TEXT, "activation_function": TEXT,
    # sizes: BERT, LLaMA, GPT-2, Mamba
    "hidden_size": SIZE, "num_attention_heads": SIZE, "num_key_value_heads": SIZE,
    "intermediate_size": SIZE, "num_hidden_layers": SIZE, "head_dim": SIZE,
    "max_position_embeddings": SIZE, "vocab_size": SIZE, "n_embd": SIZE, "n_head": SIZE,
    "n_inner": SIZE, "n_layer": SIZE, "n_positions": SIZE,
    # epsilons and RoPE's base
    "layer_norm_eps": NUMBER, "rms_norm_eps": NUMBER, "layer_norm_epsilon": NUMBER,
    "rope_theta": NUMBER,
    "rope_scaling": OBJECT, "rope_parameters": OBJECT,
    "rope_scaling.rope_type": TEXT, "rope_scaling.type": TEXT,
    "rope_parameters.rope_type": TEXT, "rope_parameters.type": TEXT,
    "rope_parameters.rope_theta": NUMBER,
    # switches the sheets refuse when set
    "attention_bias": FLAG, "mlp_bias": FLAG, "use_bias": FLAG, "use_conv_bias": FLAG,
    "scale_attn_weights": FLAG, "scale_attn_by_inverse_layer_idx": FLAG,
}

# keys transformers writes as null for "the model's default" (GPT-2's n_inner: 4·n_embd)
NULLABLE = {"n_inner", "head_dim", "rope_scaling", "rope_parameters", "rope_theta",
            "vocab_size"}


def _fits(value: Any, kind: str) -> bool:
    if kind == SIZE:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if kind == NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool) and \
            math.isfinite(value)
    if kind == TEXT:
        return isinstance(value, str)
    if kind == FLAG:
        return isinstance(value, bool)
    return isinstance(value, dict)


def checked_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """`config` itself, once every key of CONFIG_TYPES it holds has a value of its type
    (or null, where NULLABLE)."""
    for key, kind in CONFIG_TYPES.items():
        outer, _, inner = key.partition(".")
        holder = config.get(outer) if inner else config
        if not isinstance(holder, dict):
            continue  # an outer value of the wrong type is named by its own entry
        if (inner or outer) not in holder:
            continue
        value = holder[inner or outer]
        if not (_fits(value, kind) or value is None and key in NULLABLE):
            shown = repr(value) if len(repr(value)) <= 40 else f"a {type(value).__name__}"
            raise UserError(f"{where}: {key} must be {_WORDS[kind]}, not {shown}")
    return config
