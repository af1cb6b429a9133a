"""Where a model family keeps each of our inputs: one small table per family, as data.

Each entry maps an input block of the sheets to the checkpoint's tensor name ({layer} is
the layer number) and how it enters: LINEAR is an nn.Linear weight, stored out×in, which the
loader transposes into the sheets' X·W orientation (in×out); ROW is a vector (a bias, a
LayerNorm γ or β) that becomes a 1×d row; TABLE is an embedding table whose rows are looked up
by position or token id. A new family (GPT-2, LLaMA, …) adds one table the same way.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any

LINEAR, ROW, TABLE = "linear", "row", "table"
# MATRIX: a matrix taken as stored (Mamba's A_log, channels×state); CONV: a depthwise
# nn.Conv1d weight, channels×1×k, which the loader turns into k×channels (tap j in row j)
MATRIX, CONV = "matrix", "conv"


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]      # config.json's model_type values it reads
    # the tensor every checkpoint of the family holds (layer 0): where it is found tells
    # the prefix ("" for BertModel, "bert." inside BertForMaskedLM, …)
    anchor: str
    layer: dict[str, tuple[str, str]]         # input -> (tensor name, LINEAR | ROW)
    embeddings: dict[str, tuple[str, str]]    # input -> (tensor name, ROW | TABLE)
    # config.json key -> our parameter
    config: dict[str, str]
    layers_key: str                   # config.json's number of layers
    post_ln: bool = True              # LayerNorm after each residual (BERT) or before
    # config.json key -> the family's default (its transformers config class's), taken
    # when the key is missing, for the keys in `config` and the activation
    defaults: dict[str, Any] = field(default_factory=dict)
    # config.json key -> the values the sheets compute: any other value is refused, naming
    # the key (a missing key takes its default in `defaults`, else the first value here)
    fixed: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    activation_key: str | None = None  # config.json's activation ("hidden_act", …)
    # tensors under the prefix that cannot change a layer ({layer}: any layer number):
    # buffers, the pooler, the final norm
    harmless: tuple[str, ...] = ()
    # where task heads sit beside the model (applied after its last layer)
    heads: tuple[str, ...] = ()
    # our parameters the family's code fixes (DistilBERT's LayerNorm eps), not its config
    constants: dict[str, Any] = field(default_factory=dict)
    # the position of token p: "index" (p) or "after_padding" (RoBERTa: padding_idx + 1 + p)
    positions: str = "index"


def _layer_table(base: str, linears, norms, how: str) -> dict[str, tuple[str, str]]:
    """W_n/B_n from each (n, module) of `linears` (weights entering as `how`), γ and β of
    each (LN, module) of `norms`; tensor names under `base`."""
    table = {}
    for ours, theirs in linears:
        table[f"W_{ours}"] = (base + theirs + ".weight", how)
        table[f"B_{ours}"] = (base + theirs + ".bias", ROW)
    for ours, theirs in norms:
        table[f"{ours}_GAMMA"] = (base + theirs + ".weight", ROW)
        table[f"{ours}_BETA"] = (base + theirs + ".bias", ROW)
    return table


# BertConfig keys whose other values change the mathematics of a layer in ways the sheets do
# not compute: a causal mask (is_decoder), cross-attention, relative position scores (kept
# by older transformers as distance_embedding tensors)
BERT_FIXED = {"is_decoder": (False,), "add_cross_attention": (False,),
              "position_embedding_type": ("absolute",)}
BERT_HARMLESS = ("embeddings.position_ids", "embeddings.token_type_ids", "pooler.dense.weight",
                 "pooler.dense.bias")


def _bert_layer() -> dict[str, tuple[str, str]]:
    return _layer_table("encoder.layer.{layer}.",
                        (("Q", "attention.self.query"), ("K", "attention.self.key"),
                         ("V", "attention.self.value"), ("O", "attention.output.dense"),
                         ("1", "intermediate.dense"), ("2", "output.dense")),
                        (("LN1", "attention.output.LayerNorm"), ("LN2", "output.LayerNorm")),
                        LINEAR)


BERT = Family(
    name="BERT",
    model_types=("bert",),
    anchor="encoder.layer.0.attention.self.query.weight",
    layer=_bert_layer(),
    embeddings={"WORD_EMB": ("embeddings.word_embeddings.weight", TABLE),
                "POS_EMB": ("embeddings.position_embeddings.weight", TABLE),
                "TYPE_EMB": ("embeddings.token_type_embeddings.weight", TABLE),
                "EMB_GAMMA": ("embeddings.LayerNorm.weight", ROW),
                "EMB_BETA": ("embeddings.LayerNorm.bias", ROW)},
    config={"hidden_size": "d_model", "num_attention_heads": "heads",
            "intermediate_size": "d_ff", "layer_norm_eps": "ln_eps"},
    layers_key="num_hidden_layers",
    defaults={"num_attention_heads": 12, "layer_norm_eps": 1e-12, "hidden_act": "gelu"},
    fixed=BERT_FIXED,
    activation_key="hidden_act",
    harmless=BERT_HARMLESS,
    heads=("cls.", "classifier.", "qa_outputs.", "lm_head."),
)

# RoBERTa (and XLM-R, CamemBERT: the same code): BERT's names and layer, positions counted
# from padding_idx + 1 (pad_token_id, RobertaConfig's default 1)
ROBERTA = dataclasses.replace(
    BERT, name="RoBERTa", model_types=("roberta", "xlm-roberta", "camembert"),
    defaults={**BERT.defaults, "pad_token_id": 1}, positions="after_padding")


def _distilbert_layer() -> dict[str, tuple[str, str]]:
    return _layer_table("transformer.layer.{layer}.",
                        (("Q", "attention.q_lin"), ("K", "attention.k_lin"),
                         ("V", "attention.v_lin"), ("O", "attention.out_lin"),
                         ("1", "ffn.lin1"), ("2", "ffn.lin2")),
                        (("LN1", "sa_layer_norm"), ("LN2", "output_layer_norm")), LINEAR)


# DistilBERT: its own names, no token types, every LayerNorm's eps fixed at 1e-12 in its code
DISTILBERT = Family(
    name="DistilBERT",
    model_types=("distilbert",),
    anchor="transformer.layer.0.attention.q_lin.weight",
    layer=_distilbert_layer(),
    embeddings={"WORD_EMB": ("embeddings.word_embeddings.weight", TABLE),
                "POS_EMB": ("embeddings.position_embeddings.weight", TABLE),
                "EMB_GAMMA": ("embeddings.LayerNorm.weight", ROW),
                "EMB_BETA": ("embeddings.LayerNorm.bias", ROW)},
    config={"dim": "d_model", "n_heads": "heads", "hidden_dim": "d_ff"},
    layers_key="n_layers",
    defaults={"n_heads": 12, "activation": "gelu"},
    fixed={"sinusoidal_pos_embds": (False,)},
    activation_key="activation",
    harmless=("embeddings.position_ids",),
    heads=("vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "pre_classifier.",
           "classifier.", "qa_outputs."),
    constants={"ln_eps": 1e-12},
)


def _llama_layer() -> dict[str, tuple[str, str]]:
    base = "layers.{layer}."
    table = {"RMS1_WEIGHT": (base + "input_layernorm.weight", ROW),
             "RMS2_WEIGHT": (base + "post_attention_layernorm.weight", ROW)}
    for ours, theirs in (("Q", "self_attn.q_proj"), ("K", "self_attn.k_proj"),
                         ("V", "self_attn.v_proj"), ("O", "self_attn.o_proj"),
                         ("GATE", "mlp.gate_proj"), ("UP", "mlp.up_proj"),
                         ("DOWN", "mlp.down_proj")):
        table[f"W_{ours}"] = (base + theirs + ".weight", LINEAR)
        table[f"B_{ours}"] = (base + theirs + ".bias", ROW)  # read when the layer has it
    return table


# LlamaModel's names ("model." before them inside LlamaForCausalLM, found as the prefix);
# rope_theta of newer configs sits in rope_parameters: models/llama.py reads it
LLAMA = Family(
    name="LLaMA",
    model_types=("llama",),
    anchor="layers.0.self_attn.q_proj.weight",
    layer=_llama_layer(),
    embeddings={"WORD_EMB": ("embed_tokens.weight", TABLE)},
    config={"hidden_size": "d_model", "num_attention_heads": "heads",
            "num_key_value_heads": "kv_heads", "intermediate_size": "d_ff",
            "rms_norm_eps": "rms_eps", "rope_theta": "rope_theta"},
    layers_key="num_hidden_layers",
    post_ln=False,
    defaults={"num_attention_heads": 32, "rms_norm_eps": 1e-6, "hidden_act": "silu"},
    fixed={"hidden_act": ("silu",)},
    harmless=("norm.weight", "rotary_emb.inv_freq", "layers.{layer}.self_attn.rotary_emb.inv_freq"),
    heads=("lm_head.", "score."),
)
# config.json bias switches -> the llama-block parameters they turn on
LLAMA_BIASES = {"attention_bias": ("qkv_bias", "o_bias"), "mlp_bias": ("mlp_bias",)}
# Qwen2: LLaMA's layer and names, q/k/v always biased (no key), full attention only
QWEN2 = dataclasses.replace(
    LLAMA, name="Qwen2", model_types=("qwen2",),
    fixed={**LLAMA.fixed, "use_sliding_window": (False,)}, constants={"qkv_bias": True})


def _mamba_layer() -> dict[str, tuple[str, str]]:
    mixer = "layers.{layer}.mixer."
    return {"NORM_W": ("layers.{layer}.norm.weight", ROW),
            "W_IN": (mixer + "in_proj.weight", LINEAR),
            "CONV_W": (mixer + "conv1d.weight", CONV), "CONV_B": (mixer + "conv1d.bias", ROW),
            "W_X": (mixer + "x_proj.weight", LINEAR),
            "W_DELTA": (mixer + "dt_proj.weight", LINEAR),
            "DELTA_BIAS": (mixer + "dt_proj.bias", ROW),
            "A_LOG": (mixer + "A_log", MATRIX), "D": (mixer + "D", ROW),
            "W_OUT": (mixer + "out_proj.weight", LINEAR)}


# MambaModel's names ("backbone." inside MambaForCausalLM), for `mamba-block`: read by
# workbook_builder/models/mamba.py (no heads, a conv weight), not by loader.model_inputs
MAMBA = Family(
    name="Mamba",
    model_types=("mamba",),
    anchor="layers.0.mixer.in_proj.weight",
    layer=_mamba_layer(),
    embeddings={"X": ("embeddings.weight", TABLE)},
    config={"layer_norm_epsilon": "ln_eps"},
    layers_key="num_hidden_layers",
    post_ln=False,
    defaults={"layer_norm_epsilon": 1e-5},
    fixed={"use_bias": (False,), "hidden_act": ("silu",)},
    harmless=("norm_f.weight", "embedding.weight"),
    heads=("lm_head.",),
)


# GPT-2's Conv1D stores its weight in×out, already the sheets' X·W orientation: CONV1D is
# read as it is. c_attn holds W_Q, W_K and W_V side by side (d × 3d, its bias 3d): "k/3"
# after the way it enters takes the k-th third (workbook_builder/models/gpt2.py reads them)
CONV1D = "conv1d"


def _gpt2_layer() -> dict[str, tuple[str, str]]:
    base = "h.{layer}."
    table = {}
    for k, n in enumerate("QKV"):
        table[f"W_{n}"] = (base + "attn.c_attn.weight", f"{CONV1D} {k}/3")
        table[f"B_{n}"] = (base + "attn.c_attn.bias", f"{ROW} {k}/3")
    return {**table, **_layer_table(base, (("O", "attn.c_proj"), ("1", "mlp.c_fc"),
                                           ("2", "mlp.c_proj")),
                                    (("LN1", "ln_1"), ("LN2", "ln_2")), CONV1D)}


GPT2 = Family(
    name="GPT-2",
    model_types=("gpt2",),
    anchor="h.0.attn.c_attn.weight",
    layer=_gpt2_layer(),
    embeddings={"WTE": ("wte.weight", TABLE), "WPE": ("wpe.weight", TABLE),
                "LNF_GAMMA": ("ln_f.weight", ROW), "LNF_BETA": ("ln_f.bias", ROW)},
    config={"n_embd": "d_model", "n_head": "heads", "n_inner": "d_ff",
            "layer_norm_epsilon": "ln_eps", "vocab_size": "vocab"},
    layers_key="n_layer",
    post_ln=False,
    defaults={"n_head": 12, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"},
    # scale_attn_weights: scores divided by √d_k; reorder_and_upcast_attn only changes the
    # float32 rounding of transformers' own computation, not the mathematics
    fixed={"scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False, True),
           "add_cross_attention": (False,)},
    activation_key="activation_function",
    harmless=("h.{layer}.attn.bias", "h.{layer}.attn.masked_bias", "ln_f.weight", "ln_f.bias"),
    heads=("lm_head.", "score.", "multiple_choice_head."),
)

FAMILIES = (BERT, ROBERTA, DISTILBERT, LLAMA, QWEN2, MAMBA, GPT2)
# the kinds a checkpoint can fill, and the family tables they read
ENCODERS = (BERT, ROBERTA, DISTILBERT)
KIND_FAMILIES = {"multihead": ENCODERS, "encoder-block": ENCODERS, "llama-block": (LLAMA, QWEN2),
                 "decoder-block": (GPT2,), "gpt": (GPT2,)}
# config.json hidden_act -> (activation, gelu form): the activations encoder-block computes
# exactly (gelu_fast, quick_gelu, silu … are other functions: refused)
ACTIVATIONS = {"gelu": ("gelu", "exact"), "gelu_new": ("gelu", "tanh"),
               "gelu_pytorch_tanh": ("gelu", "tanh"), "relu": ("relu", "tanh")}
# tensor names that tell other families apart, for a helpful error
SIGNATURES = {"GPT-2": "h.0.attn.c_attn.weight", "LLaMA": "layers.0.self_attn.q_proj.weight",
              "BERT": "encoder.layer.0.attention.self.query.weight",
              "DistilBERT": "transformer.layer.0.attention.q_lin.weight",
              "T5": "encoder.block.0.layer.0.SelfAttention.q.weight",
              "Mamba": "layers.0.mixer.in_proj.weight"}
