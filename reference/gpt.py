"""A whole decoder-only model, as transformers' `GPT2LMHeadModel` (eval): token ids to the
next token.

Glossary: n tokens with ids t_i (whole numbers 0 … vocab−1), WTE the token embedding table
(vocab×d), WPE the position rows 0 … n−1 (n×d), L blocks (reference/decoder_block.py), each
block's weights named with the suffix _L1 … _LL.
  TOK_EMB_i = WTE[t_i];   EMBEDDED = TOK_EMB + WPE
  h_0 = EMBEDDED;   h_l = block_l(h_{l−1});   FINAL = LNF(h_L)
  LOGITS = FINAL·WTEᵀ (the output layer tied to the embedding)
  NEXT_PROBS = softmax(last row of LOGITS);   NEXT_TOKEN = argmax (the first on a tie)
With the vocabulary down the rows (`params.logits_down_rows`: a vocabulary wider than a
sheet's row, or asked for) the same steps come transposed, as the sheet lays them out:
  LOGITS = WTE·FINALᵀ (vocab × n);   NEXT_EXP, NEXT_PROBS one column (vocab × 1)
"""

import numpy as np

from reference.decoder_block import decoder_block_steps
from reference.encoder_block import layer_norm_steps


def gpt_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    ids = inputs["TOKEN_IDS"][:, 0].astype(int)
    wte = inputs["WTE"]
    steps = {"TOK_EMB": wte[ids]}
    steps["EMBEDDED"] = steps["TOK_EMB"] + inputs["WPE"]
    x = steps["EMBEDDED"]
    for layer in range(1, params.layers + 1):
        sfx = f"_L{layer}"
        weights = {name.removesuffix(sfx): value for name, value in inputs.items()
                   if name.endswith(sfx)}
        divisor = layer if params.scale_by_layer else 1  # scale_attn_by_inverse_layer_idx
        block = decoder_block_steps(x, weights, params.heads, params.ln_eps, params.gelu,
                                    divisor)
        steps["MASK"] = block.pop("MASK")  # one causal mask serves every block
        steps.update({name + sfx: value for name, value in block.items()})
        x = block["OUTPUT"]
    steps.update(layer_norm_steps(x, inputs["LNF_GAMMA"], inputs["LNF_BETA"], "LNF", "FINAL",
                                  params.ln_eps))
    steps["LOGITS"] = steps["FINAL"] @ wte.T
    last = steps["LOGITS"][-1:]
    steps["NEXT_MAX"] = last.max(keepdims=True)
    steps["NEXT_EXP"] = np.exp(last - steps["NEXT_MAX"])
    steps["NEXT_SUM"] = steps["NEXT_EXP"].sum(keepdims=True)
    steps["NEXT_PROBS"] = steps["NEXT_EXP"] / steps["NEXT_SUM"]
    steps["NEXT_TOKEN"] = np.array([[float(np.argmax(steps["NEXT_PROBS"][0]))]])
    if params.logits_down_rows:  # LOGITS = WTE·FINALᵀ = (FINAL·WTEᵀ)ᵀ
        for name in ("LOGITS", "NEXT_EXP", "NEXT_PROBS"):
            steps[name] = steps[name].T
    return steps
