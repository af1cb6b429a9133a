"""Kind `encoder`: a whole BERT-family sentence encoder (transformers' BertModel,
RobertaModel or DistilBertModel, then the sentence-transformers head), token ids to the
sentence embedding, every step a formula.

    TOK_EMB_i = INDEX(WORD_EMB, t_i + 1, ·)    the token's row of the word-embedding table
              = (one-hot of t_i)·WORD_EMB     as the `blocks` layout writes it
    EMB_SUM = TOK_EMB + POS_EMB + TYPE_EMB      plus its position's row and token type 0's
    EMBEDDED = LN_EMB(EMB_SUM)                  what enters layer 1 (hidden_states[0])
    OUTPUT_Ll = layer_l(OUTPUT_L(l−1)), l = 1 … L   encoder-block's post-LN steps, _Ll names
    POOLED = Σ_i h_i / n (mean) | h_1 (CLS) | max_i h_i (max)   over the last layer's rows
    EMBEDDING = POOLED / max(‖POOLED‖, 1e-12)   (--normalize, sentence-transformers' Normalize)
    --seq-len2: a second text, every block of it ending in _2, and
    SIMILARITY = E·E₂ / (‖E‖·‖E₂‖)
Editing a token id recomputes the whole sheet: the embedding and the similarity follow.
"""

import dataclasses
from dataclasses import dataclass, field

from reference.encoder import encoder_ref
from sheets._blocks.costs import Cost, cost_section
from sheets._blocks.embedding import ids_from_0, token_ids_input, token_lookup
from sheets._blocks.ffn import ACTIVATIONS, GELU_FORMS
from sheets._blocks.layers import (
    LayerNormKind,
    encoder_layer_inputs,
    encoder_layer_sections,
    scoped_sections,
)
from sheets._blocks.norms import layer_norm, layer_norm_inputs
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    Cell,
    Custom,
    Input,
    Map,
    Reduce,
    Rows,
    Step,
    section,
)
from workbook_builder.sheet.declare import Section

# BERT-large and XLM-R large have 24 layers, XLM-R XL 36: the inputs of every possible
# layer are declared once
MAX_LAYERS = 48
POOLINGS = ("mean", "cls", "max", "none")
NORM_FLOOR = "1E-12"  # Normalize: x / max(‖x‖, 1e-12), with a signed exponent


@dataclass(frozen=True)
class EncoderParams:
    seq_len: int = field(default=4, metadata={"help": "tokens n of the text (rows)"})
    d_model: int = field(default=4, metadata={"help": "hidden width d; d_k = d/heads"})
    heads: int = field(default=2, metadata={"help": "attention heads H (must divide d_model)"})
    d_ff: int = field(default=8, metadata={"help": "feed-forward width (intermediate_size)"})
    layers: int = field(default=2, metadata={"help": f"encoder layers L (1 … {MAX_LAYERS})"})
    vocab: int = field(default=16, metadata={"help": "vocabulary size (rows of WORD_EMB)"})
    activation: str = field(default="gelu", metadata={
        "choices": list(ACTIVATIONS), "help": "feed-forward activation (BERT: gelu)"})
    gelu: str = field(default="exact", metadata={
        "choices": list(GELU_FORMS),
        "help": "GELU form: exact, 0.5·x·(1 + erf(x/√2)) (BERT's gelu), or tanh (gelu_new)"})
    ln_eps: float = field(default=1e-12, metadata={"help": "LayerNorm's eps (BERT: 1e-12)"})
    pooling: str = field(default="mean", metadata={
        "choices": list(POOLINGS),
        "help": "the head: mean of the last layer's rows, the CLS row, their max, or none "
                "(the last hidden state is the answer)"})
    normalize: bool = field(default=False, metadata={
        "help": "divide the pooled vector by its length (sentence-transformers' Normalize)"})
    seq_len2: int | None = field(default=None, metadata={
        "help": "tokens of a second text, embedded by the same weights; its cosine "
                "similarity with the first is a formula"})
    focus: str | int | None = field(default=None, metadata={
        "metavar": "TOKEN",
        "help": "a token of the first text (its label, or its row from 1): per layer and "
                "head, the key it attends to most and that weight, and a heatmap of its "
                "attention"})

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads


def _second(p) -> bool:
    return p.seq_len2 is not None


TOKEN_IDS = token_ids_input(title="token ids: edit one and everything below follows")
TOKEN_IDS_2 = dataclasses.replace(
    token_ids_input("TOKEN_IDS_2", "token ids of the second text", "seq_len2",
                    row_labels="tokens2"), when=_second)
WORD_EMB = Input("WORD_EMB", "vocab", "d_model", "word-embedding table, one row per id",
                 ids_from_0("vocab"), "d")
POS_EMB = Input("POS_EMB", "seq_len", "d_model", "position embedding row of each token",
                "tokens", "d")
POS_EMB_2 = Input("POS_EMB_2", "seq_len2", "d_model",
                  "position embedding row of each token of the second text", "tokens2", "d",
                  when=_second)
TYPE_EMB = Input("TYPE_EMB", BROADCAST, "d_model", "token type 0's embedding row",
                 ["type 0"], "d")
EMB_LN = layer_norm_inputs("EMB")
LAYER_WEIGHTS = [encoder_layer_inputs(f"_L{layer}", when=lambda p, layer=layer:
                                      p.layers >= layer)
                 for layer in range(1, MAX_LAYERS + 1)]
SECOND = {"sizes": {"seq_len": "seq_len2"}, "labels": {"tokens": "tokens2"}}


def _steps_only(sections: list[Section]) -> list[Section]:
    """The sections without their inputs: a second text reads the first one's weights."""
    def kept(band):
        return tuple(item for item in band if not isinstance(item, Input))

    return [dataclasses.replace(sec, bands=tuple(b for b in map(kept, sec.bands) if b))
            for sec in sections]


def embedding_sections(p) -> list[Section]:
    """The lookup, the three rows added and the embedding LayerNorm: EMBEDDED."""
    lookup = token_lookup(table="WORD_EMB", equation="WORD_EMB[id, ·] = [id = v]·WORD_EMB",
                          explanation="Each token's row of the word-embedding table, looked "
                                      "up by its id.")
    # EMB_SUM = TOK_EMB + POS_EMB + TYPE_EMB
    total = Step("EMB_SUM", "TOK_EMB + POS_EMB + TYPE_EMB",
                 Map("={W}+{P}+{T}", W="TOK_EMB", P="POS_EMB", T="TYPE_EMB"),
                 "Each token's word, position and token-type rows added.")
    return [section("Embeddings — each token's row of WORD_EMB, its position's row and the "
                    "token-type row, added", [lookup, total]),
            section("EMB — LayerNorm over each row: mean, centre, variance, scale",
                    layer_norm("EMB", "EMB_SUM", "EMBEDDED", p.ln_eps))]


def layer_sections(p, layer: int, second: bool = False) -> list[Section]:
    """Layer `layer` (from 1) on the layer below's output; for the second text without its
    weights, which it reads from the first text's layer."""
    weights = LAYER_WEIGHTS[layer - 1]
    sfx, two = f"_L{layer}", "_2" if second else ""
    source = "EMBEDDED" + two if layer == 1 else f"OUTPUT_L{layer - 1}{two}"
    blocks = encoder_layer_sections(p, weights, False, p.activation, p.gelu, p.ln_eps)
    title = ("Second text — " if second else "") + f"Layer {layer} of {p.layers}"
    if not second:
        return scoped_sections(blocks, sfx, title, X=source)
    return scoped_sections(_steps_only(blocks), sfx + two, title, **SECOND, X=source,
                           **{name: name + sfx for name in weights})


def pooled(p, src: str, sfx: str) -> Step:
    """POOLED: the mean, the first row or the max of every column of the last layer."""
    n = p.seq_len2 if sfx else p.seq_len

    def each(_, j, env) -> str:
        column = env[src].col(j)
        if p.pooling == "mean":  # Σ_i m_i h_ij / Σ_i m_i, every m_i = 1
            return f"=SUM({column})/{n}"
        if p.pooling == "cls":
            return f"={env[src].cell(0, j)}"
        return f"=MAX({column})"

    equation, why = {
        "mean": ("Σ_i h_i / n", "The mean of the last layer's rows over the attention mask "
                                "(every token of one text)."),
        "cls": ("h_1 (CLS)", "The first row, the [CLS] token's."),
        "max": ("max_i h_i", "The largest value of each column over the tokens.")}[p.pooling]
    return Step("POOLED" + sfx, equation, Custom(1, "d_model", each=each), why,
                row_labels=["pooled"], col_labels="d")


def head_steps(p, sfx: str = "") -> list[Step]:
    """POOLED, then EMBEDDING: POOLED over its length (--normalize) or POOLED itself."""
    src = f"OUTPUT_L{p.layers}{sfx}"
    steps = [pooled(p, src, sfx)]
    if p.normalize:
        # ‖p‖ = √(Σ_j p_j²);  EMBEDDING = p / max(‖p‖, 1e-12)
        steps += [Step("POOLED_NORM" + sfx, "‖p‖ = √(Σ_j p_j²)",
                       Reduce("=SQRT(SUMPRODUCT({P},{P}))", P="POOLED" + sfx),
                       "The pooled vector's length.", row_labels=["pooled"],
                       col_labels=["‖p‖"]),
                  Step("EMBEDDING" + sfx, f"p / max(‖p‖, {NORM_FLOOR})",
                       Map(f"={{P}}/MAX({{N}},{NORM_FLOOR})", P="POOLED" + sfx,
                           N="POOLED_NORM" + sfx),
                       "The sentence embedding: the pooled vector scaled to length 1.")]
    else:
        steps.append(Step("EMBEDDING" + sfx, "p (no Normalize)", Map("={P}", P="POOLED" + sfx),
                          "The sentence embedding: the pooled vector as it is."))
    return steps


def similarity() -> Step:
    # cos = E·E₂ / (‖E‖·‖E₂‖)
    return Step("SIMILARITY", "cos = E·E₂ / (‖E‖·‖E₂‖)",
                Reduce("=SUMPRODUCT({A},{B})/(SQRT(SUMPRODUCT({A},{A}))*"
                       "SQRT(SUMPRODUCT({B},{B})))", A="EMBEDDING", B="EMBEDDING_2"),
                "Cosine similarity of the two texts' embeddings: edit a token id of either "
                "and it follows.", row_labels=["text 1"], col_labels=["text 2"])


def _layer_heads(p) -> list[str]:
    return [f"L{layer} h{h}" for layer in range(1, p.layers + 1)
            for h in range(1, p.heads + 1)]


def focus_steps(p) -> list[Step]:
    """Where the focus token r looks in every layer and head: its row of each WEIGHTS, the
    largest weight and the key (from 1) and token id that has it."""
    r, rows = p.focus - 1, p.layers * p.heads

    def attention(i, j, env) -> str:
        # FOCUS_ATTN_(l,h),j = WEIGHTS_Hh_Ll[r, j]
        layer, h = divmod(i, p.heads)
        return f"={env[f'WEIGHTS_H{h + 1}_L{layer + 1}'].cell(r, j)}"

    def key(i, _, env) -> Cell:
        # k = min{j : A_j = max_j A_j}: the first key with the largest weight
        row = env["FOCUS_ATTN"].row(i)
        return Cell(f"=MIN(IF({row}={env['FOCUS_WEIGHT'].cell(i, 0)},"
                    f"{env['FOCUS_POS'].whole()}))", array=True)

    def key_id(i, _, env) -> str:
        return f"=INDEX({env['TOKEN_IDS'].whole()},{env['FOCUS_KEY'].cell(i, 0)},1)"

    return [
        Step("FOCUS_POS", "j = 1 … n", Custom(1, "seq_len", each=lambda _, j, env: f"={j + 1}"),
             "The keys' positions, from 1.", row_labels=["key"], col_labels="tokens",
             number_format="0"),
        Step("FOCUS_ATTN", "A_(l,h) = WEIGHTS_h,l[r, ·]", Custom(rows, "seq_len",
                                                                each=attention),
             "The focus token's attention over the keys, one row per layer and "
             "head.", row_labels=_layer_heads, col_labels="tokens", heatmap=True),
        Step("FOCUS_WEIGHT", "max_j A_j", Rows("=MAX({A})", A="FOCUS_ATTN"),
             "The largest weight of each head.", col_labels=["max"]),
        Step("FOCUS_KEY", "k: A_k = max_j A_j", Custom(rows, 1, each=key),
             "The key each head attends to most (its position from 1; the first on a tie).",
             row_labels=_layer_heads, col_labels=["key"], number_format="0"),
        Step("FOCUS_KEY_ID", "TOKEN_IDS[k]", Custom(rows, 1, each=key_id),
             "That key's token id.", row_labels=_layer_heads, col_labels=["id"],
             number_format="0"),
    ]


COST_SIZES = {"n": "seq_len", "d": "d_model", "H": "heads", "L": "layers"}
COSTS = [
    # every layer's H attention matrices of n×n weights
    Cost("COST_HELD", "L·H·n²", "={L}*{H}*{n}^2",
         "Attention weights the sheet holds: an n×n matrix per head and layer.", "weights"),
    # Q_h·K_hᵀ and A_h·V_h: n²·d_k each per head, H·d_k = d
    Cost("COST_MACS", "2·L·n²·d", "=2*{L}*{n}^2*{d}",
         "Multiply-adds of the scores Q·Kᵀ and of A·V over every head and layer: they grow "
         "with n²."),
]


class Encoder(LayerNormKind):
    name = "encoder"
    summary = ("a whole BERT-family sentence encoder: token ids, embeddings, L layers, "
               "pooling, the embedding; two texts' similarity")
    sheet_title = "Encoder"
    Params = EncoderParams
    reference = staticmethod(encoder_ref)
    inputs = [TOKEN_IDS, WORD_EMB, POS_EMB, TYPE_EMB, *EMB_LN,
              *(w for weights in LAYER_WEIGHTS for w in weights.values()),
              TOKEN_IDS_2, POS_EMB_2]
    test_cases = [
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6, "layers": 2, "vocab": 10,
         "normalize": True, "focus": 3},
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 5, "layers": 1, "vocab": 7,
         "pooling": "cls", "normalize": True, "seq_len2": 2},
        {"seq_len": 2, "d_model": 2, "heads": 1, "d_ff": 3, "layers": 2, "vocab": 5,
         "pooling": "max", "activation": "relu", "ln_eps": 1e-5, "seq_len2": 3},
        {"seq_len": 2, "d_model": 2, "heads": 2, "d_ff": 2, "layers": 1, "vocab": 4,
         "pooling": "none", "gelu": "tanh"},
    ]
    demo_cases = [("encoder_two_texts", {"seq_len": 4, "d_model": 4, "heads": 2, "d_ff": 8,
                                         "layers": 2, "vocab": 12, "normalize": True,
                                         "seq_len2": 3, "focus": 2})]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.d_model % p.heads:
            raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
        if p.layers > MAX_LAYERS:
            raise UserError(f"--layers must be 1 … {MAX_LAYERS}, got {p.layers}")
        if p.activation not in ACTIVATIONS:
            raise UserError(f"--activation must be relu or gelu, got {p.activation!r}")
        if p.gelu not in GELU_FORMS:
            raise UserError(f"--gelu must be tanh or exact, got {p.gelu!r}")
        if p.pooling not in POOLINGS:
            raise UserError(f"--pooling must be {', '.join(POOLINGS)}, got {p.pooling!r}")
        if not 0 < p.ln_eps < 1:
            raise UserError(f"--ln-eps must be a small positive number, got {p.ln_eps}")
        if p.focus is not None and (isinstance(p.focus, str) or
                                    not 1 <= p.focus <= p.seq_len):
            raise UserError(f"--focus {p.focus} is not a token of the first text: give one "
                            f"of its labels or its row, 1 … {p.seq_len}")
        if p.pooling == "none" and (p.normalize or p.seq_len2 is not None):
            raise UserError("--normalize and a second text need a pooled embedding: "
                            "--pooling none leaves the last hidden state as the answer")

    @classmethod
    def resolve_tokens(cls, values, tokens):
        """--focus TOKEN as its row: a number, or the first row of the first text whose
        label it is (t1, t2, … without labels); else left for `validate` to refuse."""
        focus = values.get("focus")
        if not isinstance(focus, str):
            return values
        if focus.strip().isdigit():
            return {**values, "focus": int(focus)}
        n = values.get("seq_len", cls.Params.seq_len)
        first = list(tokens)[:n] if tokens is not None else [f"t{i + 1}" for i in range(n)]
        return {**values, "focus": first.index(focus) + 1} if focus in first else values

    @classmethod
    def sequence_length(cls, params) -> int:
        return params.seq_len + (params.seq_len2 or 0)

    @classmethod
    def label_sets(cls, params, labels):
        return {"tokens": labels[:params.seq_len], "tokens2": labels[params.seq_len:]}

    @classmethod
    def sections(cls, p):
        sections = [section("The token ids and the word-embedding table",
                            [TOKEN_IDS, WORD_EMB]),
                    section("The position rows, the token-type row and the embedding "
                            "LayerNorm's γ and β", [POS_EMB, TYPE_EMB, *EMB_LN]),
                    *embedding_sections(p)]
        for layer in range(1, p.layers + 1):
            sections += layer_sections(p, layer)
        if p.focus is not None:
            sections.append(section(f"Focus — where token {p.focus} looks, in every layer "
                                    f"and head", focus_steps(p)))
        if p.pooling != "none":
            sections.append(section(f"The head — {p.pooling} pooling" +
                                    (", then Normalize" if p.normalize else "") +
                                    ": the sentence embedding", head_steps(p)))
        if _second(p):
            sections += [section("The second text: its token ids and position rows",
                                 [TOKEN_IDS_2, POS_EMB_2])]
            sections += scoped_sections(embedding_sections(p), "_2", "Second text",
                                        **SECOND)
            for layer in range(1, p.layers + 1):
                sections += layer_sections(p, layer, second=True)
            sections += [section("The second text's head", head_steps(p, "_2")),
                         section("Similarity — the cosine of the two embeddings",
                                 similarity())]
        sections.append(cost_section(
            "Cost — the attention of every layer holds and multiplies n² numbers per head; "
            "at this sheet's n and at n = 1k, 4k, 32k", COST_SIZES, COSTS))
        return sections

