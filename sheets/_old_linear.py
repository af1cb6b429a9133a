"""Kind `linear`: linear attention with the feature map φ(x) = elu(x) + 1.

    Q = X·W_Q   K = X·W_K   V = X·W_V   φ(x) = IF(x>0, x+1, EXP(x))
    non-causal:  KV = φ(K)ᵀ·V   z = Σ_j φ(K_j)   O_i = φ(Q_i)·KV / (φ(Q_i)·z + eps)
    causal:      S_i = S_{i−1} + φ(K_i)ᵀ·V_i   z_i = z_{i−1} + φ(K_i)
                 O_i = φ(Q_i)·S_i / (φ(Q_i)·z_i + eps)        eps = 1E-06
"""

from dataclasses import dataclass, field

from reference.linear import linear_ref
from sheets._steps import ValueWidth, dims, matmul
from workbook_builder.sheet.kind import Kind
from workbook_builder.sheet.refs import range_ref

EPS = "1E-06"  # fast-transformers' default, written with a signed exponent


@dataclass(frozen=True)
class LinearParams(ValueWidth):
    seq_len: int = field(default=4, metadata={"help": "tokens n (rows of X)"})
    d_model: int = field(default=4, metadata={"help": "embedding width (columns of X)"})
    d_k: int = field(default=3, metadata={"help": "feature width (columns of W_Q, W_K)"})
    d_v: int | None = field(default=None, metadata={
        "help": "value width (columns of W_V); default d_k"})
    causal: bool = field(default=False, metadata={
        "help": "running state S_i, z_i down the rows (query i sees keys j ≤ i)"})


class Linear(Kind):
    name = "linear"
    summary = "linear attention φ(Q)(φ(K)ᵀV), φ = elu+1; --causal: running state (RNN view)"
    sheet_title = "Linear"
    Params = LinearParams
    reference = staticmethod(linear_ref)
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
    def input_shapes(cls, p):
        return {"X": (p.seq_len, p.d_model), "W_Q": (p.d_model, p.d_k),
                "W_K": (p.d_model, p.d_k), "W_V": (p.d_model, p.value_width)}

    input_dims = {"X": ("seq_len", "d_model"), "W_Q": ("d_model", "d_k"),
                  "W_K": ("d_model", "d_k"), "W_V": ("d_model", "d_v")}

    @classmethod
    def lay_out(cls, sheet, p, inputs, tokens):
        model_dims, key_dims = dims("d", p.d_model), dims("k", p.d_k)
        value_dims = dims("v", p.value_width)
        sheet.text("Step 1 — inputs: token rows X and the projection weights", bold=True)
        with sheet.band():
            x = sheet.input_block("X", inputs["X"], "token embeddings", tokens, model_dims)
            wq = sheet.input_block("W_Q", inputs["W_Q"], "query weights", model_dims, key_dims)
            wk = sheet.input_block("W_K", inputs["W_K"], "key weights", model_dims, key_dims)
            wv = sheet.input_block("W_V", inputs["W_V"], "value weights", model_dims,
                                   value_dims)
        sheet.text("Step 2 — queries, keys, values", bold=True)
        with sheet.band():
            q = matmul(sheet, "Q", "Q = X·W_Q", x, wq, tokens, key_dims)
            k = matmul(sheet, "K", "K = X·W_K", x, wk, tokens, key_dims)
            v = matmul(sheet, "V", "V = X·W_V", x, wv, tokens, value_dims)
        sheet.text("Step 3 — feature map φ(x) = elu(x) + 1 (positive, so no softmax is "
                   "needed)", bold=True)
        with sheet.band():
            phi_q = _feature_map(sheet, "PHI_Q", "φ(Q)", q, tokens, key_dims)
            phi_k = _feature_map(sheet, "PHI_K", "φ(K)", k, tokens, key_dims)
        if p.causal:
            numer, denom = _causal(sheet, p, phi_q, phi_k, v, tokens, key_dims, value_dims)
        else:
            numer, denom = _non_causal(sheet, phi_q, phi_k, v, tokens, key_dims, value_dims)
        sheet.text("Step 5 — divide: each output row is a weighted average of value rows",
                   bold=True)
        sheet.step_block(
            "OUTPUT", "O = NUMER / DENOM", p.seq_len, p.value_width, tokens, value_dims,
            cells=lambda i, j: f"={numer.cell(i, j)}/{denom.row(i)}",
            array=lambda me: f"={numer.whole()}/{denom.whole()}")


def _feature_map(sheet, name, equation, src, labels, col_labels):
    """φ(x) = x + 1 for x > 0, exp(x) otherwise (elu with α = 1, plus 1)."""
    return sheet.step_block(
        name, f"{equation} = IF(x>0, x+1, EXP(x))", src.rows, src.cols, labels, col_labels,
        cells=lambda i, j: f"=IF({src.cell(i, j)}>0,{src.cell(i, j)}+1,EXP({src.cell(i, j)}))",
        array=lambda me: f"=IF({src.whole()}>0,{src.whole()}+1,EXP({src.whole()}))",
        explanation="elu(x)+1: a positive feature map standing in for exp(q·k).")


def _non_causal(sheet, phi_q, phi_k, v, tokens, key_dims, value_dims):
    sheet.text("Step 4 — summarise all keys and values once: KV = φ(K)ᵀ·V and "
               "z = Σ_j φ(K_j); cost grows with n, not n²", bold=True)
    with sheet.band():
        # KV_ab = Σ_j φ(K)_ja · V_jb
        kv = sheet.step_block(
            "KV", "KV = φ(K)ᵀ·V", phi_k.cols, v.cols, key_dims, value_dims,
            cells=lambda a, b: f"=SUMPRODUCT({phi_k.col(a)},{v.col(b)})",
            array=lambda me: f"=MMULT(TRANSPOSE({phi_k.whole()}),{v.whole()})",
            explanation="Every key's feature vector times its value, summed over tokens.")
        # z_a = Σ_j φ(K)_ja
        z = sheet.step_block(
            "Z", "z = Σ_j φ(K_j)", 1, phi_k.cols, ["Σ"], key_dims,
            cells=lambda i, a: f"=SUM({phi_k.col(a)})",
            explanation="The normaliser: the keys' feature vectors summed.")
        numer = matmul(sheet, "NUMER", "φ(Q)·KV", phi_q, kv, tokens, value_dims)
        # d_i = φ(Q_i)·z + eps
        denom = sheet.step_block(
            "DENOM", f"φ(Q_i)·z + {EPS}", phi_q.rows, 1, tokens, ["denom"],
            cells=lambda i, j: f"=SUMPRODUCT({phi_q.row(i)},{z.row(0)})+{EPS}",
            explanation="Sum of the (unnormalised) weights of row i, plus eps.")
    return numer, denom


def _causal(sheet, p, phi_q, phi_k, v, tokens, key_dims, value_dims):
    n, d_k = p.seq_len, p.d_k
    sheet.text("Step 4 — the RNN view: a running state S_i (d_k×d_v, stacked down the "
               "rows) and normaliser z_i, each updated once per token", bold=True)
    state_labels = [f"{t}:k{a + 1}" for t in tokens for a in range(d_k)]
    with sheet.band():
        # S_i[a, b] = S_{i−1}[a, b] + φ(K_i)_a · V_ib ; block row i·d_k + a
        def state_cell(r, b):
            i, a = divmod(r, d_k)
            new = f"{phi_k.cell(i, a)}*{v.cell(i, b)}"
            return f"={sheet.current.cell(r - d_k, b)}+{new}" if i else f"={new}"

        def state_row(r, me):
            i, a = divmod(r, d_k)
            new = f"{phi_k.cell(i, a)}*{v.row(i)}"
            return f"={me.row(r - d_k)}+{new}" if i else f"={new}"

        state = sheet.step_block(
            "STATE", "S_i = S_{i−1} + φ(K_i)ᵀ·V_i", n * d_k, v.cols, state_labels,
            value_dims, cells=state_cell, row_array=state_row, corner="token:row",
            explanation="Rows t:k1 … t:k_d hold S_t = Σ_{j≤t} φ(K_j)ᵀV_j, the d_k×d_v "
                        "memory after reading token t.")

        # z_i = z_{i−1} + φ(K_i)
        def z_cell(i, a):
            prev = f"{sheet.current.cell(i - 1, a)}+" if i else ""
            return f"={prev}{phi_k.cell(i, a)}"

        def z_row(i, me):
            prev = f"{me.row(i - 1)}+" if i else ""
            return f"={prev}{phi_k.row(i)}"

        z = sheet.step_block(
            "Z", "z_i = z_{i−1} + φ(K_i)", n, d_k, tokens, key_dims, cells=z_cell,
            row_array=z_row, explanation="Running sum of the keys' feature vectors.")

        def state_of(i, first=0, last=None):
            """S_i as a range (rows i·d_k … (i+1)·d_k − 1, columns first … last)."""
            last = state.cols - 1 if last is None else last
            return range_ref(state.top + i * d_k, state.left + first,
                             state.top + (i + 1) * d_k - 1, state.left + last,
                             fix_row=True, fix_col=True)

        # NUMER_i = φ(Q_i)·S_i
        numer = sheet.step_block(
            "NUMER", "φ(Q_i)·S_i", n, v.cols, tokens, value_dims,
            cells=lambda i, b: f"=MMULT({phi_q.row(i)},{state_of(i, b, b)})",
            row_array=lambda i, me: f"=MMULT({phi_q.row(i)},{state_of(i)})",
            explanation="Query i reads the memory as it stood after token i.")
        # d_i = φ(Q_i)·z_i + eps
        denom = sheet.step_block(
            "DENOM", f"φ(Q_i)·z_i + {EPS}", n, 1, tokens, ["denom"],
            cells=lambda i, j: f"=SUMPRODUCT({phi_q.row(i)},{z.row(i)})+{EPS}",
            explanation="Sum of the (unnormalised) weights of keys j ≤ i, plus eps.")
    return numer, denom


# sheet text in Chinese (workbook_builder/i18n.py)
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
