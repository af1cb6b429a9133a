"""Kind `kv-cache`: autoregressive decoding with a KV cache. Step t sees only token t: it
projects x_t to one query and appends one key and one value row to the cache blocks, then
attends that one query to the cache. The stacked step outputs equal causal attention over
the whole sequence (a live difference block), and a live table gives the cache's size per
token for MHA, GQA and MQA.

    q_t = x_t·W_Q (+ B_Q)   K_CACHE_t = [K_CACHE_{t−1}; x_t·W_K (+ B_K)]   V_CACHE_t likewise
    S_t[h, s] = q_t,h · K_CACHE_t[s, g]ᵀ / √d_k     g = ⌊h·G/H⌋
    ATTN_t[h] = softmax(S_t[h])·V_CACHE_t[:, g]     OUTPUT[t] = [ATTN_t[1] … ATTN_t[H]]
    CONCAT = causal multi-head attention at once    DIFF = |OUTPUT − CONCAT|
    per token: MHA 2·L·H·d_k, GQA 2·L·G·d_k, MQA 2·L·d_k numbers
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from reference.kv_cache import kv_cache_ref
from sheets._blocks.attention import CAUSAL_MASK, X, projections
from sheets._blocks.heads import (
    B_K,
    B_Q,
    B_V,
    W_K,
    W_Q,
    W_V,
    GroupedHeads,
    GroupedHeadsKind,
    concat_heads,
    head_steps,
)
from sheets._blocks.softmax import softmax_steps
from workbook_builder.sheet import ByRow, Custom, Map, Reduce, Step, section
from workbook_builder.sheet.declare import Table

CACHE_COLUMNS = ["L", "H", "G", "d_k"]
# the tutorial's 96 heads, in a model of GPT-3 175B's shape (96 layers, d_k = 128), GQA with
# 8 key/value groups as LLaMA-2 70B; numbers a user may retype
EXAMPLE_SIZES = (96, 96, 8, 128)
CACHE_ROWS = ["this sheet", "h = 96"]
# numbers per token: a key row and a value row of every layer; {G} is MHA's H, the row's
# G, or MQA's 1
CACHE_FORMULAS = {"MHA": "2*{L}*{H}*{d_k}", "GQA": "2*{L}*{G}*{d_k}", "MQA": "2*{L}*1*{d_k}"}


@dataclass(frozen=True)
class KvCacheParams(GroupedHeads):
    bias: bool = field(default=False, metadata={
        "help": "add bias rows B_Q, B_K, B_V to the projections (GPT-2's c_attn has them)"})


def _new_row(weight: str, bias: bool, t: int, j: int, env) -> str:
    """x_t·W (+ B), column j: computed from token t alone."""
    plus = "+" + env[f"B_{weight[2:]}"].col(j) if bias else ""
    return f"=MMULT({env['X'].row(t)},{env[weight].col(j)}){plus}"


def query_row(t: int) -> ByRow:
    """q_t = x_t·W_Q (+ B_Q): the one new query of step t."""
    return ByRow(1, lambda p: p.heads * p.d_k,
                 lambda _, j, env: _new_row("W_Q", env.params.bias, t, j, env), per_cell=True)


def cache_block(which: str, t: int) -> ByRow:
    """K_CACHE_t (or V_CACHE_t): the rows of step t − 1 carried over, then x_t·W (+ B)."""
    def each(i, j, env):
        if i < t:
            return f"={env[f'{which}_CACHE_T{t}'].cell(i, j)}"
        return _new_row(f"W_{which}", env.params.bias, t, j, env)

    return ByRow(t + 1, lambda p: p.groups * p.d_k, each, per_cell=True)


def step_scores(t: int) -> Custom:
    """S_t[h, s] = q_t,h · K_CACHE_t[s, g]ᵀ / √d_k, one row per query head."""
    def each(h, s, env):
        d_k = env.params.d_k
        g = h * env.params.groups // env.params.heads
        q, k = env[f"Q_T{t + 1}"], env[f"K_CACHE_T{t + 1}"]
        return (f"=SUMPRODUCT({q.row(0, h * d_k, (h + 1) * d_k - 1)},"
                f"{k.row(s, g * d_k, (g + 1) * d_k - 1)})/SQRT({d_k})")

    return Custom("heads", t + 1, each)


def step_attention(t: int) -> ByRow:
    """ATTN_t[h] = A_t[h]·V_CACHE_t[:, g]: each head's weighted sum of the cached values."""
    def each(h, c, env):
        g = h * env.params.groups // env.params.heads
        weights, values = env[f"WEIGHTS_T{t + 1}"], env[f"V_CACHE_T{t + 1}"]
        return f"=MMULT({weights.row(h)},{values.col(g * env.params.d_k + c)})"

    return ByRow("heads", "d_k", each, per_cell=True)


def stacked(i, j, env) -> str:
    """OUTPUT[t, j] = ATTN_t[j // d_k, j mod d_k]: the step outputs, one row per step."""
    d_k = env.params.d_k
    return f"={env[f'ATTN_T{i + 1}'].cell(j // d_k, j % d_k)}"


def cache_size(i, j, env) -> str:
    """This sheet's sizes (one layer), then the tutorial's example; numbers to edit."""
    p = env.params
    row = (1, p.heads, p.groups, p.d_k) if i == 0 else EXAMPLE_SIZES
    return f"={row[j]}"


def cache_numbers(i, j, env) -> str:
    sizes = env["CACHE_SIZES"]
    slots = {name: sizes.cell(i, c) for c, name in enumerate(CACHE_COLUMNS)}
    return "=" + list(CACHE_FORMULAS.values())[j].format(**slots)


def _heads(p) -> list[str]:
    return [f"h{h + 1}" for h in range(p.heads)]


def decode_step(t: int, p) -> list:
    """Step t (0-based): the new query, the grown caches, the scores over the cache, their
    softmax and each head's output."""
    sfx, seen = f"_T{t + 1}", f"seen_{t + 1}"
    bias = {n: f" + B_{n}" if p.bias else "" for n in "QKV"}
    return section(
        lambda labels: f"Decode step {t + 1} — token {labels['tokens'][t]}: append its key "
                       f"and value to the cache, attend its query to the cache",
        [Step("Q" + sfx, f"q_t = x_t·W_Q{bias['Q']}", query_row(t),
              "The one new query: computed from this token alone.",
              row_labels=f"token_{t + 1}", col_labels=W_Q.col_labels),
         Step("K_CACHE" + sfx, f"K cache: previous rows, then x_t·W_K{bias['K']}",
              cache_block("K", t), "The key cache: the rows of the step before, unchanged, "
                                   "and one new row (last).",
              row_labels=seen, col_labels=W_K.col_labels),
         Step("V_CACHE" + sfx, f"V cache: previous rows, then x_t·W_V{bias['V']}",
              cache_block("V", t), "The value cache, grown by one row the same way.",
              row_labels=seen, col_labels=W_V.col_labels)],
        [Step("SCORES" + sfx, "S[h, s] = q_h·k_s / √d_k", step_scores(t),
              "One row per query head: its query against every cached key. The cache holds "
              "no later token, so no mask is needed.",
              row_labels=_heads, col_labels=seen, corner="head\\key"),
         *softmax_steps("SCORES" + sfx, None, sfx, over="cached keys"),
         Step("ATTN" + sfx, "ATTN[h] = A[h]·V_CACHE", step_attention(t),
              "Each head's output for this token: its weights times the cached values.",
              row_labels=_heads, col_labels="k")])


class _SeenLabels(Mapping):
    """"tokens", and per step t the token itself ("token_t") and the tokens cached by
    then ("seen_t"), each list made when asked: made at once, n steps would hold n²/2
    labels before the plan could refuse the size."""

    def __init__(self, labels):
        self._labels = labels

    def __getitem__(self, key):
        if key == "tokens":
            return self._labels
        which, _, step = key.rpartition("_")
        if which in ("token", "seen") and step.isdigit() and \
                1 <= int(step) <= len(self._labels):
            t = int(step)
            return self._labels[t - 1:t] if which == "token" else self._labels[:t]
        raise KeyError(key)

    def __iter__(self):
        yield "tokens"
        for t in range(1, len(self._labels) + 1):
            yield from (f"token_{t}", f"seen_{t}")

    def __len__(self):
        return 1 + 2 * len(self._labels)


def _seen_label_sets(cls, p, labels):
    return _SeenLabels(labels)


class KvCache(GroupedHeadsKind):
    name = "kv-cache"
    summary = "decoding token by token with a KV cache; equals causal attention; cache size"
    sheet_title = "KvCache"
    Params = KvCacheParams
    reference = staticmethod(kv_cache_ref)
    inputs = [X, W_Q, W_K, W_V, B_Q, B_K, B_V]
    label_sets = classmethod(_seen_label_sets)
    test_cases = [
        {"seq_len": 3, "d_model": 4, "heads": 2},
        {"seq_len": 4, "d_model": 8, "heads": 4, "kv_heads": 2, "bias": True},
        {"seq_len": 3, "d_model": 2, "heads": 1},
        {"seq_len": 4, "d_model": 6, "heads": 3, "kv_heads": 1},
    ]
    demo_cases = [
        ("kv_cache", {"seq_len": 4, "d_model": 4, "heads": 2}),
        ("kv_cache_gqa", {"seq_len": 5, "d_model": 8, "heads": 4, "kv_heads": 2}),
    ]

    @classmethod
    def sections(cls, p):
        heads = [section(f"Whole sequence, head {h + 1} — query columns q{h + 1}.*, "
                         f"key/value head {g + 1}", head_steps(h, g, p.d_k, "MASK"))
                 for h, g in ((h, h * p.groups // p.heads) for h in range(p.heads))]
        example = Table((
            ("h = 96: the tutorial's example of 96 heads, in a model of GPT-3 175B's shape "
             "(96 layers, d_k = 128)", ""),
            ("GQA there with G = 8 key/value groups, as LLaMA-2 70B", ""),
            ("this sheet: its one layer and its own heads", ""),
            ("×2 for bytes in 16-bit floats", "")))
        yield section("Step 1 — inputs ({heads} query heads, {groups} key/value heads, "
                      "d_k = d_model/H = {d_k})", [X, W_Q, W_K, W_V],
                      *([[B_Q, B_K, B_V]] if p.bias else []))
        # one section per decoded token, declared as the plan reaches it
        yield from (decode_step(t, p) for t in range(p.seq_len))
        yield from [
            section("The step outputs stacked: row t is what step t produced",
                    Step("OUTPUT", "OUTPUT[t] = [ATTN_t[1] … ATTN_t[H]]",
                         Custom("seq_len", lambda p: p.heads * p.d_k, stacked),
                         "Decoding one token at a time, each step seeing only the cache.",
                         row_labels="tokens", col_labels=W_Q.col_labels)),
            section("The same attention over the whole sequence at once, with a causal mask",
                    [*projections(bias=p.bias), CAUSAL_MASK]),
            *heads,
            section("Check — the cached steps equal causal attention over the whole sequence",
                    [concat_heads(p.heads, p.d_k),
                     Step("DIFF", "|OUTPUT − CONCAT|",
                          Map("=ABS({A}-{B})", A="OUTPUT", B="CONCAT"),
                          "Zero up to rounding: the cache gives exactly causal attention."),
                     Step("MAX_DIFF", "max |OUTPUT − CONCAT|",
                          Reduce("=MAX({DIFF})"),
                          "The largest difference anywhere: about 1e-16. Edit X or a weight "
                          "and it stays ≈ 0.", row_labels=["max"], col_labels=["diff"])]),
            section("KV cache size — numbers kept per token, for MHA (G = H), GQA (G groups) "
                    "and MQA (G = 1)",
                    [Step("CACHE_SIZES", "layers L, heads H, groups G, head width d_k",
                          Custom(2, 4, cache_size),
                          "Sizes as numbers: type others to see their cache.",
                          row_labels=CACHE_ROWS, col_labels=CACHE_COLUMNS, number_format="0"),
                     Step("CACHE_PER_TOKEN", "MHA 2·L·H·d_k, GQA 2·L·G·d_k, MQA 2·L·d_k",
                          Custom(2, 3, cache_numbers),
                          "A key row and a value row of every layer for each token; GQA "
                          "divides MHA's by H/G, MQA by H.",
                          row_labels=CACHE_ROWS, col_labels=list(CACHE_FORMULAS),
                          number_format="#,##0"),
                     example]),
        ]
