"""A checkpoint's layer as a kind's inputs: sizes from its config, weights by its family's
name table (nn.Linear weights transposed into X·W), tokens from its own tokenizer, and the
hidden states entering the layer from the NumPy reference of the layers before it. A
checkpoint is read exactly or refused: a config value the sheet does not compute is named,
a missing key takes the family's default, a tensor the sheet does not read and that could
change the layer is named."""

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models import llama
from workbook_builder.models.config_values import refuse_contradicted_flags
from workbook_builder.models.families import (
    ACTIVATIONS,
    BERT,
    CONV,
    GPT2,
    KIND_FAMILIES,
    LINEAR,
    MATRIX,
    ROBERTA,
    SIGNATURES,
    TABLE,
    Family,
)
from workbook_builder.models.files import Checkpoint, read_checkpoint
from workbook_builder.models.gpt2 import gpt2_inputs
from workbook_builder.registry import get_kind
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.provenance import CheckpointParams, checked_params

MODELS_EXTRA = "pip install 'attnsheets[models]'"
# flags that shape every layer, so also the layers computed before the one on the sheet
LAYER_FLAGS = ("heads", "d_ff", "ln_eps", "activation", "gelu", "kv_heads", "rms_eps",
               "rope_theta")


# parameters a bare weights file gives by its tensors (sizes, which biases it holds)
SHAPE_DECIDED = ("d_model", "d_ff", "qkv_bias", "o_bias", "mlp_bias")


def said_by(family: Family) -> dict[str, str]:
    """Each of our parameters and the config.json key that gives it."""
    keys = {ours: key for key, ours in family.config.items()}
    if family.activation_key:
        keys.update(dict.fromkeys(("activation", "gelu"), family.activation_key))
    return {**keys, "pre_ln": f"{family.name}'s layer", **dict.fromkeys(
        family.constants, f"{family.name}'s code"), "bias": f"the biases of {family.name}'s "
            f"layers", "seq_len": "the tokens of --text or --token-ids",
            **dict.fromkeys(("qkv_bias", "o_bias", "mlp_bias"), "its bias tensors")}


@dataclass
class ModelInputs:
    """What a checkpoint gives a build: parameters, input blocks, row labels, a line
    saying where X comes from (written on the sheet), and what the checkpoint decides of the
    kind's parameters (`decided`: each fixed value with its source, and those left to the
    user), which every build settles its flags against (sheet/provenance.py)."""

    params: dict[str, Any]
    inputs: dict[str, np.ndarray]
    labels: list[str] | None
    note: str
    decided: CheckpointParams


def model_inputs(kind_name: str, path: str | Path, *, layer: int = 0,
                 prefix: str | None = None, text: str | None = None,
                 token_ids: list[int] | None = None,
                 explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The inputs of `kind_name` for layer `layer` of the checkpoint at `path`. With
    `text` or `token_ids`, X is the real hidden states entering the layer (encoder-block
    at layer 0: the embedding step itself, live on the sheet); without, X is left to the
    seed."""
    if kind_name not in KIND_FAMILIES:
        raise UserError(f"--checkpoint fills {' and '.join(KIND_FAMILIES)}, not {kind_name}")
    check_request(text, token_ids, layer)
    explicit = explicit or {}
    checkpoint = read_checkpoint(Path(path))
    family = _family(checkpoint, KIND_FAMILIES[kind_name])
    base = _prefix(checkpoint, family, prefix)
    refuse_unused_tensors(checkpoint, family, base, kind_name)
    if family is GPT2:  # fused Conv1D weights and whole models: models/gpt2.py
        ids, labels = _ids_and_labels(checkpoint, text, token_ids)
        params, inputs, note, decided = gpt2_inputs(kind_name, checkpoint, base, layer, ids,
                                                    explicit, _tensor)
        return ModelInputs(params, inputs, labels, f"weights: {Path(str(path)).name}; {note}",
                           decided)
    sizes = _sizes(checkpoint, family, base, explicit, kind_name)
    if family.name in ("LLaMA", "Qwen2"):
        sizes.update(llama.config_sizes(checkpoint.config or {}, checkpoint.source))
        sizes.update(llama.bias_switches(checkpoint, family, base))
        if checkpoint.config is None:  # a config without the key: LlamaConfig's default
            sizes.update(llama.shape_sizes(checkpoint, base, {**sizes, **explicit}))
    # what the checkpoint says cannot be changed by hand; what a bare weights file leaves
    # to its family's defaults can, in the layers before this one too
    decided = dict(sizes) if checkpoint.config is not None else \
        {k: v for k, v in sizes.items() if k in SHAPE_DECIDED or k in family.constants}
    ids, labels = _ids_and_labels(checkpoint, text, token_ids)
    kind = get_kind(kind_name)
    fields = {f.name for f in dataclasses.fields(kind.Params)}
    decided["pre_ln"] = not family.post_ln
    if "bias" in fields:  # the family's layers hold their biases: the sheet reads them
        decided["bias"] = True
    if ids is not None:
        decided["seq_len"] = len(ids)
    fixed = refuse_contradicted_flags(checkpoint, {k: v for k, v in decided.items()
                                                   if k in fields}, explicit, said_by(family))
    # a bare weights file leaves the sizes its config would give to the flags (and the
    # family's defaults)
    configurable = {*family.config.values(), *(("activation", "gelu")
                                               if family.activation_key else ())}
    free = {"embeddings", *(() if ids is not None else ("seq_len",)),
            *(k for k in configurable if k not in fixed and checkpoint.config is None)}
    sizes.update({k: v for k, v in explicit.items() if k in LAYER_FLAGS})
    _existing_layer(checkpoint, family, base, layer)
    params = {k: v for k, v in sizes.items() if k in fields}
    if "bias" in fields:
        params["bias"] = True
    if explicit.get("embeddings") and ids is not None and layer > 0:
        raise UserError(f"--embeddings puts the embedding step, layer 0's input, on the "
                        f"sheet; at --layer {layer} X is the hidden states entering layer "
                        f"{layer}")
    embedding_step = ids is not None and layer == 0 and explicit.get("embeddings", True) \
        and "embeddings" in fields
    if "embeddings" in fields:
        params["embeddings"] = embedding_step
    if ids is not None:
        params["seq_len"] = len(ids)
        family = _positions_family(checkpoint, family, base)
    checked = checked_params(kind, {**params, **explicit}, fixed, explicit)
    inputs = _layer_inputs(checkpoint, family, base, layer, kind.input_shapes(checked))
    where = f"{family.name} layer {layer} of {Path(str(path)).name}"
    decided_params = CheckpointParams(fixed, frozenset(free), family.name)
    if ids is None:
        return ModelInputs(params, inputs, None, f"weights: {where}; X drawn from --seed",
                           decided_params)
    embedded = _embedding_inputs(checkpoint, family, base, ids)
    if embedding_step:
        inputs.update(embedded)
        return ModelInputs(params, inputs, labels, f"weights: {where}; X is the embedding "
                           f"step of the token ids {_short(ids)}{_positions_note(family)}",
                           decided_params)
    inputs["X"] = _hidden_states(checkpoint, family, base, sizes, embedded, layer)
    before = "the embedding step" + ("" if layer == 0 else " and layer 0" if layer == 1
                                     else f" and layers 0 … {layer - 1}")
    return ModelInputs(params, inputs, labels,
                       f"weights: {where}; X: the hidden states entering layer {layer}, "
                       f"computed by the NumPy reference of {before} (numbers, not "
                       f"formulas), token ids {_short(ids)}{_positions_note(family)}",
                       decided_params)


def _positions_note(family: Family) -> str:
    if family.positions == "after_padding":
        return " (RoBERTa positions: padding_idx + 1 on)"
    if "TYPE_EMB" not in family.embeddings:
        return f" ({family.name} has no token types: TYPE_EMB rows are zeros)"
    return ""


def refuse_unused_tensors(checkpoint: Checkpoint, family: Family, base: str,
                          kind_name: str) -> None:
    """Every tensor is one the sheet reads (at any layer), one that cannot change a layer
    (the family's `harmless` list, the task heads beside the model), or refused by name: a
    tensor left out would make the sheet silently differ from the model."""
    templates = [t for t, _ in (*family.layer.values(), *family.embeddings.values())]
    templates += list(family.harmless)
    known = re.compile("|".join(re.escape(base + t).replace(re.escape("{layer}"), r"\d+")
                                for t in templates))
    for name in sorted(checkpoint.shapes):
        if known.fullmatch(name):
            continue
        inner = name[len(base):] if name.startswith(base) else name
        if (base == "" or not name.startswith(base)) and inner.startswith(family.heads):
            continue
        raise UserError(f"{checkpoint.source}: tensor {name} is not read by the {kind_name} "
                        f"sheet and would change the {family.name} layer it computes; refused")


def config_values(checkpoint: Checkpoint, family: Family, kind_name: str) -> dict[str, Any]:
    """config.json's values of the keys the family's layer depends on, a missing key at the
    family's default (a bare weights file: every default); a value the sheet does not
    compute is refused, naming the key."""
    config = checkpoint.config or {}
    where = f"{checkpoint.source}: config.json" if checkpoint.config is not None else \
        f"{checkpoint.source} (no config.json: {family.name}'s default)"
    for key, values in family.fixed.items():
        value = config.get(key, family.defaults.get(key, values[0]))
        if value not in values:
            raise UserError(f"{where} sets {key} to {json.dumps(value)}; the {kind_name} "
                            f"sheet computes {family.name} with {key} "
                            f"{' or '.join(json.dumps(v) for v in values)}")
    values = {key: config.get(key, family.defaults.get(key)) for key in family.config}
    if checkpoint.config is None:  # the sizes come from the shapes, the heads from --heads
        values = {key: family.defaults[key] for key in family.config
                  if key in family.defaults and family.config[key] not in ("heads",)}
    values = {key: value for key, value in values.items() if value is not None}
    if family.activation_key:
        act = config.get(family.activation_key, family.defaults[family.activation_key])
        if act not in ACTIVATIONS:
            raise UserError(f"{where} sets {family.activation_key} to {json.dumps(act)}; the "
                            f"{kind_name} sheet computes {', '.join(ACTIVATIONS)}")
        values[family.activation_key] = act
    return values


def _positions_family(checkpoint: Checkpoint, family: Family, base: str) -> Family:
    """BERT's names hold BERT or RoBERTa, whose positions differ (0, 1, … against
    padding_idx + 1, …). Without a config.json: RoBERTa when its names or its zero
    position row (the padding row, which never trains) say so, else BERT."""
    if family is not BERT or checkpoint.config is not None:
        return family
    names = checkpoint.shapes
    table = base + BERT.embeddings["POS_EMB"][0]
    zero_rows = []
    if table in names and len(names[table]) == 2:
        zero_rows = np.flatnonzero(~checkpoint.tensor(table).any(axis=1)).tolist()
    types = names.get(base + BERT.embeddings["TYPE_EMB"][0], (2,))
    signs = [sign for sign, seen in (
        (f"its names under {base!r}", base.startswith(("roberta", "xlm"))),
        ("a RobertaLMHead (lm_head.dense)", "lm_head.dense.weight" in names),
        ("one token type", types[0] == 1),
        (f"position row {zero_rows[0] if zero_rows else ''} all zeros", bool(zero_rows)))
        if seen]
    if not signs:
        return family
    pad = ROBERTA.defaults["pad_token_id"]
    if zero_rows == [pad]:
        return ROBERTA
    raise UserError(f"{checkpoint.source}: no config.json to tell BERT's positions (0, 1, …) "
                    f"from RoBERTa's (padding_idx + 1, …), and it looks like RoBERTa "
                    f"({', '.join(signs)}); give the model folder with its config.json")


def _existing_layer(checkpoint: Checkpoint, family: Family, base: str, layer: int) -> None:
    """Refuses a `layer` the checkpoint does not have."""
    layers = _layer_count(checkpoint, family, base)
    if layer >= layers:
        raise UserError(f"{checkpoint.source}: no layer {layer} (it has layers 0 … "
                        f"{layers - 1})")


def _ids_and_labels(checkpoint: Checkpoint, text: str | None,
                    token_ids: list[int] | None) -> tuple[list[int] | None, list[str] | None]:
    """The token ids and their labels, from --text or --token-ids (None, None: neither).
    The ids are checked against the checkpoint's vocabulary before a tokenizer or a table
    sees them; they come back as TokenIds, carrying the flag that gave them (--text2 and
    --token-ids2 arrive as GivenText and TokenIds saying so) for every message about them."""
    if text is not None:
        ids, labels = _tokenize(checkpoint, text)
        ids = TokenIds(ids, typed_flag(text, "--text"))
        check_vocabulary(checkpoint, ids)
        return ids, labels
    if token_ids is not None:
        ids = TokenIds(token_ids, typed_flag(token_ids, "--token-ids"))
        check_vocabulary(checkpoint, ids)
        return ids, _labels_of(checkpoint, ids)
    return None, None


def check_request(text: str | None, token_ids: list[int] | None, layer: int) -> None:
    """What every family's reader refuses before opening the checkpoint."""
    if text is not None and token_ids is not None:
        raise UserError("give --text or --token-ids, not both")
    if layer < 0:
        raise UserError(f"--layer must be 0 or more, got {layer}")


def _short(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def _family(checkpoint: Checkpoint, families: tuple[Family, ...]) -> Family:
    """The family whose table fits; a config naming another model type, or tensors that
    belong to another family, are one line."""
    names = " or ".join(f.name for f in families).replace(" or ", ", ", len(families) - 2)
    model_type = (checkpoint.config or {}).get("model_type")
    for family in families:
        if model_type is None or model_type in family.model_types:
            if any(name.endswith(family.anchor) for name in checkpoint.shapes):
                return family
    if model_type is not None and not any(model_type in f.model_types for f in families):
        raise UserError(f"{checkpoint.source}: config.json says model_type {model_type!r}; "
                        f"this kind reads {names} checkpoints")
    other = next((family for family, name in SIGNATURES.items()
                  if any(n.endswith(name) for n in checkpoint.shapes)), None)
    looks = f" (it looks like {other})" if other else ""
    raise UserError(f"{checkpoint.source}: no tensor named …{families[0].anchor}: not a "
                    f"{names} checkpoint{looks}")


def _prefix(checkpoint: Checkpoint, family: Family, prefix: str | None) -> str:
    """The part before the family's names ("", "bert.", …): --prefix, or the one place the
    anchor tensor is found."""
    if prefix is not None:
        base = prefix if prefix == "" or prefix.endswith(".") else prefix + "."
        if base + family.anchor not in checkpoint.shapes:
            raise UserError(f"{checkpoint.source}: no tensor {base + family.anchor} "
                            f"(--prefix {prefix!r})")
        return base
    found = sorted(name[:-len(family.anchor)] for name in checkpoint.shapes
                   if name.endswith(family.anchor))
    if len(found) > 1:
        raise UserError(f"{checkpoint.source}: {family.name} weights under several prefixes "
                        f"({', '.join(repr(f) for f in found)}); pick one with --prefix")
    return found[0]


def _sizes(checkpoint: Checkpoint, family: Family, base: str,
           explicit: dict[str, Any], kind_name: str) -> dict[str, Any]:
    """Sizes from config.json (missing keys at the family's defaults); a bare weights file
    gives d_model and d_ff by its shapes and needs --heads."""
    values = config_values(checkpoint, family, kind_name)
    sizes = {ours: values[key] for key, ours in family.config.items() if key in values}
    sizes.update(family.constants)
    if family.activation_key:
        sizes["activation"], sizes["gelu"] = ACTIVATIONS[values[family.activation_key]]
    if family.config and "d_model" not in sizes:
        sizes["d_model"] = checkpoint.dim(base + family.anchor, 1)
    w_1 = family.layer.get("W_1") or family.layer.get("W_GATE")
    if w_1 and "d_ff" not in sizes:
        name = base + w_1[0].format(layer=0)
        if name in checkpoint.shapes:
            sizes["d_ff"] = checkpoint.dim(name, 0)
    if "heads" not in sizes and "heads" not in explicit:
        raise UserError(f"{checkpoint.source}: no config.json gives the number of heads; "
                        f"pass --heads")
    # the checkpoint's heads first: a --heads against them is refused by name afterwards
    heads, d_model = sizes.get("heads", explicit.get("heads")), sizes["d_model"]
    if isinstance(heads, int) and heads > 0 and d_model % heads:
        said = "--heads" if "heads" not in sizes else \
            next(k for k, ours in family.config.items() if ours == "heads")
        width = next(k for k, ours in family.config.items() if ours == "d_model")
        raise UserError(f"{checkpoint.source}: {said} {heads} does not divide the model's "
                        f"width {width} = {d_model}")
    return sizes


def _layer_count(checkpoint: Checkpoint, family: Family, base: str) -> int:
    config = checkpoint.config or {}
    if family.layers_key in config:
        return int(config[family.layers_key])
    anchor = base + family.anchor
    count = 0
    while anchor.replace(".0.", f".{count}.", 1) in checkpoint.shapes:
        count += 1
    return count


def _tensor(checkpoint: Checkpoint, name: str, expected: tuple[int, ...]) -> np.ndarray:
    """A tensor of the shape the sheet needs, or one line naming it and that shape."""
    if name not in checkpoint.shapes:
        raise UserError(f"{checkpoint.source}: no tensor {name} (expected shape "
                        f"{_shape(expected)})")
    got = tuple(checkpoint.shapes[name])
    if got != expected:
        raise UserError(f"{checkpoint.source}: tensor {name} has shape {_shape(got)}, "
                        f"expected {_shape(expected)}")
    return checkpoint.tensor(name)


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape)) if shape else "a scalar"


def _layer_inputs(checkpoint: Checkpoint, family: Family, base: str, layer: int,
                  shapes: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """Every input of the sheet the family's layer table fills, in X·W orientation."""
    inputs = {}
    for ours, (theirs, how) in family.layer.items():
        if ours not in shapes:
            continue
        rows, cols = shapes[ours]
        name = base + theirs.format(layer=layer)
        if how == LINEAR:  # nn.Linear stores out×in; the sheets multiply X·W, W in×out
            inputs[ours] = _tensor(checkpoint, name, (cols, rows)).T
        elif how == MATRIX:
            inputs[ours] = _tensor(checkpoint, name, (rows, cols))
        elif how == CONV:  # channels×1×k -> k×channels
            inputs[ours] = _tensor(checkpoint, name, (cols, 1, rows))[:, 0, :].T
        else:
            inputs[ours] = _tensor(checkpoint, name, (cols,))[None, :]
    return inputs


def _embedding_inputs(checkpoint: Checkpoint, family: Family, base: str,
                      ids: list[int]) -> dict[str, np.ndarray]:
    """The rows looked up for each token: word row by id, position row by place, the
    token-type row of segment 0; and the embedding LayerNorm's γ and β."""
    word_name, _ = family.embeddings["WORD_EMB"]
    word_shape = checkpoint.shapes.get(base + word_name)
    if word_shape is None or len(word_shape) != 2:
        raise UserError(f"{checkpoint.source}: no tensor {base + word_name} "
                        f"(vocabulary×d_model): the embedding step needs it")
    vocab, d = word_shape
    flag = typed_flag(ids, "--token-ids")
    _refuse_outside(ids, vocab, base + word_name, checkpoint)
    lookups = {"WORD_EMB": ids, "POS_EMB": _positions(checkpoint, family, ids),
               "TYPE_EMB": [0] * len(ids)}
    inputs = {}
    for ours, (theirs, how) in family.embeddings.items():
        name = base + theirs
        if how == TABLE:
            shape = checkpoint.shapes.get(name)
            if shape is None or len(shape) != 2 or shape[1] != d:
                raise UserError(f"{checkpoint.source}: no tensor {name} (rows×{d})")
            rows = lookups[ours]
            if max(rows) >= shape[0]:
                raise UserError(f"{flag} gives {len(ids)} tokens, which need "
                                f"{max(rows) + 1} rows of {name}; it has {shape[0]} (in "
                                f"{checkpoint.source})")
            inputs[ours] = checkpoint.rows(name, list(rows))
        else:
            inputs[ours] = _tensor(checkpoint, name, (d,))[None, :]
    if "TYPE_EMB" not in family.embeddings:  # DistilBERT: no token types, added as zeros
        inputs["TYPE_EMB"] = np.zeros((len(ids), d))
    return inputs


def _positions(checkpoint: Checkpoint, family: Family, ids: list[int]) -> list[int]:
    """The position row of each token: p, or RoBERTa's padding_idx + (number of
    non-padding tokens up to p) (a padding token: padding_idx), as transformers'
    create_position_ids_from_input_ids."""
    if family.positions == "index":
        return list(range(len(ids)))
    config = checkpoint.config or {}
    pad = config.get("pad_token_id", family.defaults["pad_token_id"])
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        # a negative one would read the position table's rows from its end
        raise UserError(f"{checkpoint.source}: config.json sets pad_token_id to "
                        f"{json.dumps(pad)}; {family.name}'s positions start after it, a "
                        f"row of the position table (0 or more)")
    count, positions = 0, []
    for i in ids:
        count += i != pad
        positions.append(pad + count if i != pad else pad)
    return positions


def _hidden_states(checkpoint: Checkpoint, family: Family, base: str, sizes: dict,
                   embedded: dict[str, np.ndarray], layer: int) -> np.ndarray:
    """The embedding step, then layers 0 … layer−1, each by encoder-block's NumPy
    reference: the hidden states entering `layer`."""
    if family.name in ("LLaMA", "Qwen2"):  # no embedding step of its own: the rows
        kind = get_kind("llama-block")
        fields = {f.name for f in dataclasses.fields(kind.Params)}
        values = {k: v for k, v in sizes.items() if k in fields}

        def params(n: int):
            return make_params(kind, {**values, "seq_len": n})

        return llama.hidden_states(
            kind.reference, params, lambda k: _layer_inputs(
                checkpoint, family, base, k, kind.input_shapes(params(1))),
            embedded["WORD_EMB"], layer)
    encoder = get_kind("encoder-block")
    n = len(embedded["WORD_EMB"])
    fields = {f.name for f in dataclasses.fields(encoder.Params)}
    values = {k: v for k, v in sizes.items() if k in fields}
    params = make_params(encoder, {**values, "seq_len": n, "embeddings": True,
                                   "pre_ln": not family.post_ln})
    shapes = encoder.input_shapes(params)
    first = _layer_inputs(checkpoint, family, base, 0, shapes)
    x = encoder.reference({**first, **embedded}, params)["X"]
    plain = dataclasses.replace(params, embeddings=False)
    for k in range(layer):
        weights = _layer_inputs(checkpoint, family, base, k, shapes)
        x = encoder.reference({**weights, "X": x}, plain)["OUTPUT"]
    return x


def _tokenizer(checkpoint: Checkpoint):
    if checkpoint.tokenizer_problem is not None:
        raise UserError(f"{checkpoint.tokenizer_problem}; give --token-ids instead of --text")
    if checkpoint.tokenizer_json is None:
        raise UserError(f"{checkpoint.source}: no tokenizer.json beside the weights; give "
                        f"--token-ids instead of --text")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError(f"--text needs the tokenizers package ({MODELS_EXTRA})") from None
    try:
        tokenizer = Tokenizer.from_str(checkpoint.tokenizer_json)
    except Exception as exc:  # the Rust side raises its own exception type
        raise UserError(f"{checkpoint.source}: tokenizer.json is not readable ({exc})") \
            from None
    tokenizer.no_padding()  # a saved tokenizer may pad every text to a fixed length
    tokenizer.no_truncation()  # …or cut it: a text too long for the model is refused instead
    return tokenizer


def _tokenize(checkpoint: Checkpoint, text: str) -> tuple[list[int], list[str]]:
    """The checkpoint's tokenizer's ids and tokens of --text (or --text2: `typed_flag`)."""
    flag = typed_flag(text, "--text")
    if not text.strip():
        raise UserError(f"{flag} is empty")
    try:
        tokenizer = _tokenizer(checkpoint)
    except UserError as exc:  # said of --text and --token-ids: of the second text's flags
        raise UserError(re.sub(r"--(text|token-ids)\b", r"--\g<1>" + flag[len("--text"):],
                               str(exc))) from None
    try:
        encoding = tokenizer.encode(text)
    except Exception as exc:  # the Rust side raises its own exception type
        raise UserError(f"{checkpoint.source}: its tokenizer.json cannot encode {flag} "
                        f"({' '.join(str(exc).split()) or type(exc).__name__})") from None
    if not encoding.ids:
        raise UserError(f"{flag} {str(text)!r} gives no tokens with this checkpoint's "
                        f"tokenizer")
    return list(encoding.ids), list(encoding.tokens)


def _labels_of(checkpoint: Checkpoint, ids: list[int]) -> list[str]:
    """Each id's token from the checkpoint's tokenizer, else "#id" (also for an id the
    tokenizer cannot be asked about: outside 0 … 2³² − 1, when no table bounds them)."""
    if checkpoint.tokenizer_json is None:
        return [f"#{i}" for i in ids]
    try:
        tokenizer = _tokenizer(checkpoint)
    except UserError:  # labels only: ids alone still build
        return [f"#{i}" for i in ids]
    return [(0 <= i < TOKENIZER_IDS and tokenizer.id_to_token(i)) or f"#{i}" for i in ids]


# the tokenizers package takes ids as unsigned 32-bit numbers (a larger one raises)
TOKENIZER_IDS = 2**32
# the last part but one of a word-embedding table's name, in the families read:
# BERT, DistilBERT word_embeddings; LLaMA, Qwen2 embed_tokens; GPT-2 wte; BART, Marian
# shared; Mamba embeddings (older: embedding)
WORD_TABLES = ("word_embeddings", "embed_tokens", "wte", "shared", "embeddings", "embedding")


class TokenIds(list):
    """Token ids with the flag the user gave them by (--text, --token-ids, --text2,
    --token-ids2), which messages about them name."""

    def __init__(self, ids=(), flag: str = "--token-ids"):
        super().__init__(ids)
        self.flag = flag


class GivenText(str):
    """A text with the flag the user gave it by (--text2), which messages about it name."""

    flag: str

    def __new__(cls, text: str, flag: str):
        given = super().__new__(cls, text)
        given.flag = flag
        return given


def typed_flag(value: Any, default: str) -> str:
    """The flag that gave `value` (a TokenIds or GivenText), else `default`."""
    return getattr(value, "flag", default)


def check_vocabulary(checkpoint: Checkpoint, ids: list[int]) -> None:
    """Refuse, naming the flag that gave them, ids outside the checkpoint's vocabulary:
    the rows of its word-embedding table (of the largest, if it holds several)."""
    flag = typed_flag(ids, "--token-ids")
    tables = [(shape[0], name) for name, shape in checkpoint.shapes.items()
              if len(shape) == 2 and name.endswith(".weight")
              and name.split(".")[-2] in WORD_TABLES]
    negative = next((i for i in ids if i < 0), None)
    if not tables:  # refused later for want of a table; the tokenizer must not see these
        if negative is not None:
            raise UserError(f"{flag}: token id {negative} is negative; token ids are 0 or "
                            f"more")
        return
    _refuse_outside(ids, *max(tables), checkpoint)


def _refuse_outside(ids: list[int], vocab: int, table: str, checkpoint: Checkpoint) -> None:
    """One line, naming the flag that gave them, for ids outside the `vocab` rows of the
    word-embedding tensor `table`."""
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        raise UserError(f"{typed_flag(ids, '--token-ids')}: token id {bad} is outside the "
                        f"vocabulary, 0 … {vocab - 1} (the {vocab:,} rows of tensor {table} "
                        f"in {checkpoint.source})")


def parse_token_ids(text: str | None, flag: str = "--token-ids") -> TokenIds | None:
    """"101,1996,102" -> [101, 1996, 102], carrying `flag` (the one the user typed)."""
    if text is None:
        return None
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"{flag} must be whole numbers separated by commas, got "
                        f"{text!r}") from None
    if not ids:
        raise UserError(f"{flag} is empty")
    return TokenIds(ids, flag)
