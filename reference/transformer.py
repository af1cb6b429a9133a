"""An encoder-decoder Transformer (Vaswani et al. 2017; PyTorch's `nn.TransformerEncoderLayer`
and `nn.TransformerDecoderLayer` stacked, dropout 0), with greedy decoding, in the `X @ W`
orientation.

Glossary: n source ids s_i, WTE the embedding table (vocab×d) shared by both stacks and the
output layer; P = max(n, K) positions 0 … P−1; H heads of width d_k = d/H (contiguous column
slices); LN(r) = (r − μ)/√(σ² + eps)·γ + β per row (biased σ²); act = ReLU, exact GELU or
SiLU; c = √d (1 with no_scale).
  POS = PE (sinusoidal: PE[p,2i] = sin(p/10000^(2i/d)), PE[p,2i+1] = cos(…); halves:
        PE[p,i] = sin(…), PE[p,d/2+i] = cos(…)) or POS_EMB (per_stack: ENC_POS_EMB for the
        encoder, DEC_POS_EMB for the decoder)
  SRC_EMB_i = WTE[s_i];   ENC_X = c·SRC_EMB + POS[0 … n−1]
  embed_ln: ENC_X_LN = LN_ENC_EMB_LN(ENC_X) enters layer 1 (DEC_X_LN = LN_DEC_EMB_LN(DEC_X))
  encoder layer (post-LN): H1 = LN1(X + MHA(X));  OUTPUT = LN2(H1 + FFN(H1))
                (pre-LN):  R1 = X + MHA(LN1(X));  OUTPUT = R1 + FFN(LN2(R1))
  ENC_OUTPUT = the last layer's output (pre-LN: ENC_LNF of it)
  CROSS_K_Dl = ENC_OUTPUT·CROSS_W_K + CROSS_B_K, CROSS_V_Dl likewise (one per decoder layer)
  step t = 1 … K: DEC_IDS = [start, y_1 … y_{t−1}];  DEC_X = c·WTE[DEC_IDS] + POS[0 … t−1]
    decoder layer (post-LN): L1 = LN1(X + SA(X));  L2 = LN2(L1 + CA(L1));
                             OUTPUT = LN3(L2 + FFN(L2))
                  (pre-LN):  R1 = X + SA(LN1(X));  R2 = R1 + CA(LN2(R1));
                             OUTPUT = R2 + FFN(LN3(R2))
      SA causal over the prefix, CA(h): softmax((h·CROSS_W_Q + CROSS_B_Q)_h·CROSS_K_hᵀ/√d_k)·
      CROSS_V_h, heads concatenated, ·CROSS_W_O + CROSS_B_O
    LOGITS = last row (pre-LN: of DEC_LNF) ·WTEᵀ (+ LOGITS_BIAS)
    GEN_LOGITS = LOGITS with generate's banned ids at −10³⁰ (the pad id with ban_pad; all
    but bos_id at step 1 with forced_bos, unless forced_end forces step 1 = K; all but the
    end id at step K with forced_end);  PROBS = softmax(GEN_LOGITS or LOGITS)
    ARGMAX = the first id of the largest probability;  y_t = pad once the end id was chosen,
    else ARGMAX
  GENERATED = [y_1 … y_K]
"""

import numpy as np

from reference.cost import cost_blocks, lengths
from reference.encoder_block import (
    attention_steps,
    encoder_layer_steps,
    feed_forward_into,
    gelu_exact,
    layer_norm_steps,
    norm_into,
    self_attention_into,
)
from reference.positional import sinusoidal_angles, sinusoidal_pe
from reference.softmax import causal_allowed


def activation(x: np.ndarray, kind: str) -> np.ndarray:
    """ReLU, exact GELU or SiLU x·σ(x) (as torch's F.silu)."""
    if kind == "gelu":
        return gelu_exact(x)
    if kind == "silu":
        return x / (1.0 + np.exp(-x))
    return np.maximum(x, 0.0)


def decoder_layer(x: np.ndarray, w: dict[str, np.ndarray], cross_k: np.ndarray,
                  cross_v: np.ndarray, params) -> dict[str, np.ndarray]:
    """Every step of one decoder layer on the prefix rows x, the encoder's keys and values
    of this layer given."""
    eps, steps, t = params.ln_eps, {}, len(x)

    def act(h):
        return activation(h, params.activation)

    def self_attention(h):
        return self_attention_into(steps, h, w, params.heads, causal_allowed(t, t))

    def cross_attention(h):
        steps["CROSS_Q"] = h @ w["CROSS_W_Q"] + w["CROSS_B_Q"]
        steps.update(attention_steps(steps["CROSS_Q"], cross_k, cross_v, params.heads,
                                     np.ones((t, len(cross_k)), bool), "CROSS_"))
        steps["CROSS_ATTN"] = steps["CROSS_CONCAT"] @ w["CROSS_W_O"] + w["CROSS_B_O"]
        return steps["CROSS_ATTN"]

    if params.pre_ln:
        steps["RESID_1"] = x + self_attention(norm_into(steps, x, w, "LN1", "LN1_OUT", eps))
        steps["RESID_2"] = steps["RESID_1"] + cross_attention(
            norm_into(steps, steps["RESID_1"], w, "LN2", "LN2_OUT", eps))
        steps["OUTPUT"] = steps["RESID_2"] + feed_forward_into(
            steps, norm_into(steps, steps["RESID_2"], w, "LN3", "LN3_OUT", eps), w, act)
    else:
        steps["RESID_1"] = x + self_attention(x)
        h1 = norm_into(steps, steps["RESID_1"], w, "LN1", "LN1_OUT", eps)
        steps["RESID_2"] = h1 + cross_attention(h1)
        h2 = norm_into(steps, steps["RESID_2"], w, "LN2", "LN2_OUT", eps)
        steps["RESID_3"] = h2 + feed_forward_into(steps, h2, w, act)
        norm_into(steps, steps["RESID_3"], w, "LN3", "OUTPUT", eps)
    return steps


def _layer_weights(inputs: dict[str, np.ndarray], sfx: str) -> dict[str, np.ndarray]:
    return {name.removesuffix(sfx): value for name, value in inputs.items()
            if name.endswith(sfx)}


def transformer_costs(params) -> dict[str, np.ndarray]:
    """Multiply-adds of attention as functions of the length n (the target as long as the
    source, t = K for the decoder): the encoder L_e·2·n²·d, one decoder step with a KV cache
    L_d·2·t·d, cross-attention of a prefix of t rows L_d·2·t·n·d, and one step as this sheet
    computes it (the prefix recomputed) L_d·2·(t² + t·n)·d."""
    n, d, t = lengths(params.src_len), params.d_model, params.decode
    enc, dec = params.layers, params.dec_layers
    return cost_blocks([params.src_len, t, d, enc, dec], n,
                       COST_ENC=enc * 2 * n ** 2 * d,
                       COST_DEC_STEP=np.full(4, dec * 2 * t * d),
                       COST_CROSS=dec * 2 * t * n * d,
                       COST_SHEET_STEP=dec * 2 * (t * t + t * n) * d)


def transformer_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    wte, d, n = inputs["WTE"], params.d_model, params.src_len
    scale = 1.0 if params.no_scale else np.sqrt(d)
    positions = max(n, params.decode)
    steps: dict[str, np.ndarray] = {}
    if params.positions == "sinusoidal":
        steps["PE_ANGLE"] = sinusoidal_angles(positions, d, 10000)
        if params.sinusoid == "halves":  # Marian: every sin, then every cos
            steps["PE"] = np.concatenate([np.sin(steps["PE_ANGLE"]),
                                          np.cos(steps["PE_ANGLE"])], axis=1)
        else:
            steps["PE"] = sinusoidal_pe(steps["PE_ANGLE"])
        pos = dec_pos = steps["PE"]
    elif params.positions == "learned":
        pos = dec_pos = inputs["POS_EMB"]
    else:
        pos, dec_pos = inputs["ENC_POS_EMB"], inputs["DEC_POS_EMB"]
    src = inputs["SRC_IDS"][:, 0].astype(int)
    steps["SRC_EMB"] = wte[src]
    steps["ENC_X"] = steps["SRC_EMB"] * scale + pos[:n]
    x = steps["ENC_X"]
    if params.embed_ln:
        steps.update(layer_norm_steps(x, inputs["ENC_EMB_LN_GAMMA"], inputs["ENC_EMB_LN_BETA"],
                                      "ENC_EMB_LN", "ENC_X_LN", params.ln_eps))
        x = steps["ENC_X_LN"]
    for layer in range(1, params.layers + 1):
        sfx = f"_E{layer}"
        made = encoder_layer_steps(x, _layer_weights(inputs, sfx), params.heads,
                                   lambda h: activation(h, params.activation),
                                   params.ln_eps, params.pre_ln)
        steps.update({name + sfx: value for name, value in made.items()})
        x = made["OUTPUT"]
    if params.pre_ln:
        steps.update(layer_norm_steps(x, inputs["ENC_LNF_GAMMA"], inputs["ENC_LNF_BETA"],
                                      "ENC_LNF", "ENC_OUTPUT", params.ln_eps))
    else:
        steps["ENC_OUTPUT"] = x
    memory = steps["ENC_OUTPUT"]
    decoder = [_layer_weights(inputs, f"_D{layer}")
               for layer in range(1, params.dec_layers + 1)]
    for layer, w in enumerate(decoder, 1):
        steps[f"CROSS_K_D{layer}"] = memory @ w["CROSS_W_K"] + w["CROSS_B_K"]
        steps[f"CROSS_V_D{layer}"] = memory @ w["CROSS_W_V"] + w["CROSS_B_V"]
    chosen: list[int] = []
    for t in range(1, params.decode + 1):
        st = f"_T{t}"
        ids = np.array([params.start_id, *chosen])
        steps["DEC_IDS" + st] = ids.reshape(-1, 1).astype(float)
        steps["DEC_EMB" + st] = wte[ids]
        steps["DEC_X" + st] = steps["DEC_EMB" + st] * scale + dec_pos[:t]
        steps["MASK" + st] = causal_allowed(t, t).astype(float)
        x = steps["DEC_X" + st]
        if params.embed_ln:
            first = layer_norm_steps(x, inputs["DEC_EMB_LN_GAMMA"], inputs["DEC_EMB_LN_BETA"],
                                     "DEC_EMB_LN", "DEC_X_LN", params.ln_eps)
            steps.update({name + st: value for name, value in first.items()})
            x = first["DEC_X_LN"]
        for layer, w in enumerate(decoder, 1):
            made = decoder_layer(x, w, steps[f"CROSS_K_D{layer}"], steps[f"CROSS_V_D{layer}"],
                                 params)
            steps.update({f"{name}_D{layer}{st}": value for name, value in made.items()})
            x = made["OUTPUT"]
        if params.pre_ln:
            final = layer_norm_steps(x, inputs["DEC_LNF_GAMMA"], inputs["DEC_LNF_BETA"],
                                     "DEC_LNF", "DEC_FINAL", params.ln_eps)
            steps.update({name + st: value for name, value in final.items()})
            x = final["DEC_FINAL"]
        logits = x[-1:] @ wte.T
        if params.logits_bias:
            logits = logits + inputs["LOGITS_BIAS"]
        steps["LOGITS" + st] = logits
        if params.processed:  # generate's bans: −10³⁰ for the ids it never chooses here
            every_id = np.arange(params.vocab)
            banned = np.zeros(params.vocab, bool)
            if params.ban_pad:
                banned |= every_id == params.pad_id
            last_forced = params.forced_end and t == params.decode
            if params.forced_bos and t == 1 and not last_forced:
                banned |= every_id != params.bos_id
            if last_forced:
                banned |= every_id != params.end_id
            logits = np.where(banned, -1e30, logits)
            steps["GEN_LOGITS" + st] = logits
        steps["LOGIT_MAX" + st] = logits.max(keepdims=True)
        steps["LOGIT_EXP" + st] = np.exp(logits - steps["LOGIT_MAX" + st])
        steps["LOGIT_SUM" + st] = steps["LOGIT_EXP" + st].sum(keepdims=True)
        steps["PROBS" + st] = steps["LOGIT_EXP" + st] / steps["LOGIT_SUM" + st]
        argmax = int(np.argmax(steps["PROBS" + st][0]))
        steps["ARGMAX" + st] = np.array([[float(argmax)]])
        finished = params.end_id in chosen
        if t > 1:
            steps["FINISHED" + st] = np.array([[float(finished)]])
        chosen.append(params.pad_id if finished else argmax)
        steps["NEXT_TOKEN" + st] = np.array([[float(chosen[-1])]])
    steps["GENERATED"] = np.array(chosen, dtype=float).reshape(-1, 1)
    steps.update(transformer_costs(params))
    return steps
