"""The PyTorch translation tutorial's trained model as the inputs of the `seq2seq` sheet: the
state dicts of its `EncoderRNN` and `AttnDecoderRNN` in one file, keys under `encoder.` and
`decoder.` (e.g. `torch.save({**{f"encoder.{k}": v for k, v in encoder.state_dict().items()},
**{f"decoder.{k}": v …}}, "model.pt")`, read with weights_only). Sizes come from the
tensors' shapes; nn.Linear and nn.GRU weights are transposed into the sheet's X·W
orientation, the GRU's gates kept in its order r | z | n. An encoder GRU saved with
bidirectional=True (its `…_l0_reverse` tensors) makes a `--bidirectional` sheet. Exact or
refused: every tensor is read or named, a shape the model cannot have is named with the
shape expected."""

from pathlib import Path
from typing import Any

import numpy as np

from workbook_builder.errors import UserError
from workbook_builder.models.config_values import refuse_contradicted_flags
from workbook_builder.models.files import Checkpoint, read_checkpoint
from workbook_builder.models.loader import ModelInputs, _short, check_request
from workbook_builder.sheet.provenance import CheckpointParams

# sheet input -> (tensor under the prefix, how it is stored): "table" as it is (one row per
# id), "linear" an out×in weight transposed, "row" a bias vector as one row
TENSORS = {
    "ENC_EMBEDDING": ("encoder.embedding.weight", "table"),
    "ENC_W_I": ("encoder.gru.weight_ih_l0", "linear"),
    "ENC_B_I": ("encoder.gru.bias_ih_l0", "row"),
    "ENC_W_H": ("encoder.gru.weight_hh_l0", "linear"),
    "ENC_B_H": ("encoder.gru.bias_hh_l0", "row"),
    "DEC_EMBEDDING": ("decoder.embedding.weight", "table"),
    "W_A": ("decoder.attention.Wa.weight", "linear"),
    "B_W": ("decoder.attention.Wa.bias", "row"),
    "U_A": ("decoder.attention.Ua.weight", "linear"),
    "B_U": ("decoder.attention.Ua.bias", "row"),
    "V_A": ("decoder.attention.Va.weight", "linear"),
    "B_V": ("decoder.attention.Va.bias", "row"),
    "DEC_W_I": ("decoder.gru.weight_ih_l0", "linear"),
    "DEC_B_I": ("decoder.gru.bias_ih_l0", "row"),
    "DEC_W_H": ("decoder.gru.weight_hh_l0", "linear"),
    "DEC_B_H": ("decoder.gru.bias_hh_l0", "row"),
    "OUT_W": ("decoder.out.weight", "linear"),
    "OUT_B": ("decoder.out.bias", "row"),
}
# a bidirectional encoder's backward GRU (nn.GRU's `…_l0_reverse`), read when it is there
REVERSE = {
    "ENC_W_I_REV": ("encoder.gru.weight_ih_l0_reverse", "linear"),
    "ENC_B_I_REV": ("encoder.gru.bias_ih_l0_reverse", "row"),
    "ENC_W_H_REV": ("encoder.gru.weight_hh_l0_reverse", "linear"),
    "ENC_B_H_REV": ("encoder.gru.bias_hh_l0_reverse", "row"),
}
# what a tensor the tutorial's modules do not have says about the model saved
UNREAD = (("_reverse", "a bidirectional GRU (the sheet has one in the encoder only)"),
          ("_l1", "a GRU of more than one layer"))


def seq2seq_inputs(kind_name: str, path: str | Path, *, layer: int = 0,
                   prefix: str | None = None, text: str | None = None,
                   token_ids: list[int] | None = None,
                   explicit: dict[str, Any] | None = None) -> ModelInputs:
    """The seq2seq sheet's weights from the checkpoint at `path`; with `token_ids`, the
    source sentence SRC_IDS (the tutorial's Lang has no tokenizer file, so no --text)."""
    check_request(text, token_ids, layer)
    if text is not None:
        raise UserError("the tutorial's vocabularies (its Lang objects) are not in a state "
                        "dict: give the source sentence as --token-ids")
    if layer != 0:
        raise UserError(f"--layer picks a Transformer layer; the tutorial's encoder and "
                        f"decoder are one GRU layer each, got --layer {layer}")
    explicit = explicit or {}
    checkpoint = read_checkpoint(Path(path))
    base = prefix or ""
    bidirectional = any(base + tensor in checkpoint.shapes for tensor, _ in REVERSE.values())
    tensors = {**TENSORS, **(REVERSE if bidirectional else {})}
    _refuse_unread(checkpoint, base, tensors)
    sizes = _sizes(checkpoint, base)
    shown = {**sizes, "bidirectional": bidirectional, "no_attention": False}
    if token_ids is not None:
        shown["src_len"] = len(token_ids)
    fixed = refuse_contradicted_flags(checkpoint, shown, explicit, {
        **dict.fromkeys(sizes, "the shapes of its tensors"),
        "bidirectional": f"its encoder GRU's tensors ({base}"
                         f"{REVERSE['ENC_W_I_REV'][0]} {'present' if bidirectional else 'absent'})",
        "no_attention": "its decoder's attention tensors",
        "src_len": "the tokens of --token-ids"})
    # the tutorial's SOS and EOS ids live in its Lang objects, not in the state dict; the
    # steps decoded and teacher forcing are how the sheet runs the model
    decided = CheckpointParams(fixed, frozenset({"decode", "sos", "eos", "teacher_forcing",
                                                 *(() if token_ids else ("src_len",))}),
                               "the tutorial's EncoderRNN and AttnDecoderRNN")
    h, vocab = sizes["hidden"], sizes["tgt_vocab"]
    shapes = {"ENC_EMBEDDING": (sizes["src_vocab"], h), "ENC_W_I": (h, 3 * h),
              "ENC_B_I": (1, 3 * h), "ENC_W_H": (h, 3 * h), "ENC_B_H": (1, 3 * h),
              "DEC_EMBEDDING": (vocab, h), "W_A": (h, h), "B_W": (1, h), "U_A": (h, h),
              "B_U": (1, h), "V_A": (h, 1), "B_V": (1, 1), "DEC_W_I": (2 * h, 3 * h),
              "DEC_B_I": (1, 3 * h), "DEC_W_H": (h, 3 * h), "DEC_B_H": (1, 3 * h),
              "OUT_W": (h, vocab), "OUT_B": (1, vocab), "ENC_W_I_REV": (h, 3 * h),
              "ENC_B_I_REV": (1, 3 * h), "ENC_W_H_REV": (h, 3 * h), "ENC_B_H_REV": (1, 3 * h)}
    inputs = {name: _read(checkpoint, base + tensor, how, shapes[name])
              for name, (tensor, how) in tensors.items()}
    params = {**sizes, "bidirectional": bidirectional}
    where = f"the tutorial's EncoderRNN and AttnDecoderRNN of {Path(str(path)).name}"
    if token_ids is None:
        return ModelInputs(params, inputs, None, f"weights: {where}; source ids drawn "
                                                 f"from --seed", decided)
    bad = [i for i in token_ids if not 0 <= i < sizes["src_vocab"]]
    if bad:
        raise UserError(f"token id {bad[0]} is outside the source vocabulary "
                        f"(0 … {sizes['src_vocab'] - 1})")
    inputs["SRC_IDS"] = np.array(token_ids, dtype=float).reshape(-1, 1)
    params["src_len"] = len(token_ids)
    return ModelInputs(params, inputs, None,
                       f"weights: {where}; source ids {_short(token_ids)}", decided)


def _refuse_unread(checkpoint: Checkpoint, base: str, tensors: dict) -> None:
    """Every tensor is one the sheet reads, or one line naming it."""
    read = {base + tensor for tensor, _ in tensors.values()}
    for name in sorted(checkpoint.shapes):
        if name in read:
            continue
        what = next((why for mark, why in UNREAD if mark in name), None)
        detail = f": {what}, which the sheet does not compute" if what else \
            ": not a tensor of the tutorial's EncoderRNN or AttnDecoderRNN"
        raise UserError(f"{checkpoint.source}: tensor {name}{detail}; refused rather than "
                        f"left out")


def _sizes(checkpoint: Checkpoint, base: str) -> dict[str, int]:
    """hidden, src_vocab and tgt_vocab from the two embedding tables."""
    sizes = {}
    for side, vocab in (("encoder", "src_vocab"), ("decoder", "tgt_vocab")):
        name = f"{base}{side}.embedding.weight"
        if name not in checkpoint.shapes:
            raise UserError(f"{checkpoint.source}: no tensor {name}: the seq2seq sheet reads "
                            f"the tutorial's state dicts, keys under encoder. and decoder.")
        sizes[vocab] = checkpoint.dim(name, 0)
        hidden = checkpoint.dim(name, 1)
        if sizes.setdefault("hidden", hidden) != hidden:
            raise UserError(f"{checkpoint.source}: tensor {name} is {hidden} wide, the "
                            f"encoder's embedding {sizes['hidden']}: the tutorial's one "
                            f"hidden_size is both")
    return sizes


def _read(checkpoint: Checkpoint, name: str, how: str, shape: tuple[int, int]) -> np.ndarray:
    """The tensor `name` as the sheet's block of `shape`, or one line naming it."""
    stored = {"table": shape, "linear": shape[::-1], "row": (shape[1],)}[how]
    got = checkpoint.shapes.get(name)
    if got is None:
        raise UserError(f"{checkpoint.source}: no tensor {name} "
                        f"({'×'.join(map(str, stored))} expected)")
    if tuple(got) != stored:
        raise UserError(f"{checkpoint.source}: tensor {name} has shape "
                        f"{'×'.join(map(str, got)) or 'a scalar'}; "
                        f"{'×'.join(map(str, stored))} was expected")
    value = np.asarray(checkpoint.tensor(name), dtype=float)
    return value.T.copy() if how == "linear" else value.reshape(shape)
