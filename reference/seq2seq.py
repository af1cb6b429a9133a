"""A GRU encoder-decoder with Bahdanau attention, float64, as PyTorch's translation tutorial
("NLP From Scratch: Translation with a Sequence to Sequence Network and Attention") runs
it in eval mode (dropout off), one sentence, greedy decoding.

Rows are vectors and weights are (in × out), as on the sheet; PyTorch's nn.GRU stores
weight_ih (3H × in) with the gates in the order r, z, n, so ENC_W_I = weight_ih_l0ᵀ and its
columns are r | z | n, H each (likewise W_H, and the biases b_i, b_h).

Encoder, t = 1 … n (h_0 = 0), x_t = ENC_EMB[src_t] (dropout is the identity in eval mode):
    GX = X·W_I + b_I                    the input side of every gate, all rows at once
    GH_t = h_{t−1}·W_H + b_H            the recurrent side, one row per step
    r_t = σ(GX_t[r] + GH_t[r])          reset gate
    z_t = σ(GX_t[z] + GH_t[z])          update gate
    n_t = tanh(GX_t[n] + r_t ⊙ GH_t[n]) candidate state
    h_t = (1 − z_t) ⊙ n_t + z_t ⊙ h_{t−1}
ENC_OUTPUTS = [h_1; …; h_n],  s_0 = h_n.
Bidirectional (as PyTorch's chatbot tutorial combines nn.GRU(bidirectional=True)): a second
GRU with its own weights (`_REV`, nn.GRU's `…_l0_reverse`) runs up the rows from ←h_{n+1} = 0;
ENC_OUTPUTS = →h_t + ←h_t, and s_0 = the forward h_n (its `encoder_hidden[:1]`).

Decoder, step k = 1 … K, the previous id y_{k−1} (y_0 = SOS; with teacher forcing the
target id k − 1 instead of the argmax):
    e = DEC_EMB[y_{k−1}]
    WS = s_{k−1}·W_a + b_a    UH = ENC_OUTPUTS·U_a + b_U (once)
    PRE_j = WS + UH_j   HIDDEN = tanh(PRE)   e_j = HIDDEN_j·v_a + b_v   α = softmax_j(e)
    c = α·ENC_OUTPUTS     (without attention: c = h_n at every step, the bottleneck)
    x = [e; c]            the GRU step above on x and s_{k−1} gives s_k
    LOGITS = s_k·W_out + b_out     LOG_PROBS = LOGITS − m − ln Σ exp(LOGITS − m)
    y_k = argmax LOG_PROBS (the smallest id among equal maxima)
"""

import numpy as np

from reference.cost import cost_blocks, lengths
from reference.softmax import masked_softmax_steps


def sigmoid(x: np.ndarray) -> np.ndarray:
    """σ(x) = 1/(1 + e⁻ˣ), as the sheet writes it."""
    return 1.0 / (1.0 + np.exp(-x))


def gru_gates(gx: np.ndarray, h_prev: np.ndarray, w_h: np.ndarray,
              b_h: np.ndarray) -> dict[str, np.ndarray]:
    """One GRU step from the input side `gx` = x·W_I + b_I (1 × 3H) and the state before
    (1 × H): GH, R, Z, N and H as PyTorch's nn.GRU computes them."""
    size = h_prev.shape[1]
    gh = h_prev @ w_h + b_h                                          # h·W_H + b_H
    r = sigmoid(gx[:, :size] + gh[:, :size])                         # reset gate
    z = sigmoid(gx[:, size:2 * size] + gh[:, size:2 * size])         # update gate
    n = np.tanh(gx[:, 2 * size:] + r * gh[:, 2 * size:])             # candidate
    h = (1.0 - z) * n + z * h_prev                                   # new state
    return {"GH": gh, "R": r, "Z": z, "N": n, "H": h}


def log_softmax_steps(logits: np.ndarray) -> dict[str, np.ndarray]:
    """m = max, P = exp(x − m), ℓ = Σ P, log p = x − m − ln ℓ (one row)."""
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    total = e.sum(axis=1, keepdims=True)
    return {"OUT_MAX": m, "OUT_EXP": e, "OUT_SUM": total,
            "LOG_PROBS": logits - m - np.log(total)}


def encoder_steps(inputs: dict[str, np.ndarray], bidirectional: bool = False
                  ) -> dict[str, np.ndarray]:
    """SRC_EMB, ENC_GX, each step's ENC_GH/R/Z/N/H_Tt and ENC_OUTPUTS; bidirectional, also
    the backward GRU up the rows (ENC_GX_REV, ENC_BACK_…_Tt, t = n … 1, from its own
    weights) and ENC_OUTPUTS the sum of the two directions' states."""
    ids = inputs["SRC_IDS"][:, 0].astype(int)
    emb = inputs["ENC_EMBEDDING"][ids]                                # x_t = EMB[src_t]
    size = emb.shape[1]
    gx = emb @ inputs["ENC_W_I"] + inputs["ENC_B_I"]                  # X·W_I + b_I
    steps = {"SRC_EMB": emb, "ENC_GX": gx}
    h = np.zeros((1, size))                                           # h_0 = 0
    forward = []
    for t in range(len(ids)):
        gates = gru_gates(gx[t:t + 1], h, inputs["ENC_W_H"], inputs["ENC_B_H"])
        steps.update({f"ENC_{name}_T{t + 1}": value for name, value in gates.items()})
        h = gates["H"]
        forward.append(h)
    steps["ENC_OUTPUTS"] = np.vstack(forward)
    if bidirectional:
        gx_rev = emb @ inputs["ENC_W_I_REV"] + inputs["ENC_B_I_REV"]
        steps["ENC_GX_REV"] = gx_rev
        h = np.zeros((1, size))                                       # ←h_{n+1} = 0
        backward = [None] * len(ids)
        for t in reversed(range(len(ids))):                           # up the rows
            gates = gru_gates(gx_rev[t:t + 1], h, inputs["ENC_W_H_REV"],
                              inputs["ENC_B_H_REV"])
            steps.update({f"ENC_BACK_{name}_T{t + 1}": value for name, value in gates.items()})
            h = backward[t] = gates["H"]
        steps["ENC_OUTPUTS"] = steps["ENC_OUTPUTS"] + np.vstack(backward)  # →h_t + ←h_t
    return steps


def attention_steps(inputs: dict[str, np.ndarray], state: np.ndarray, uh: np.ndarray,
                    keys: np.ndarray) -> dict[str, np.ndarray]:
    """Bahdanau attention of the state before the step over every encoder output: WS,
    PRE, HIDDEN, SCORES, the softmax's four steps and CONTEXT."""
    ws = state @ inputs["W_A"] + inputs["B_W"]                  # W_a·s + b_a
    pre = ws + uh                                                     # row j: WS + UH_j
    hidden = np.tanh(pre)
    scores = (hidden @ inputs["V_A"]).T + inputs["B_V"][0, 0]  # e_j = v·tanh(…) + b_v
    steps = {"WS": ws, "PRE": pre, "HIDDEN": hidden, "SCORES": scores,
             **masked_softmax_steps(scores, np.ones(scores.shape, dtype=bool))}
    steps["CONTEXT"] = steps["WEIGHTS"] @ keys                        # c = α·H
    return steps


def seq2seq_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    """Every block of the `seq2seq` sheet: the encoder, K decoder steps, the stacked
    results and the cost table."""
    bidirectional = getattr(params, "bidirectional", False)
    steps = encoder_steps(inputs, bidirectional)
    keys = steps["ENC_OUTPUTS"]
    src_len, size = keys.shape
    attention = not params.no_attention
    if attention:
        steps["UH"] = keys @ inputs["U_A"] + inputs["B_U"]     # U_a·h_j + b_U
    last = steps[f"ENC_H_T{src_len}"]                                 # the forward h_n
    state = last                                                      # s_0 = h_n
    previous = params.sos
    stacked = {"ATTN_WEIGHTS": [], "DEC_HIDDEN": [], "LOG_PROBS": [], "GENERATED": []}
    for k in range(params.decode):
        sfx = f"_T{k + 1}"
        if k > 0 and params.teacher_forcing:
            previous = int(inputs["TGT_IDS"][k - 1, 0])               # the target id before
        step = {"DEC_IN": np.array([[previous]], dtype=float),
                "DEC_EMB": inputs["DEC_EMBEDDING"][[previous]]}             # e = EMB[y_{k−1}]
        if attention:
            step.update(attention_steps(inputs, state, steps["UH"], keys))
            stacked["ATTN_WEIGHTS"].append(step["WEIGHTS"])
        else:
            step["CONTEXT"] = last                                    # c = h_n, every step
        step["DEC_X"] = np.hstack([step["DEC_EMB"], step["CONTEXT"]])  # [e; c]
        step["DEC_GX"] = step["DEC_X"] @ inputs["DEC_W_I"] + inputs["DEC_B_I"]
        gates = gru_gates(step["DEC_GX"], state, inputs["DEC_W_H"], inputs["DEC_B_H"])
        step.update({f"DEC_{name}": value for name, value in gates.items()})
        state = gates["H"]
        step["LOGITS"] = state @ inputs["OUT_W"] + inputs["OUT_B"]
        step.update(log_softmax_steps(step["LOGITS"]))
        previous = int(np.argmax(step["LOG_PROBS"][0]))              # the first maximum
        step["GEN"] = np.array([[previous]], dtype=float)
        stacked["DEC_HIDDEN"].append(state)
        stacked["LOG_PROBS"].append(step["LOG_PROBS"])
        stacked["GENERATED"].append(step["GEN"])
        steps.update({name + sfx: value for name, value in step.items()})
    steps.update({name: np.vstack(rows) for name, rows in stacked.items() if rows})
    generated = steps["GENERATED"][:, 0]
    first_eos = np.zeros((params.decode, 1))
    ends = np.flatnonzero(generated == params.eos)
    if ends.size:
        first_eos[ends[0], 0] = 1.0
    steps["FIRST_EOS"] = first_eos
    return {**steps, **seq2seq_cost(src_len, size, params.decode, attention, bidirectional)}


def seq2seq_cost(src_len: int, size: int, decode: int, attention: bool,
                 bidirectional: bool = False) -> dict[str, np.ndarray]:
    """Per source length n: the encoder's multiply-adds, n sequential steps of
    h·W_H (H·3H each; h_0 = 0 makes the first a bias only) and the input side X·W_I
    (n·H·3H), twice when bidirectional; each decoder step's attention, U_a·h_j once (n·H²)
    then per step W_a·s (H²), v·tanh over n pairs (n·H) and the context (n·H)."""
    ns = lengths(src_len)
    directions = 2 if bidirectional else 1
    recurrence = directions * ((ns - 1) * size * 3 * size + ns * size * 3 * size)
    per_step = size * size + 2 * ns * size if attention else 0 * ns
    once = ns * size * size if attention else 0 * ns
    return cost_blocks([src_len, size, decode], ns,
                       COST_ENCODER=recurrence,
                       COST_ATTENTION=once + decode * per_step,
                       COST_STEPS=ns + decode)
