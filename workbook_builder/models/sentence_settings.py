"""sentence-transformers' pipeline settings, read in one place and judged key by key.

A sentence-transformers folder says what `SentenceTransformer.encode` does to a text in four
files: modules.json (the modules, their types and folders), the Pooling module's config.json,
sentence_bert_config.json (the Transformer module: truncation, lowercasing) and
config_sentence_transformers.json (prompts, similarity, the model type); a Normalize module
may have a config.json too. Every key each file may hold is in a table below, taken from the
lists of sentence-transformers 6.2 (Pooling.config_keys, its config_key_renames and old
pooling_mode_… switches; Transformer.__init__'s arguments and the old names its loader
renames; Normalize.config_keys; what SentenceTransformer._get_model_config writes and
_parse_model_config reads). Each key is reproduced by the sheet, harmless (the table says why
it cannot change what `encode` gives), or refused naming the key and its file; a key no table
holds is refused, since the library would refuse it or a later one may read it.

Every path the folder names resolves inside it: a module path with `..`, a rooted path, or a
link that leads out of the folder is refused, naming modules.json and the path, before
anything outside is opened. The one exception is a Hugging Face cache snapshot
(…/snapshots/<revision>/), whose files are links into the same repository's blobs folder.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbook_builder.errors import UserError
from workbook_builder.models.files import confined, model_json

REPRODUCED, HARMLESS = "reproduced", "harmless"
MODULES, MODEL_CONFIG = "modules.json", "config_sentence_transformers.json"
# the Transformer module's configuration: the first of these that exists and is not empty
# (sentence-transformers' Transformer.load_config tries them in this order)
TRANSFORMER_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json",
                       "sentence_distilbert_config.json", "sentence_camembert_config.json",
                       "sentence_albert_config.json", "sentence_xlm-roberta_config.json",
                       "sentence_xlnet_config.json")


@dataclass(frozen=True)
class Key:
    """What the sheet does with one key: `handling` (reproduced or harmless) for the values
    `fits` accepts, with `why`; any other value is refused with `refusal`."""

    handling: str
    why: str
    fits: Callable[[Any], bool] = lambda value: True
    refusal: str = ""


def _is_none(value) -> bool:
    return value is None


def _is_bool(value) -> bool:
    return isinstance(value, bool)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count_or_none(value) -> bool:
    return value is None or _is_count(value)


def _is_text(value) -> bool:
    return isinstance(value, str)


def _text_or_none(value) -> bool:
    return value is None or isinstance(value, str)


def _empty(value) -> bool:
    return value is None or value == {}


# keys of model_kwargs, processor_kwargs and config_kwargs that the loader replaces with its
# own arguments (subfolder, token, cache_dir, revision, local_files_only) or strips
# (trust_remote_code): none reaches the model
LOADING_KEYS = frozenset({"subfolder", "token", "cache_dir", "revision", "local_files_only",
                          "trust_remote_code"})


def _loading_only(value) -> bool:
    return value is None or (isinstance(value, dict) and set(value) <= LOADING_KEYS)


def _tokenizer_arguments(value) -> bool:
    """Loading keys, and model_max_length (a whole number: the truncation length)."""
    return value is None or (isinstance(value, dict) and set(value) <= LOADING_KEYS | {
        "model_max_length"} and _count_or_none(value.get("model_max_length")))


# the feature-extraction task's default: text through forward(), the last hidden state out
TEXT_MODALITY = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}

# modules.json: one object per module
MODULE_ENTRY_KEYS = {
    "idx": Key(HARMLESS, "a module's number; the modules run in the order the list gives"),
    "name": Key(HARMLESS, "a module's name inside the model"),
    "path": Key(REPRODUCED, "the module's folder, read only inside the model folder",
                _is_text, "a module's path must be a text (a folder inside the model's)"),
    "type": Key(REPRODUCED, "the module's class: Transformer, Pooling, Normalize",
                _is_text, "a module's type must be a text naming its class"),
    "kwargs": Key(HARMLESS, "names of encode() arguments handed to the module; the sheet is "
                            "encode() called without them",
                  lambda value: isinstance(value, list) and all(map(_is_text, value)),
                  "kwargs must be a list of argument names"),
}
# modules.json types by their last name (sentence-transformers 2 … 6 spell the module path
# differently: sentence_transformers.models.Pooling, …sentence_transformer.modules.pooling.
# Pooling); the sheet computes exactly Transformer → Pooling (→ Normalize)
TRANSFORMER, POOLING, NORMALIZE, DENSE = "Transformer", "Pooling", "Normalize", "Dense"
MODULE_TYPES = {
    TRANSFORMER: "the encoder's layers, from the weights at the folder's root",
    POOLING: "POOLED: mean, CLS or max over the tokens",
    NORMALIZE: "EMBEDDING: POOLED over its length",
}
REFUSED_TYPES = {DENSE: "a linear layer after pooling, which the sheet does not compute"}
LIBRARY_PREFIX = "sentence_transformers."

# Pooling's pooling modes: the ones the sheet computes, and the library's others
POOLING_MODES = {"mean": "mean", "cls": "cls", "max": "max"}
OTHER_MODES = ("mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# the old switches, each turning one mode on (in the order messages list them)
POOLING_SWITCHES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
                    "pooling_mode_max_tokens": "max",
                    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                    "pooling_mode_weightedmean_tokens": "weightedmean",
                    "pooling_mode_lasttoken": "lasttoken"}
DIMENSION_KEYS = ("embedding_dimension", "word_embedding_dimension")
POOLING_KEYS = {
    **dict.fromkeys(DIMENSION_KEYS, Key(
        HARMLESS, "the width Pooling reports; it pools the hidden state whatever it says")),
    # judged with the switches below: pooling_mode, when given, wins over them
    "pooling_mode": Key(REPRODUCED, "mean, cls or max, or a list of one of them: POOLED"),
    "include_prompt": Key(REPRODUCED, "true pools the prompt's tokens with the text's, as the "
                                      "sheet does; false is refused when a prompt applies",
                          _is_bool, "include_prompt must be true or false"),
    **dict.fromkeys(POOLING_SWITCHES, Key(
        REPRODUCED, "the older way to say pooling_mode (ignored when it is given)", _is_bool,
        "a pooling_mode_… switch must be true or false")),
}

# sentence_bert_config.json (or an older name for it): Transformer's arguments
TRANSFORMER_KEYS = {
    "max_seq_length": Key(REPRODUCED, "a longer text is refused, where encode would cut it",
                          _count_or_none, "max_seq_length must be a whole number, 1 or more"),
    "do_lower_case": Key(REPRODUCED, "the text is lowercased by the tokenizer's first step, "
                                     "as sentence-transformers adds it",
                         _is_bool, "do_lower_case must be true or false"),
    "transformer_task": Key(HARMLESS, "feature-extraction: the last hidden state, which the "
                                      "sheet computes",
                            lambda value: value == "feature-extraction",
                            "the encoder sheet computes the feature-extraction task only"),
    "modality_config": Key(HARMLESS, "text through forward(), the last hidden state out",
                           lambda value: value == TEXT_MODALITY,
                           f"the encoder sheet computes {json.dumps(TEXT_MODALITY)} only"),
    "module_output_name": Key(HARMLESS, "token_embeddings: the hidden state handed to Pooling",
                              lambda value: value == "token_embeddings",
                              "the encoder sheet hands token_embeddings to Pooling"),
    "processing_kwargs": Key(HARMLESS, "empty: the tokenizer is called as it is saved", _empty,
                             "they change how the text is tokenized"),
    "unpad_inputs": Key(HARMLESS, "batching without padding for flash attention; one text "
                                  "has no padding", lambda value: value is None or
                        isinstance(value, bool), "unpad_inputs must be true, false or null"),
    **dict.fromkeys(("query_length", "document_length"), Key(
        HARMLESS, "only encode_query and encode_document cut there; the sheet is encode's",
        _count_or_none, "it must be a whole number, 1 or more, or null")),
    "query_expansion": Key(HARMLESS, "null: no query expansion", _is_none,
                           "ColBERT-style query expansion is not computed by the sheet"),
    "tokenizer_name_or_path": Key(HARMLESS, "null: the tokenizer is the folder's own",
                                  _is_none, "the sheet tokenizes with the folder's own "
                                            "tokenizer.json"),
    "backend": Key(HARMLESS, "the loading call's own backend argument replaces it"),
    **dict.fromkeys(("model_kwargs", "model_args", "config_kwargs", "config_args"), Key(
        HARMLESS, f"only {', '.join(sorted(LOADING_KEYS))}, which the loader replaces or "
                  f"strips", _loading_only,
        f"arguments to the model or its config other than {', '.join(sorted(LOADING_KEYS))} "
        f"may change the model")),
    **dict.fromkeys(("processor_kwargs", "tokenizer_args"), Key(
        REPRODUCED, "model_max_length: the truncation length (a longer text is refused); "
                    "loading keys the loader replaces", _tokenizer_arguments,
        "arguments to the tokenizer other than model_max_length may change its ids")),
}

# config_sentence_transformers.json: the model's own settings
SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
MODEL_KEYS = {
    "__version__": Key(HARMLESS, "the versions that saved the folder; the library only warns"),
    "model_type": Key(HARMLESS, "SentenceTransformer: the pipeline modules.json lists",
                      lambda value: value in (None, "SentenceTransformer"),
                      "another model type is converted on loading, not run as listed"),
    "prompts": Key(REPRODUCED, "the default prompt, if any, is put before the text",
                   lambda value: value is None or (isinstance(value, dict) and all(
                       map(_text_or_none, value.values()))),
                   "prompts must map names to texts"),
    "default_prompt_name": Key(REPRODUCED, "the prompt encode puts before every text",
                               _text_or_none, "default_prompt_name must be a prompt's name"),
    "similarity_fn_name": Key(REPRODUCED, "SIMILARITY is the cosine: refused for a second "
                                          "text under euclidean or manhattan, or dot without "
                                          "Normalize",
                              lambda value: value is None or value in SIMILARITY_FUNCTIONS,
                              f"similarity_fn_name must be one of "
                              f"{', '.join(SIMILARITY_FUNCTIONS)}"),
    "truncate_dim": Key(HARMLESS, "null: encode keeps the whole vector", _is_none,
                        "encode keeps only that many numbers of the embedding; the sheet "
                        "keeps them all"),
    "requirements": Key(HARMLESS, "packages the library checks are installed"),
}

# a Normalize module's config.json; the library keeps these two keys and drops any other
NORMALIZE_KEYS = {
    "module_input_name": Key(HARMLESS, "sentence_embedding: Pooling's output is normalised",
                             lambda value: value == "sentence_embedding",
                             "the sheet normalises the pooled sentence_embedding"),
    "module_output_name": Key(HARMLESS, "null or sentence_embedding: encode returns the "
                                        "normalised vector",
                              lambda value: value in (None, "sentence_embedding"),
                              "encode would return the vector before Normalize"),
}


@dataclass(frozen=True)
class Pipeline:
    """What a sentence-transformers folder asks of `encode`, as the sheet reproduces it."""

    pooling: str                # mean | cls | max
    normalize: bool
    max_tokens: int | None      # the truncation length: a longer text is refused
    limit_said: str             # where that length comes from, for the refusal
    lower_case: bool            # do_lower_case: the tokenizer lowercases first
    prompt: str                 # the default prompt put before every text ("" for none)
    prompt_said: str            # which file and name give it
    similarity: str             # similarity_fn_name (cosine when not said)


def read_pipeline(folder: Path) -> Pipeline | None:
    """The settings of the sentence-transformers folder (or zip of one) at `folder`, every
    key judged; None when it has no modules.json (a plain model)."""
    folder = Path(folder)
    modules, where = _read(folder, MODULES, None)
    if modules is None:
        return None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise UserError(f"{where}: expected a list of modules")
    for module in modules:
        _judge(module, MODULE_ENTRY_KEYS, where)
    types = [_module_type(module, number, where) for number, module in enumerate(modules)]
    paths = [module.get("path") for module in modules]
    if None in paths:
        raise UserError(f"{where}: module {paths.index(None)} has no path; "
                        f"sentence-transformers cannot load it")
    for number, path in enumerate(paths):
        confined(folder, path, where, number, directory=True)
    if not types or types[0] != TRANSFORMER or paths[0] not in ("", "."):
        raise UserError(f"{where}: the encoder sheet reads a Transformer module whose "
                        f"weights are at the folder's root, first")
    if types[1:] not in ([POOLING], [POOLING, NORMALIZE]):
        refused = next((REFUSED_TYPES[t] for t in types if t in REFUSED_TYPES), None)
        raise UserError(f"{where} lists {' → '.join(types)}; the encoder sheet computes "
                        f"Transformer → Pooling (→ Normalize)" +
                        (f" (Dense is {refused})" if refused else ""))
    config, config_where = _read(folder, _joined(paths[1], "config.json"), where)
    if not isinstance(config, dict):
        raise UserError(f"{config_where}: no pooling configuration (the Pooling module's "
                        f"config.json)")
    pooling, include_prompt = _pooling(config, config_where)
    normalize = types[-1] == NORMALIZE
    if normalize:
        settings, normalize_where = _read(folder, _joined(paths[2], "config.json"), where)
        if settings is not None:
            _judge(_object(settings, normalize_where), NORMALIZE_KEYS, normalize_where,
                   others_dropped=True)
    transformer, transformer_where = _transformer_config(folder, where)
    model, model_where = _read(folder, MODEL_CONFIG, where)
    model = _object(model, model_where) if model is not None else {}
    _judge(model, MODEL_KEYS, model_where)
    prompt, prompt_said = _default_prompt(model, model_where)
    if prompt and not include_prompt:
        raise UserError(f"{config_where} sets include_prompt to false and {prompt_said} "
                        f"applies; the encoder sheet pools the prompt's tokens with the "
                        f"text's, so it cannot leave them out")
    limit, limit_said = _truncation(folder, transformer, transformer_where, where)
    return Pipeline(pooling, normalize, limit, limit_said,
                    transformer.get("do_lower_case") is True, prompt, prompt_said,
                    model.get("similarity_fn_name") or "cosine")


def _read(folder: Path, relative: str, named_in: str | None) -> tuple[Any, str]:
    """A JSON file of the folder, once its path is known to stay inside the folder."""
    confined(folder, relative, named_in, None, directory=False)
    return model_json(folder, relative)


def _object(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a JSON object")
    return value


def _joined(module_path: str, name: str) -> str:
    return name if module_path in ("", ".") else f"{module_path.rstrip('/')}/{name}"


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "…"


def _judge(config: dict, table: dict[str, Key], where: str,
           others_dropped: bool = False) -> None:
    """Every key of `config` by its table: a value outside what the table covers, or a key
    the table does not hold, is refused naming the key (others_dropped: the library itself
    drops keys it does not know, so they are harmless)."""
    for key, value in config.items():
        rule = table.get(key)
        if rule is None:
            if others_dropped:
                continue
            raise UserError(f"{where}: unknown key {key!r}; the encoder sheet cannot say "
                            f"what it changes (it knows {', '.join(table)})")
        if not rule.fits(value):
            raise UserError(f"{where} sets {key} to {_shown(value)}; {rule.refusal}")


def _module_type(module: dict, number: int, where: str) -> str:
    """A module's class by its last name, when it is sentence-transformers' own."""
    given = module.get("type", "")
    if not given.startswith(LIBRARY_PREFIX):
        raise UserError(f"{where}: module {number} has type {given!r}, not a "
                        f"sentence-transformers module; the encoder sheet computes "
                        f"Transformer → Pooling (→ Normalize)")
    return given.rsplit(".", 1)[-1]


def _pooling(config: dict, where: str) -> tuple[str, bool]:
    """mean, cls or max from a Pooling config.json, and its include_prompt; any other
    pooling, or several at once (concatenated), refused naming the key."""
    _judge(config, POOLING_KEYS, where)
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        if isinstance(mode, list) and len(mode) == 1:  # the library reads ["mean"] as "mean"
            mode = mode[0]
        if isinstance(mode, list):
            raise UserError(f"{where} sets pooling_mode to {_shown(mode)}; the encoder sheet "
                            f"computes one mode ({', '.join(POOLING_MODES)}), not several "
                            f"concatenated")
        if not isinstance(mode, str):
            raise UserError(f"{where} sets pooling_mode to {_shown(mode)}; it must be a "
                            f"mode's name: {', '.join(POOLING_MODES)}")
        if mode not in POOLING_MODES:
            raise UserError(f"{where} sets pooling_mode to {mode!r}; the encoder sheet "
                            f"computes {', '.join(POOLING_MODES)}")
        pooling = POOLING_MODES[mode]
    elif any(key in config for key in POOLING_SWITCHES):
        on = [key for key in POOLING_SWITCHES if config.get(key) is True]
        if len(on) != 1 or POOLING_SWITCHES[on[0]] not in POOLING_MODES:
            # none on: sentence-transformers 6 pools by mean, earlier releases fail
            said = ", ".join(on) or "no pooling_mode_… switch"
            computed = (k for k, mode in POOLING_SWITCHES.items() if mode in POOLING_MODES)
            raise UserError(f"{where} turns on {said}; the encoder sheet computes one of "
                            f"{', '.join(computed)}")
        pooling = POOLING_SWITCHES[on[0]]
    else:
        pooling = "mean"  # Pooling's default in every release
    if not any(key in config for key in DIMENSION_KEYS):
        raise UserError(f"{where}: no embedding_dimension; sentence-transformers cannot load "
                        f"a Pooling module without it")
    return pooling, config.get("include_prompt", True)


def _transformer_config(folder: Path, named_in: str) -> tuple[dict, str]:
    """The first of the Transformer module's configuration files that says anything."""
    where = str(folder / TRANSFORMER_CONFIGS[0])
    for name in TRANSFORMER_CONFIGS:
        config, where = _read(folder, name, named_in)
        if config is not None and config != {}:
            config = _object(config, where)
            _judge(config, TRANSFORMER_KEYS, where)
            return config, where
    return {}, where


def _default_prompt(model: dict, where: str) -> tuple[str, str]:
    """The prompt encode puts before every text: prompts[default_prompt_name]."""
    name = model.get("default_prompt_name")
    if name is None:
        return "", ""
    # the library's own two names, empty until a file fills them
    prompts = {"query": None, "document": None, **(model.get("prompts") or {})}
    if name not in prompts:
        raise UserError(f"{where} sets default_prompt_name to {name!r}, which its prompts do "
                        f"not hold; sentence-transformers refuses to load it")
    return prompts[name] or "", f"the default prompt {name!r} ({prompts[name]!r}) of {where}"


def _truncation(folder: Path, transformer: dict, where: str,
                named_in: str) -> tuple[int | None, str]:
    """The length sentence-transformers cuts a text at: the tokenizer's model_max_length
    given to the Transformer, else its max_seq_length, else tokenizer_config.json's."""
    # the older name wins: the loader renames tokenizer_args over processor_kwargs
    given = transformer.get("tokenizer_args" if "tokenizer_args" in transformer else
                            "processor_kwargs") or {}
    if given.get("model_max_length") is not None:
        return given["model_max_length"], f"{where}'s model_max_length is " \
                                          f"{given['model_max_length']}"
    if transformer.get("max_seq_length") is not None:
        return transformer["max_seq_length"], \
            f"the model's max_seq_length is {transformer['max_seq_length']}"
    tokenizer, tokenizer_where = _read(folder, "tokenizer_config.json", named_in)
    limit = tokenizer.get("model_max_length") if isinstance(tokenizer, dict) else None
    if _is_count(limit):
        return limit, f"{tokenizer_where}'s model_max_length is {limit}"
    return None, ""


def lowercasing_first(tokenizer_json: str | None) -> str | None:
    """tokenizer.json with Lowercase as its normalizer's first step, as sentence-
    transformers' Transformer does for do_lower_case (unless a Lowercase step is there
    already); a file that does not parse is left for the tokenizer to refuse."""
    if tokenizer_json is None:
        return None
    try:
        tokenizer = json.loads(tokenizer_json)
    except (json.JSONDecodeError, RecursionError):
        return tokenizer_json
    if not isinstance(tokenizer, dict):
        return tokenizer_json
    normalizer = tokenizer.get("normalizer")
    lowercase = {"type": "Lowercase"}
    if isinstance(normalizer, dict) and normalizer.get("type") == "Lowercase":
        return tokenizer_json
    if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence":
        steps = normalizer.get("normalizers") or []
        if any(isinstance(s, dict) and s.get("type") == "Lowercase" for s in steps):
            return tokenizer_json
        tokenizer["normalizer"] = {"type": "Sequence", "normalizers": [lowercase, *steps]}
    else:
        tokenizer["normalizer"] = {"type": "Sequence", "normalizers": [
            lowercase, *([normalizer] if normalizer is not None else [])]}
    return json.dumps(tokenizer, ensure_ascii=False)
