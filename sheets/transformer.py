"""Kind `transformer`: the whole encoder-decoder Transformer of the paper (Vaswani et al.
2017), source ids to a greedy translation, every step a formula.

    POS = PE (PE[p,2i] = sin(p/10000^(2i/d)), PE[p,2i+1] = cos(…); --sinusoid halves:
          PE[p,i] = sin(…), PE[p,d/2+i] = cos(…), as Marian) or the input POS_EMB
          (--positions per_stack: ENC_POS_EMB for the encoder, DEC_POS_EMB for the decoder)
    SRC_EMB_i = INDEX(WTE, s_i + 1, ·)       ENC_X = SRC_EMB·√d + POS[0 … n−1]   (--no-scale: ·1)
    --embed-ln: ENC_X_LN = ENC_EMB_LN(ENC_X) enters layer 1 (DEC_X_LN = DEC_EMB_LN(DEC_X) too)
    h_l = encoder layer l (h_{l−1})          encoder-block's steps, names ending _E1 … _EN
    ENC_OUTPUT = h_N (pre-LN: ENC_LNF(h_N))
    CROSS_K_Dl = ENC_OUTPUT·CROSS_W_K + CROSS_B_K, CROSS_V_Dl likewise: once per decoder layer
    decode step t = 1 … K (names ending _Tt; a decoder layer's _Dl_Tt):
      DEC_IDS = [start id, NEXT_TOKEN_T1 … NEXT_TOKEN_T(t−1)]
      DEC_X = WTE[DEC_IDS]·√d + POS[0 … t−1]
      g_l = decoder layer l (g_{l−1}): causal self-attention, cross-attention over the
            encoder's keys and values, FFN, each with Add & Norm (pre-LN: norm first)
      LOGITS = last row of g_M (pre-LN: DEC_LNF(g_M))·WTEᵀ (+ LOGITS_BIAS)
      GEN_LOGITS = LOGITS, the ids generate bans at −10³⁰ (--ban-pad, --forced-bos,
                   --forced-end)
      PROBS = softmax(GEN_LOGITS or LOGITS);  ARGMAX = the smallest id of the largest one
      NEXT_TOKEN = the pad id once the end id was chosen (FINISHED), else ARGMAX
    GENERATED = [NEXT_TOKEN_T1 … NEXT_TOKEN_TK]
Each step recomputes its whole prefix (no KV cache). Typing another source id re-translates.
"""

from dataclasses import dataclass, field

from reference.transformer import transformer_ref
from sheets._blocks.attention import QUERY_KEY
from sheets._blocks.costs import Cost, cost_section
from sheets._blocks.embedding import ids_from_0, token_ids_input, token_lookup
from sheets._blocks.layers import (
    LayerNormKind,
    decoder_layer_inputs,
    decoder_layer_sections,
    encoder_layer_inputs,
    encoder_layer_sections,
    scoped_sections,
)
from sheets._blocks.norms import layer_norm, layer_norm_inputs, layer_norm_section
from sheets._blocks.softmax import softmax_band
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    ByRow,
    Cell,
    Custom,
    Example,
    Input,
    Map,
    MatMul,
    Step,
    section,
)
from workbook_builder.sheet.kind import make_params

MAX_LAYERS = 12  # the inputs of every possible layer are declared once
ACTIVATIONS = ("relu", "gelu", "silu")
POSITIONS = ("sinusoidal", "learned", "per_stack")
SINUSOIDS = ("interleaved", "halves")
DECODER_WEIGHTS = tuple(decoder_layer_inputs())  # their plain names


@dataclass(frozen=True)
class TransformerParams:
    src_len: int = field(default=4, metadata={"help": "source tokens n (rows of SRC_IDS)"})
    d_model: int = field(default=8, metadata={"help": "embedding width d, even; d_k = d/heads"})
    heads: int = field(default=2, metadata={"help": "attention heads H (must divide d_model)"})
    d_ff: int = field(default=16, metadata={"help": "feed-forward width (columns of W_1)"})
    layers: int = field(default=2, metadata={
        "help": f"encoder layers N (1 … {MAX_LAYERS})"})
    dec_layers: int = field(default=2, metadata={
        "help": f"decoder layers M (1 … {MAX_LAYERS})"})
    vocab: int = field(default=16, metadata={"help": "vocabulary size (rows of WTE)"})
    decode: int = field(default=4, metadata={"help": "greedy decoding steps K"})
    activation: str = field(default="relu", metadata={
        "choices": list(ACTIVATIONS),
        "help": "feed-forward activation: relu (the paper), gelu (exact, erf) or silu "
                "(Marian's swish)"})
    pre_ln: bool = field(default=False, metadata={
        "help": "pre-LN order (norm_first): LayerNorm before each sub-layer, and a final "
                "LayerNorm after each stack"})
    positions: str = field(default="sinusoidal", metadata={
        "choices": list(POSITIONS),
        "help": "sinusoidal (the paper's sin/cos, live formulas), learned (an input "
                "table POS_EMB) or per_stack (two tables, ENC_POS_EMB and DEC_POS_EMB, as "
                "BART)"})
    sinusoid: str = field(default="interleaved", metadata={
        "choices": list(SINUSOIDS),
        "help": "the sinusoid's columns: interleaved (the paper: sin, cos, sin, …) or halves "
                "(Marian: every sin first, then every cos)"})
    no_scale: bool = field(default=False, metadata={
        "help": "leave the embeddings unscaled (the paper multiplies them by √d_model)"})
    embed_ln: bool = field(default=False, metadata={
        "help": "a LayerNorm after embedding + positions in both stacks (BART's "
                "layernorm_embedding)"})
    logits_bias: bool = field(default=False, metadata={
        "help": "add a bias row LOGITS_BIAS to the logits (Marian's final_logits_bias)"})
    pad_id: int = field(default=0, metadata={
        "help": "the pad id, given by every step after the end id"})
    start_id: int = field(default=1, metadata={"help": "the decoder start id"})
    end_id: int = field(default=2, metadata={"help": "the end id (end of sentence)"})
    ban_pad: bool = field(default=False, metadata={
        "help": "never choose the pad id (generate's bad_words_ids [[pad]], as Marian's)"})
    forced_bos: bool = field(default=False, metadata={
        "help": "the first step chooses --bos-id (generate's forced_bos_token_id)"})
    bos_id: int = field(default=0, metadata={"help": "the id --forced-bos forces"})
    forced_end: bool = field(default=False, metadata={
        "help": "the last step chooses the end id (generate's forced_eos_token_id)"})
    ln_eps: float = field(default=1e-5, metadata={"help": "LayerNorm's eps (PyTorch: 1e-05)"})

    @property
    def processed(self) -> bool:
        """Whether the logits pass through generate's bans before the softmax."""
        return self.ban_pad or self.forced_end or self.forced_bos

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    @property
    def positions_count(self) -> int:
        """Positions 0 … P−1 the two stacks read: P = max(n, K)."""
        return max(self.src_len, self.decode)


def _positions(p) -> list[int]:
    return list(range(p.positions_count))


SRC_IDS = token_ids_input("SRC_IDS", "source token ids: type another to re-translate",
                          rows="src_len")
WTE = Input("WTE", "vocab", "d_model", "embedding table, one row per id (shared by both "
            "stacks and the output layer)", ids_from_0("vocab"), "d")
LOGITS_BIAS = Input("LOGITS_BIAS", 1, "vocab", "bias added to the logits", ["b"],
                    ids_from_0("vocab"), when="logits_bias")
POS_EMB = Input("POS_EMB", lambda p: p.positions_count, "d_model",
                "learned position rows 0 … P−1 (both stacks read them)", _positions, "d",
                when=lambda p: p.positions == "learned")
ENC_POS_EMB = Input("ENC_POS_EMB", "src_len", "d_model",
                    "the encoder's learned position rows 0 … n−1", ids_from_0("src_len"),
                    "d", when=lambda p: p.positions == "per_stack")
DEC_POS_EMB = Input("DEC_POS_EMB", "decode", "d_model",
                    "the decoder's learned position rows 0 … K−1", ids_from_0("decode"),
                    "d", when=lambda p: p.positions == "per_stack")
ENC_EMB_LN = layer_norm_inputs("ENC_EMB_LN", when="embed_ln")
DEC_EMB_LN = layer_norm_inputs("DEC_EMB_LN", when="embed_ln")
ENC_WEIGHTS = [encoder_layer_inputs(f"_E{layer}", when=lambda p, layer=layer:
                                    p.layers >= layer)
               for layer in range(1, MAX_LAYERS + 1)]
DEC_WEIGHTS = [decoder_layer_inputs(f"_D{layer}", when=lambda p, layer=layer:
                                    p.dec_layers >= layer)
               for layer in range(1, MAX_LAYERS + 1)]
ENC_LNF = layer_norm_inputs("ENC_LNF", when="pre_ln")
DEC_LNF = layer_norm_inputs("DEC_LNF", when="pre_ln")


def _scale(p) -> str:
    """The embedding's factor as the formulas write it."""
    return "" if p.no_scale else f"*SQRT({p.d_model})"


def _position_table(p, stack: str) -> str:
    """The block a stack ("ENC" or "DEC") reads its position rows from."""
    return {"sinusoidal": "PE", "learned": "POS_EMB"}.get(p.positions, f"{stack}_POS_EMB")


def _embedded(emb: str, rows, stack: str) -> ByRow:
    """EMB·√d + POS[0 … rows−1]: each row plus its position's row."""
    def row(i, j, env):
        pos = env[_position_table(env.params, stack)]
        if j is None:
            return f"={env[emb].row(i)}{_scale(env.params)}+{pos.row(i)}"
        return f"={env[emb].cell(i, j)}{_scale(env.params)}+{pos.cell(i, j)}"

    return ByRow(rows, "d_model", row)


def _pe_cell(i, j, env):
    angle = env["PE_ANGLE"]
    if env.params.sinusoid == "halves":  # PE[pos,i] = sin θ[pos,i], PE[pos,d/2+i] = cos θ
        half = env.params.d_model // 2
        return f"={'COS' if j >= half else 'SIN'}({angle.cell(i, j % half)})"
    # PE[pos,2i] = sin θ[pos,i], PE[pos,2i+1] = cos θ[pos,i]
    return f"={'COS' if j % 2 else 'SIN'}({angle.cell(i, j // 2)})"


def _pe_labels(p) -> list[str]:
    if p.sinusoid == "halves":
        half = p.d_model // 2
        return [f"{'cos' if j >= half else 'sin'}{j % half}" for j in range(p.d_model)]
    return [f"{'cos' if j % 2 else 'sin'}{j // 2}" for j in range(p.d_model)]


def position_section(p):
    if p.positions == "per_stack":
        return section("Positions: learned, one table per stack (BART keeps rows 0 and 1 "
                       "of each apart: position p is its row p + 2)", [ENC_POS_EMB],
                       [DEC_POS_EMB])
    if p.positions == "learned":
        return section("Positions: learned rows 0 … P−1 (P = max(n, K) = "
                       f"{p.positions_count}), read by both stacks", POS_EMB)
    columns = ("sin in the first half of the columns, cos in the second (Marian)"
               if p.sinusoid == "halves" else "sin in even columns, cos in odd")
    return section(
        "Positions: the paper's sinusoid, angle pos/10000^(2i/{d_model}), " + columns +
        ", for positions 0 … P−1 (P = max(n, K)); both stacks read it",
        [Step("PE_ANGLE", "θ = pos / 10000^(2i/{d_model})",
              Map("={ROW_LABEL}/POWER(10000,2*{COL_LABEL}/{d_model})",
                  rows=lambda p: p.positions_count, cols=lambda p: p.d_model // 2),
              "Frequency i turns once every 2π·10000^(2i/d) positions.",
              row_labels=_positions, col_labels=lambda p: list(range(p.d_model // 2)),
              corner="pos\\i"),
         Step("PE", "PE[pos,i] = sin θ,  PE[pos,d/2+i] = cos θ" if p.sinusoid == "halves"
              else "PE[pos,2i] = sin θ,  PE[pos,2i+1] = cos θ",
              Custom(lambda p: p.positions_count, "d_model", _pe_cell),
              "Each pair of columns is a point on a circle turning at its own speed.",
              row_labels=_positions, corner="pos", col_labels=_pe_labels)])


def _prefix(t: int):
    return lambda p: list(range(t))


def _dec_ids(t: int) -> ByRow:
    """The start id, then the ids steps 1 … t−1 chose."""
    def row(i, j, env):
        if i == 0:
            return f"={env.params.start_id}"
        return f"={env[f'NEXT_TOKEN_T{i}'].fixed(0, 0)}"

    return ByRow(t, 1, row, per_cell=True)


def _logits(t: int, final: str) -> ByRow:
    """The last row of `final` against every row of WTE (+ LOGITS_BIAS)."""
    def row(i, j, env):
        last, wte = env[final].row(env[final].rows - 1), env["WTE"]
        bias = env.params.logits_bias
        if j is None:
            plus = f"+{env['LOGITS_BIAS'].whole()}" if bias else ""
            return f"=MMULT({last},TRANSPOSE({wte.whole()})){plus}"
        plus = f"+{env['LOGITS_BIAS'].cell(0, j)}" if bias else ""
        return f"=SUMPRODUCT({last},{wte.row(j)}){plus}"

    return ByRow(1, "vocab", row)


def _processed(p, t: int) -> Step:
    """generate's logits processors as a step: the pad id banned (bad_words_ids), every id
    but the end id at the last step (forced_eos_token_id), each set to −1E+30."""
    banned, words = [], []
    last_forced = p.forced_end and t == p.decode  # generate's forced end comes last
    if p.forced_bos and t == 1 and not last_forced:
        banned.append(f"{{COL_LABEL}}<>{p.bos_id}")
        words.append("every id but the forced first id (the first step)")
    if p.ban_pad:
        banned.append(f"{{COL_LABEL}}={p.pad_id}")
        words.append("the pad id")
    if last_forced:
        banned.append(f"{{COL_LABEL}}<>{p.end_id}")
        words.append("every id but the end id (the last step)")
    # conditions added, not OR()ed: OR reduces a whole row in the blocks layout to one value
    condition = banned[0] if len(banned) == 1 else "+".join(f"({c})" for c in banned) + ">0"
    template = f"=IF({condition},-1E+30,{{L}})" if banned else "={L}"
    return Step("GEN_LOGITS" + f"_T{t}", "LOGITS, banned ids −10³⁰" if banned else "LOGITS",
                Map(template, labels_from=f"LOGITS_T{t}", L=f"LOGITS_T{t}"),
                ("What generate chooses from: " + " and ".join(words) + " set to −10³⁰.")
                if banned else "What generate chooses from: nothing banned at this step.",
                row_labels=["next"], col_labels=ids_from_0("vocab"))


def _argmax(t: int) -> Custom:
    # the id of the largest probability: the smallest id among the maxima, as argmax
    def each(i, j, env):
        probs = env[f"PROBS_T{t}"]
        return Cell(f"=MIN(IF({probs.whole()}={f'MAX({probs.whole()})'},"
                    f"{probs.col_labels()}))", array=True)

    return Custom(1, 1, each)


def _finished(t: int) -> Custom:
    """1 once a step before t chose the end id."""
    def each(i, j, env):
        said_end = f"{env[f'NEXT_TOKEN_T{t - 1}'].fixed(0, 0)}={env.params.end_id}"
        if t == 2:
            return f"=IF({said_end},1,0)"
        return f"=IF(OR({env[f'FINISHED_T{t - 1}'].fixed(0, 0)}=1,{said_end}),1,0)"

    return Custom(1, 1, each)


def _next_token(t: int) -> Custom:
    def each(i, j, env):
        argmax = env[f"ARGMAX_T{t}"].fixed(0, 0)
        if t == 1:
            return f"={argmax}"
        return f"=IF({env[f'FINISHED_T{t}'].fixed(0, 0)}=1,{env.params.pad_id},{argmax})"

    return Custom(1, 1, each)


def decode_step(p, t: int) -> list:
    """Decode step t (from 1): the prefix, M decoder layers over it, the logits of its last
    row, their softmax and the chosen id."""
    st = f"_T{t}"
    ids_words = "the start id" if t == 1 else f"the start id, then the ids steps 1 … {t - 1} chose"
    prefix = section(
        f"Decode step {t} of {p.decode} — the prefix: {ids_words} (the whole prefix is "
        f"recomputed at every step: no KV cache)",
        [Step("DEC_IDS" + st, "[start, y_1 … y_{t−1}]", _dec_ids(t),
              "The decoder's input ids: read from the steps before, so a new choice there "
              "flows on.", row_labels=_prefix(t), col_labels=["id"], corner="pos",
              number_format="0"),
         token_lookup("DEC_EMB" + st, "DEC_IDS" + st, rows=t,
                      explanation="Each prefix id's row of the embedding table."),
         Step("DEC_X" + st, "DEC_EMB" + ("" if p.no_scale else "·√d") + " + POS",
              _embedded("DEC_EMB" + st, t, "DEC"),
              "What enters decoder layer 1" + (" after DEC_EMB_LN" if p.embed_ln else "") +
              ": each row plus its position's row."),
         Step("MASK" + st, "1 if key j ≤ query i else 0",
              Map("=IF({COL_LABEL}<={ROW_LABEL},1,0)", rows=t, cols=t),
              "Causal mask: a prefix row attends only to itself and the rows before it.",
              row_labels=_prefix(t), col_labels=_prefix(t), corner=QUERY_KEY)])
    layers = []
    if p.embed_ln:
        layers += scoped_sections(
            [section("DEC_EMB_LN — the LayerNorm after the decoder's embedding",
                     layer_norm("DEC_EMB_LN", "X", "DEC_X_LN", p.ln_eps))],
            st, f"Step {t}", X="DEC_X" + st)
    first = ("DEC_X_LN" if p.embed_ln else "DEC_X") + st
    for layer in range(1, p.dec_layers + 1):
        source = first if layer == 1 else f"OUTPUT_D{layer - 1}{st}"
        reads = {name: f"{name}_D{layer}" for name in DECODER_WEIGHTS}
        layers += scoped_sections(
            decoder_layer_sections(p, t, _prefix(t), p.pre_ln, p.activation, "exact",
                                   p.ln_eps),
            f"_D{layer}{st}", f"Step {t}, decoder layer {layer} of {p.dec_layers}",
            X=source, MASK="MASK" + st, CROSS_K=f"CROSS_K_D{layer}",
            CROSS_V=f"CROSS_V_D{layer}", **reads)
    last = f"OUTPUT_D{p.dec_layers}{st}"
    if p.pre_ln:
        layers += scoped_sections(
            [section("DEC_LNF — the decoder's final LayerNorm",
                     layer_norm("DEC_LNF", "X", "DEC_FINAL", p.ln_eps))],
            st, f"Step {t}", X=last)
        last = "DEC_FINAL" + st
    bias = " + LOGITS_BIAS" if p.logits_bias else ""
    processed = [_processed(p, t)] if p.processed else []
    probs = softmax_band(
        ("GEN_LOGITS" if p.processed else "LOGITS") + st,
        [f"{name}{st}" for name in ("LOGIT_MAX", "LOGIT_EXP", "LOGIT_SUM", "PROBS")],
        ("m = max_v LOGITS_v", "e = exp(LOGITS − m)", "ℓ = Σ_v e_v", "p = e / ℓ"),
        ("Largest logit of this step.", "Exponential of each shifted logit.",
         "The softmax denominator.", "The model's probability of every id coming next."),
        last_row="vocab", row_labels=["next"], col_labels=ids_from_0("vocab"))
    chosen = [Step("ARGMAX" + st, "v: p_v = max p", _argmax(t),
                   "The most likely id (the smallest on a tie, as argmax).",
                   row_labels=["next"], col_labels=["id"], number_format="0")]
    if t > 1:
        chosen.append(Step("FINISHED" + st, "1 if an earlier step chose the end id",
                           _finished(t), "Once the end id is chosen, every later step gives "
                                         "the pad id.", row_labels=["next"],
                           col_labels=["end"], number_format="0"))
    chosen.append(Step("NEXT_TOKEN" + st, "pad if finished, else the argmax", _next_token(t),
                       "The id this step adds to the translation; the next step reads it.",
                       row_labels=["next"], col_labels=["id"], number_format="0"))
    return [prefix, *layers,
            section(f"Step {t} — the output layer: the last row against every row of the "
                    f"embedding table (tied){bias and ', plus the logits bias'}, softmax, "
                    f"the chosen id",
                    [Step("LOGITS" + st, f"last row·WTEᵀ{bias}", _logits(t, last),
                          "Score of every id coming next.", row_labels=["next"],
                          col_labels=ids_from_0("vocab")), *processed],
                    probs, chosen)]


# the tutorial's 我/爱/AI rows (../shared/seeds/000_*.txt, d = 2) as ids 3, 4, 5 of the
# table, beside the special ids and two target words; every weight matrix the identity
HAND_TABLE = [[0, 0], [-1, 0], [0, -1], [1, 0], [0, 1], [1, 1], [1, -1], [-1, 1]]
HAND_SIZES = {"src_len": 3, "d_model": 2, "heads": 1, "d_ff": 2, "layers": 1,
              "dec_layers": 1, "vocab": 8, "decode": 3}
HAND_NOTE = ("example hand: the tutorial's 我/爱/AI embeddings [1,0], [0,1], [1,1] as ids "
             "3, 4, 5 of WTE (0 pad, 1 start, 2 end); every weight matrix the identity, "
             "biases 0, γ 1, β 0")


def hand_example() -> Example:
    params = make_params(Transformer, HAND_SIZES)
    identity, zeros = [[1, 0], [0, 1]], [[0, 0]]
    inputs = {"SRC_IDS": [[3], [4], [5]], "WTE": HAND_TABLE}
    for name, (rows, cols) in Transformer.input_shapes(params).items():
        if name in inputs:
            continue
        inputs[name] = [[1, 1]] if "_GAMMA" in name else zeros if rows == 1 else identity
        assert (rows, cols) == (len(inputs[name]), 2), name
    return Example(HAND_SIZES, inputs, ["我", "爱", "AI"], HAND_NOTE)


# cost of attention as a function of the length n (the target as long as the source)
COSTS = [
    Cost("COST_ENC", "L_e·2·n²·d", "={L_e}*2*{n}^2*{d}",
         "The encoder's attention: scores Q·Kᵀ and A·V, n² pairs of d numbers per layer."),
    Cost("COST_DEC_STEP", "L_d·2·t·d", "={L_d}*2*{t}*{d}",
         "One decoding step with a KV cache: one new query against t cached keys and "
         "values."),
    Cost("COST_CROSS", "L_d·2·t·n·d", "={L_d}*2*{t}*{n}*{d}",
         "Cross-attention of a prefix of t rows over the n source rows."),
    Cost("COST_SHEET_STEP", "L_d·2·(t² + t·n)·d", "={L_d}*2*({t}^2+{t}*{n})*{d}",
         "One step as this sheet computes it: the whole prefix again (t² pairs) and its "
         "cross-attention (t·n)."),
]


class Transformer(LayerNormKind):
    name = "transformer"
    summary = ("the whole encoder-decoder Transformer: N encoder and M decoder layers, "
               "greedy decoding step by step")
    sheet_title = "Transformer"
    Params = TransformerParams
    repeated_by = ("decode",)  # one decoding band per step (each recomputes its prefix)
    reference = staticmethod(transformer_ref)
    inputs = [SRC_IDS, WTE, LOGITS_BIAS, POS_EMB, ENC_POS_EMB, DEC_POS_EMB, *ENC_EMB_LN,
              *DEC_EMB_LN,
              *(w for weights in ENC_WEIGHTS for w in weights.values()), *ENC_LNF,
              *(w for weights in DEC_WEIGHTS for w in weights.values()), *DEC_LNF]
    # the sequence names its tokens in SRC_IDS's rows; the decoder's rows are positions
    documented_suffixes = (("H", "Hh", "head h"), ("E", "El", "encoder layer l"),
                           ("D", "Dl", "decoder layer l"), ("T", "Tt", "step t"))
    test_cases = [
        {"src_len": 3, "d_model": 4, "heads": 2, "d_ff": 6, "layers": 1, "dec_layers": 1,
         "vocab": 7, "decode": 3},
        {"src_len": 2, "d_model": 4, "heads": 1, "d_ff": 5, "layers": 2, "dec_layers": 1,
         "vocab": 6, "decode": 2, "pre_ln": True, "activation": "gelu",
         "positions": "learned", "logits_bias": True},
        {"src_len": 2, "d_model": 2, "heads": 1, "d_ff": 3, "layers": 1, "dec_layers": 2,
         "vocab": 5, "decode": 3, "activation": "silu", "no_scale": True, "start_id": 0,
         "pad_id": 0, "end_id": 1},
        {"src_len": 3, "d_model": 4, "heads": 2, "d_ff": 3, "layers": 1, "dec_layers": 1,
         "vocab": 6, "decode": 3, "activation": "silu", "sinusoid": "halves", "pad_id": 5,
         "start_id": 5, "end_id": 0, "logits_bias": True, "ban_pad": True,
         "forced_end": True},
        {"src_len": 3, "d_model": 4, "heads": 2, "d_ff": 3, "layers": 1, "dec_layers": 2,
         "vocab": 7, "decode": 3, "activation": "gelu", "positions": "per_stack",
         "embed_ln": True, "no_scale": True, "pad_id": 1, "start_id": 2, "end_id": 2,
         "logits_bias": True, "forced_bos": True, "bos_id": 0, "forced_end": True},
    ]
    demo_cases = [("transformer", {})]
    examples = {"hand": hand_example}
    demo_examples = ("hand",)

    @classmethod
    def validate(cls, p):
        for name in ("src_len", "d_model", "heads", "d_ff", "layers", "dec_layers", "vocab",
                     "decode"):
            if getattr(p, name) <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be a positive whole "
                                f"number, got {getattr(p, name)}")
        if p.d_model % p.heads:
            raise UserError(f"--heads {p.heads} does not divide --d-model {p.d_model}")
        if p.d_model % 2:
            raise UserError(f"--d-model must be even (sin/cos work on pairs), got {p.d_model}")
        for flag, value in (("--layers", p.layers), ("--dec-layers", p.dec_layers)):
            if value > MAX_LAYERS:
                raise UserError(f"{flag} must be 1 … {MAX_LAYERS}, got {value}")
        if p.activation not in ACTIVATIONS:
            raise UserError(f"--activation must be one of {', '.join(ACTIVATIONS)}, got "
                            f"{p.activation!r}")
        if p.sinusoid not in SINUSOIDS:
            raise UserError(f"--sinusoid must be interleaved or halves, got {p.sinusoid!r}")
        if p.positions not in POSITIONS:
            raise UserError(f"--positions must be one of {', '.join(POSITIONS)}, got "
                            f"{p.positions!r}")
        for flag, value in (("--pad-id", p.pad_id), ("--start-id", p.start_id),
                            ("--end-id", p.end_id), ("--bos-id", p.bos_id)):
            if not 0 <= value < p.vocab:
                raise UserError(f"{flag} must be a token id 0 … {p.vocab - 1}, got {value}")
        if not 0 < p.ln_eps < 1:
            raise UserError(f"--ln-eps must be a small positive number, got {p.ln_eps}")

    @classmethod
    def sequence_length(cls, params) -> int:
        return params.src_len

    @classmethod
    def params_from_tokens(cls, tokens):
        return {"src_len": len(tokens)}

    @classmethod
    def sections(cls, p):
        encoder = []
        for layer in range(1, p.layers + 1):
            source = ("ENC_X_LN" if p.embed_ln else "ENC_X") if layer == 1 else \
                f"OUTPUT_E{layer - 1}"
            encoder += scoped_sections(
                encoder_layer_sections(p, ENC_WEIGHTS[layer - 1], p.pre_ln, p.activation,
                                       "exact", p.ln_eps, rows="src_len"),
                f"_E{layer}", f"Encoder layer {layer} of {p.layers}", X=source)
        last = f"OUTPUT_E{p.layers}"
        ending = (layer_norm_section("ENC_LNF", last, "ENC_OUTPUT", p.ln_eps, *ENC_LNF)
                  if p.pre_ln else
                  section("The encoder's output: what every cross-attention reads",
                          Step("ENC_OUTPUT", f"{last}", Map("={H}", H=last),
                               "The encoder's last layer: its keys and values feed every "
                               "decoder layer at every step.")))
        memory = []
        for layer in range(1, p.dec_layers + 1):
            w = DEC_WEIGHTS[layer - 1]
            kv = [Step(f"CROSS_{n}_D{layer}", f"ENC_OUTPUT·CROSS_W_{n} + CROSS_B_{n}",
                       MatMul("ENC_OUTPUT", f"CROSS_W_{n}_D{layer}",
                              plus=f"CROSS_B_{n}_D{layer}"),
                       "The source's cross-attention keys for this decoder layer: computed "
                       "once, read by every step." if n == "K" else
                       "The source's cross-attention values for this decoder layer.")
                  for n in "KV"]
            memory.append(section(
                f"Decoder layer {layer} of {p.dec_layers} — its weights, and its "
                "cross-attention keys and values from the encoder's output (once for "
                "every step)",
                [w["W_Q"], w["W_K"], w["W_V"]], [w["B_Q"], w["B_K"], w["B_V"]],
                [w["W_O"], w["B_O"], w["LN1_GAMMA"], w["LN1_BETA"]],
                [w["CROSS_W_Q"], w["CROSS_W_K"], w["CROSS_W_V"]],
                [w["CROSS_B_Q"], w["CROSS_B_K"], w["CROSS_B_V"]],
                [w["CROSS_W_O"], w["CROSS_B_O"], w["LN2_GAMMA"], w["LN2_BETA"]],
                [w["W_1"], w["B_1"], w["W_2"], w["B_2"], w["LN3_GAMMA"], w["LN3_BETA"]],
                kv))
        if p.embed_ln:
            memory.append(section("DEC_EMB_LN — the LayerNorm after the decoder's embedding "
                                  "(γ, β)", list(DEC_EMB_LN)))
        if p.pre_ln:
            memory.append(section("DEC_LNF — the decoder's final LayerNorm (γ, β)",
                                  list(DEC_LNF)))
        steps = [sec for t in range(1, p.decode + 1) for sec in decode_step(p, t)]
        return [
            section("Step 1 — the source ids and the embedding table"
                    + (", and the logits bias" if p.logits_bias else ""),
                    [SRC_IDS, WTE, *([LOGITS_BIAS] if p.logits_bias else [])]),
            position_section(p),
            section("Step 2 — the encoder's input: each source id's row of WTE"
                    + ("" if p.no_scale else " times √d_model") + ", plus its position's row",
                    [token_lookup("SRC_EMB", "SRC_IDS", rows="src_len",
                                  explanation="Each source token's row of the embedding "
                                              "table, looked up by its id."),
                     Step("ENC_X", "SRC_EMB" + ("" if p.no_scale else "·√d") + " + POS",
                          _embedded("SRC_EMB", "src_len", "ENC"),
                          "What enters encoder layer 1" + (" after ENC_EMB_LN" if p.embed_ln
                                                           else "") + ".",
                          row_labels="tokens")]),
            *([layer_norm_section("ENC_EMB_LN", "ENC_X", "ENC_X_LN", p.ln_eps, *ENC_EMB_LN)]
              if p.embed_ln else []),
            *encoder, ending, *memory, *steps,
            section("The translation: the ids the steps chose, in order",
                    Step("GENERATED", "[y_1 … y_K]",
                         Custom("decode", 1, lambda i, j, env:
                                f"={env[f'NEXT_TOKEN_T{i + 1}'].fixed(0, 0)}"),
                         "The greedy translation, one id per step; the pad id after the end "
                         "id.", row_labels=lambda p: list(range(1, p.decode + 1)),
                         col_labels=["id"], corner="step", number_format="0")),
            cost_section("Cost — the encoder is O(n²·d); a decoding step with a KV cache "
                         "O(t·d), its cross-attention O(t·n·d); this sheet recomputes the "
                         "prefix, O(t²·d) per step",
                         {"n": "src_len", "t": "decode", "d": "d_model", "L_e": "layers",
                          "L_d": "dec_layers"}, COSTS),
        ]
