"""A BART checkpoint (transformers' `BartForConditionalGeneration`) as the inputs of
`transformer`: every encoder and decoder layer, the shared embedding table (tied to the
output layer), `final_logits_bias`, each stack's learned positions (BART looks position p up
at row p + 2: `BartLearnedPositionalEmbedding`'s offset) and `layernorm_embedding`, and what
greedy `generate` applies from the generation settings (`generation_settings.py`:
decoder_start_token_id as the first decoder id, forced_bos_token_id at the first step,
forced_eos_token_id at the last). Every config key that changes the math is reproduced or
refused naming it; every tensor is read or is a tied copy of the table, or is refused
naming it. A folder of another class of BART or MarianMT (`BartModel`,
`BartForSequenceClassification`, `MarianModel`, …: config.json's `architectures`, and its
tensors) is refused saying so."""

import json
from pathlib import Path
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.models._encoder_decoder import (
    SHARED_DEFAULTS,
    TABLE,
    EncoderDecoder,
    encoder_decoder_inputs,
    model_type,
    read_tensor,
    shared_params,
)
from workbook_builder.models.files import Checkpoint, read_checkpoint
from workbook_builder.models.loader import ModelInputs, check_request
from workbook_builder.models.marian import marian_inputs

# BartConfig's own defaults for the model (its token ids are generation settings, which
# transformers does not take from the class: `generation_settings.py`)
DEFAULTS = {**SHARED_DEFAULTS, "vocab_size": 50265}
# BART's learned positions keep rows 0 and 1 apart: position p is row p + 2
OFFSET = 2
STACKS = {"encoder": "ENC", "decoder": "DEC"}
# the class whose folder transformer reads, by config.json's model_type, and the family's name
GENERATING = {"bart": ("BartForConditionalGeneration", "BART"),
              "marian": ("MarianMTModel", "MarianMT")}
# the tensors a folder of that class holds beside its layers
GENERATING_TENSORS = (TABLE, "final_logits_bias")


def bart_params(settings: dict) -> dict[str, Any]:
    """The sheet's parameters, or a UserError naming the key the sheet does not compute."""
    return {**shared_params(settings, ("tie_word_embeddings",)), "positions": "per_stack",
            "embed_ln": True}


def _check_positions(params, limit: int) -> None:
    for what, count in (("source ids", params.src_len), ("decoding steps", params.decode)):
        if count > limit:
            raise UserError(f"{count} {what} exceed max_position_embeddings {limit}")


def _embeddings(checkpoint: Checkpoint, params, limit: int, inputs: dict,
                read: set[str]) -> None:
    """Each stack's learned positions (the rows the sheet uses) and layernorm_embedding."""
    d = params.d_model
    for stack, mark in STACKS.items():
        name = f"model.{stack}.embed_positions.weight"
        rows = params.src_len if stack == "encoder" else params.decode
        inputs[f"{mark}_POS_EMB"] = read_tensor(checkpoint, name, (limit + OFFSET, d))[
            OFFSET:OFFSET + rows]
        for part, weight in (("GAMMA", "weight"), ("BETA", "bias")):
            module = f"model.{stack}.layernorm_embedding.{weight}"
            inputs[f"{mark}_EMB_LN_{part}"] = read_tensor(checkpoint, module, (d,))[None]
            read.add(module)
        read.add(name)


BART = EncoderDecoder(
    name="BART", defaults=DEFAULTS, params=bart_params, check_positions=_check_positions,
    embeddings=_embeddings, kept=lambda name, value: False, kept_as="the tied table")


def bart_inputs(kind_name: str, path: Path, checkpoint: Checkpoint, *, text: str | None,
                token_ids: list[int] | None,
                explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `transformer` (`kind_name`) from a BART folder already read."""
    return encoder_decoder_inputs(BART, kind_name, path, checkpoint, text=text,
                                  token_ids=token_ids, explicit=explicit)


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
    kind = model_type(checkpoint)
    refuse_another_class(path, checkpoint, kind)
    read = bart_inputs if kind == "bart" else marian_inputs
    return read(kind_name, path, checkpoint, text=text, token_ids=token_ids,
                explicit=explicit)


def refuse_another_class(path: Path, checkpoint: Checkpoint, kind: str) -> None:
    """A folder of another class of the model (`BartModel`, `BartForSequenceClassification`,
    `MarianModel`, …) refused in one line saying what it holds: config.json's
    `architectures` naming another class, or, with none named, tensors without the shared
    table and final_logits_bias of the class transformer reads."""
    wanted, family = GENERATING[kind]
    named = checkpoint.config.get("architectures")
    if isinstance(named, list) and named:
        if wanted in named:
            return
        listed = json.dumps(named, default=str)
        said = f"config.json's architectures is {listed[:80]}{'…' if len(listed) > 80 else ''}"
    elif all(name in checkpoint.shapes for name in GENERATING_TENSORS):
        return
    else:
        missing = [name for name in GENERATING_TENSORS if name not in checkpoint.shapes]
        said = f"config.json names no architectures and it has no {' nor '.join(missing)}"
    tops = sorted({name.split(".")[0] + "." for name in checkpoint.shapes})
    shown = ", ".join(tops[:6]) + (", …" if len(tops) > 6 else "")
    raise UserError(f"{path}: not a {wanted} folder ({said}; its tensors lie under "
                    f"{shown}); transformer reads a {wanted} folder, the encoder, decoder "
                    f"and output layer generate uses, and no other kind reads {family} "
                    f"checkpoints")
