"""A kind's parameters as command-line flags, and back."""

import argparse
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the machinery is imported by the commands that use it
    from workbook_builder.api import Kind


def add_param_flags(parser: argparse.ArgumentParser, params_class) -> None:
    """One flag per Params field: seq_len -> --seq-len; bools are switches."""
    import dataclasses  # with a kind's Params, not at start-up (it brings `inspect`)

    for f in dataclasses.fields(params_class):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        help_text = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.type is bool:
            parser.add_argument(flag, dest=f.name, action="store_true",
                                default=argparse.SUPPRESS, help=help_text)
            continue
        base = f.type
        if isinstance(base, types.UnionType):  # e.g. int | None
            base = next(t for t in base.__args__ if t is not type(None))
        choices = f.metadata.get("choices")
        parser.add_argument(flag, dest=f.name, type=base, choices=choices,
                            default=argparse.SUPPRESS, metavar=f.metadata.get("metavar"),
                            help=f"{help_text} (default {default})")


def explicit_params(kind: "type[Kind]", namespace) -> dict[str, Any]:
    """The kind's parameters a user set by flag (unset flags are absent from the namespace)."""
    import dataclasses

    return {f.name: getattr(namespace, f.name) for f in dataclasses.fields(kind.Params)
            if hasattr(namespace, f.name)}


def add_checkpoint_flags(parser: argparse.ArgumentParser, kind_name: str) -> None:
    """--checkpoint and what goes with it, for the kinds a real model's layer can fill."""
    from workbook_builder.api import CHECKPOINT_KINDS, TWO_TEXT_KINDS

    if kind_name not in CHECKPOINT_KINDS:
        return
    parser.add_argument("--checkpoint", type=Path, metavar="PATH",
                        help="weights and sizes from a model: a Hugging Face model folder, "
                             "a .zip of one, .safetensors, a torch state dict .pt/.bin, or .npz")
    parser.add_argument("--layer", type=int, default=0,
                        help="which layer of the checkpoint (default 0)")
    parser.add_argument("--prefix", help="the submodule holding the model's weights, e.g. "
                        "'bert.' (default: found from the names)")
    parser.add_argument("--text", help="X from this text, tokenised by the checkpoint's "
                        "tokenizer.json (rows labelled with its tokens)")
    parser.add_argument("--token-ids", metavar="ID,ID,…",
                        help="X from these token ids (instead of --text)")
    if kind_name in TWO_TEXT_KINDS:
        parser.add_argument("--text2", help="a second text, embedded beside the first; "
                            "their cosine similarity is a formula")
        parser.add_argument("--token-ids2", metavar="ID,ID,…",
                            help="the second text's token ids (instead of --text2)")
        parser.add_argument("--tokenizer", type=Path, metavar="FILE",
                            help="a tokenizer.json for --text when the checkpoint has none "
                                 "(an ONNX file)")


def checkpoint_args(args) -> dict:
    """The checkpoint options of a build, for api.build (which tells the second text's
    flags, --text2 and --token-ids2, in messages about them)."""
    if not hasattr(args, "checkpoint"):  # a kind no checkpoint fills
        return {}
    second = {"text2": args.text2, "token_ids2": args.token_ids2,
              "tokenizer": args.tokenizer} if hasattr(args, "text2") else {}
    return {"checkpoint": args.checkpoint, "layer": args.layer, "prefix": args.prefix,
            "text": args.text, "token_ids": args.token_ids, **second}
