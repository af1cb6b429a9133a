"""What the MarianMT and BART tests share: a tiny random model perturbed and saved, what
transformers' greedy `generate` gives with it, and the largest relative difference of a
sheet's blocks from it."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.models import perturb_biases_and_norms
from helpers.requires import requires_gnumeric, requires_libreoffice
from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.gnumeric import evaluate_with_gnumeric
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice

ENGINES = [pytest.param(evaluate_with_formulas, id="formulas"),
           pytest.param(evaluate_with_libreoffice, marks=requires_libreoffice,
                        id="libreoffice"),
           pytest.param(evaluate_with_gnumeric, marks=requires_gnumeric, id="gnumeric")]


def save_perturbed(model, folder: Path, generation: dict | None, norms: str) -> Path:
    """`model` with its biases and norms (parameters named with `norms`) perturbed by
    N(0, 0.3) and final_logits_bias drawn from it, saved with save_pretrained;
    `generation` keys are written into its generation_config.json."""
    import torch

    perturb_biases_and_norms(model, norms)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.3)
    model.save_pretrained(folder)
    if generation:
        path = folder / "generation_config.json"
        values = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**values, **generation}), encoding="utf-8")
    return folder


def generate_outputs(model, ids: list[int], steps: int):
    """encoder_last_hidden_state, each step's logits for the prefix generate chose, and
    generate's ids without the start token, padded with the pad id to `steps`."""
    import torch

    source = torch.tensor([ids])
    with torch.no_grad():
        generated = model.generate(source, num_beams=1, do_sample=False,
                                   max_new_tokens=steps)[0].tolist()
        assert generated[0] == model.generation_config.decoder_start_token_id
        chosen = generated[1:] + [model.config.pad_token_id] * (steps + 1 - len(generated))
        prefix = [generated[0], *chosen[:-1]]
        out = model(input_ids=source, decoder_input_ids=torch.tensor([prefix]))
    logits = out.logits[0].numpy()  # row t: the logits after prefix[0 … t]
    return out.encoder_last_hidden_state[0].numpy(), logits, chosen


def relative(got, exp) -> float:
    return float(np.abs(got - exp).max() / np.abs(exp).max())


def worst_relative(got: dict[str, np.ndarray], memory, logits, steps: int) -> float:
    """The largest relative difference of ENC_OUTPUT and each step's LOGITS from the
    model's."""
    return max([relative(got["ENC_OUTPUT"], memory)] +
               [relative(got[f"LOGITS_T{t + 1}"][0], logits[t]) for t in range(steps)])


def stray_tensor_error(folder: Path, out: Path, d: int) -> str:
    """The one line a build prints for the folder with a stray tensor beside the model's
    (a fake pooler, d × d)."""
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    weights["model.pooler.weight"] = np.ones((d, d), dtype=np.float32)
    save_file(weights, str(folder / "model.safetensors"))
    return one_line_error(cli("build", "transformer", "-o", out, "--checkpoint", folder,
                              "--layout", "blocks"))


def contradicted_line(folder: Path, ids: list[int], flags: tuple[str, ...], out: Path) -> str:
    """The one line a build from `folder` for `ids` prints for command-line `flags` that
    contradict the checkpoint."""
    return one_line_error(cli("build", "transformer", "-o", out, "--checkpoint", folder,
                              "--token-ids", ",".join(map(str, ids)), *flags,
                              "--layout", "blocks"))


def sheet_against(folder: Path, ids: list[int], steps: int, outputs, engine=None,
                  path: Path | None = None, **flags) -> tuple[Any, float, list[int]]:
    """transformer built from `folder` for `ids` and `steps` decoding steps, with `flags`
    (saved at `path` and computed by `engine`, or in memory with its build's own values):
    its book, its largest relative difference from `outputs` (`generate_outputs`) and its
    GENERATED ids."""
    memory, logits, _ = outputs
    book = api.build("transformer", path, checkpoint=folder, token_ids=ids, decode=steps,
                     layout="blocks", **flags)
    if engine is None:
        got = {name: frame.to_numpy(float) for name, frame in api.read_blocks(book).items()}
    else:
        names = ["ENC_OUTPUT", "GENERATED", *(f"LOGITS_T{t}" for t in range(1, steps + 1))]
        got = evaluated_blocks(path, engine(path), names)
    return book, worst_relative(got, memory, logits, steps), \
        got["GENERATED"][:, 0].astype(int).tolist()


def save_tiny_marian(folder, seed=0, generation=None, **config):
    """A MarianMTModel of random weights (linear weights N(0, 0.5), biases, LayerNorms and
    final_logits_bias perturbed by N(0, 0.3)), saved with save_pretrained; `generation`
    keys are written into its generation_config.json."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**{**MARIAN_SIZES, "init_std": 0.5, **config})).eval()
    return save_perturbed(model, folder, generation, "layer_norm")


def save_tiny_bart(folder, seed=0, generation=None, **config):
    """A BartForConditionalGeneration of random weights (linear weights, the table and the
    position tables N(0, 0.5); biases, LayerNorms and final_logits_bias perturbed by
    N(0, 0.3)), saved with save_pretrained; `generation` keys are written into its
    generation_config.json."""
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(seed)
    model = BartForConditionalGeneration(
        BartConfig(**{**BART_SIZES, "init_std": 0.5, **config})).eval()
    return save_perturbed(model, folder, generation, "norm")


# the tiny models' sizes (tests/test_transformer_marian.py and _bart.py name their ids)
MARIAN_SIZES = {"vocab_size": 13, "d_model": 6, "encoder_layers": 2, "decoder_layers": 2,
                "encoder_attention_heads": 3, "decoder_attention_heads": 3,
                "encoder_ffn_dim": 7, "decoder_ffn_dim": 7, "max_position_embeddings": 16,
                "pad_token_id": 12, "decoder_start_token_id": 12, "eos_token_id": 0,
                "forced_eos_token_id": 0, "scale_embedding": True,
                "activation_function": "swish"}
BART_SIZES = {"vocab_size": 17, "d_model": 10, "encoder_layers": 1, "decoder_layers": 2,
              "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 9,
              "decoder_ffn_dim": 9, "max_position_embeddings": 12}
