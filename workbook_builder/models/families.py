"""Where a model family keeps each of our inputs: one small table per family, as data.

Each entry maps an input block of the sheets to the checkpoint's tensor name ({layer} is
the layer number) and how it enters: LINEAR is an nn.Linear weight, stored out×in, which the
loader transposes into the sheets' X·W orientation (in×out); ROW is a vector (a bias, a
LayerNorm γ or β) that becomes a 1×d row; TABLE is an embedding table whose rows are looked up
by position or token id. A new family (GPT-2, LLaMA, …) adds one table the same way.
"""

from dataclasses import dataclass

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
)


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
)

FAMILIES = (BERT, LLAMA, MAMBA, GPT2)
# the kinds a checkpoint can fill, and the family tables they read
KIND_FAMILIES = {"multihead": (BERT,), "encoder-block": (BERT,), "llama-block": (LLAMA,),
                 "decoder-block": (GPT2,), "gpt": (GPT2,)}
# config.json hidden_act -> (activation, gelu form)
ACTIVATIONS = {"gelu": ("gelu", "exact"), "gelu_new": ("gelu", "tanh"),
               "gelu_pytorch_tanh": ("gelu", "tanh"), "relu": ("relu", "tanh"),
               "silu": ("silu", "tanh")}
# tensor names that tell other families apart, for a helpful error
SIGNATURES = {"GPT-2": "h.0.attn.c_attn.weight", "LLaMA": "layers.0.self_attn.q_proj.weight",
              "T5": "encoder.block.0.layer.0.SelfAttention.q.weight",
              "Mamba": "layers.0.mixer.in_proj.weight"}
