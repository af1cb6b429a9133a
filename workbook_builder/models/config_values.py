"""The type of every config.json value a family reads, checked once when the file is read:
a value of another type or beyond reason (`"num_hidden_layers": "abc"`, `"n_layers": 1e300`,
`"hidden_act": ["gelu"]`, `"rope_scaling": [1]`, `"layer_types": 5`) is one line naming the
key and what it holds, before any family's code meets it. A family that reads a new key
adds it to CONFIG_TYPES (`tests/test_hostile_bounds.py` gives every key each wrong type)."""

import math
from typing import Any

from workbook_builder.errors import UserError

SIZE, EPSILON, BASE = "size", "epsilon", "base"
TEXT, TEXTS, FLAG, OBJECT = "text", "texts", "flag", "object"
# no size of a model a sheet can hold comes near it (a vocabulary, a position table, a
# count of layers): a larger one is not a model's
MAX_SIZE = 2**31 - 1
_WORDS = {SIZE: "a whole number, 1 or more",
          EPSILON: "a number, 0 or more", BASE: "a number above 0", TEXT: "a text",
          TEXTS: "a list of texts", FLAG: "true or false", OBJECT: "an object ({…})"}

# key (an object's key inside another as "outer.inner") -> its type
CONFIG_TYPES = {
    "model_type": TEXT, "hidden_act": TEXT, "activation_function": TEXT, "activation": TEXT,
    "position_embedding_type": TEXT, "layer_types": TEXTS,
    # sizes: BERT, LLaMA, GPT-2, Mamba, DistilBERT
    "hidden_size": SIZE, "num_attention_heads": SIZE, "num_key_value_heads": SIZE,
    "intermediate_size": SIZE, "num_hidden_layers": SIZE, "head_dim": SIZE,
    "max_position_embeddings": SIZE, "vocab_size": SIZE, "n_embd": SIZE, "n_head": SIZE,
    "n_inner": SIZE, "n_layer": SIZE, "n_positions": SIZE, "dim": SIZE, "n_heads": SIZE,
    "hidden_dim": SIZE, "n_layers": SIZE,
    # epsilons and RoPE's base
    "layer_norm_eps": EPSILON, "rms_norm_eps": EPSILON, "layer_norm_epsilon": EPSILON,
    "rope_theta": BASE,
    "rope_scaling": OBJECT, "rope_parameters": OBJECT,
    "rope_scaling.rope_type": TEXT, "rope_scaling.type": TEXT,
    "rope_parameters.rope_type": TEXT, "rope_parameters.type": TEXT,
    "rope_parameters.rope_theta": BASE,
    # switches the sheets refuse when set
    "attention_bias": FLAG, "mlp_bias": FLAG, "use_bias": FLAG, "use_conv_bias": FLAG,
    "scale_attn_weights": FLAG, "scale_attn_by_inverse_layer_idx": FLAG,
    "is_decoder": FLAG, "add_cross_attention": FLAG, "sinusoidal_pos_embds": FLAG,
    "use_sliding_window": FLAG,
}

# keys transformers writes as null for "the model's default" (GPT-2's n_inner: 4·n_embd)
NULLABLE = {"n_inner", "head_dim", "rope_scaling", "rope_parameters", "rope_theta",
            "vocab_size", "layer_types"}


def _fits(value: Any, kind: str) -> bool:
    if kind == SIZE:
        return isinstance(value, int) and not isinstance(value, bool) and \
            1 <= value <= MAX_SIZE
    if kind in (EPSILON, BASE):
        number = isinstance(value, int | float) and not isinstance(value, bool) and \
            math.isfinite(value)
        return number and (value > 0 or kind == EPSILON and value == 0)
    if kind == TEXT:
        return isinstance(value, str)
    if kind == TEXTS:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
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
            shown = repr(value) if len(repr(value)) <= 40 else \
                f"{value:.3e}" if isinstance(value, int) else f"a {type(value).__name__}"
            large = kind == SIZE and isinstance(value, int) and value > MAX_SIZE
            most = f", at most {MAX_SIZE:,}" if large else ""
            raise UserError(f"{where}: {key} must be {_WORDS[kind]}{most}, not {shown}")
    return config


def refuse_contradicted_flags(source: str, decided: dict[str, Any], explicit: dict[str, Any],
                              said_by: dict[str, str]) -> None:
    """A flag given by hand with another value than the checkpoint's own (`decided`: our
    parameter -> what its config, its shapes or its family's code give) is refused: the
    sheet would compute another layer than the one its About sheet says it holds.
    `said_by`: parameter -> the config key that says it."""
    for key, value in explicit.items():
        if key in decided and value != decided[key]:
            flag = "--" + key.replace("_", "-")
            said = said_by.get(key, "the checkpoint")
            verb = "give" if said.startswith(("the shapes", "the tokens")) else "gives"
            raise UserError(f"{source}: {flag} {value} contradicts the checkpoint ({said} "
                            f"{verb} {decided[key]}); the sheet holds its layer as the model "
                            f"computes it: leave {flag} out")
