"""What the MarianMT and BART readers share (`marian.py`, `bart.py`): the model's settings read
from config.json, its generation settings as `generate` reads them (`generation_settings.py`:
generation_config.json, else config.json), the checks both make of them, every layer's
weights by their sheet names, the tensors left over refused, and the walk from a folder
already read to the inputs of `transformer`. A family says only what is its own
(`EncoderDecoder`)."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models.config_values import refuse_contradicted_flags
from workbook_builder.models.files import Checkpoint
from workbook_builder.models.generation_settings import (
    GenerationSettings,
    greedy_parameters,
    greedy_sources,
    read_generation_settings,
)
from workbook_builder.models.loader import ModelInputs, _ids_and_labels, _short
from workbook_builder.registry import get_kind
from workbook_builder.sheet.provenance import CheckpointParams, Fixed, checked_params

# the defaults MarianConfig and BartConfig share, for a key config.json leaves out
SHARED_DEFAULTS = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
                   "encoder_attention_heads": 16, "decoder_attention_heads": 16,
                   "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
                   "max_position_embeddings": 1024, "activation_function": "gelu",
                   "scale_embedding": False, "tie_word_embeddings": True}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
# the settings' key holding the generation settings (set after config.json's keys, which
# cannot hide it)
GENERATION = "generation settings"
ATTENTION = {"W_Q": "q_proj", "W_K": "k_proj", "W_V": "v_proj", "W_O": "out_proj"}
ENCODER_NORMS = {"LN1": "self_attn_layer_norm", "LN2": "final_layer_norm"}
DECODER_NORMS = {"LN1": "self_attn_layer_norm", "LN2": "encoder_attn_layer_norm",
                 "LN3": "final_layer_norm"}
TABLE = "model.shared.weight"
TIED_COPIES = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
               "lm_head.weight")


@dataclass(frozen=True)
class EncoderDecoder:
    """What one family adds to the shared walk: its name on the sheet's note, its config
    class's defaults, its parameters from the settings, its check of the positions asked
    for, the weights it reads beyond the layers (added to `inputs`, their names to `read`),
    and the tensors it leaves unread on purpose (`kept`, said in a refusal as `kept_as`)."""

    name: str
    defaults: dict[str, Any]
    params: Callable[[dict], dict[str, Any]]
    check_positions: Callable[[Any, int], None]
    embeddings: Callable[[Checkpoint, Any, int, dict, set], None]
    kept: Callable[[str, np.ndarray], bool]
    kept_as: str


def model_type(checkpoint: Checkpoint) -> str:
    """"marian" or "bart", or one line."""
    config = checkpoint.config
    if config is None:
        raise UserError(f"{checkpoint.source}: transformer reads a MarianMT or BART model "
                        f"folder with its config.json")
    model_type = config.get("model_type")
    if model_type in ("t5", "mt5", "umt5"):
        raise UserError(f"{checkpoint.source}: a T5 model (model_type {json.dumps(model_type)}) "
                        f"does not fit the transformer sheet: its relative position buckets, "
                        f"RMSNorm and attention without 1/√d_k are not its steps")
    if model_type not in ("marian", "bart"):
        raise UserError(f"{checkpoint.source}: config.json's model_type is "
                        f"{json.dumps(model_type)}; transformer reads MarianMT and BART "
                        f"checkpoints (model_type \"marian\" or \"bart\")")
    return model_type


def read_settings(checkpoint: Checkpoint, path: Path, defaults: dict) -> dict[str, Any]:
    """config.json's values over the config class's `defaults` (the model), and under
    GENERATION the generation settings `generate` reads for the folder: from
    generation_config.json alone when there is one, else from config.json, whose class
    defaults it does not take."""
    settings = {**defaults, **checkpoint.config}
    settings[GENERATION] = read_generation_settings(path, checkpoint.config)
    return settings


def size(settings: dict, key: str) -> int:
    value = settings[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"config.json: {key} must be a whole number, 1 or more, not "
                        f"{value!r}")
    return value


def shared_params(settings: dict, tied: tuple[str, ...]) -> dict[str, Any]:
    """The parameters both families read alike, or a UserError naming the key the sheet
    does not compute: each key of `tied` must tie the one embedding table; the ids and
    the processors of greedy `generate` come from the generation settings
    (`greedy_parameters`)."""
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if size(settings, a) != size(settings, b):
            raise UserError(f"config.json: {a} {settings[a]} and {b} {settings[b]} differ; "
                            f"the transformer sheet gives both stacks one size")
    vocab = size(settings, "vocab_size")
    for key in tied:
        if settings[key] is not True:
            raise UserError(f"config.json: {key} is {json.dumps(settings[key])}; the "
                            f"transformer sheet ties one embedding table to both stacks and "
                            f"the output layer")
    if not isinstance(settings["scale_embedding"], bool):
        raise UserError(f"config.json: scale_embedding must be true or false, not "
                        f"{settings['scale_embedding']!r}")
    act = settings["activation_function"]
    if act not in ACTIVATIONS:
        raise UserError(f"config.json: activation_function {json.dumps(act)}; the transformer "
                        f"sheet computes {', '.join(ACTIVATIONS)}")
    generation: GenerationSettings = settings[GENERATION]
    return {"d_model": size(settings, "d_model"),
            "heads": settings["encoder_attention_heads"], "d_ff": settings["encoder_ffn_dim"],
            "layers": size(settings, "encoder_layers"),
            "dec_layers": size(settings, "decoder_layers"), "vocab": vocab,
            "activation": ACTIVATIONS[act], "no_scale": not settings["scale_embedding"],
            "logits_bias": True, **greedy_parameters(generation, vocab), "ln_eps": 1e-5}


def read_tensor(checkpoint: Checkpoint, name: str, shape: tuple[int, ...]) -> np.ndarray:
    got = checkpoint.shapes.get(name)
    if got is None or tuple(got) != shape:
        found = "absent" if got is None else "×".join(map(str, got))
        raise UserError(f"{checkpoint.source}: tensor {name} should be "
                        f"{'×'.join(map(str, shape))}; it is {found}")
    return checkpoint.tensor(name)


def _layer(checkpoint: Checkpoint, stack: str, layer: int, d: int, d_ff: int,
           read: set[str]) -> dict[str, np.ndarray]:
    """One layer's weights by their sheet names (without the layer suffix), X·W oriented."""
    base = f"model.{stack}.layers.{layer}."
    modules = {"": "self_attn"} if stack == "encoder" else \
        {"": "self_attn", "CROSS_": "encoder_attn"}
    linears = [(f"{prefix}{w}", f"{prefix}B_{w[2:]}", f"{module}.{proj}", d, d)
               for prefix, module in modules.items() for w, proj in ATTENTION.items()]
    linears += [("W_1", "B_1", "fc1", d_ff, d), ("W_2", "B_2", "fc2", d, d_ff)]
    got = {}
    for w, b, module, out, into in linears:  # nn.Linear stores out × in: X·W is its ᵀ
        got[w] = read_tensor(checkpoint, base + module + ".weight", (out, into)).T
        got[b] = read_tensor(checkpoint, base + module + ".bias", (out,))[None]
        read.update({base + module + ".weight", base + module + ".bias"})
    norms = ENCODER_NORMS if stack == "encoder" else DECODER_NORMS
    for ln, module in norms.items():
        got[f"{ln}_GAMMA"] = read_tensor(checkpoint, base + module + ".weight", (d,))[None]
        got[f"{ln}_BETA"] = read_tensor(checkpoint, base + module + ".bias", (d,))[None]
        read.update({base + module + ".weight", base + module + ".bias"})
    return got


# what each parameter the readers give is said by, in a refusal of a flag against it
SAID_BY = {"d_model": "d_model", "heads": "encoder_attention_heads", "d_ff": "encoder_ffn_dim",
           "layers": "encoder_layers", "dec_layers": "decoder_layers", "vocab": "vocab_size",
           "activation": "activation_function", "pad_id": "pad_token_id",
           "start_id": "decoder_start_token_id", "end_id": "eos_token_id",
           "ban_pad": "bad_words_ids", "forced_end": "forced_eos_token_id",
           "forced_bos": "forced_bos_token_id", "bos_id": "forced_bos_token_id",
           "src_len": "the tokens of --text or --token-ids"}


def refuse_contradicted(checkpoint: Checkpoint, family: str, sizes: dict[str, Any],
                        settings: dict, explicit: dict[str, Any]) -> CheckpointParams:
    """A flag given by hand against what the checkpoint decides (`sizes`, and the post-LN
    layer, the embedding LayerNorm and the forced first id the reader leaves at their
    defaults) is refused, as for the other families: the sheet would compute another model
    than the one its About sheet names. The greedy steps (--decode) are the user's."""
    decided = {"pre_ln": False, "embed_ln": False, "forced_bos": False, **sizes}
    if not decided["forced_bos"]:  # no first id forced: --bos-id changes nothing
        decided.pop("bos_id", None)
    act = settings["activation_function"]
    said = {**SAID_BY, **dict.fromkeys(("pre_ln", "embed_ln"), f"{family}'s layer"),
            **dict.fromkeys(("positions", "sinusoid", "logits_bias", "ln_eps"),
                            f"{family}'s code"),
            "no_scale": f"scale_embedding {json.dumps(settings['scale_embedding'])}"}
    if ACTIVATIONS[act] != act:  # swish: the sheet's silu
        said["activation"] = f"activation_function {json.dumps(act)}"
    # the greedy decoding's ids and switches: from the file `generate` reads them from
    said.update({name: Fixed(None, where, key) for name, (where, key)
                 in greedy_sources(settings[GENERATION]).items()})
    fixed = refuse_contradicted_flags(checkpoint, decided, explicit, said)
    # the greedy steps are the user's; so is the first id when none is forced and the
    # sinusoids' order with learned positions (each changes nothing), and the source's
    # length without tokens
    free = {"decode", *(name for name in ("bos_id", "sinusoid", "src_len")
                        if name not in fixed)}
    return CheckpointParams(fixed, frozenset(free), family)


def _refuse_the_rest(family: EncoderDecoder, checkpoint: Checkpoint, read: set[str],
                     table: np.ndarray) -> None:
    """Every tensor not read is a tied copy of the table or one the family keeps, or is
    refused naming it."""
    for name in sorted(set(checkpoint.shapes) - read):
        value = checkpoint.tensor(name)
        if name in TIED_COPIES and value.shape == table.shape and np.array_equal(value, table):
            continue
        if family.kept(name, value):
            continue
        raise UserError(f"{checkpoint.source}: tensor {name} is not part of the transformer "
                        f"sheet (or differs from {family.kept_as} it should be); refused "
                        f"rather than left out")


def encoder_decoder_inputs(family: EncoderDecoder, kind_name: str, path: Path,
                           checkpoint: Checkpoint, *, text: str | None,
                           token_ids: list[int] | None,
                           explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `transformer` (`kind_name`) from a `family` folder already read."""
    explicit = explicit or {}
    settings = read_settings(checkpoint, path, family.defaults)
    sizes = family.params(settings)
    ids, labels = _ids_and_labels(checkpoint, text, token_ids)
    if ids is not None:
        sizes["src_len"] = len(ids)
    decided = refuse_contradicted(checkpoint, family.name, sizes, settings, explicit)
    params = checked_params(get_kind(kind_name), {**sizes, **explicit}, decided.fixed,
                            explicit)
    limit = size(settings, "max_position_embeddings")
    family.check_positions(params, limit)
    d, vocab = params.d_model, params.vocab
    read = {TABLE, "final_logits_bias"}
    table = read_tensor(checkpoint, TABLE, (vocab, d))
    inputs = {"WTE": table,
              "LOGITS_BIAS": read_tensor(checkpoint, "final_logits_bias", (1, vocab))}
    family.embeddings(checkpoint, params, limit, inputs, read)
    for stack, count, mark in (("encoder", params.layers, "E"),
                               ("decoder", params.dec_layers, "D")):
        for k in range(count):
            weights = _layer(checkpoint, stack, k, d, params.d_ff, read)
            inputs.update({f"{name}_{mark}{k + 1}": value for name, value in weights.items()})
    _refuse_the_rest(family, checkpoint, read, table)
    if ids is not None:
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise UserError(f"token id {bad[0]} is outside the vocabulary (0 … {vocab - 1})")
        inputs["SRC_IDS"] = np.array(ids, dtype=float)[:, None]
    source = f"{family.name} {path.name}: {params.layers} + {params.dec_layers} layers"
    note = f"weights: {source}; source ids " + (_short(ids) if ids is not None else
                                                  "drawn from --seed")
    return ModelInputs(sizes, inputs, labels, note, decided)
