"""Additive attention (Bahdanau, Cho & Bengio 2015), for m decoder states at once.

Glossary (paper → here): s_{i−1} decoder state → row i of DEC_S (m×d_dec); h_j encoder
annotation → row j of ENC_H (n×d_enc); W_a → W_A (d_dec×d_att); U_a → U_A (d_enc×d_att);
v_a → V_A (d_att×1). Row vectors times weights, as everywhere in attnsheets.
  WS = DEC_S·W_A (+ B_W)         UH = ENC_H·U_A (+ B_U)
  PRE[(i,j)] = WS_i + UH_j       HIDDEN = tanh(PRE)        (m·n × d_att, row i·n + j)
  e_ij = HIDDEN[(i,j)]·v (+ b_v)  α_i = softmax_j(e_i)      c_i = Σ_j α_ij h_j
The paper has no biases; with bias=True the three layers are nn.Linear with bias as in the
PyTorch seq2seq tutorial (b_v shifts every score of a row equally, so it cancels in α).
"""

import numpy as np

from reference.softmax import masked_softmax_steps


def additive_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    s, h = inputs["DEC_S"], inputs["ENC_H"]
    m, n = s.shape[0], h.shape[0]
    ws = s @ inputs["W_A"]                                 # W·s_i   (m×d_att)
    uh = h @ inputs["U_A"]                                 # U·h_j   (n×d_att)
    if params.bias:
        ws, uh = ws + inputs["B_W"], uh + inputs["B_U"]
    pre = (ws[:, None, :] + uh[None, :, :]).reshape(m * n, -1)   # row i·n + j
    hidden = np.tanh(pre)
    scores = (hidden @ inputs["V_A"]).reshape(m, n)        # e_ij = vᵀ tanh(…)
    if params.bias:
        scores = scores + inputs["B_V"][0, 0]
    steps = {"WS": ws, "UH": uh, "PRE": pre, "HIDDEN": hidden, "SCORES": scores}
    steps.update(masked_softmax_steps(scores, np.ones((m, n), dtype=bool)))
    steps["CONTEXT"] = steps["WEIGHTS"] @ h                # c_i = Σ_j α_ij h_j
    return steps
