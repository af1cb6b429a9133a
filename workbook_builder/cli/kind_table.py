"""What the command line shows before it runs a kind: the kinds' names and one-line
summaries, and the engines' names. Known here without importing a kind, NumPy, openpyxl
or an engine, so that `attnsheets --help` and `attnsheets list` start at once;
tests/test_start_up.py checks every entry against the kinds and engines themselves."""

import importlib.util
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only when sheets/ holds a kind the table does not name
    from workbook_builder import api  # noqa: F401

# kind name -> the summary its class gives (`Kind.summary`); the kind is defined in the
# module of its name, dashes as underscores (cross-attention -> sheets/cross_attention.py)
KIND_SUMMARIES = {
    "additive": "Bahdanau additive attention: score vᵀ·tanh(W·s + U·h_j), softmax, context",
    "attention": "single-head scaled dot-product attention, softmax in visible steps",
    "cross-attention": "cross-attention: target queries Y·W_Q over source keys/values X "
                       "(m ≠ n)",
    "decoder-block": "a GPT-2 block: LN, causal MHA with biases, residual, LN, tanh-GELU "
                     "MLP, residual",
    "encoder-block": "a whole Transformer encoder layer: MHA, residual, LayerNorm, FFN "
                     "(--pre-ln)",
    "encoder": "a whole BERT-family sentence encoder: token ids, embeddings, L layers, "
               "pooling, the embedding; two texts' similarity",
    "flash": "FlashAttention: blockwise online softmax (running max and sum), exact",
    "gpt": "a whole GPT: token ids, embeddings, L decoder blocks, logits, the next token",
    "kv-cache": "decoding token by token with a KV cache; equals causal attention; "
                "cache size",
    "linear": "linear attention φ(Q)(φ(K)ᵀV), φ = elu+1; --causal: running state (RNN "
              "view); --features favor: Performer's random features vs softmax",
    "llama-block": "a LLaMA decoder layer: RMSNorm, RoPE, grouped K/V heads, SwiGLU MLP",
    "mamba-block": "a whole Mamba block (transformers' MambaBlock): RMSNorm, conv, "
                   "selective scan",
    "multihead": "multi-head attention: split, per-head softmax, concat, W_O (GQA via "
                 "--kv-heads)",
    "positional": "sinusoidal PE added to X; RoPE on Q, K (--rope interleaved|half); "
                  "offset check",
    "relative-position": "relative position bias on the scores: ALiBi slopes or T5 buckets "
                         "(--bias)",
    "seq2seq": "GRU encoder-decoder with Bahdanau attention (the PyTorch tutorial), greedy",
    "scaling": "why divide by √d_k: score variance, softmax saturation and its gradient "
               "per width",
    "sliding-window": "Longformer sliding-window attention (--window w one-sided, --global "
                      "tokens, --random R BigBird keys)",
    "ssm": "Mamba S6 selective scan: softplus Δ, Ā = exp(ΔA), h_t recurrence down the rows",
    "train": "attention that learns: forward, every gradient and K SGD steps as formulas",
    "transformer": "the whole encoder-decoder Transformer: N encoder and M decoder layers, "
                   "greedy decoding step by step",
}

# `checking.check.ENGINES`, in its order: the choices of `check --engine`, `grade --engine`
ENGINE_NAMES = ("formulas", "libreoffice", "gnumeric")


def kind_module(name: str) -> str:
    return name.replace("-", "_")


def kind_modules() -> set[str]:
    """The modules in sheets/ that define a kind (an underscore: shared bands), as
    `registry.load_kinds` finds them; read from the folder (pkgutil would import
    `inspect`, a tenth of this command's start-up)."""
    found = set()
    for folder in importlib.util.find_spec("sheets").submodule_search_locations:
        for entry in os.scandir(folder):
            name, _, suffix = entry.name.partition(".")
            if suffix == "py" or (entry.is_dir() and
                                  os.path.exists(os.path.join(entry.path, "__init__.py"))):
                found.add(name)
    return {name for name in found if name.isidentifier() and not name.startswith("_")}


def listed_here() -> bool:
    """Whether KIND_SUMMARIES names the kinds of exactly the modules in sheets/."""
    return kind_modules() == {kind_module(name) for name in KIND_SUMMARIES}


def kind_summaries() -> dict[str, str]:
    """Every kind's summary, by name in sorted order: from KIND_SUMMARIES, or, when sheets/
    holds modules it does not list (a kind added since), from the kinds themselves."""
    if listed_here():
        return dict(sorted(KIND_SUMMARIES.items()))
    from workbook_builder import api

    return {name: api.get_kind(name).summary for name in api.kinds()}
