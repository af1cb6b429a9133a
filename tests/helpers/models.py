"""Tiny checkpoints of every model family the loaders read (BERT, GPT-2, LLaMA, Mamba),
made from a config with save_pretrained, and what transformers computes with them: the
reference every checkpoint test holds a sheet to (the fixtures of tests/conftest.py save
each once per run)."""

import shutil
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from workbook_builder.engines.libreoffice import evaluate_with_libreoffice

LLAMA_SIZES = {"vocab_size": 32, "hidden_size": 8, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 12}


def perturb_biases_and_norms(model, *norms: str) -> None:
    """Every bias, and every parameter whose name holds one of `norms`, moved by N(0, 0.3):
    the 0s and 1s they start at would hide a weight read wrongly."""
    import torch

    with torch.no_grad():
        for name, value in model.named_parameters():
            if any(norm in name for norm in norms) or name.endswith("bias"):
                value.add_(0.3 * torch.randn_like(value))


def save_llama(folder: Path, sizes: dict) -> Path:
    """A seeded random LlamaForCausalLM (rope_theta 100, eps 1e-5), RMSNorm weights moved
    off 1, saved with save_pretrained ("model." before every layer name)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**sizes, rope_theta=100.0, rms_norm_eps=1e-5,
                         max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if "norm" in name:
                value.add_(0.3 * torch.randn_like(value))
            elif "proj" in name:  # the default init (std 0.02) would leave attention flat
                value.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    return folder


def llama_model(folder: Path):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager") \
        .double().eval().model


def transcribed_layer(model, layer: int, x: np.ndarray) -> np.ndarray:
    """The same layer transcribed from transformers' modeling_llama.py in float64 throughout
    (their RMSNorm, rotary tables and softmax cast to float32)."""
    import torch

    config, block = model.config, model.layers[layer]
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dim = config.hidden_size // heads
    base = (config.rope_parameters["rope_theta"] if hasattr(config, "rope_parameters")
            else config.rope_theta)

    def rms_norm(norm, h):  # LlamaRMSNorm.forward without .to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        return norm.weight * (h * torch.rsqrt(variance + norm.variance_epsilon))

    def rotate_half(t):
        return torch.cat((-t[..., dim // 2:], t[..., :dim // 2]), dim=-1)

    with torch.no_grad():
        h = torch.tensor(x[None])
        n = h.shape[1]
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        attn = block.self_attn
        normed = rms_norm(block.input_layernorm, h)
        q = attn.q_proj(normed).view(1, n, heads, dim).transpose(1, 2)
        k = attn.k_proj(normed).view(1, n, kv_heads, dim).transpose(1, 2)
        v = attn.v_proj(normed).view(1, n, kv_heads, dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=1)  # repeat_kv
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = q @ k.transpose(2, 3) * dim ** -0.5
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(1, n, -1)
        h = h + attn.o_proj(out)
        normed = rms_norm(block.post_attention_layernorm, h)
        mlp = block.mlp
        h = h + mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(normed))
                              * mlp.up_proj(normed))
    return h[0].numpy()


def embedded(model, ids) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model.embed_tokens(torch.tensor([ids]))[0].numpy()


MAMBA_SIZES = {"vocab_size": 16, "hidden_size": 4, "state_size": 3, "num_hidden_layers": 2}


def save_mamba(folder: Path, sizes: dict) -> Path:
    """A random MambaForCausalLM in float64 (expand 2, conv kernel 4, dt rank ⌈d/16⌉), its
    RMSNorm weights and D moved off their initial 1 so that they tell, saved with
    save_pretrained."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(**sizes, layer_norm_epsilon=1e-5)).double().eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith(("norm.weight", ".D")):
                value.add_(0.3 * torch.randn_like(value))
    model.save_pretrained(folder)
    return folder


def loaded(folder: Path):
    import torch
    from transformers import MambaForCausalLM

    return MambaForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()


def transcribed_block(block, x):
    """MambaBlock.forward and MambaMixer's full-sequence path (no cache, the recurrent
    loop of mamba_selective_scan), statement by statement, without their float32 casts."""
    import torch
    import torch.nn.functional as F

    mixer = block.mixer
    residual = x
    variance = x.pow(2).mean(-1, keepdim=True)
    hidden = block.norm.weight * (x * torch.rsqrt(variance + block.norm.variance_epsilon))
    projected = mixer.in_proj(hidden).transpose(1, 2)
    hidden, gate = projected.chunk(2, dim=1)
    seq_len = hidden.shape[-1]
    hidden = F.conv1d(hidden, mixer.conv1d.weight, mixer.conv1d.bias,
                      padding=mixer.conv_kernel_size - 1,
                      groups=mixer.intermediate_size)[:, :, :seq_len]
    hidden = F.silu(hidden)
    time_step, B, C = torch.split(mixer.x_proj(hidden.transpose(1, 2)),
                                  [mixer.time_step_rank, mixer.ssm_state_size,
                                   mixer.ssm_state_size], dim=-1)
    dt = F.softplus(mixer.dt_proj.weight @ time_step.transpose(1, 2)
                    + mixer.dt_proj.bias[..., None])
    A = -torch.exp(mixer.A_log)
    discrete_A = torch.exp(A[None, :, None, :] * dt[:, :, :, None])
    delta_b_u = dt[:, :, :, None] * B[:, None, :, :] * hidden[:, :, :, None]
    state = torch.zeros(x.shape[0], mixer.intermediate_size, mixer.ssm_state_size,
                        dtype=x.dtype)
    outputs = []
    for t in range(seq_len):
        state = discrete_A[:, :, t] * state + delta_b_u[:, :, t]
        outputs.append(torch.matmul(state, C[:, t, :].unsqueeze(-1))[:, :, 0])
    scan = torch.stack(outputs, dim=-1) + hidden * mixer.D[None, :, None]
    scan = scan * F.silu(gate)
    return residual + mixer.out_proj(scan.transpose(1, 2))


def transcribed_hidden_states(model, ids) -> list[np.ndarray]:
    """The embedding rows, then each block's output, by the transcription."""
    import torch

    with torch.no_grad():
        x = model.backbone.embeddings(torch.tensor([ids]))
        states = [x]
        for block in model.backbone.layers:
            x = transcribed_block(block, x)
            states.append(x)
    return [s[0].numpy() for s in states]


def save_tiny_gpt2(folder: Path, *, n_embd: int = 8, n_head: int = 2, n_layer: int = 2,
                   vocab: int = 50, n_positions: int = 16, n_inner: int | None = None,
                   **config) -> Path:
    """A random GPT2LMHeadModel (float64, seeded) saved with save_pretrained; LayerNorm γ, β
    and every bias moved away from their initial 1 and 0 so that each one tells."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt_config = GPT2Config(vocab_size=vocab, n_positions=n_positions, n_embd=n_embd,
                            n_layer=n_layer, n_head=n_head, n_inner=n_inner, bos_token_id=0,
                            eos_token_id=0, **config)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(gpt_config).double().eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                value.add_(0.3 * torch.randn_like(value))
            elif name.endswith("weight"):  # GPT-2's 0.02 init makes every block near identity
                value.mul_(10.0)
    model.save_pretrained(folder)
    return folder


def gpt2_forward(folder: Path, ids: list[int]):
    """transformers' GPT2LMHeadModel in float64 on these ids: each block's input and output
    (forward hooks on GPT2Block) and the logits."""
    import torch
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float64).eval()
    seen = []
    hooks = [block.register_forward_hook(
        lambda _m, args, out: seen.append((args[0][0].numpy(), out[0].numpy())))
        for block in model.transformer.h]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy()
    for hook in hooks:
        hook.remove()
    return seen, logits


def realistic_gpt2(tmp_path: Path):
    """A 2-layer GPT-2 of d = 64, 4 heads, vocab 256 and 32 positions, 16 token ids, and
    what it computes on them (`gpt2_forward`): folder, ids, each block's input and output,
    logits."""
    folder = save_tiny_gpt2(tmp_path / "gpt2", n_embd=64, n_head=4, vocab=256,
                            n_positions=32)
    ids = list(range(7, 7 + 16 * 13, 13))
    return folder, ids, *gpt2_forward(folder, ids)


WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "animal", "didn", "'", "t", "cross",
         "street", "because", "it", "was", "too", "tired", "."]


def save_tiny_bert(folder: Path) -> Path:
    """A random 2-layer BERT (d = 8, 2 heads, FFN 12, exact GELU, eps 1e-12) saved with
    save_pretrained (config.json + model.safetensors) and a WordPiece tokenizer.json."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=12,
                        max_position_embeddings=20, hidden_act="gelu", layer_norm_eps=1e-12)
    torch.manual_seed(0)
    model = BertModel(config)
    perturb_biases_and_norms(model, "LayerNorm")
    model.save_pretrained(folder)
    tokenizer = Tokenizer(WordPiece({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.normalizer = BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = BertPreTokenizer()
    tokenizer.post_processor = TemplateProcessing(single="[CLS] $A [SEP]",
                                                  special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def assert_close(got, exp, what, rtol: float = 1e-9):
    """The sheet's block within `rtol` of transformers', relative to the block's largest."""
    error = np.abs(got - exp).max() / max(1.0, np.abs(exp).max())
    print(f"{what}: max relative |sheet − transformers| = {error:.1e}")
    assert error < rtol, f"{what}: {error:.1e}"


def engine_values(path: Path, book, libreoffice: bool):
    """(engine, cell values) of a built book: the formulas engine's, and LibreOffice's when
    asked and installed."""
    yield "formulas", book.values
    if libreoffice and (shutil.which("soffice") or shutil.which("libreoffice")):
        yield "libreoffice", evaluate_with_libreoffice(path)


def tiny_checkpoints(folder: Path) -> dict[str, Path]:
    """The test suite's tiny random models of every family, saved with save_pretrained;
    empty without transformers."""
    if find_spec("transformers") is None:
        return {}
    return {"bert": save_tiny_bert(folder / "tiny-bert"),
            "gpt2": save_tiny_gpt2(folder / "tiny-gpt2"),
            "llama": save_llama(folder / "tiny-llama", LLAMA_SIZES),
            "mamba": save_mamba(folder / "tiny-mamba", MAMBA_SIZES)}


SENTENCE_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog",
                  "sat", "ran", "on", "mat", "park", "in", "quickly", "."]


def save_sentence_encoder(folder: Path, family: str, pooling: str, normalize: bool = True,
                          sizes: dict | None = None) -> Path:
    """A random BERT, RoBERTa or DistilBERT made from its transformers config, saved with
    save_pretrained beside a WordPiece tokenizer, then wrapped as a sentence-transformers
    folder: Transformer → Pooling(`pooling`) (→ Normalize), saved with
    `SentenceTransformer(modules=[…]).save`. LayerNorms and biases are moved off 1 and 0."""
    import warnings

    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import (
        BertConfig,
        BertModel,
        DistilBertConfig,
        DistilBertModel,
        PreTrainedTokenizerFast,
        RobertaConfig,
        RobertaModel,
    )

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from sentence_transformers.models import Normalize, Pooling, Transformer

    sizes = {"d": 10, "heads": 2, "layers": 3, "ffn": 14, **(sizes or {})}
    vocab = len(SENTENCE_WORDS)
    if family == "bert":
        config = BertConfig(vocab_size=vocab, hidden_size=sizes["d"],
                            num_hidden_layers=sizes["layers"],
                            num_attention_heads=sizes["heads"],
                            intermediate_size=sizes["ffn"], max_position_embeddings=24)
        model = BertModel(config, add_pooling_layer=False)
    elif family == "roberta":
        config = RobertaConfig(vocab_size=vocab, hidden_size=sizes["d"],
                               num_hidden_layers=sizes["layers"],
                               num_attention_heads=sizes["heads"],
                               intermediate_size=sizes["ffn"], max_position_embeddings=26,
                               pad_token_id=1, type_vocab_size=1)
        model = RobertaModel(config, add_pooling_layer=False)
    else:
        config = DistilBertConfig(vocab_size=vocab, dim=sizes["d"], n_layers=sizes["layers"],
                                  n_heads=sizes["heads"], hidden_dim=sizes["ffn"],
                                  max_position_embeddings=24)
        model = DistilBertModel(config)
    torch.manual_seed(7)
    with torch.no_grad():
        for name, value in model.named_parameters():
            value.normal_(0, 0.4)
            if "LayerNorm" in name or "layer_norm" in name:
                value.add_(1.0 if name.endswith("weight") else 0.0)
    raw = folder / "transformer"
    model.save_pretrained(raw)
    words = Tokenizer(WordPiece({w: i for i, w in enumerate(SENTENCE_WORDS)},
                                unk_token="[UNK]"))
    words.normalizer = BertNormalizer(lowercase=True)
    words.pre_tokenizer = BertPreTokenizer()
    words.post_processor = TemplateProcessing(single="[CLS] $A [SEP]",
                                              special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]",
                            cls_token="[CLS]", sep_token="[SEP]",
                            mask_token="[MASK]").save_pretrained(raw)
    transformer = Transformer(str(raw))
    modules = [transformer, Pooling(transformer.get_word_embedding_dimension(),
                                    pooling_mode=pooling)]
    SentenceTransformer(modules=modules + ([Normalize()] if normalize else []),
                        device="cpu").save(str(folder / "sentence"))
    return folder / "sentence"


def sentence_encodings(folder: Path, texts: list[str]):
    """SentenceTransformer(folder).encode(texts) with the model in float64, and each
    text's token ids and transformers' hidden_states (float64)."""
    import warnings

    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    encoder = SentenceTransformer(str(folder), device="cpu").double()
    embeddings = encoder.encode(texts, convert_to_numpy=True)
    model = AutoModel.from_pretrained(folder, dtype=torch.float64).eval()
    ids, states = [], []
    for text in texts:
        tokens = encoder.tokenizer(text)["input_ids"]
        with torch.no_grad():
            out = model(torch.tensor([tokens]), output_hidden_states=True)
        ids.append(tokens)
        states.append([h[0].numpy() for h in out.hidden_states])
    return np.asarray(embeddings, dtype=np.float64), ids, states


def export_onnx(folder, family: str):
    """A random BERT or DistilBERT (d = 10, 2 heads, 2 layers) exported by torch.onnx (opset
    17, the length dynamic), and the same weights saved with save_pretrained."""
    import warnings

    import torch
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

    warnings.simplefilter("ignore")
    if family == "bert":
        model = BertModel(BertConfig(vocab_size=17, hidden_size=10, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=14,
                                     max_position_embeddings=24), add_pooling_layer=False)
    else:
        model = DistilBertModel(DistilBertConfig(vocab_size=17, dim=10, n_layers=2, n_heads=2,
                                                 hidden_dim=14, max_position_embeddings=24))
    torch.manual_seed(11)
    with torch.no_grad():
        for _, value in model.named_parameters():
            value.normal_(0, 0.4)

    ids = torch.tensor([[2, 5, 7, 9, 3]])
    path = folder / f"{family}.onnx"
    torch.onnx.export(last_hidden_state(model.eval()), (ids, torch.ones_like(ids)), str(path),
                      input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={name: {1: "n"} for name in
                                    ("input_ids", "attention_mask", "last_hidden_state")})
    model.save_pretrained(folder / "saved")
    return path, folder / "saved"


def last_hidden_state(model):
    """`model` as a module whose one output is its last hidden state (an encoder's ONNX
    export), taking input_ids and attention_mask."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids,
                              attention_mask=attention_mask).last_hidden_state

    return LastHiddenState(model)
