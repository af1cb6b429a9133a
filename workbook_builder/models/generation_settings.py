"""transformers' generation settings of a MarianMT or BART folder, read as `generate` reads
them, and what the transformer sheet does with each.

Which file gives them (transformers 5.24: `PreTrainedModel.from_pretrained` calls
`GenerationMixin.adjust_generation_fn`, and `generate`'s `_prepare_generation_config` starts
from what it loaded): a folder with generation_config.json takes its settings from that file
alone, config.json's generation keys are then ignored; a folder without it takes the keys
of config.json that GenerationConfig knows (`GenerationConfig.from_model_config` of the
file's own dict: nulls dropped, no default of the config class added, so a Marian
config.json without forced_eos_token_id forces no end). A setting left out or null takes
in `generate` the value `GenerationConfig._get_default_generation_params` gives it.

KEYS holds every key GenerationConfig knows, as data (tests/test_generation_settings.py
fails when the installed transformers knows one it does not): each is REPRODUCED (its value
goes into the sheet's parameters: `greedy_parameters`), HARMLESS (it cannot change the ids
the sheet gives; the reason is said beside it) or NEUTRAL (refused, naming the key and the
file, unless at a value that changes nothing). A key of generation_config.json that the table
does not know is refused too: a newer transformers may act on it."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.models.files import model_json

# the transformers whose GenerationConfig the table below lists
TABLE_VERSION = "5.24"
REPRODUCED, HARMLESS, NEUTRAL = "reproduced", "harmless", "neutral"


@dataclass(frozen=True)
class Rule:
    """What the sheet does with one key: `role`, `why` (what the sheet computes instead,
    for a NEUTRAL key; why it changes nothing, for a HARMLESS one), and the values of a
    NEUTRAL key that change nothing (null, that is unset, always among them)."""

    role: str
    why: str
    neutral: tuple = (None,)


def _neutral(why: str, *values) -> Rule:
    return Rule(NEUTRAL, why, (None, *values))


GREEDY = "the transformer sheet decodes greedily (num_beams 1, do_sample false)"
NO_SAMPLING = "the transformer sheet does not sample: it takes the largest score"
NOT_COMPUTED = "the transformer sheet's greedy decoding does not compute it"
ALONE = "the transformer sheet decodes with the model alone, as plain greedy generate"
ASSISTED = ("tunes assisted generation only, which needs an assistant model (the sheet's "
            "generate has none) or prompt_lookup_num_tokens, assistant_early_exit or use_mtp "
            "(each refused)")
OUTPUT = "says what generate returns beside the ids, not which ids"
RUNNING = "says how the forward pass is run (compiled, batched, chunked), not what it computes"
CACHE = "keeps the keys and values already computed instead of computing them again"
BEAM = "a rule of beam search, which num_beams 1 (refused otherwise) leaves out"
METADATA = "written by transformers itself to say where the file came from"
DECODE = ("the number of steps is --decode, the user's choice (generate's max_new_tokens; "
          "the forced end id, if any, falls on its last step)")
# the caches that keep exact keys and values (a quantized one rounds them)
EXACT_CACHES = ("dynamic", "offloaded", "static", "offloaded_static", "sliding_window",
                "hybrid", "hybrid_chunked", "offloaded_hybrid", "offloaded_hybrid_chunked")

KEYS: dict[str, Rule] = {
    # the length of the output
    "max_length": Rule(HARMLESS, DECODE),
    "max_new_tokens": Rule(HARMLESS, DECODE),
    "min_length": _neutral(NOT_COMPUTED, 0),
    "min_new_tokens": _neutral(NOT_COMPUTED, 0),
    "early_stopping": Rule(HARMLESS, BEAM),
    "max_time": _neutral("the transformer sheet computes every step, however long it takes"),
    "stop_strings": _neutral("the transformer sheet stops on the end id only", []),
    # the strategy
    "do_sample": _neutral(GREEDY, False),
    "num_beams": _neutral(GREEDY, 1),
    "use_mtp": _neutral(ALONE, False),
    # the cache
    "use_cache": Rule(HARMLESS, CACHE),
    "cache_implementation": _neutral("the transformer sheet keeps keys and values exact, "
                                     "as a cache that does not quantize them",
                                     *EXACT_CACHES),
    "cache_config": Rule(HARMLESS, "configures the cache cache_implementation names (a "
                                   "quantized one is refused there)"),
    "max_cache_len": Rule(HARMLESS, CACHE),
    # the scores: each sampling setting at a value that keeps every id (or its default)
    "temperature": _neutral(NO_SAMPLING, 1.0),
    "top_k": _neutral(NO_SAMPLING, 0, 50),  # 50: generate's own when unset
    "top_p": _neutral(NO_SAMPLING, 1.0),
    "min_p": _neutral(NO_SAMPLING, 0.0),
    "top_h": _neutral(NO_SAMPLING),
    "typical_p": _neutral(NO_SAMPLING, 1.0),
    "epsilon_cutoff": _neutral(NO_SAMPLING, 0.0),
    "eta_cutoff": _neutral(NO_SAMPLING, 0.0),
    "repetition_penalty": _neutral(NOT_COMPUTED, 1.0),
    "encoder_repetition_penalty": _neutral(NOT_COMPUTED, 1.0),
    "length_penalty": _neutral(f"a beam search setting; {GREEDY}", 1.0),
    "no_repeat_ngram_size": _neutral(NOT_COMPUTED, 0),
    "bad_words_ids": Rule(REPRODUCED, "the pad id banned (--ban-pad)"),
    "renormalize_logits": Rule(HARMLESS, "a log-softmax after the other processors, which "
                                         "keeps each step's largest score where it is"),
    "forced_bos_token_id": Rule(REPRODUCED, "the first step's id (--forced-bos, --bos-id)"),
    "forced_eos_token_id": Rule(REPRODUCED, "the end id at the last step (--forced-end)"),
    "remove_invalid_values": _neutral(NOT_COMPUTED, False),
    "exponential_decay_length_penalty": _neutral(NOT_COMPUTED),
    "suppress_tokens": _neutral(NOT_COMPUTED, []),
    "begin_suppress_tokens": _neutral(NOT_COMPUTED, []),
    "sequence_bias": _neutral(NOT_COMPUTED, [], {}),
    "token_healing": _neutral(NOT_COMPUTED, False),
    "guidance_scale": _neutral(NOT_COMPUTED, 1.0),
    "watermarking_config": _neutral(NOT_COMPUTED),
    # what generate returns
    "num_return_sequences": _neutral("the transformer sheet gives one sequence", 1),
    "output_attentions": Rule(HARMLESS, OUTPUT),
    "output_hidden_states": Rule(HARMLESS, OUTPUT),
    "output_scores": Rule(HARMLESS, OUTPUT),
    "output_logits": Rule(HARMLESS, OUTPUT),
    "return_dict_in_generate": Rule(HARMLESS, OUTPUT),
    # the special ids
    "pad_token_id": Rule(REPRODUCED, "the id after the end (--pad-id)"),
    "bos_token_id": Rule(REPRODUCED, "the first decoder id when decoder_start_token_id is "
                                     "unset"),
    "eos_token_id": Rule(REPRODUCED, "the end id (--end-id)"),
    "encoder_no_repeat_ngram_size": _neutral(NOT_COMPUTED, 0),
    "decoder_start_token_id": Rule(REPRODUCED, "the first decoder id (--start-id)"),
    # assisted generation
    "is_assistant": Rule(HARMLESS, "says the model may serve as another model's assistant, "
                                   "which changes nothing when it decodes alone"),
    "num_assistant_tokens": Rule(HARMLESS, ASSISTED),
    "num_assistant_tokens_schedule": Rule(HARMLESS, ASSISTED),
    "assistant_confidence_threshold": Rule(HARMLESS, ASSISTED),
    "prompt_lookup_num_tokens": _neutral(ALONE),
    "max_matching_ngram_size": Rule(HARMLESS, ASSISTED),
    "assistant_early_exit": _neutral(ALONE),
    "assistant_lookbehind": Rule(HARMLESS, ASSISTED),
    "target_lookbehind": Rule(HARMLESS, ASSISTED),
    "assistant_ensemble_weight": Rule(HARMLESS, ASSISTED),
    "speculation_type": Rule(HARMLESS, ASSISTED),
    # how the forward pass runs
    "compile_config": Rule(HARMLESS, RUNNING),
    "disable_compile": Rule(HARMLESS, RUNNING),
    "continuous_batching_config": Rule(HARMLESS, RUNNING),
    "prefill_chunk_size": Rule(HARMLESS, RUNNING),
    # strategies transformers moved out of generate (contrastive search, DoLa, group and
    # constrained beam search)
    "low_memory": _neutral(GREEDY, False),
    "penalty_alpha": _neutral(GREEDY, 0.0),
    "dola_layers": _neutral(GREEDY),
    "diversity_penalty": _neutral(GREEDY, 0.0),
    "num_beam_groups": _neutral(GREEDY, 1),
    "constraints": _neutral(GREEDY),
    "force_words_ids": _neutral(GREEDY),
    # written by transformers (save_pretrained) or left by an older one
    "_from_model_config": Rule(HARMLESS, METADATA),
    "transformers_version": Rule(HARMLESS, METADATA),
    "_commit_hash": Rule(HARMLESS, METADATA),
    "_original_object_hash": Rule(HARMLESS, METADATA),
    # an old switch GenerationConfig still reads from a model's config: true forces
    # bos_token_id first (`read_generation_settings` applies it)
    "force_bos_token_to_be_generated": Rule(HARMLESS, "read as forced_bos_token_id"),
}
# config.json keys holding a sub-config whose generation keys transformers would read too
SUB_CONFIGS = ("decoder", "generator", "text_config")


@dataclass(frozen=True)
class GenerationSettings:
    """The generation keys `generate` reads for the folder, nulls dropped (a key left out
    takes generate's default), and `where` they were read: generation_config.json, or
    config.json when the folder has no generation_config.json."""

    values: dict[str, Any]
    where: str

    def get(self, key: str) -> Any:
        return self.values.get(key)


def _is(value: Any, neutral: Any) -> bool:
    """`value` is `neutral`, true and false not taken for 1 and 0."""
    if neutral is None or isinstance(neutral, bool) or isinstance(value, bool):
        return value is neutral
    if isinstance(neutral, int | float):
        return isinstance(value, int | float) and value == neutral
    return type(value) is type(neutral) and value == neutral


def _shown(value: Any, limit: int = 60) -> str:
    """`value` as the file spells it, cut short: a refusal stays one readable line."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def read_generation_settings(path: Path, config: dict) -> GenerationSettings:
    """The generation settings of the model folder (or zip of one) at `path`, whose
    config.json holds `config`: every key known, each NEUTRAL one at a value that changes
    nothing, or a UserError naming the key and its file."""
    values, where = model_json(path, "generation_config.json")
    from_model_config = values is None
    if from_model_config:  # config.json's generation keys, its other keys being the model's
        where = where.removesuffix("generation_config.json") + "config.json"
        for key in SUB_CONFIGS:
            if config.get(key):
                raise UserError(f"{where}: {key} holds a sub-config, whose generation "
                                f"settings transformers reads too; the transformer sheet "
                                f"reads a BART or MarianMT config.json without one")
        values = {key: value for key, value in config.items() if key in KEYS}
    elif not isinstance(values, dict):
        raise UserError(f"{where}: not a JSON object; generation_config.json holds one, "
                        f"its keys the generation settings")
    else:
        unknown = sorted(set(values) - set(KEYS))
        if unknown:
            raise UserError(f"{where}: {unknown[0][:60]} is not a generation setting "
                            f"transformers {TABLE_VERSION} knows; a newer transformers may "
                            f"act on it, which the transformer sheet cannot tell: remove it "
                            f"to build")
        from_model_config = bool(values.get("_from_model_config"))
    values = {key: value for key, value in values.items() if value is not None}
    # GenerationConfig made from a model's config turns the old switch into the forced id
    if from_model_config and values.pop("force_bos_token_to_be_generated", False) and \
            values.get("bos_token_id") is not None:
        values["forced_bos_token_id"] = values["bos_token_id"]
    for key, value in values.items():
        rule = KEYS[key]
        if rule.role == NEUTRAL and not any(_is(value, n) for n in rule.neutral):
            unset = [n for n in rule.neutral if n is not None][:1]
            instead = f" (or set it to {_shown(unset[0])})" if unset else ""
            raise UserError(f"{where}: {key} is {_shown(value)}; {rule.why}: leave it "
                            f"out{instead} to build the greedy decoding")
    return GenerationSettings(values, where)


def _id(settings: GenerationSettings, key: str, vocab: int, value: Any = None) -> int:
    value = settings.get(key) if value is None else value
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab:
        raise UserError(f"{settings.where}: {key} must be a token id 0 … {vocab - 1}, not "
                        f"{_shown(value)}")
    return value


def _one_id(settings: GenerationSettings, key: str, vocab: int, what: str) -> int | None:
    """The id of `key`, given as one id or a list of one (None when unset); a list of
    several is refused, saying `what` the sheet takes."""
    value = settings.get(key)
    if isinstance(value, list):
        if len(value) != 1:
            raise UserError(f"{settings.where}: {key} is {_shown(value)}; the transformer "
                            f"sheet takes {what}: give one id")
        value = value[0]
    return None if value is None else _id(settings, key, vocab, value)


def greedy_parameters(settings: GenerationSettings, vocab: int) -> dict[str, Any]:
    """The transformer sheet's parameters from the REPRODUCED keys, as `generate` applies
    them to one sequence: the first decoder id (decoder_start_token_id, else bos_token_id),
    the end id, the pad id (else the end id), the pad id banned (bad_words_ids [[pad]]; a
    banned end id generate drops), the end id forced at the last step and the first id
    forced; or a UserError naming the key and its file."""
    where = settings.where
    end = _one_id(settings, "eos_token_id", vocab, "one end id")
    if end is None:
        raise UserError(f"{where}: eos_token_id is unset, so generate never ends a sequence "
                        f"early; the transformer sheet ends on an end id: set eos_token_id "
                        f"there")
    start = _one_id(settings, "decoder_start_token_id", vocab, "one first decoder id")
    if start is None:
        if settings.get("bos_token_id") is None:
            raise UserError(f"{where}: decoder_start_token_id and bos_token_id are unset; "
                            f"generate needs one as the first decoder id: set "
                            f"decoder_start_token_id there")
        start = _id(settings, "bos_token_id", vocab)
    pad = end if settings.get("pad_token_id") is None else \
        _id(settings, "pad_token_id", vocab)
    bad = settings.get("bad_words_ids")
    if bad is not None and not (isinstance(bad, list) and all(
            isinstance(words, list) and words and all(
                isinstance(i, int) and not isinstance(i, bool) for i in words)
            for words in bad)):
        raise UserError(f"{where}: bad_words_ids must be a list of lists of token ids, not "
                        f"{_shown(bad)}")
    banned = [words for words in bad or [] if words != [end]]  # generate never bans the end
    if any(words != [pad] for words in banned):
        raise UserError(f"{where}: bad_words_ids is {_shown(bad)}; the transformer sheet bans "
                        f"the pad id only ([[{pad}]])")
    forced_end = _one_id(settings, "forced_eos_token_id", vocab, "one forced end id")
    if forced_end not in (None, end):
        raise UserError(f"{where}: forced_eos_token_id {forced_end} is not eos_token_id "
                        f"{end}; the transformer sheet forces the end id only")
    forced_bos = settings.get("forced_bos_token_id") is not None
    return {"pad_id": pad, "start_id": start, "end_id": end,
            "ban_pad": bool(banned), "forced_end": forced_end is not None,
            "forced_bos": forced_bos,
            "bos_id": _id(settings, "forced_bos_token_id", vocab) if forced_bos else 0}


def greedy_sources(settings: GenerationSettings) -> dict[str, tuple[str, str]]:
    """The file and key that give each parameter of `greedy_parameters` (for a flag given
    by hand against it)."""
    start = "decoder_start_token_id" if settings.get("decoder_start_token_id") is not None \
        else "bos_token_id"
    pad = "pad_token_id" if settings.get("pad_token_id") is not None else "eos_token_id"
    keys = {"pad_id": pad, "start_id": start, "end_id": "eos_token_id",
            "ban_pad": "bad_words_ids", "forced_end": "forced_eos_token_id",
            "forced_bos": "forced_bos_token_id", "bos_id": "forced_bos_token_id"}
    return {name: (settings.where, key) for name, key in keys.items()}
