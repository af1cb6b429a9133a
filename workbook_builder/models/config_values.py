"""The type of every config.json value a family reads, checked once when the file is read:
a value of another type or beyond reason (`"num_hidden_layers": "abc"`, `"n_layers": 1e300`,
`"hidden_act": ["gelu"]`, `"rope_scaling": [1]`, `"layer_types": 5`) is one line naming the
key and what it holds, before any family's code meets it. A family that reads a new key
adds it to CONFIG_TYPES (`tests/test_hostile_bounds.py` gives every key each wrong type)."""

import math
from pathlib import Path
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.sheet.provenance import Fixed, refuse_contradicting_flags

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


def config_file(checkpoint) -> str:
    """The config.json a checkpoint's values come from, as the user would find it: beside
    the weights in a folder, inside a zip, or the file itself (an ONNX graph gives them)."""
    source = Path(checkpoint.source)
    if checkpoint.config is None:
        return checkpoint.source
    if source.suffix.lower() == ".zip":
        return f"config.json in {source}"
    if source.suffix.lower() in (".safetensors", ".bin", ".pt", ".pth"):
        return str(source.parent / "config.json")
    if source.suffix.lower() == ".onnx":
        return f"{source}'s graph"
    return checkpoint.source


def layers_part(checkpoint, layers_key: str) -> Fixed:
    """Where a checkpoint's count of layers comes from (its config.json's `layers_key`, or
    its layers' tensors), as a part a flag may take less of: the first --layers layers."""
    if checkpoint.config is not None:
        return Fixed(None, config_file(checkpoint), layers_key, at_most=True)
    return Fixed(None, "its layers' tensors", at_most=True)


def refuse_contradicted_flags(checkpoint, decided: dict[str, Any], explicit: dict[str, Any],
                              said_by: dict[str, "str | Fixed"]) -> dict[str, Fixed]:
    """What the checkpoint fixes (`decided`: our parameter -> what its config, its shapes
    or its family's code give), each with its source (`said_by`: parameter -> the config key
    that says it, or a phrase such as "the shapes of its tensors", or a `Fixed` the reader
    made); a flag given by hand with another value is refused (sheet/provenance.py): the
    sheet would compute another model than the one its About sheet names."""
    config, file = checkpoint.config, config_file(checkpoint)
    fixed = {}
    for name, value in decided.items():
        said = said_by.get(name, "the checkpoint")
        if isinstance(said, Fixed):
            fixed[name] = Fixed(value, said.where, said.key, said.at_most)
        elif " " in said or said.startswith("--") or said == "the checkpoint":
            fixed[name] = Fixed(value, said)
        elif config is not None and said in config:
            fixed[name] = Fixed(value, file, said)
        elif config is not None and (outer := next((key for key, inner in config.items()
                                                   if isinstance(inner, dict)
                                                   and said in inner), None)):
            fixed[name] = Fixed(value, file, f"{outer}.{said}")  # rope_parameters.rope_theta
        elif config is not None:
            fixed[name] = Fixed(value, f"{file} (without {said}: the model's default)")
        else:
            fixed[name] = Fixed(value, f"the family's default {said} (no config.json)")
    refuse_contradicting_flags(fixed, explicit)
    return fixed
