"""A MarianMT checkpoint (transformers' `MarianMTModel`) as the inputs of `transformer`: every
encoder and decoder layer, the shared embedding table, `final_logits_bias`, and what greedy
`generate` applies from the generation settings (`generation_settings.py`: the pad id as
decoder start, the pad id banned by `bad_words_ids`, the end id forced at the last step by
`forced_eos_token_id`, a first id forced by `forced_bos_token_id`).
Every config key that changes the math is reproduced or refused naming it; every tensor is
read or is one that changes nothing (the sinusoid tables, recomputed as formulas, and the
embedding table's tied copies), or is refused naming it. (`bart` reads a `--checkpoint`
folder for `transformer` and hands a MarianMT one to `marian_inputs`; what both read alike
is in `_encoder_decoder.py`.)"""

from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models._encoder_decoder import (
    SHARED_DEFAULTS,
    EncoderDecoder,
    encoder_decoder_inputs,
    shared_params,
    size,
)
from workbook_builder.models.files import Checkpoint
from workbook_builder.models.loader import ModelInputs

# MarianConfig's own defaults for the model (its token ids are generation settings, which
# transformers does not take from the class: `generation_settings.py`)
DEFAULTS = {**SHARED_DEFAULTS, "vocab_size": 58101, "share_encoder_decoder_embeddings": True,
            "decoder_vocab_size": None}
SINUSOID_TABLES = ("model.encoder.embed_positions.weight",
                   "model.decoder.embed_positions.weight")


def marian_params(settings: dict) -> dict[str, Any]:
    """The sheet's parameters, or a UserError naming the key the sheet does not compute."""
    vocab = size(settings, "vocab_size")
    if settings["decoder_vocab_size"] not in (None, vocab):
        raise UserError(f"config.json: decoder_vocab_size {settings['decoder_vocab_size']!r} "
                        f"differs from vocab_size {vocab}; the sheet ties one table to both")
    return {**shared_params(settings, ("share_encoder_decoder_embeddings",
                                       "tie_word_embeddings")),
            "positions": "sinusoidal", "sinusoid": "halves"}


def _halves_sinusoid(rows: int, d: int) -> np.ndarray:
    angle = np.arange(rows)[:, None] / np.power(10000.0, 2 * np.arange(d // 2)[None] / d)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def _check_positions(params, limit: int) -> None:
    if params.positions_count > limit:
        raise UserError(f"{params.positions_count} positions (source {params.src_len}, "
                        f"{params.decode} steps) exceed max_position_embeddings {limit}")


def _sinusoid_table(name: str, value: np.ndarray) -> bool:
    """A sinusoid table (stored as float32, recomputed on the sheet)."""
    return name in SINUSOID_TABLES and value.ndim == 2 and np.allclose(
        value, _halves_sinusoid(*value.shape), rtol=0, atol=1e-6)


MARIAN = EncoderDecoder(
    name="MarianMT", defaults=DEFAULTS, params=marian_params,
    check_positions=_check_positions,
    embeddings=lambda checkpoint, params, limit, inputs, read: None,
    kept=_sinusoid_table, kept_as="the tied table or the sinusoid")


def marian_inputs(kind_name: str, path: Path, checkpoint: Checkpoint, *, text: str | None,
                  token_ids: list[int] | None,
                  explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `transformer` (`kind_name`) from a MarianMT folder already read."""
    return encoder_decoder_inputs(MARIAN, kind_name, path, checkpoint, text=text,
                                  token_ids=token_ids, explicit=explicit)
