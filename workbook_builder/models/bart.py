"""A BART checkpoint (transformers' `BartForConditionalGeneration`) as the inputs of
`transformer`: every encoder and decoder layer, the shared embedding table (tied to the
output layer), `final_logits_bias`, each stack's learned positions (BART looks position p up
at row p + 2: `BartLearnedPositionalEmbedding`'s offset) and `layernorm_embedding`, and what
greedy `generate` applies from the generation config (decoder_start_token_id as the first
decoder id, forced_bos_token_id at the first step, forced_eos_token_id at the last).
Every config key that changes the math is reproduced or refused naming it; every tensor is
read or is a tied copy of the table, or is refused naming it."""

import json
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models.files import Checkpoint, read_checkpoint
from workbook_builder.models.loader import ModelInputs, _ids_and_labels, _short, check_request
from workbook_builder.models.marian import (
    ACTIVATIONS,
    NEUTRAL_GENERATION,
    TIED_COPIES,
    _layer,
    _read,
    _size,
    _token,
    marian_inputs,
    model_type,
    read_settings,
    refuse_contradicted,
)
from workbook_builder.registry import get_kind
from workbook_builder.sheet.kind import make_params

# BartConfig's defaults, for a key config.json leaves out
DEFAULTS = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
            "encoder_attention_heads": 16, "decoder_attention_heads": 16,
            "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "vocab_size": 50265,
            "max_position_embeddings": 1024, "activation_function": "gelu",
            "scale_embedding": False, "pad_token_id": 1, "bos_token_id": 0,
            "eos_token_id": 2, "decoder_start_token_id": 2, "tie_word_embeddings": True,
            "forced_eos_token_id": 2, "forced_bos_token_id": None, "bad_words_ids": None}
# BART's learned positions keep rows 0 and 1 apart: position p is row p + 2
OFFSET = 2
TABLE = "model.shared.weight"
STACKS = {"encoder": "ENC", "decoder": "DEC"}


def bart_params(settings: dict) -> dict[str, Any]:
    """The sheet's parameters, or a UserError naming the key the sheet does not compute."""
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if _size(settings, a) != _size(settings, b):
            raise UserError(f"config.json: {a} {settings[a]} and {b} {settings[b]} differ; "
                            f"the transformer sheet gives both stacks one size")
    vocab = _size(settings, "vocab_size")
    if settings["tie_word_embeddings"] is not True:
        raise UserError(f"config.json: tie_word_embeddings is "
                        f"{json.dumps(settings['tie_word_embeddings'])}; the transformer "
                        f"sheet ties one embedding table to both stacks and the output layer")
    if not isinstance(settings["scale_embedding"], bool):
        raise UserError(f"config.json: scale_embedding must be true or false, not "
                        f"{settings['scale_embedding']!r}")
    act = settings["activation_function"]
    if act not in ACTIVATIONS:
        raise UserError(f"config.json: activation_function {json.dumps(act)}; the transformer "
                        f"sheet computes {', '.join(ACTIVATIONS)}")
    for key, neutral in NEUTRAL_GENERATION.items():
        if key != "forced_bos_token_id" and settings.get(key) not in neutral:
            raise UserError(f"generation config: {key} is {json.dumps(settings[key])}; the "
                            f"transformer sheet's greedy decoding does not compute it")
    pad, end = _token(settings, "pad_token_id", vocab), _token(settings, "eos_token_id", vocab)
    start = _token(settings, "decoder_start_token_id", vocab)
    if settings["forced_eos_token_id"] not in (None, end):
        raise UserError(f"generation config: forced_eos_token_id "
                        f"{settings['forced_eos_token_id']!r} is not eos_token_id {end}; the "
                        f"sheet forces the end id only")
    forced_bos = settings["forced_bos_token_id"] is not None
    bos = _token(settings, "forced_bos_token_id", vocab) if forced_bos else 0
    bad = settings["bad_words_ids"]
    if bad not in (None, [], [[pad]]):
        raise UserError(f"generation config: bad_words_ids {json.dumps(bad)}; the transformer "
                        f"sheet bans the pad id only ([[{pad}]])")
    return {"d_model": _size(settings, "d_model"),
            "heads": settings["encoder_attention_heads"], "d_ff": settings["encoder_ffn_dim"],
            "layers": _size(settings, "encoder_layers"),
            "dec_layers": _size(settings, "decoder_layers"), "vocab": vocab,
            "activation": ACTIVATIONS[act], "positions": "per_stack", "embed_ln": True,
            "no_scale": not settings["scale_embedding"], "logits_bias": True, "pad_id": pad,
            "start_id": start, "end_id": end, "ban_pad": bad == [[pad]],
            "forced_bos": forced_bos, "bos_id": bos,
            "forced_end": settings["forced_eos_token_id"] == end, "ln_eps": 1e-5}


def _refuse_the_rest(checkpoint: Checkpoint, read: set[str], table: np.ndarray) -> None:
    """Every tensor not read is a tied copy of the table, or is refused naming it."""
    for name in sorted(set(checkpoint.shapes) - read):
        value = checkpoint.tensor(name)
        if name in TIED_COPIES and value.shape == table.shape and np.array_equal(value, table):
            continue
        raise UserError(f"{checkpoint.source}: tensor {name} is not part of the transformer "
                        f"sheet (or differs from the tied table it should be); refused "
                        f"rather than left out")


def bart_inputs(kind_name: str, path: Path, checkpoint: Checkpoint, *, text: str | None,
                token_ids: list[int] | None,
                explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `transformer` (`kind_name`) from a BART folder already read."""
    explicit = explicit or {}
    settings = read_settings(checkpoint, path, DEFAULTS)
    sizes = bart_params(settings)
    ids, labels = _ids_and_labels(checkpoint, text, token_ids)
    if ids is not None:
        sizes["src_len"] = len(ids)
    refuse_contradicted(checkpoint, "BART", sizes, settings, explicit)
    params = make_params(get_kind(kind_name), {**sizes, **explicit})
    limit = _size(settings, "max_position_embeddings")
    for what, count in (("source ids", params.src_len), ("decoding steps", params.decode)):
        if count > limit:
            raise UserError(f"{count} {what} exceed max_position_embeddings {limit}")
    d, vocab = params.d_model, params.vocab
    read = {TABLE, "final_logits_bias"}
    table = _read(checkpoint, TABLE, (vocab, d))
    inputs = {"WTE": table, "LOGITS_BIAS": _read(checkpoint, "final_logits_bias", (1, vocab))}
    for stack, mark in STACKS.items():
        name = f"model.{stack}.embed_positions.weight"
        rows = params.src_len if stack == "encoder" else params.decode
        inputs[f"{mark}_POS_EMB"] = _read(checkpoint, name, (limit + OFFSET, d))[
            OFFSET:OFFSET + rows]
        for part, weight in (("GAMMA", "weight"), ("BETA", "bias")):
            module = f"model.{stack}.layernorm_embedding.{weight}"
            inputs[f"{mark}_EMB_LN_{part}"] = _read(checkpoint, module, (d,))[None]
            read.add(module)
        read.add(name)
    for stack, count, mark in (("encoder", params.layers, "E"),
                               ("decoder", params.dec_layers, "D")):
        for k in range(count):
            weights = _layer(checkpoint, stack, k, d, params.d_ff, read)
            inputs.update({f"{name}_{mark}{k + 1}": value for name, value in weights.items()})
    _refuse_the_rest(checkpoint, read, table)
    if ids is not None:
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise UserError(f"token id {bad[0]} is outside the vocabulary (0 … {vocab - 1})")
        inputs["SRC_IDS"] = np.array(ids, dtype=float)[:, None]
    source = f"BART {path.name}: {params.layers} + {params.dec_layers} layers"
    note = f"weights: {source}; source ids " + (_short(ids) if ids is not None else
                                                  "drawn from --seed")
    return ModelInputs(sizes, inputs, labels, note)


def model_inputs(kind_name: str, path: str | Path, *, layer: int = 0,
                 prefix: str | None = None, text: str | None = None,
                 token_ids: list[int] | None = None,
                 explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `transformer` from a BART or MarianMT folder (--checkpoint DIR)."""
    check_request(text, token_ids, layer)
    if layer or prefix is not None:
        raise UserError("--layer and --prefix pick one layer; transformer reads every layer "
                        "of a BART or MarianMT checkpoint")
    path = Path(path)
    checkpoint = read_checkpoint(path)
    read = bart_inputs if model_type(checkpoint) == "bart" else marian_inputs
    return read(kind_name, path, checkpoint, text=text, token_ids=token_ids,
                explicit=explicit)
