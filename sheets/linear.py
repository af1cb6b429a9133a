"""Kind `linear`: linear attention with the feature map φ(x) = elu(x) + 1.

    Q = X·W_Q   K = X·W_K   V = X·W_V   φ(x) = IF(x>0, x+1, EXP(x))
    non-causal:  KV = φ(K)ᵀ·V   z = Σ_j φ(K_j)   O_i = φ(Q_i)·KV / (φ(Q_i)·z + eps)
    causal:      S_i = S_{i−1} + φ(K_i)ᵀ·V_i   z_i = z_{i−1} + φ(K_i)
                 O_i = φ(Q_i)·S_i / (φ(Q_i)·z_i + eps)        eps = 1E-06
"""

from dataclasses import dataclass, field

from reference.linear import linear_ref
from sheets._bands import COST_ZH, D_V, QKV_INPUTS, Cost, cost_section, projections
from sheets.attention import AttentionParams
from workbook_builder.sheet import Custom, Kind, Map, MatMul, Rows, Step, section
from workbook_builder.sheet.refs import range_ref

EPS = "1E-06"  # fast-transformers' default, written with a signed exponent


@dataclass(frozen=True)
class LinearParams(AttentionParams):
    """Attention's sizes; d_k is the feature width here."""

    d_k: int = field(default=3, metadata={"help": "feature width (columns of W_Q, W_K)"})
    causal: bool = field(default=False, metadata={
        "help": "running state S_i, z_i down the rows (query i sees keys j ≤ i)"})


def feature_map(name: str, source: str) -> Step:
    """φ(x) = x + 1 for x > 0, exp(x) otherwise (elu with α = 1, plus 1)."""
    return Step(name, f"φ({source}) = IF(x>0, x+1, EXP(x))",
                Map("=IF({S}>0,{S}+1,EXP({S}))", S=source),
                "elu(x)+1: a positive feature map standing in for exp(q·k).")


def denominator(equation: str, explanation: str) -> Step:
    """d_i = φ(Q_i)·z (z_i when causal) + eps."""
    return Step("DENOM", f"{equation} + {EPS}",
                Rows(f"=SUMPRODUCT({{Q}},{{Z}})+{EPS}", Q="PHI_Q", Z="Z"), explanation,
                col_labels=["denom"])


def non_causal_steps() -> list[Step]:
    return [
        # KV_ab = Σ_j φ(K)_ja · V_jb
        Step("KV", "KV = φ(K)ᵀ·V", Custom(
            "d_k", D_V,
            each=lambda a, b, env: f"=SUMPRODUCT({env['PHI_K'].col(a)},{env['V'].col(b)})",
            whole=lambda env: f"=MMULT(TRANSPOSE({env['PHI_K'].whole()}),{env['V'].whole()})"),
            "Every key's feature vector times its value, summed over tokens.",
            row_labels="k", col_labels="v"),
        # z_a = Σ_j φ(K)_ja
        Step("Z", "z = Σ_j φ(K_j)",
             Custom(1, "d_k", each=lambda _, a, env: f"=SUM({env['PHI_K'].col(a)})"),
             "The normaliser: the keys' feature vectors summed.", row_labels=["Σ"],
             col_labels="k"),
        Step("NUMER", "φ(Q)·KV", MatMul("PHI_Q", "KV")),
        denominator("φ(Q_i)·z", "Sum of the (unnormalised) weights of row i, plus eps."),
    ]


# -- causal: recurrences down the rows; STATE row i·d_k + a holds row a of S_i -----------
def running_sum(rows, cols, lag, term) -> Custom:
    """Row r = row r − lag(p) of this block + term(r) (the first lag rows: the term alone).
    term(r, env, j) is one cell of the term, term(r, env) its whole row."""
    def formula(r, env, j=None):
        back = r - lag(env.params)
        if back < 0:
            return f"={term(r, env, j)}"
        prev = env.me.row(back) if j is None else env.me.cell(back, j)
        return f"={prev}+{term(r, env, j)}"

    return Custom(rows, cols, each=lambda r, j, env: formula(r, env, j), per_row=formula)


def outer(r: int, env, b: int | None = None) -> str:
    """φ(K_i)_a · V_i (column b), for STATE row r = i·d_k + a."""
    i, a = divmod(r, env.params.d_k)
    v = env["V"]
    return f"{env['PHI_K'].cell(i, a)}*{v.row(i) if b is None else v.cell(i, b)}"


def phi_k(i: int, env, a: int | None = None) -> str:
    """φ(K_i) (column a)."""
    return env["PHI_K"].row(i) if a is None else env["PHI_K"].cell(i, a)


def state_of(env, i: int, first: int = 0, last: int | None = None) -> str:
    """S_i as a range (STATE rows i·d_k … (i+1)·d_k − 1, columns first … last)."""
    state, d_k = env["STATE"], env.params.d_k
    last = state.cols - 1 if last is None else last
    return range_ref(state.top + i * d_k, state.left + first, state.top + (i + 1) * d_k - 1,
                     state.left + last, fix_row=True, fix_col=True)


def causal_steps() -> list[Step]:
    return [
        # S_i[a, b] = S_{i−1}[a, b] + φ(K_i)_a · V_ib
        Step("STATE", "S_i = S_{i−1} + φ(K_i)ᵀ·V_i",
             running_sum(lambda p: p.seq_len * p.d_k, D_V, lambda p: p.d_k, outer),
             "Rows t:k1 … t:k_d hold S_t = Σ_{j≤t} φ(K_j)ᵀV_j, the d_k×d_v memory after "
             "reading token t.", row_labels="state", col_labels="v", corner="token:row"),
        # z_i = z_{i−1} + φ(K_i)
        Step("Z", "z_i = z_{i−1} + φ(K_i)",
             running_sum("seq_len", "d_k", lambda p: 1, phi_k),
             "Running sum of the keys' feature vectors.", row_labels="tokens",
             col_labels="k"),
        # NUMER_i = φ(Q_i)·S_i
        Step("NUMER", "φ(Q_i)·S_i", Custom(
            "seq_len", D_V,
            each=lambda i, b, env: f"=MMULT({env['PHI_Q'].row(i)},{state_of(env, i, b, b)})",
            per_row=lambda i, env: f"=MMULT({env['PHI_Q'].row(i)},{state_of(env, i)})"),
            "Query i reads the memory as it stood after token i.", row_labels="tokens",
            col_labels="v"),
        denominator("φ(Q_i)·z_i", "Sum of the (unnormalised) weights of keys j ≤ i, plus eps."),
    ]


class Linear(Kind):
    name = "linear"
    summary = "linear attention φ(Q)(φ(K)ᵀV), φ = elu+1; --causal: running state (RNN view)"
    sheet_title = "Linear"
    Params = LinearParams
    reference = staticmethod(linear_ref)
    inputs = QKV_INPUTS
    test_cases = [
        {"seq_len": 4, "d_model": 3, "d_k": 2},
        {"seq_len": 5, "d_model": 4, "d_k": 3, "d_v": 2, "causal": True},
        {"seq_len": 1, "d_model": 2, "d_k": 2, "causal": True},
    ]
    demo_cases = [
        ("linear", {"seq_len": 5, "d_model": 4, "d_k": 3}),
        ("linear_causal", {"seq_len": 5, "d_model": 4, "d_k": 3, "causal": True}),
    ]

    @classmethod
    def label_sets(cls, p, labels):
        return {"tokens": labels,
                "state": [f"{t}:k{a + 1}" for t in labels for a in range(p.d_k)]}

    @classmethod
    def sections(cls, p):
        step4 = (section("Step 4 — the RNN view: a running state S_i (d_k×d_v, stacked down "
                         "the rows) and normaliser z_i, each updated once per token",
                         causal_steps()) if p.causal else
                 section("Step 4 — summarise all keys and values once: KV = φ(K)ᵀ·V and "
                         "z = Σ_j φ(K_j); cost grows with n, not n²", non_causal_steps()))
        return [
            section("Step 1 — inputs: token rows X and the projection weights", QKV_INPUTS),
            section("Step 2 — queries, keys, values", projections()),
            section("Step 3 — feature map φ(x) = elu(x) + 1 (positive, so no softmax is "
                    "needed)", [feature_map("PHI_Q", "Q"), feature_map("PHI_K", "K")]),
            step4,
            section("Step 5 — divide: each output row is a weighted average of value rows",
                    Step("OUTPUT", "O = NUMER / DENOM",
                         Map("={N}/{D}", N="NUMER", D="DENOM"))),
            cost_section(COST_TITLE, COST_SIZES, COSTS),
        ]


# sheet text in Chinese (workbook_builder/teaching/i18n.py)
Linear.translations = {"zh": {
    "linear attention φ(Q)(φ(K)ᵀV), φ = elu+1; --causal: running state (RNN view)":
        "线性注意力 φ(Q)(φ(K)ᵀV)，φ = elu+1；--causal：运行状态（RNN 视角）",
    "Step 3 — feature map φ(x) = elu(x) + 1 (positive, so no softmax is needed)":
        "Step 3：特征映射 φ(x) = elu(x) + 1（恒为正，因此不需要 Softmax）",
    "elu(x)+1: a positive feature map standing in for exp(q·k).":
        "elu(x)+1：代替 exp(q·k) 的正值特征映射。",
    "Step 4 — summarise all keys and values once: KV = φ(K)ᵀ·V and z = Σ_j φ(K_j); cost "
    "grows with n, not n²": "Step 4：一次性汇总所有键和值：KV = φ(K)ᵀ·V，z = Σ_j φ(K_j)；"
                           "代价随 n 增长，而不是 n²",
    "Every key's feature vector times its value, summed over tokens.":
        "每个键的特征向量乘以它的值，再对所有词求和。",
    "The normaliser: the keys' feature vectors summed.": "归一化项：所有键特征向量之和。",
    "Sum of the (unnormalised) weights of row i, plus eps.":
        "第 i 行（未归一化）权重之和，加上 eps。",
    "denom": "分母",
    "Step 5 — divide: each output row is a weighted average of value rows":
        "Step 5：相除 — 每个输出行是各值行的加权平均",
    "Step 4 — the RNN view: a running state S_i (d_k×d_v, stacked down the rows) and "
    "normaliser z_i, each updated once per token":
        "Step 4：RNN 视角 — 运行状态 S_i（d_k×d_v，逐行向下堆叠）与归一化项 z_i，每个词更新一次",
    "Rows t:k1 … t:k_d hold S_t = Σ_{j≤t} φ(K_j)ᵀV_j, the d_k×d_v memory after reading "
    "token t.": "行 t:k1 … t:k_d 保存 S_t = Σ_{j≤t} φ(K_j)ᵀV_j，即读完词 t 之后的 d_k×d_v 记忆。",
    "Running sum of the keys' feature vectors.": "键特征向量的运行和。",
    "Query i reads the memory as it stood after token i.": "查询 i 读取读完词 i 时的记忆。",
    "Sum of the (unnormalised) weights of keys j ≤ i, plus eps.":
        "键 j ≤ i 的（未归一化）权重之和，加上 eps。",
    "token:row": "词:行",
}}


# -- the cost table: what the steps above hold and multiply, as functions of n -----------
COST_TITLE = "Cost — O(n·d²): a d_k×d_v state instead of an n×n matrix; at this sheet's n " \
             "and at n = 1k, 4k, 32k"
COST_SIZES = {"n": "seq_len", "d_k": "d_k", "d_v": D_V}
COSTS = [
    # d_k·d_v + d_k: KV and z (causal: S_i and z_i, one token's row of STATE and Z)
    Cost("COST_HELD", "d_k·d_v + d_k", "={d_k}*{d_v}+{d_k}",
         "State held at once: KV (d_k×d_v) and z (d_k); causal, S_i and z_i, of which the "
         "sheet stacks all n for reading while an RNN keeps one. Does not grow with n.",
         "state"),
    # KV = φ(K)ᵀV (or the S_i updates): n·d_k·d_v; NUMER = φ(Q)·KV: n·d_k·d_v;
    # DENOM = φ(Q)·z: n·d_k; z is sums only
    Cost("COST_MACS", "2·n·d_k·d_v + n·d_k", "=2*{n}*{d_k}*{d_v}+{n}*{d_k}",
         "Multiply-adds: φ(K)ᵀV (causal: the S_i updates) and φ(Q)·KV, n·d_k·d_v each, and "
         "φ(Q)·z, n·d_k (z itself is sums only). Linear in n."),
    Cost("COST_STD_HELD", "n²", "={n}^2",
         "Softmax attention of the same sizes holds n×n scores.", "scores"),
    Cost("COST_STD_MACS", "n²·(d_k + d_v)", "={n}^2*({d_k}+{d_v})",
         "Multiply-adds of softmax attention: Q·Kᵀ and A·V. Linear attention needs fewer "
         "once n > (2·d_k·d_v + d_k)/(d_k + d_v), about d when d_k = d_v = d."),
]

Linear.translations["zh"].update({
    **COST_ZH,
    COST_TITLE: "代价 — O(n·d²)：用一个 d_k×d_v 的状态代替 n×n 矩阵；取本表的 n 以及 "
                "n = 1k、4k、32k",
    "State held at once: KV (d_k×d_v) and z (d_k); causal, S_i and z_i, of which the sheet "
    "stacks all n for reading while an RNN keeps one. Does not grow with n.":
        "同时保存的状态：KV（d_k×d_v）和 z（d_k）；因果时为 S_i 和 z_i，本表为了阅读把 n 个都"
        "堆叠出来，而 RNN 只保留一个。不随 n 增长。",
    "Multiply-adds: φ(K)ᵀV (causal: the S_i updates) and φ(Q)·KV, n·d_k·d_v each, and "
    "φ(Q)·z, n·d_k (z itself is sums only). Linear in n.":
        "乘加次数：φ(K)ᵀV（因果时为 S_i 的更新）和 φ(Q)·KV 各 n·d_k·d_v 次，φ(Q)·z 为 n·d_k 次"
        "（z 本身只有加法）。随 n 线性增长。",
    "Softmax attention of the same sizes holds n×n scores.":
        "相同尺寸的 Softmax 注意力要保存 n×n 个分数。",
    "Multiply-adds of softmax attention: Q·Kᵀ and A·V. Linear attention needs fewer once "
    "n > (2·d_k·d_v + d_k)/(d_k + d_v), about d when d_k = d_v = d.":
        "Softmax 注意力的乘加次数：Q·Kᵀ 与 A·V。当 n > (2·d_k·d_v + d_k)/(d_k + d_v) 时"
        "（d_k = d_v = d 时约为 d）线性注意力的乘加更少。",
})
