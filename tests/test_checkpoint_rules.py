"""Exact or refused: for each family, tiny models saved with save_pretrained, each
configuration key that changes a layer's mathematics set to each value transformers accepts.
Every cell of the matrix either builds a sheet equal to transformers (float64, eager
attention, its float32 casts removed where it has them) to 1e-12, or is refused in one line
naming the key; bare weight files holding tensors the sheet does not read are refused naming
the tensor. No cell may build a sheet that differs."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.requires import requires_transformers

from workbook_builder import api
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.errors import UserError
from workbook_builder.models.families import ACTIVATIONS
from workbook_builder.models.gpt2 import GELU_OF

pytestmark = requires_transformers

RTOL = 1e-12
IDS = [2, 7, 5, 9, 3]
MISSING = object()  # a key taken out of config.json
SIZES = {"bert": {"hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 12,
                  "num_hidden_layers": 2, "max_position_embeddings": 16},
         "distilbert": {"dim": 8, "n_heads": 2, "hidden_dim": 12, "n_layers": 2,
                        "max_position_embeddings": 16}}
SIZES["roberta"] = SIZES["xlm-roberta"] = {**SIZES["bert"], "max_position_embeddings": 18}


def act2fn() -> list[str]:
    """Every activation name transformers accepts in a config."""
    from transformers.activations import ACT2FN

    return sorted(ACT2FN)


def relative(got: np.ndarray, exp: np.ndarray) -> float:
    return float(np.abs(got - exp).max() / max(1.0, np.abs(exp).max()))


def save_encoder(folder: Path, model_type: str, **config) -> Path:
    """A seeded random model of `model_type` (vocabulary 20), LayerNorms and biases moved
    off their initial 1 and 0, saved with save_pretrained."""
    import torch
    from helpers.models import perturb_biases_and_norms
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.for_model(model_type, vocab_size=20,
                                                       **SIZES[model_type], **config))
    perturb_biases_and_norms(model, "LayerNorm", "layer_norm")
    model.save_pretrained(folder)
    return folder


def variant(folder: Path, target: Path, **changes) -> Path:
    """A copy of the model folder with config.json changed (MISSING: the key removed)."""
    shutil.copytree(folder, target)
    config = json.loads((target / "config.json").read_text())
    for key, value in changes.items():
        if value is MISSING:
            config.pop(key, None)
        else:
            config[key] = value
    (target / "config.json").write_text(json.dumps(config))
    return target


def encoder_states(folder: Path, ids: list[int]) -> list[np.ndarray]:
    """transformers' hidden states in float64: the embeddings, then each layer's output."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, attn_implementation="eager",
                                      dtype=torch.float64).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    return [h[0].numpy() for h in out.hidden_states]


def sheet_blocks(kind: str, path: Path, names: list[str], libreoffice: bool = False,
                 **build) -> dict[str, dict[str, np.ndarray]]:
    """The named blocks of a built sheet, by engine (formulas; LibreOffice when asked)."""
    book = api.build(kind, path, layout="blocks", **build)
    got = {"formulas": evaluated_blocks(path, book.values, names)}
    if libreoffice and shutil.which("soffice"):
        got["libreoffice"] = evaluated_blocks(path, evaluate_with_libreoffice(path), names)
    return got


def refusal(kind: str, path: Path, **build) -> str:
    with pytest.raises(UserError) as caught:
        api.build(kind, layout="blocks", **build)
    assert not path.exists()
    return str(caught.value)


# -- the encoder families: BERT, RoBERTa, XLM-R, DistilBERT -----------------------------------

@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("encoders")
    return {model_type: save_encoder(root / model_type, model_type)
            for model_type in ("bert", "roberta", "xlm-roberta", "distilbert")}


def assert_encoder_equal(folder: Path, tmp_path: Path, ids=IDS, libreoffice=False,
                         **flags) -> None:
    """Layer 0 with its embedding step, and layer 1 (X by the reference of layer 0)."""
    tmp_path.mkdir(exist_ok=True)
    states = encoder_states(folder, ids)
    for layer in (0, 1):
        path = tmp_path / f"layer{layer}.xlsx"
        got = sheet_blocks("encoder-block", path, ["X", "OUTPUT"], libreoffice and layer == 0,
                           checkpoint=folder, layer=layer,
                           token_ids=",".join(map(str, ids)), **flags)
        for engine, blocks in got.items():
            for name, exp in (("X", states[layer]), ("OUTPUT", states[layer + 1])):
                error = relative(blocks[name], exp)
                family = json.loads((folder / "config.json").read_text())["model_type"]
                print(f"{family} layer {layer} {engine} {name}: {error:.1e}")
                assert error < RTOL, (folder.name, layer, engine, name, error)


HIDDEN_ACT = {"bert": "hidden_act", "roberta": "hidden_act", "xlm-roberta": "hidden_act",
              "distilbert": "activation"}


@pytest.mark.parametrize("model_type", list(HIDDEN_ACT))
def test_each_activation_transformers_accepts_is_equal_or_refused(encoders, tmp_path,
                                                                   model_type):
    key = HIDDEN_ACT[model_type]
    for act in act2fn():
        folder = variant(encoders[model_type], tmp_path / act, **{key: act})
        if act in ACTIVATIONS:
            assert_encoder_equal(folder, tmp_path / f"{act}-book", ids=IDS[:3])
        else:
            line = refusal("encoder-block", tmp_path / "x.xlsx", checkpoint=folder)
            assert f"sets {key} to \"{act}\"" in line, line


@pytest.mark.parametrize("model_type,changes", [
    ("bert", {}), ("bert", {"layer_norm_eps": 1e-5}), ("bert", {"hidden_act": MISSING}),
    ("bert", {"layer_norm_eps": MISSING, "hidden_act": MISSING}),
    ("bert", {"type_vocab_size": 2, "pad_token_id": 4}),
    ("roberta", {}), ("roberta", {"layer_norm_eps": 1e-5, "pad_token_id": MISSING}),
    ("xlm-roberta", {}), ("distilbert", {}), ("distilbert", {"activation": MISSING}),
])
def test_values_the_sheet_computes_equal_transformers(encoders, tmp_path, model_type, changes):
    """Missing keys take the family's defaults (BertConfig: eps 1e-12, exact GELU), as
    transformers' config classes do; RoBERTa counts positions from padding_idx + 1."""
    folder = variant(encoders[model_type], tmp_path / "model", **changes)
    assert_encoder_equal(folder, tmp_path, libreoffice=not changes and model_type != "bert")


def test_roberta_positions_skip_padding_tokens(encoders, tmp_path):
    """A padding id inside the text keeps position padding_idx, and the count goes on after
    it (create_position_ids_from_input_ids)."""
    assert_encoder_equal(encoders["roberta"], tmp_path, ids=[0, 7, 1, 9, 2])


@pytest.mark.parametrize("model_type,changes,key", [
    ("bert", {"is_decoder": True}, "is_decoder"),
    ("bert", {"is_decoder": True, "add_cross_attention": True}, "is_decoder"),
    ("bert", {"add_cross_attention": True}, "add_cross_attention"),
    ("bert", {"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ("bert", {"position_embedding_type": "relative_key_query"}, "position_embedding_type"),
    ("roberta", {"is_decoder": True}, "is_decoder"),
    ("roberta", {"pad_token_id": None}, "pad_token_id"),
    ("distilbert", {"sinusoidal_pos_embds": True}, "sinusoidal_pos_embds"),
    ("bert", {"num_attention_heads": MISSING}, "num_attention_heads"),
    ("distilbert", {"n_heads": 3}, "n_heads"),
])
def test_values_the_sheet_does_not_compute_are_refused_naming_the_key(encoders, tmp_path,
                                                                     model_type, changes, key):
    folder = variant(encoders[model_type], tmp_path / "model", **changes)
    for kind in ("encoder-block", "multihead"):
        line = one_line_error(cli("build", kind, "--checkpoint", folder, "--token-ids",
                                  "2,7,5", "-o", tmp_path / "x.xlsx"))
        assert key in line and "--" not in line, line
        assert not (tmp_path / "x.xlsx").exists()


def test_distilbert_multihead_equals_its_attention(encoders, tmp_path):
    """multihead from DistilBERT's own names: OUTPUT = out_lin of the attention of layer 1."""
    import torch
    from transformers import AutoModel

    folder = encoders["distilbert"]
    model = AutoModel.from_pretrained(folder, attn_implementation="eager",
                                      dtype=torch.float64).eval()
    seen = []
    model.transformer.layer[1].attention.out_lin.register_forward_hook(
        lambda _m, _i, out: seen.append(out[0].detach().numpy()))
    with torch.no_grad():
        model(torch.tensor([IDS]))
    path = tmp_path / "mha.xlsx"
    got = sheet_blocks("multihead", path, ["OUTPUT"], checkpoint=folder, layer=1,
                       token_ids=",".join(map(str, IDS)))
    error = relative(got["formulas"]["OUTPUT"], seen[0])
    print(f"DistilBERT multihead OUTPUT: {error:.1e}")
    assert error < RTOL


# -- bare weight files -------------------------------------------------------------------------

def weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def bare(target: Path, tensors: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    save_file(tensors, str(target))
    return target


@pytest.mark.parametrize("extra", ["encoder.layer.0.attention.self.distance_embedding.weight",
                                   "encoder.layer.1.attention.self.query.lora_A",
                                   "decoder.weight"])
def test_bare_bert_weights_with_a_tensor_the_sheet_does_not_read_are_refused(
        encoders, tmp_path, extra):
    tensors = {**weights(encoders["bert"]), extra: np.ones((3, 8), np.float32)}
    path = bare(tmp_path / "bert.safetensors", tensors)
    line = one_line_error(cli("build", "encoder-block", "--checkpoint", path, "--heads", "2",
                              "-o", tmp_path / "x.xlsx"))
    assert f"tensor {extra} is not read" in line, line


def test_bare_bert_weights_with_harmless_tensors_equal_transformers(encoders, tmp_path):
    """The pooler, the position_ids buffer and a masked-LM head beside the model cannot
    change a layer: read, and equal."""
    tensors = {f"bert.{k}": v for k, v in weights(encoders["bert"]).items()}
    tensors["bert.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    tensors["cls.predictions.bias"] = np.zeros(20, np.float32)
    assert any(k.startswith("bert.pooler.") for k in tensors)
    path = bare(tmp_path / "bert.safetensors", tensors)
    states = encoder_states(encoders["bert"], IDS)
    got = sheet_blocks("encoder-block", tmp_path / "b.xlsx", ["OUTPUT"], checkpoint=path,
                       heads=2, token_ids=",".join(map(str, IDS)))
    assert relative(got["formulas"]["OUTPUT"], states[1]) < RTOL


def test_bare_roberta_weights_count_positions_from_its_padding_row(encoders, tmp_path):
    """Without config.json, RoBERTa's names are BERT's: its all-zero position row 1 (the
    padding row) tells it, and the sheet counts positions from 2, as RobertaModel."""
    path = bare(tmp_path / "roberta.safetensors", weights(encoders["roberta"]))
    states = encoder_states(encoders["roberta"], IDS)
    book = api.build("encoder-block", tmp_path / "r.xlsx", checkpoint=path, heads=2,
                     token_ids=",".join(map(str, IDS)), layout="blocks")
    assert "RoBERTa" in book.note
    got = evaluated_blocks(tmp_path / "r.xlsx", book.values, ["X"])
    assert relative(got["X"], states[0]) < RTOL
    # a zero row that is not row 1: RoBERTa with another padding id, which a bare file
    # cannot tell
    tensors = weights(encoders["roberta"])
    table = tensors["embeddings.position_embeddings.weight"].copy()
    table[1], table[3] = 1.0, 0.0
    tensors["embeddings.position_embeddings.weight"] = table
    line = one_line_error(cli("build", "encoder-block", "--checkpoint",
                              bare(tmp_path / "other.safetensors", tensors), "--heads", "2",
                              "--token-ids", "2,7", "-o", tmp_path / "x.xlsx"))
    assert "config.json" in line and "position row 3 all zeros" in line


# -- GPT-2 --------------------------------------------------------------------------------------



def gpt2_block_io(folder: Path, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    from helpers.models import gpt2_forward

    seen, _ = gpt2_forward(folder, ids)
    return seen[1]  # block 1's input and output


@pytest.mark.parametrize("act", [None] + sorted(GELU_OF))
def test_gpt2_activations_equal_transformers(tiny_gpt2, tmp_path, act):
    folder = variant(tiny_gpt2, tmp_path / "m", **({} if act is None else
                                               {"activation_function": act}))
    x, out = gpt2_block_io(folder, IDS)
    got = sheet_blocks("decoder-block", tmp_path / "d.xlsx", ["X", "OUTPUT"],
                       checkpoint=folder, layer=1, token_ids=",".join(map(str, IDS)))
    print(f"gpt2 {act} formulas: X {relative(got['formulas']['X'], x):.1e}, OUTPUT "
          f"{relative(got['formulas']['OUTPUT'], out):.1e}")
    assert relative(got["formulas"]["X"], x) < RTOL
    assert relative(got["formulas"]["OUTPUT"], out) < RTOL


def test_gpt2_values_the_sheet_does_not_compute_are_refused(tiny_gpt2, tmp_path):
    cases = [{"activation_function": act} for act in act2fn() if act not in GELU_OF]
    cases += [{"scale_attn_weights": False}, {"add_cross_attention": True}, {"n_head": 3}]
    for n, changes in enumerate(cases):
        folder = variant(tiny_gpt2, tmp_path / str(n), **changes)
        for kind in ("decoder-block", "gpt", "kv-cache"):
            line = refusal(kind, tmp_path / "x.xlsx", checkpoint=folder)
            assert next(iter(changes)) in line and "--" not in line, line
    # the kv-cache sheet's scores are divided by √d_k only
    folder = variant(tiny_gpt2, tmp_path / "inverse", scale_attn_by_inverse_layer_idx=True)
    line = refusal("kv-cache", tmp_path / "x.xlsx", checkpoint=folder)
    assert "scale_attn_by_inverse_layer_idx" in line


def test_gpt2_scores_divided_by_the_layer_index_equal_transformers(tiny_gpt2, tmp_path):
    """scale_attn_by_inverse_layer_idx: block 1's scores also divided by 2, live on the
    decoder-block sheet and in every block of the gpt sheet (its logits)."""
    from helpers.models import gpt2_forward

    folder = variant(tiny_gpt2, tmp_path / "m", scale_attn_by_inverse_layer_idx=True)
    (x, out), logits = gpt2_forward(folder, IDS)[0][1], gpt2_forward(folder, IDS)[1]
    assert relative(out, gpt2_block_io(tiny_gpt2, IDS)[1]) > 1e-3  # the setting tells
    ids = ",".join(map(str, IDS))
    got = sheet_blocks("decoder-block", tmp_path / "d.xlsx", ["X", "OUTPUT"], True,
                       checkpoint=folder, layer=1, token_ids=ids)
    for engine, blocks in got.items():
        print(f"decoder-block layer 1 {engine}: X {relative(blocks['X'], x):.1e}, OUTPUT "
              f"{relative(blocks['OUTPUT'], out):.1e}")
        assert relative(blocks["X"], x) < RTOL and relative(blocks["OUTPUT"], out) < RTOL
    got = sheet_blocks("gpt", tmp_path / "g.xlsx", ["LOGITS"], checkpoint=folder,
                       token_ids=ids)["formulas"]
    print(f"gpt LOGITS: {relative(got['LOGITS'], logits):.1e}")
    assert relative(got["LOGITS"], logits) < RTOL


def test_bare_gpt2_weights_with_an_unread_tensor_are_refused(tiny_gpt2, tmp_path):
    tensors = weights(tiny_gpt2)
    tensors["transformer.h.0.attn.bias"] = np.ones((1, 1, 16, 16), np.float32)  # old buffer
    ok = bare(tmp_path / "ok.safetensors", tensors)
    api.build("decoder-block", checkpoint=ok, heads=2, layout="blocks")
    tensors["transformer.h.0.attn.q_attn.weight"] = np.ones((8, 8), np.float32)
    line = refusal("decoder-block", tmp_path / "x.xlsx", heads=2,
                   checkpoint=bare(tmp_path / "bad.safetensors", tensors))
    assert "transformer.h.0.attn.q_attn.weight" in line


# -- LLaMA -------------------------------------------------------------------------------------



def assert_llama_equal(checkpoint, folder: Path, tmp_path: Path, layer: int, **flags):
    from helpers.models import embedded, llama_model, transcribed_layer

    model = llama_model(folder)
    x = embedded(model, IDS)
    for k in range(layer + 1):
        before, x = x, transcribed_layer(model, k, x)
    got = sheet_blocks("llama-block", tmp_path / "l.xlsx", ["X", "OUTPUT"],
                       checkpoint=checkpoint, layer=layer,
                       token_ids=",".join(map(str, IDS)), **flags)["formulas"]
    print(f"llama layer {layer}: X {relative(got['X'], before):.1e}, OUTPUT "
          f"{relative(got['OUTPUT'], x):.1e}")
    assert relative(got["X"], before) < RTOL and relative(got["OUTPUT"], x) < RTOL


@pytest.mark.parametrize("changes", [{}, {"rms_norm_eps": MISSING},
                                     {"rms_norm_eps": 1e-6, "pretraining_tp": 2}])
def test_llama_values_the_sheet_computes_equal_transformers(tiny_llama, tmp_path, changes):
    folder = variant(tiny_llama, tmp_path / "m", **changes)
    assert_llama_equal(folder, folder, tmp_path, 1)


def test_bare_llama_weights_at_layer_1_read_d_ff_and_kv_heads_from_the_shapes(tiny_llama,
                                                                             tmp_path):
    """The layers before --layer get the same sizes as it: d_ff (48×32 was read as 8×32
    before) and the key/value heads, from the tensors' shapes."""
    assert_llama_equal(tiny_llama / "model.safetensors", tiny_llama, tmp_path, 1, heads=2,
                       rms_eps=1e-5, rope_theta=100.0)


def test_llama_values_the_sheet_does_not_compute_are_refused(tiny_llama, tmp_path):
    cases = [{"hidden_act": act} for act in act2fn() if act != "silu"]
    cases += [{"head_dim": 2}, {"num_key_value_heads": 3}]
    # without the key, LlamaConfig's default (as many key/value heads as heads) does not fit
    # k_proj: refused naming it, as transformers refuses to load it
    cases += [{"num_key_value_heads": MISSING, "k_proj": None}]
    cases += [{"rope_parameters": {"rope_type": kind, "rope_theta": 100.0, "factor": 2.0}}
              for kind in ("linear", "dynamic", "yarn", "llama3", "longrope")]
    for n, changes in enumerate(cases):
        key = list(changes)[-1]
        changes = {k: v for k, v in changes.items() if k != "k_proj"}
        folder = variant(tiny_llama, tmp_path / str(n), **changes)
        line = refusal("llama-block", tmp_path / "x.xlsx", checkpoint=folder)
        assert key in line or (key == "rope_parameters" and "RoPE type" in line), line
        assert "--" not in line, line


def save_biased(folder: Path, model_type: str, **config) -> Path:
    """A seeded random LLaMA-style model with bias rows (moved off 0), saved."""
    import torch
    from helpers.models import LLAMA_SIZES
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(
        model_type, **LLAMA_SIZES, rope_theta=100.0, rms_norm_eps=1e-5,
        max_position_embeddings=64, **config))
    with torch.no_grad():
        for name, value in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                value.add_(0.3 * torch.randn_like(value))
            elif "proj" in name:
                value.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("model_type,config", [
    ("llama", {"attention_bias": True}), ("llama", {"mlp_bias": True}),
    ("llama", {"attention_bias": True, "mlp_bias": True}), ("qwen2", {})])
def test_biased_llama_layers_equal_transformers(tmp_path, model_type, config):
    """Qwen2's q/k/v biases and LLaMA's attention_bias (also o_proj) and mlp_bias, as live
    bias rows; from the folder and from the bare weights file (biases read by their
    presence)."""
    from helpers.models import embedded, transcribed_layer
    from transformers import AutoModelForCausalLM

    folder = save_biased(tmp_path / "m", model_type, **config)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager") \
        .double().eval().model
    x = embedded(model, IDS)
    before, x = x, transcribed_layer(model, 0, x)
    before, x = x, transcribed_layer(model, 1, x)
    for n, (checkpoint, flags) in enumerate((
            (folder, {}), (folder / "model.safetensors", {"heads": 2, "rms_eps": 1e-5,
                                                         "rope_theta": 100.0}))):
        path = tmp_path / f"l{n}.xlsx"
        got = sheet_blocks("llama-block", path, ["X", "OUTPUT"], n == 0 and model_type ==
                           "qwen2", checkpoint=checkpoint, layer=1,
                           token_ids=",".join(map(str, IDS)), **flags)
        for engine, blocks in got.items():
            print(f"{model_type} {config} {engine}: X {relative(blocks['X'], before):.1e}, "
                  f"OUTPUT {relative(blocks['OUTPUT'], x):.1e}")
            assert relative(blocks["X"], before) < RTOL
            assert relative(blocks["OUTPUT"], x) < RTOL


def test_qwen2_sliding_window_layers_are_refused(tmp_path):
    folder = save_biased(tmp_path / "m", "qwen2")
    for n, changes in enumerate(({"use_sliding_window": True},
                                 {"layer_types": ["sliding_attention", "full_attention"]})):
        line = refusal("llama-block", tmp_path / "x.xlsx",
                       checkpoint=variant(folder, tmp_path / str(n), **changes))
        assert next(iter(changes)) in line, line


def test_llama_bias_tensors_the_config_does_not_turn_on_are_refused(tmp_path):
    folder = save_biased(tmp_path / "m", "llama", attention_bias=True)
    variant(folder, tmp_path / "off", attention_bias=False)
    line = refusal("llama-block", tmp_path / "x.xlsx", checkpoint=tmp_path / "off")
    assert "self_attn.q_proj.bias" in line and "attention_bias" in line
    tensors = weights(folder)
    del tensors["model.layers.0.self_attn.k_proj.bias"]
    line = refusal("llama-block", tmp_path / "x.xlsx", heads=2,
                   checkpoint=bare(tmp_path / "b.safetensors", tensors))
    assert "model.layers.0.self_attn.k_proj.bias" in line


# -- Mamba -------------------------------------------------------------------------------------



def test_mamba_values_are_equal_or_refused(tiny_mamba, tmp_path):
    from helpers.models import loaded, transcribed_hidden_states

    states = transcribed_hidden_states(loaded(tiny_mamba), IDS)
    got = sheet_blocks("mamba-block", tmp_path / "m.xlsx", ["OUTPUT"], checkpoint=tiny_mamba,
                       layer=1, token_ids=",".join(map(str, IDS)))
    print(f"mamba formulas: OUTPUT {relative(got['formulas']['OUTPUT'], states[2]):.1e}")
    assert relative(got["formulas"]["OUTPUT"], states[2]) < RTOL
    cases = [{"hidden_act": act} for act in act2fn() if act != "silu"] + [{"use_bias": True}]
    for n, changes in enumerate(cases):
        folder = variant(tiny_mamba, tmp_path / str(n), **changes)
        line = refusal("mamba-block", tmp_path / "x.xlsx", checkpoint=folder)
        assert next(iter(changes)) in line, line
    folder = variant(tiny_mamba, tmp_path / "no-conv-bias", use_conv_bias=False)
    line = refusal("mamba-block", tmp_path / "x.xlsx", checkpoint=folder)
    assert "conv1d.bias" in line and "use_conv_bias" in line
    tensors = {**weights(tiny_mamba), "backbone.layers.0.mixer.in_proj.bias":
               np.ones(2 * 2 * 8, np.float32)}
    line = refusal("mamba-block", tmp_path / "x.xlsx",
                   checkpoint=bare(tmp_path / "b.safetensors", tensors))
    assert "backbone.layers.0.mixer.in_proj.bias" in line


# -- text, and messages that name what the user gave --------------------------------------------

def test_a_tokenizer_that_truncates_does_not_cut_the_text(encoders, tmp_path):
    """A tokenizer.json saved with truncation at 4 tokens: the text's 6 ids all reach the
    sheet; 20 ids, more than the model's 16 positions, are refused."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    folder = tmp_path / "bert"
    shutil.copytree(encoders["bert"], folder)
    words = [f"w{i}" for i in range(20)]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.enable_truncation(4)
    tokenizer.save(str(folder / "tokenizer.json"))
    book = api.build("encoder-block", checkpoint=folder, text="w2 w3 w4 w5 w6 w7",
                     layout="blocks")
    assert book.params.seq_len == 6
    line = one_line_error(cli("build", "encoder-block", "--checkpoint", folder, "--text",
                              " ".join(words), "-o", tmp_path / "x.xlsx"))
    assert "20 tokens" in line and "16" in line


def test_messages_name_what_the_user_gave(encoders, tmp_path):
    folder = variant(encoders["bert"], tmp_path / "silu", hidden_act="silu")
    line = one_line_error(cli("build", "encoder-block", "--checkpoint", folder,
                              "-o", tmp_path / "x.xlsx"))
    assert "hidden_act" in line and "--activation" not in line
    line = one_line_error(cli("build", "encoder-block", "--checkpoint", encoders["bert"],
                              "--layer", "1", "--token-ids", "2,7", "--embeddings",
                              "-o", tmp_path / "x.xlsx"))
    assert "--embeddings" in line and "--layer 1" in line and "no input" not in line
    line = one_line_error(cli("build", "encoder-block", "--checkpoint", encoders["bert"],
                              "--heads", "3", "-o", tmp_path / "x.xlsx"))
    assert "--heads 3" in line and "--d-model" not in line
