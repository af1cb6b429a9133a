"""A whole BERT-family encoder and its sentence-transformers head as the `encoder` kind's
inputs: every layer by the family's name table (models/families.py, as `encoder-block`
reads one), the whole word-embedding table, the position and token-type rows of each text,
and the head `modules.json` declares (Transformer → Pooling → Normalize;
`1_Pooling/config.json` says mean, CLS or max). A folder without `modules.json` is a plain
model: its answer is the last hidden state. Anything else a folder declares is refused
naming it."""

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.book.reading import read_bounded
from workbook_builder.errors import UserError
from workbook_builder.models import loader
from workbook_builder.models.families import ENCODERS
from workbook_builder.models.files import (
    MAX_JSON_BYTES,
    Checkpoint,
    model_json,
    read_checkpoint,
)
from workbook_builder.models.onnx_graph import onnx_checkpoint
from workbook_builder.registry import get_kind

# modules.json types by their last name (sentence-transformers 2 … 6 spell the module path
# differently: sentence_transformers.models.Pooling, …sentence_transformer.modules.pooling.Pooling)
TRANSFORMER, POOLING, NORMALIZE = "Transformer", "Pooling", "Normalize"
# 1_Pooling/config.json: the old switches, and the new "pooling_mode" values the sheet computes
POOLING_SWITCHES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
                    "pooling_mode_max_tokens": "max"}
OTHER_SWITCHES = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                  "pooling_mode_lasttoken")
POOLING_MODES = {"mean": "mean", "cls": "cls", "max": "max"}


@dataclasses.dataclass(frozen=True)
class Head:
    """What follows the transformer in a sentence-transformers folder."""

    pooling: str            # mean | cls | max | none (no modules.json: the hidden state)
    normalize: bool
    max_tokens: int | None  # sentence_bert_config.json's max_seq_length (encode truncates)
    note: str


def sentence_head(path: Path) -> Head:
    """The head modules.json declares, or none for a plain model folder."""
    modules, where = model_json(path, "modules.json")
    if modules is None:
        return Head("none", False, None, "no modules.json: the answer is the last hidden "
                                         "state")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise UserError(f"{where}: expected a list of modules")
    types = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if not types or types[0] != TRANSFORMER or str(modules[0].get("path", "")) not in ("",
                                                                                       "."):
        raise UserError(f"{where}: the encoder sheet reads a Transformer module whose "
                        f"weights are at the folder's root, first")
    rest = types[1:]
    allowed = ([POOLING], [POOLING, NORMALIZE])
    if rest not in allowed:
        raise UserError(f"{where} lists {' → '.join(types)}; the encoder sheet computes "
                        f"Transformer → Pooling (→ Normalize)")
    pooling_path = str(modules[1].get("path", ""))
    config, config_where = model_json(path, f"{pooling_path}/config.json")
    if not isinstance(config, dict):
        raise UserError(f"{config_where}: no pooling configuration (the Pooling module's "
                        f"config.json)")
    pooling = _pooling_mode(config, config_where)
    bert_config, _ = model_json(path, "sentence_bert_config.json")
    limit = bert_config.get("max_seq_length") if isinstance(bert_config, dict) else None
    normalize = rest[-1] == NORMALIZE
    return Head(pooling, normalize, limit if isinstance(limit, int) else None,
                f"head: {pooling} pooling" + (", Normalize" if normalize else ""))


def _pooling_mode(config: dict, where: str) -> str:
    """mean, cls or max from a Pooling config.json, old (one switch on) or new
    (pooling_mode); any other pooling, or several at once (concatenated), refused."""
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        if mode not in POOLING_MODES:
            raise UserError(f"{where} sets pooling_mode to {mode!r}; the encoder sheet "
                            f"computes {', '.join(POOLING_MODES)}")
        return POOLING_MODES[mode]
    on = [key for key in (*POOLING_SWITCHES, *OTHER_SWITCHES) if config.get(key) is True]
    if len(on) != 1 or on[0] not in POOLING_SWITCHES:
        said = ", ".join(on) or "no pooling_mode_… switch"
        raise UserError(f"{where} turns on {said}; the encoder sheet computes one of "
                        f"{', '.join(POOLING_SWITCHES)}")
    return POOLING_SWITCHES[on[0]]


def encoder_inputs(kind_name: str, path: str | Path, *, layer: int = 0,
                   prefix: str | None = None, text: str | None = None,
                   token_ids: list[int] | None = None,
                   explicit: dict[str, Any] | None = None, text2: str | None = None,
                   token_ids2: list[int] | None = None,
                   tokenizer: Path | None = None) -> loader.ModelInputs:
    """The `encoder` inputs of the checkpoint at `path`: its sizes, every layer, the whole
    word-embedding table, the rows of each text (--text/--token-ids, and
    --text2/--token-ids2, tokenised by the checkpoint's tokenizer.json or `tokenizer`) and
    its head."""
    if layer:
        raise UserError("the encoder sheet holds every layer; --layer is encoder-block's")
    loader.check_request(text, token_ids, 0)
    if text2 is not None and token_ids2 is not None:
        raise UserError("give --text2 or --token-ids2, not both")
    if text is None and token_ids is None:
        raise UserError("the encoder sheet starts from token ids: give --text or --token-ids")
    explicit = dict(explicit or {})
    path = Path(path)
    head = sentence_head(path)
    if path.suffix.lower() == ".onnx":  # an export: its graph gives what config.json would
        checkpoint = onnx_checkpoint(path, explicit.get("heads"))
    else:
        checkpoint = read_checkpoint(path)
    if tokenizer is not None:  # wins over the one beside the weights
        checkpoint.tokenizer_json = tokenizer_text(tokenizer)
        checkpoint.tokenizer_problem = None
    family = loader._family(checkpoint, ENCODERS)
    base = loader._prefix(checkpoint, family, prefix)
    loader.refuse_unused_tensors(checkpoint, family, base, kind_name)
    sizes = loader._sizes(checkpoint, family, base, explicit, kind_name)
    sizes.update({k: v for k, v in explicit.items() if k in loader.LAYER_FLAGS})
    count = loader._layer_count(checkpoint, family, base)
    layers = explicit.get("layers", count)
    if isinstance(layers, int) and layers > count:
        raise UserError(f"{checkpoint.source}: --layers {layers}, but it has {count} layers")
    ids, labels = loader._ids_and_labels(checkpoint, text, token_ids)
    second = (None, None) if text2 is None and token_ids2 is None else \
        loader._ids_and_labels(checkpoint, text2, token_ids2)
    for which, tokens in (("--text", ids), ("--text2", second[0])):
        if tokens is not None and head.max_tokens is not None and \
                len(tokens) > head.max_tokens:
            raise UserError(f"{which} gives {len(tokens)} tokens; the model's "
                            f"max_seq_length is {head.max_tokens} (sentence-transformers "
                            f"would cut it)")
    family = loader._positions_family(checkpoint, family, base)
    word_name = base + family.embeddings["WORD_EMB"][0]
    vocab = checkpoint.dim(word_name, 0) if word_name in checkpoint.shapes else 0
    kind = get_kind(kind_name)
    fields = {f.name for f in dataclasses.fields(kind.Params)}
    params = {k: v for k, v in sizes.items() if k in fields}
    params.update({"seq_len": len(ids), "vocab": vocab, "layers": layers,
                   "pooling": head.pooling, "normalize": head.normalize})
    if second[0] is not None:
        params["seq_len2"] = len(second[0])
    checked = loader._checked_params(
        kind, kind.resolve_tokens({**params, **explicit}, labels + (second[1] or [])), family,
        explicit)
    inputs = _layer_weights(checkpoint, family, base, kind.input_shapes(checked),
                            checked.layers)
    inputs.update(_text_rows(checkpoint, family, base, ids, ""))
    if second[0] is not None:
        inputs.update(_text_rows(checkpoint, family, base, second[0], "_2"))
    inputs["WORD_EMB"] = loader._tensor(checkpoint, word_name, (vocab, checked.d_model))
    ids_text = loader._short(ids) + ("" if second[0] is None else
                                     f" and {loader._short(second[0])}")
    note = (f"weights: {family.name} layers 0 … {checked.layers - 1} of {path.name}; "
            f"{head.note}; token ids {ids_text}{loader._positions_note(family)}")
    return loader.ModelInputs(params, inputs, labels + (second[1] or []), note)


def tokenizer_text(path: Path) -> str:
    """A tokenizer.json given by hand, read within the bound config files have."""
    data = read_bounded(path, MAX_JSON_BYTES, "tokenizer")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _layer_weights(checkpoint: Checkpoint, family, base: str,
                   shapes: dict[str, tuple[int, int]], layers: int) -> dict[str, np.ndarray]:
    """Layer l's weights (checkpoint layer l − 1) by their sheet names, suffixed _Ll."""
    inputs = {}
    for layer in range(1, layers + 1):
        sfx = f"_L{layer}"
        plain = {name.removesuffix(sfx): shape for name, shape in shapes.items()
                 if name.endswith(sfx)}
        weights = loader._layer_inputs(checkpoint, family, base, layer - 1, plain)
        inputs.update({name + sfx: value for name, value in weights.items()})
    return inputs


def _text_rows(checkpoint: Checkpoint, family, base: str, ids: list[int],
               sfx: str) -> dict[str, np.ndarray]:
    """A text's token ids and position rows; token type 0's row and the embedding
    LayerNorm (the same for both texts)."""
    rows = loader._embedding_inputs(checkpoint, family, base, ids)
    made = {"TOKEN_IDS" + sfx: np.array(ids, dtype=float)[:, None],
            "POS_EMB" + sfx: rows["POS_EMB"]}
    if not sfx:
        made.update({"TYPE_EMB": rows["TYPE_EMB"][:1], "EMB_GAMMA": rows["EMB_GAMMA"],
                     "EMB_BETA": rows["EMB_BETA"]})
    return made
