"""Single-head attention that learns: K steps of gradient descent, forward and backward
written out by hand (no autograd).

The task: position i holds token t_i and is told to look at position p_i; it must output
t_{p_i}, a token it can only learn of through attention.

Glossary (rows are positions, as on the sheet; n positions, a vocabulary of c tokens):
    X (n×(c+2n))  [one-hot t_i | one-hot i | one-hot p_i]
    TARGET (n×1)  y_i = t_{p_i};  Y (n×c) its one-hot rows
    per step (suffix _Tt), weights W_Q, W_K, W_V (d×d_k), W_OUT (d_k×c) as the step found them:
    Q = X·W_Q  K = X·W_K  V = X·W_V      S = Q·Kᵀ   S/√d_k (not with --no-scale)
    A = softmax of each row (causal: keys j ≤ i)      O = A·V      Z = O·W_OUT
    P = softmax of each row of Z;  NLL_i = m_i + ln ℓ_i − z_{i,y_i};  L = Σ_i NLL_i / n
    backward:  dZ = (P − Y)/n      dW_OUT = Oᵀ·dZ    dO = dZ·W_OUTᵀ
               dA = dO·Vᵀ          dV = Aᵀ·dO        r_i = Σ_j dA_ij·A_ij
               dŜ = A ⊙ (dA − r)   (the softmax backward; Ŝ its input S/√d_k)
               dS = dŜ/√d_k        dQ = dS·K          dK = dSᵀ·Q
               dW_Q = Xᵀ·dQ        dW_K = Xᵀ·dK       dW_V = Xᵀ·dV
    update (SGD):  W ← W − η·dW;   (Adam) m ← β₁m + (1−β₁)g,  v ← β₂v + (1−β₂)g²,
                   W ← W − η·(m/(1−β₁ᵗ)) / (√(v/(1−β₂ᵗ)) + ε)
LOSS (K×1) holds L of every step, before its update; GRAD_NORM (K×1) ‖dW_Q‖_F. With
compare_scale the same data and initial weights train twice: the run without 1/√d_k has
its names marked _RAW (Q_RAW_T1, LOSS_RAW, …).
"""

import numpy as np

from reference.softmax import causal_allowed, masked_softmax_steps

WEIGHTS = ("W_Q", "W_K", "W_V", "W_OUT")
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults


def task_blocks(token_ids: np.ndarray, look_at: np.ndarray, vocab: int
                ) -> dict[str, np.ndarray]:
    """X = [one-hot t_i | one-hot i | one-hot p_i], y_i = t_{p_i} and its one-hot rows."""
    tokens = token_ids[:, 0].astype(int)
    pointers = look_at[:, 0].astype(int) - 1            # p_i counts from 1 on the sheet
    n = len(tokens)
    eye = np.eye(n)
    x = np.hstack([np.eye(vocab)[tokens], eye, eye[pointers]])
    target = tokens[pointers].astype(float)[:, None]
    return {"X": x, "TARGET": target, "Y": np.eye(vocab)[tokens[pointers]]}


def forward_backward(x: np.ndarray, y: np.ndarray, w: dict[str, np.ndarray],
                     allowed: np.ndarray, scaled: bool) -> dict[str, np.ndarray]:
    """One step's forward pass, loss and gradients, under the sheet's names."""
    n, d_k = x.shape[0], w["W_Q"].shape[1]
    out = {"Q": x @ w["W_Q"], "K": x @ w["W_K"], "V": x @ w["W_V"]}
    out["SCORES"] = out["Q"] @ out["K"].T                        # S = Q·Kᵀ
    logits_in = out["SCORES"]
    if scaled:
        out["SCALED"] = logits_in = out["SCORES"] / np.sqrt(d_k)  # Ŝ = S/√d_k
    out |= masked_softmax_steps(logits_in, allowed)              # A = softmax(Ŝ)
    a = out["WEIGHTS"]
    out["OUTPUT"] = a @ out["V"]                                 # O = A·V
    out["LOGITS"] = z = out["OUTPUT"] @ w["W_OUT"]               # Z = O·W_OUT
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    total = e.sum(axis=1, keepdims=True)
    out |= {"LOGIT_MAX": m, "LOGIT_EXP": e, "LOGIT_SUM": total, "PROBS": e / total}
    # NLL_i = −ln p_{i,y_i} = m_i + ln ℓ_i − z_{i,y_i}
    out["NLL"] = m + np.log(total) - (y * z).sum(axis=1, keepdims=True)
    out["LOSS"] = out["NLL"].sum(keepdims=True) / n
    # backward
    out["D_LOGITS"] = d_z = (out["PROBS"] - y) / n                # dZ = (P − Y)/n
    out["D_W_OUT"] = out["OUTPUT"].T @ d_z                        # dW_OUT = Oᵀ·dZ
    out["D_OUTPUT"] = d_o = d_z @ w["W_OUT"].T                    # dO = dZ·W_OUTᵀ
    out["D_WEIGHTS"] = d_a = d_o @ out["V"].T                     # dA = dO·Vᵀ
    out["D_V"] = a.T @ d_o                                        # dV = Aᵀ·dO
    out["ROW_DOT"] = (d_a * a).sum(axis=1, keepdims=True)         # r_i = Σ_j dA_ij·A_ij
    d_in = a * (d_a - out["ROW_DOT"])                             # dŜ = A ⊙ (dA − r)
    if scaled:
        out["D_SCALED"] = d_in
        d_in = d_in / np.sqrt(d_k)                                # dS = dŜ/√d_k
    out["D_SCORES"] = d_s = d_in
    out["D_Q"] = d_s @ out["K"]                                   # dQ = dS·K
    out["D_K"] = d_s.T @ out["Q"]                                 # dK = dSᵀ·Q
    for name in ("Q", "K", "V"):
        out[f"D_W_{name}"] = x.T @ out[f"D_{name}"]               # dW = Xᵀ·d(X·W)
    return out


def run(x: np.ndarray, y: np.ndarray, weights: dict[str, np.ndarray], allowed: np.ndarray,
        params, scaled: bool, suffix: str) -> dict[str, np.ndarray]:
    """params.steps steps of SGD (or Adam) from `weights`; every block named
    <NAME><suffix>_T<t>, then LOSS<suffix> and GRAD_NORM<suffix>."""
    adam = params.optimizer == "adam"
    w = dict(weights)
    moments = {name: (np.zeros_like(w[name]), np.zeros_like(w[name])) for name in WEIGHTS}
    blocks, losses, norms = {}, [], []
    for t in range(1, params.steps + 1):
        step = forward_backward(x, y, w, allowed, scaled)
        for name in WEIGHTS:
            grad = step[f"D_{name}"]
            if adam:
                first = ADAM_BETA1 * moments[name][0] + (1 - ADAM_BETA1) * grad
                second = ADAM_BETA2 * moments[name][1] + (1 - ADAM_BETA2) * grad * grad
                moments[name] = first, second
                step[f"ADAM_M_{name}"], step[f"ADAM_V_{name}"] = first, second
                first_hat = first / (1 - ADAM_BETA1 ** t)        # bias corrections
                second_hat = second / (1 - ADAM_BETA2 ** t)
                w[name] = w[name] - params.lr * first_hat / (np.sqrt(second_hat) + ADAM_EPS)
            else:
                w[name] = w[name] - params.lr * grad                 # W ← W − η·dW
            step[name] = w[name]
        blocks |= {f"{name}{suffix}_T{t}": value for name, value in step.items()}
        losses.append(step["LOSS"][0, 0])
        norms.append(np.sqrt((step["D_W_Q"] ** 2).sum()))           # ‖dW_Q‖_F
    blocks[f"LOSS{suffix}"] = np.array(losses)[:, None]
    blocks[f"GRAD_NORM{suffix}"] = np.array(norms)[:, None]
    return blocks


def train_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    n = params.seq_len
    steps = task_blocks(inputs["TOKEN_IDS"], inputs["LOOK_AT"], params.vocab)
    allowed = causal_allowed(n, n) if params.causal else np.ones((n, n), dtype=bool)
    if params.causal:
        steps["MASK"] = allowed.astype(float)
    weights = {name: inputs[name] for name in WEIGHTS}
    runs = [("", True), ("_RAW", False)] if params.compare_scale else \
        [("", not params.no_scale)]
    for suffix, scaled in runs:
        steps |= run(steps["X"], steps["Y"], weights, allowed, params, scaled, suffix)
    return steps
