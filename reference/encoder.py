"""A whole BERT-family sentence encoder (transformers' BertModel, RobertaModel or
DistilBertModel, eval, one text without padding), then the sentence-transformers head.

Glossary: n tokens with ids t_i (whole numbers 0 … vocab−1), WORD_EMB the word-embedding
table (vocab×d), POS_EMB the position rows of the n tokens, TYPE_EMB token type 0's row;
L post-LN layers (reference/encoder_block.py), each layer's weights named with the suffix
_L1 … _LL; a second text's blocks end in _2.
  TOK_EMB_i = WORD_EMB[t_i];   EMB_SUM = TOK_EMB + POS_EMB + TYPE_EMB
  h_0 = EMBEDDED = LN_EMB(EMB_SUM)   (transformers' hidden_states[0])
  h_l = OUTPUT_Ll = layer_l(h_{l−1})   (hidden_states[l])
  POOLED = Σ_i h_L,i / n (mean over the attention mask, all ones for one text),
           h_L,0 (CLS) or max_i h_L,i (max)
  EMBEDDING = POOLED / max(‖POOLED‖₂, 1e-12) (Normalize), else POOLED
  --focus r: FOCUS_ATTN_(l,h) = WEIGHTS_h,l[r−1]; FOCUS_WEIGHT its max; FOCUS_KEY the
           first key (from 1) with it; FOCUS_KEY_ID that key's token id
  SIMILARITY = EMBEDDING·EMBEDDING_2 / (‖EMBEDDING‖·‖EMBEDDING_2‖)
  COST_HELD = L·H·n², COST_MACS = 2·L·n²·d (reference/cost.py's lengths)
"""

from types import SimpleNamespace

import numpy as np

from reference.cost import cost_blocks, lengths
from reference.encoder_block import encoder_block_ref, layer_norm_steps

NORM_FLOOR = 1e-12  # sentence-transformers' Normalize: x / max(‖x‖, 1e-12)


def sentence_steps(ids: np.ndarray, positions: np.ndarray, inputs: dict[str, np.ndarray],
                   params, focus: int | None = None) -> dict[str, np.ndarray]:
    """One text through the embedding step, every layer and the head (and where token
    `focus` looks); names without the text's suffix."""
    steps = {"TOK_EMB": inputs["WORD_EMB"][ids.astype(int)]}
    steps["EMB_SUM"] = steps["TOK_EMB"] + positions + inputs["TYPE_EMB"]
    steps.update(layer_norm_steps(steps["EMB_SUM"], inputs["EMB_GAMMA"], inputs["EMB_BETA"],
                                  "EMB", "EMBEDDED", params.ln_eps))
    layer_params = SimpleNamespace(heads=params.heads, activation=params.activation,
                                   gelu=params.gelu, ln_eps=params.ln_eps, pre_ln=False,
                                   embeddings=False)
    h = steps["EMBEDDED"]
    for layer in range(1, params.layers + 1):
        sfx = f"_L{layer}"
        weights = {name.removesuffix(sfx): value for name, value in inputs.items()
                   if name.endswith(sfx)}
        block = encoder_block_ref({**weights, "X": h}, layer_params)
        steps.update({name + sfx: value for name, value in block.items()})
        h = block["OUTPUT"]
    if focus is not None:
        steps.update(focus_steps(steps, ids, focus, params))
    if params.pooling == "none":
        return steps
    if params.pooling == "mean":    # Σ_i m_i h_i / max(Σ_i m_i, 1e-9), m = 1
        steps["POOLED"] = h.mean(axis=0, keepdims=True)
    elif params.pooling == "cls":
        steps["POOLED"] = h[:1]
    else:                           # max over the (unmasked) rows
        steps["POOLED"] = h.max(axis=0, keepdims=True)
    if params.normalize:
        steps["POOLED_NORM"] = np.sqrt((steps["POOLED"] ** 2).sum(keepdims=True))
        steps["EMBEDDING"] = steps["POOLED"] / np.maximum(steps["POOLED_NORM"], NORM_FLOOR)
    else:
        steps["EMBEDDING"] = steps["POOLED"].copy()
    return steps


def focus_steps(steps: dict[str, np.ndarray], ids: np.ndarray, focus: int,
                params) -> dict[str, np.ndarray]:
    """Row r = focus − 1 of every layer's and head's WEIGHTS (rows l·H + h), its largest
    weight, the first key (from 1) with it and that key's token id."""
    r = focus - 1
    attention = np.array([steps[f"WEIGHTS_H{h}_L{layer}"][r]
                          for layer in range(1, params.layers + 1)
                          for h in range(1, params.heads + 1)])
    keys = attention.argmax(axis=1)  # the first of equal maxima, as MIN(IF(…))
    return {"FOCUS_POS": np.arange(1, len(ids) + 1, dtype=float)[None, :],
            "FOCUS_ATTN": attention, "FOCUS_WEIGHT": attention.max(axis=1, keepdims=True),
            "FOCUS_KEY": (keys + 1.0)[:, None], "FOCUS_KEY_ID": ids[keys][:, None]}


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a·b / (‖a‖·‖b‖) of two rows, as a 1×1 block."""
    a, b = a[0], b[0]
    return np.array([[(a @ b) / (np.sqrt(a @ a) * np.sqrt(b @ b))]])


def costs(params) -> dict[str, np.ndarray]:
    """The cost table: attention weights held, L·H·n², and the multiply-adds of Q·Kᵀ and
    A·V, 2·L·n²·d, at the sheet's n and at 1k, 4k, 32k tokens."""
    n, d, heads, layers = params.seq_len, params.d_model, params.heads, params.layers
    at = lengths(n)
    return cost_blocks([n, d, heads, layers], at, COST_HELD=layers * heads * at ** 2,
                       COST_MACS=2 * layers * at ** 2 * d)


def encoder_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    steps = sentence_steps(inputs["TOKEN_IDS"][:, 0], inputs["POS_EMB"], inputs, params,
                           params.focus)
    steps.update(costs(params))
    if params.seq_len2 is None:
        return steps
    second = sentence_steps(inputs["TOKEN_IDS_2"][:, 0], inputs["POS_EMB_2"], inputs, params)
    steps.update({name + "_2": value for name, value in second.items()})
    steps["SIMILARITY"] = cosine(steps["EMBEDDING"], steps["EMBEDDING_2"])
    return steps
