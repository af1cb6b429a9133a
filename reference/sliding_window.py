"""Sliding-window attention with global tokens (Longformer, Beltagy et al. 2020) and
random keys (BigBird, Zaheer et al. 2020), one head.

Glossary: w one-sided window (the allenai convention: keys on each side), G the set of
global positions (0-based), b queries per block, RANDOM_KEYS[k] the R key positions picked
for query block k (queries k·b … k·b+b−1; the input, so a user's edits count). Query i may
see key j when |i − j| ≤ w, or i ∈ G (a global token attends to all), or j ∈ G (every token
attends to a global token), or j ∈ RANDOM_KEYS[⌊i/b⌋] (BigBird's random attention, shared by
the queries of a block). One projection serves local, global and random attention
(Longformer proper has separate global projections).
Q = X·W_Q, K = X·W_K, V = X·W_V; S = Q·Kᵀ/√d_k; A = softmax over the allowed keys; O = A·V.
"""

import numpy as np

from reference.cost import cost_blocks, lengths
from reference.softmax import masked_softmax_steps


def parse_global(text: str) -> list[int]:
    """'0,5' -> [0, 5] (sorted, duplicates dropped); '' -> []."""
    return sorted({int(part) for part in text.split(",") if part.strip()})


def window_allowed(n: int, window: int, global_positions: list[int]) -> np.ndarray:
    """allowed_ij = |i − j| ≤ w  or  i ∈ G  or  j ∈ G."""
    positions = np.arange(n)
    allowed = np.abs(positions[None, :] - positions[:, None]) <= window
    is_global = np.isin(positions, global_positions)
    return allowed | is_global[:, None] | is_global[None, :]


def random_picked(keys: np.ndarray, n: int) -> np.ndarray:
    """picked_kj = 1 if key j ∈ RANDOM_KEYS[k]  (query blocks × n); the picks must be whole
    positions 0 … n−1 (a repeat, or a key already in the window, adds nothing)."""
    if not np.all((keys == np.round(keys)) & (keys >= 0) & (keys <= n - 1)):
        raise ValueError(f"RANDOM_KEYS must hold whole key positions 0 … {n - 1}")
    picked = np.zeros((keys.shape[0], n), dtype=bool)
    block_of_pick = np.repeat(np.arange(keys.shape[0]), keys.shape[1])
    picked[block_of_pick, keys.astype(int).ravel()] = True
    return picked


def sliding_window_ref(inputs: dict[str, np.ndarray], params) -> dict[str, np.ndarray]:
    x = inputs["X"]
    n = x.shape[0]
    q, k, v = x @ inputs["W_Q"], x @ inputs["W_K"], x @ inputs["W_V"]
    scores = q @ k.T                                  # S = Q·Kᵀ  (n×n)
    scaled = scores / np.sqrt(q.shape[1])
    global_positions = parse_global(params.global_tokens)
    allowed = window_allowed(n, params.window, global_positions)
    steps = {"Q": q, "K": k, "V": v, "SCORES": scores, "SCALED": scaled}
    if global_positions:
        steps["GLOBAL"] = np.isin(np.arange(n), global_positions).astype(float)[:, None]
    if params.random:
        keys = inputs["RANDOM_KEYS"]                  # query blocks × R
        if keys.shape != (-(-n // params.block_size), params.random):
            raise ValueError(f"RANDOM_KEYS is {keys.shape}, not one row of {params.random} "
                             f"per block of {params.block_size} queries")
        picked = random_picked(keys, n)
        steps["RANDOM"] = picked.astype(float)
        allowed = allowed | picked[np.arange(n) // params.block_size]  # row i: block ⌊i/b⌋
    steps["MASK"] = allowed.astype(float)
    steps.update(masked_softmax_steps(scaled, allowed))
    steps["OUTPUT"] = steps["WEIGHTS"] @ v            # O = A·V
    steps.update(sliding_window_cost(n, q.shape[1], v.shape[1], params.window,
                                     global_positions, params.random))
    return steps


def allowed_per_row(n: int, window: int, global_positions: list[int]) -> np.ndarray:
    """Keys query i may see, counted row by row without the n×n mask: all n for a global
    row; else the keys within w (clipped at the ends) plus the global keys outside them."""
    i = np.arange(n, dtype=np.int64)
    count = np.minimum(i + window, n - 1) - np.maximum(i - window, 0) + 1
    for g in (g for g in global_positions if g < n):
        count += np.abs(g - i) > window
    count[[g for g in global_positions if g < n]] = n
    return count


def sliding_window_cost(n: int, d_k: int, d_v: int, window: int,
                        global_positions: list[int], random: int = 0) -> dict[str, np.ndarray]:
    """Per length n: the allowed scores (band, and what global tokens add), d_k + d_v
    multiply-adds per allowed pair; full attention's n² and n²·(d_k + d_v) beside them."""
    ns = lengths(n)
    held = np.array([allowed_per_row(int(m), window, global_positions).sum() for m in ns])
    columns = {}
    if global_positions or random:
        band = np.array([allowed_per_row(int(m), window, []).sum() for m in ns])
        columns["COST_BAND"] = band
        if global_positions:
            columns["COST_GLOBAL"] = held - band
        if random:  # R keys per non-global query, outside its band and the global tokens
            rows = ns - np.array([sum(g < m for g in global_positions) for m in ns])
            columns["COST_RANDOM"] = rows * random
            held = held + rows * random
    columns.update(COST_HELD=held, COST_MACS=held * (d_k + d_v), COST_STD_HELD=ns * ns,
                   COST_STD_MACS=ns * ns * (d_k + d_v))
    return cost_blocks([n, d_k, d_v, window, random], ns, **columns)
