"""kv-cache: the stacked decoding steps equal causal attention over the whole sequence
(PyTorch's scaled_dot_product_attention, GQA included), a tiny random GPT-2 decoded by
transformers itself token by token with its cache (use_cache=True) gives the same step
outputs and the same cache, in float64, under the `formulas` engine and LibreOffice; the
cache-size table is live."""

import inspect
import shutil
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.models import assert_close
from helpers.requires import requires_torch, requires_transformers

from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet.names import find_name

RTOL = 1e-9
IDS = [3, 14, 15, 9, 2, 6]




def save_gpt2(folder: Path, d: int, heads: int, layers: int, vocab: int,
              activation: str = "gelu_new") -> Path:
    """A seeded random GPT2LMHeadModel with LayerNorms and biases that tell."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab, n_positions=32, n_embd=d, n_layer=layers,
                        n_head=heads, bos_token_id=0, eos_token_id=0,
                        activation_function=activation)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                value.add_(0.3 * torch.randn_like(value))
            elif "attn" in name:  # the default init (std 0.02) would leave attention flat
                value.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return folder


def decode_with_cache(folder: Path, layer: int, ids: list[int]):
    """transformers' GPT-2 fed one token per call with its cache: layer `layer`'s merged
    heads (c_proj's input) at each step, and that layer's cached keys and values at the end
    (n × H·d_k, heads side by side)."""
    import torch
    from transformers import GPT2Model

    model = GPT2Model.from_pretrained(folder, attn_implementation="eager").double().eval()
    merged = []
    hook = model.h[layer].attn.c_proj.register_forward_pre_hook(
        lambda _m, args: merged.append(args[0][0].detach().numpy().copy()))
    # the cache's keyword: `cache` in newer transformers, `past_key_values` before
    keyword = ("cache" if "cache" in inspect.signature(model.forward).parameters
               else "past_key_values")
    cache = None
    with torch.no_grad():
        for token in ids:
            out = model(input_ids=torch.tensor([[token]]), use_cache=True, **{keyword: cache})
            cache = out[keyword]
    hook.remove()
    if hasattr(cache, "layers"):
        keys, values = cache.layers[layer].keys, cache.layers[layer].values
    else:  # transformers 4: a list per layer
        keys, values = cache.key_cache[layer], cache.value_cache[layer]

    def side_by_side(t):  # (1, H, n, d_k) -> (n, H·d_k)
        return t[0].permute(1, 0, 2).reshape(len(ids), -1).numpy()

    return np.vstack(merged), side_by_side(keys), side_by_side(values)


def engines(path, book, libreoffice):
    yield "formulas", book.values
    if libreoffice and (shutil.which("soffice") or shutil.which("libreoffice")):
        yield "libreoffice", evaluate_with_libreoffice(path)


def compare_with_gpt2(folder: Path, tmp_path: Path, layer: int, layout: str,
                      libreoffice: bool) -> Path:
    path = tmp_path / f"kv-{layout}.xlsx"
    book = api.build("kv-cache", path, checkpoint=folder, layer=layer,
                     token_ids=",".join(map(str, IDS)), layout=layout)
    assert book.params.bias
    steps, keys, values = decode_with_cache(folder, layer, IDS)
    last = f"_T{len(IDS)}"
    for engine, got_values in engines(path, book, libreoffice):
        got = evaluated_blocks(path, got_values, ["OUTPUT", "K_CACHE" + last,
                                                  "V_CACHE" + last, "MAX_DIFF"])
        assert_close(got["OUTPUT"], steps, f"{engine} step outputs vs GPT-2 with its cache")
        assert_close(got["K_CACHE" + last], keys, f"{engine} key cache vs past keys")
        assert_close(got["V_CACHE" + last], values, f"{engine} value cache vs past values")
        assert got["MAX_DIFF"][0, 0] < 1e-12
    return path


@requires_transformers
def test_steps_equal_gpt2_decoding_with_its_cache(tmp_path):
    folder = save_gpt2(tmp_path / "gpt2", d=8, heads=2, layers=2, vocab=32)
    path = compare_with_gpt2(folder, tmp_path, 1, "cells", libreoffice=True)
    ran = cli("check", path, "--engine", "all")
    assert ran.returncode == 0, ran.stdout + ran.stderr


@requires_transformers
def test_layers_before_with_the_exact_gelu_equal_gpt2_decoding(tmp_path):
    """X of layer 1 passes through layer 0's MLP: a GPT-2 configured with the exact (erf)
    GELU is read with it, as decoder-block reads it."""
    folder = save_gpt2(tmp_path / "gpt2-erf", d=8, heads=2, layers=2, vocab=32,
                       activation="gelu")
    compare_with_gpt2(folder, tmp_path, 1, "blocks", libreoffice=False)


@requires_transformers
def test_realistic_size_equals_gpt2_decoding(tmp_path):
    """d = 64, 4 heads, 2 layers, vocabulary 256: layer 1, blocks layout."""
    folder = save_gpt2(tmp_path / "gpt2-64", d=64, heads=4, layers=2, vocab=256)
    compare_with_gpt2(folder, tmp_path, 1, "blocks", libreoffice=False)


@requires_torch
@pytest.mark.parametrize("layout,kv_heads", [("cells", 2), ("blocks", 1), ("blocks", None)])
def test_stacked_steps_equal_causal_attention(tmp_path, layout, kv_heads):
    """Each step's output row = that row of PyTorch's causal attention (enable_gqa: head h
    reads key/value head ⌊h·G/H⌋) over the whole sequence."""
    import torch
    import torch.nn.functional as F

    path = tmp_path / "kv.xlsx"
    sizes = {"seq_len": 5, "d_model": 8, "heads": 4, "kv_heads": kv_heads, "bias": True}
    book = api.build("kv-cache", path, layout=layout, seed=3, **sizes)
    got = evaluated_blocks(path, evaluate_with_formulas(path),
                           ["X", "W_Q", "W_K", "W_V", "B_Q", "B_K", "B_V", "OUTPUT"])
    groups = kv_heads or 4

    def heads_of(m, count):  # (n, count·2) -> (1, count, n, 2)
        x = torch.tensor(got["X"] @ got[f"W_{m}"] + got[f"B_{m}"])
        return x.view(5, count, 2).transpose(0, 1)[None]

    out = F.scaled_dot_product_attention(heads_of("Q", 4), heads_of("K", groups),
                                         heads_of("V", groups), is_causal=True,
                                         enable_gqa=True)
    expected = out[0].transpose(0, 1).reshape(5, 8).numpy()
    assert_close(got["OUTPUT"], expected, "stacked steps vs causal attention")
    assert book.params.groups == groups


def test_cache_table_is_live(tmp_path):
    """The 96-head row: 96 layers of 96 heads of width 128, GQA with 8 groups; typing 48
    groups into the sheet multiplies GQA's cache by 6 and leaves MHA's and MQA's as they were."""
    path = tmp_path / "kv.xlsx"
    api.build("kv-cache", path, seq_len=2, d_model=4, heads=2)
    per_token = evaluated_blocks(path, evaluate_with_formulas(path), ["CACHE_PER_TOKEN"])
    mha, gqa, mqa = per_token["CACHE_PER_TOKEN"][1]
    assert (mha, gqa, mqa) == (2 * 96 * 96 * 128, 2 * 96 * 8 * 128, 2 * 96 * 1 * 128)
    assert list(per_token["CACHE_PER_TOKEN"][0]) == [2 * 1 * 2 * 2, 2 * 1 * 2 * 2, 2 * 1 * 2]
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "CACHE_SIZES", path)
    wb[where.sheet].cell(where.top + 1, where.left + 2).value = 48  # G of the 96-head row
    wb.save(path)
    again = evaluated_blocks(path, evaluate_with_formulas(path), ["CACHE_PER_TOKEN"])
    assert list(again["CACHE_PER_TOKEN"][1]) == [mha, 6 * gqa, mqa]


@requires_transformers
def test_kv_cache_checkpoint_refusals(tmp_path):
    from transformers import LlamaConfig, LlamaModel

    folder = save_gpt2(tmp_path / "gpt2", d=8, heads=2, layers=2, vocab=32)
    line = one_line_error(cli("build", "kv-cache", "--checkpoint", folder, "--layer", "2",
                              "-o", tmp_path / "x.xlsx"))
    assert "no layer 2" in line
    line = one_line_error(cli("build", "kv-cache", "--checkpoint", folder, "--token-ids",
                              "1,99", "-o", tmp_path / "x.xlsx"))
    assert "99" in line
    llama = tmp_path / "llama"
    LlamaModel(LlamaConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1,
                           num_attention_heads=2, intermediate_size=8)).save_pretrained(llama)
    line = one_line_error(cli("build", "kv-cache", "--checkpoint", llama,
                              "-o", tmp_path / "y.xlsx"))
    assert "llama" in line and "GPT-2" in line


@pytest.mark.parametrize("flags,words", [(["--heads", "3"], "divide"),
                                         (["--heads", "4", "--kv-heads", "3"], "divide")])
def test_bad_sizes_are_one_line(tmp_path, flags, words):
    assert words in one_line_error(cli("build", "kv-cache", *flags, "-o", tmp_path / "x.xlsx"))
