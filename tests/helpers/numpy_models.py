"""Checkpoints of every model family written with NumPy alone (no PyTorch): tiny random
weights named by the families' own tables, in a folder as save_pretrained leaves it (a
safetensors file in the documented layout, config.json, tokenizer.json)."""

import json
import struct
from pathlib import Path

import numpy as np

from workbook_builder.models.families import BERT, DISTILBERT, GPT2, LLAMA, MAMBA, TABLE

D, HEADS, D_FF, VOCAB, POSITIONS = 4, 2, 6, 10, 8


def safetensors_bytes(tensors: dict[str, np.ndarray], change_header=None) -> bytes:
    """The documented layout (u64 header length, JSON header, data); `change_header(header)`
    edits the header before it is written."""
    header, data = {}, b""
    for name, value in tensors.items():
        value = np.asarray(value, "<f4")
        header[name] = {"dtype": "F32", "shape": list(value.shape),
                        "data_offsets": [len(data), len(data) + value.nbytes]}
        data += value.tobytes()
    if change_header is not None:
        change_header(header)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def bert_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out_in = {"Q": (D, D), "K": (D, D), "V": (D, D), "O": (D, D), "1": (D_FF, D),
              "2": (D, D_FF)}
    weights = {}
    for ours, (name, _) in BERT.layer.items():
        kind, _, which = ours.partition("_")
        shape = out_in[which] if kind == "W" else (out_in[which][0],) if kind == "B" else (D,)
        weights[name.format(layer=0)] = rng.normal(size=shape)
    rows = {"WORD_EMB": VOCAB, "POS_EMB": POSITIONS, "TYPE_EMB": 2}
    for ours, (name, how) in BERT.embeddings.items():
        weights[name] = rng.normal(size=(rows[ours], D) if how == TABLE else (D,))
    return weights


def llama_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    out_in = {"Q": (D, D), "K": (D, D), "V": (D, D), "O": (D, D), "GATE": (D_FF, D),
              "UP": (D_FF, D), "DOWN": (D, D_FF)}
    weights = {name.format(layer=0): rng.normal(size=out_in[ours[2:]] if ours.startswith("W_")
                                                 else (D,))
               for ours, (name, _) in LLAMA.layer.items()}
    return {**weights, LLAMA.embeddings["WORD_EMB"][0]: rng.normal(size=(VOCAB, D))}


def gpt2_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    in_out = {"O": (D, D), "1": (D, D_FF), "2": (D_FF, D)}
    weights = {"h.0.attn.c_attn.weight": rng.normal(size=(D, 3 * D)),
               "h.0.attn.c_attn.bias": rng.normal(size=3 * D)}
    for ours, (name, _) in GPT2.layer.items():
        kind, _, which = ours.partition("_")
        if which in in_out:
            shape = in_out[which] if kind == "W" else (in_out[which][1],)
            weights[name.format(layer=0)] = rng.normal(size=shape)
        elif "c_attn" not in name:
            weights[name.format(layer=0)] = rng.normal(size=D)
    sizes = {"WTE": (VOCAB, D), "WPE": (POSITIONS, D), "LNF_GAMMA": (D,), "LNF_BETA": (D,)}
    return {**weights, **{name: rng.normal(size=sizes[ours])
                          for ours, (name, _) in GPT2.embeddings.items()}}


BERT_CONFIG = {"model_type": "bert", "hidden_size": D, "num_attention_heads": HEADS,
               "intermediate_size": D_FF, "num_hidden_layers": 1, "hidden_act": "gelu",
               "layer_norm_eps": 1e-12}
LLAMA_CONFIG = {"model_type": "llama", "hidden_size": D, "num_attention_heads": HEADS,
                "num_key_value_heads": HEADS, "intermediate_size": D_FF,
                "num_hidden_layers": 1, "hidden_act": "silu", "rms_norm_eps": 1e-6}


def model_folder(folder: Path, weights, config: dict | str | None, change_header=None,
                 tokenizer: bytes | None = None) -> Path:
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(safetensors_bytes(weights, change_header))
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str)
                                            else json.dumps(config))
    if tokenizer is not None:
        (folder / "tokenizer.json").write_bytes(tokenizer)
    return folder


def distilbert_weights() -> dict[str, np.ndarray]:
    """BERT's tiny weights under DistilBERT's names (the same layer, no token types)."""
    bert = bert_weights()
    return {**{DISTILBERT.layer[ours][0].format(layer=0): bert[name.format(layer=0)]
               for ours, (name, _) in BERT.layer.items()},
            **{DISTILBERT.embeddings[ours][0]: bert[name]
               for ours, (name, _) in BERT.embeddings.items() if ours in DISTILBERT.embeddings}}


def unbiased_llama_weights() -> dict[str, np.ndarray]:
    """LLaMA's tiny weights without bias rows (LlamaConfig's attention_bias false)."""
    return {name: value for name, value in llama_weights().items()
            if not name.endswith(".bias")}


def qwen2_weights() -> dict[str, np.ndarray]:
    """LLaMA's tiny weights and the q/k/v biases Qwen2 always has."""
    rng = np.random.default_rng(3)
    return {**unbiased_llama_weights(),
            **{LLAMA.layer[f"B_{n}"][0].format(layer=0): rng.normal(size=D) for n in "QKV"}}


MAMBA_INNER, MAMBA_STATE, MAMBA_RANK, MAMBA_KERNEL = 8, 3, 2, 3


def mamba_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    shapes = {"NORM_W": (D,), "W_IN": (2 * MAMBA_INNER, D),
              "CONV_W": (MAMBA_INNER, 1, MAMBA_KERNEL), "CONV_B": (MAMBA_INNER,),
              "W_X": (MAMBA_RANK + 2 * MAMBA_STATE, MAMBA_INNER),
              "W_DELTA": (MAMBA_INNER, MAMBA_RANK), "DELTA_BIAS": (MAMBA_INNER,),
              "A_LOG": (MAMBA_INNER, MAMBA_STATE), "D": (MAMBA_INNER,),
              "W_OUT": (D, MAMBA_INNER)}
    return {**{name.format(layer=0): rng.normal(size=shapes[ours])
               for ours, (name, _) in MAMBA.layer.items()},
            MAMBA.embeddings["X"][0]: rng.normal(size=(VOCAB, D))}
