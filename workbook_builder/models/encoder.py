"""A whole BERT-family encoder and its sentence-transformers head as the `encoder` kind's
inputs: every layer by the family's name table (models/families.py, as `encoder-block`
reads one), the whole word-embedding table, the position and token-type rows of each text,
and the head `modules.json` declares (Transformer → Pooling → Normalize;
`1_Pooling/config.json` says mean, CLS or max). A folder without `modules.json` is a plain
model: its answer is the last hidden state. The sentence-transformers settings are read and
judged key by key in sentence_settings.py: a text is tokenized as `encode` tokenizes it (the
default prompt before it, lowercased first under do_lower_case), a longer one than encode
keeps is refused, and anything else a folder declares that the sheet does not compute is
refused naming it."""

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models import loader
from workbook_builder.models.config_values import layers_part, refuse_contradicted_flags
from workbook_builder.models.families import ENCODERS
from workbook_builder.models.files import Checkpoint, read_checkpoint, tokenizer_text
from workbook_builder.models.onnx_graph import NOT_IN_GRAPH, onnx_checkpoint
from workbook_builder.models.sentence_settings import lowercasing_first, read_pipeline
from workbook_builder.registry import get_kind
from workbook_builder.sheet.provenance import CheckpointParams, checked_params


@dataclasses.dataclass(frozen=True)
class Head:
    """What follows the transformer in a sentence-transformers folder, and what encode does
    to a text before it (sentence_settings.py reads and judges every setting)."""

    pooling: str            # mean | cls | max | none (no modules.json: the hidden state)
    normalize: bool
    max_tokens: int | None  # the length encode cuts a text at: a longer one is refused
    note: str
    limit_said: str = ""    # where max_tokens comes from, for that refusal
    lower_case: bool = False  # do_lower_case: the tokenizer lowercases first
    prompt: str = ""        # the default prompt encode puts before every text
    prompt_said: str = ""
    similarity: str = "cosine"  # similarity_fn_name
    source: str = ""        # the folder, for messages

    def ids_and_labels(self, checkpoint: Checkpoint, which: str, text: str | None,
                       token_ids: list[int] | None) -> tuple[list[int], list[str]]:
        """A text's token ids and labels as encode makes them: the default prompt before
        --text/--text2, lowercased first under do_lower_case; typed ids stay as typed.
        `which` is the flag, "--text" or "--text2"."""
        if which == "--text2":
            self._second_text_check("--text2" if text is not None else "--token-ids2")
        if text is not None and text.strip() and (self.prompt or self.lower_case):
            text = loader.GivenText(self.prompt + text, loader.typed_flag(text, which))
            if self.lower_case:
                checkpoint = dataclasses.replace(
                    checkpoint, tokenizer_json=lowercasing_first(checkpoint.tokenizer_json))
        ids, labels = loader._ids_and_labels(checkpoint, text, token_ids)
        if self.max_tokens is not None and len(ids) > self.max_tokens:
            prompt = f" (with {self.prompt_said})" if text is not None and self.prompt else ""
            typed = which if text is not None else which.replace("--text", "--token-ids")
            raise UserError(f"{typed} gives {len(ids)} tokens{prompt}; {self.limit_said} "
                            f"(sentence-transformers would cut it)")
        return ids, labels

    def _second_text_check(self, flag: str) -> None:
        """A second text is compared by SIMILARITY, the cosine of two pooled embeddings."""
        if self.pooling == "none":
            raise UserError(f"{flag} needs a pooled embedding to compare, and {self.source} "
                            f"has no sentence-transformers Pooling module (no modules.json): "
                            f"its answer is the last hidden state; give one text")
        if self.similarity == "cosine" or (self.similarity == "dot" and self.normalize):
            return  # for unit vectors the dot product is the cosine
        raise UserError(f"{flag}: {self.source}'s config_sentence_transformers.json sets "
                        f"similarity_fn_name to {self.similarity!r}; the sheet's SIMILARITY "
                        f"is the cosine of the two embeddings (leave out {flag})")


def sentence_head(path: Path) -> Head:
    """The head modules.json declares, or none for a plain model folder."""
    pipeline = read_pipeline(path)
    if pipeline is None:
        return Head("none", False, None, "no modules.json: the answer is the last hidden "
                                         "state", source=str(path))
    note = f"head: {pipeline.pooling} pooling" + (", Normalize" if pipeline.normalize else "")
    if pipeline.lower_case:
        note += "; text lowercased (do_lower_case)"
    if pipeline.prompt:
        note += f"; {pipeline.prompt_said} before each text"
    return Head(pipeline.pooling, pipeline.normalize, pipeline.max_tokens, note,
                pipeline.limit_said, pipeline.lower_case, pipeline.prompt,
                pipeline.prompt_said, pipeline.similarity, str(path))


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
    # what the folder is comes first: a folder that is no model says so with or without text
    if text is None and token_ids is None:
        raise UserError("the encoder sheet starts from token ids: give --text or --token-ids")
    sizes = loader._sizes(checkpoint, family, base, explicit, kind_name)
    count = loader._layer_count(checkpoint, family, base)
    ids, labels = head.ids_and_labels(checkpoint, "--text", text, token_ids)
    second = (None, None) if text2 is None and token_ids2 is None else \
        head.ids_and_labels(checkpoint, "--text2", text2, token_ids2)
    family = loader._positions_family(checkpoint, family, base)
    word_name = base + family.embeddings["WORD_EMB"][0]
    vocab = checkpoint.dim(word_name, 0) if word_name in checkpoint.shapes else 0
    kind = get_kind(kind_name)
    fields = {f.name for f in dataclasses.fields(kind.Params)}
    decided = _decided(checkpoint, family, head, sizes, fields, count, vocab, ids, second[0],
                       explicit)
    params = {**decided.values(), **{k: v for k, v in explicit.items()
                                     if k in decided.free or k == "layers"}}
    checked = checked_params(
        kind, kind.resolve_tokens({**params, **explicit}, labels + (second[1] or [])),
        decided.fixed, explicit)
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
    return loader.ModelInputs(params, inputs, labels + (second[1] or []), note, decided)


def _decided(checkpoint: Checkpoint, family, head: Head, sizes: dict[str, Any],
             fields: set[str], count: int, vocab: int, ids: list[int],
             ids2: list[int] | None, explicit: dict[str, Any]) -> CheckpointParams:
    """What the checkpoint fixes of the encoder sheet, each with its source (its config,
    its head, its tensors, the tokens), a flag against one refused; a bare weights file
    leaves the layers' sizes its config would give to the flags."""
    config = checkpoint.config is not None
    folder = head.source
    if head.pooling == "none":
        pooling_said = normalize_said = f"{folder}: no modules.json (the answer is the last " \
                                        f"hidden state)"
    else:
        pooling_said = f"{folder}'s Pooling module"
        normalize_said = f"{folder}/modules.json " + ("(a Normalize module)" if head.normalize
                                                      else "(no Normalize module)")
    # what an ONNX graph cannot tell (its heads, with dynamic reshapes) is the flag's
    untold = {family.config.get(key) for key in
              (checkpoint.config or {}).get(NOT_IN_GRAPH, ())}
    decided = {k: v for k, v in sizes.items() if k in fields and k not in untold and
               (config or k in loader.SHAPE_DECIDED or k in family.constants)}
    decided.update({"vocab": vocab, "layers": count, "pooling": head.pooling,
                    "normalize": head.normalize, "seq_len": len(ids), "pre_ln": False})
    said = {**loader.said_by(family), "vocab": "the shape of its word embedding table",
            "layers": layers_part(checkpoint, family.layers_key), "pooling": pooling_said,
            "normalize": normalize_said}
    if ids2 is not None:
        decided["seq_len2"] = len(ids2)
        said["seq_len2"] = "the tokens of --text2 or --token-ids2"
    decided = {k: v for k, v in decided.items() if k in fields}
    fixed = refuse_contradicted_flags(checkpoint, decided, explicit, said)
    configurable = {*family.config.values(), "activation", "gelu"}
    free = {"focus", *(k for k in configurable if k not in fixed and k in fields and
                       (not config or k in untold))}
    return CheckpointParams(fixed, frozenset(free), family.name)


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
