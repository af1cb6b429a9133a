"""Every checkpoint reader, declared once: the kinds it fills, the model families it reads,
and where its function is (imported on first use, so that a command without --checkpoint
starts fast). `api.build`, the command line's --checkpoint flags and the tests that hold every
kind × flag × family to "exact or refused" (tests/test_flag_provenance.py) all read this table;
a reader added here gets the one settling of flags against what its checkpoint fixes
(sheet/provenance.py) without code of its own.

A reader is called as `read(kind, path, layer=…, prefix=…, text=…, token_ids=…,
explicit=flags, **second_text)` and returns a `loader.ModelInputs` whose `decided` says what
the checkpoint fixes (each value with its file and key) and which parameters stay the user's."""

import importlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Reader:
    """A checkpoint reader: the kinds it fills, the families it reads (by the names its
    messages and notes use), and its function as module and name."""

    kinds: tuple[str, ...]
    families: tuple[str, ...]
    module: str
    function: str
    # it also embeds a second text (--text2/--token-ids2) and takes a tokenizer.json from
    # elsewhere (--tokenizer: an ONNX file has none)
    two_texts: bool = False

    def load(self) -> Callable:
        return getattr(importlib.import_module(self.module), self.function)


_LOADER = "workbook_builder.models.loader"
READERS = (
    Reader(("multihead", "encoder-block"), ("BERT", "RoBERTa", "DistilBERT"), _LOADER,
           "model_inputs"),
    Reader(("llama-block",), ("LLaMA", "Qwen2"), _LOADER, "model_inputs"),
    Reader(("decoder-block", "gpt"), ("GPT-2",), _LOADER, "model_inputs"),
    Reader(("kv-cache",), ("GPT-2",), "workbook_builder.models.kv_cache", "kv_cache_inputs"),
    Reader(("mamba-block",), ("Mamba",), "workbook_builder.models.mamba", "model_inputs"),
    Reader(("encoder",), ("BERT", "RoBERTa", "DistilBERT", "sentence-transformers", "ONNX"),
           "workbook_builder.models.encoder", "encoder_inputs", two_texts=True),
    Reader(("transformer",), ("MarianMT", "BART"), "workbook_builder.models.bart",
           "model_inputs"),
    Reader(("seq2seq",), ("the PyTorch translation tutorial",),
           "workbook_builder.models.seq2seq", "seq2seq_inputs"),
)
CHECKPOINT_KINDS = tuple(kind for reader in READERS for kind in reader.kinds)
TWO_TEXT_KINDS = tuple(kind for reader in READERS if reader.two_texts
                       for kind in reader.kinds)


def reader_of(kind: str) -> Reader | None:
    """The reader that fills `kind`, or None when no checkpoint does."""
    return next((reader for reader in READERS if kind in reader.kinds), None)
