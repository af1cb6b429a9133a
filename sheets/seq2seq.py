"""Kind `seq2seq`: where attention began — a GRU encoder-decoder with Bahdanau attention, as
PyTorch's translation tutorial builds it (EncoderRNN, AttnDecoderRNN; eval mode, greedy).

    x_t = ENC_EMBEDDING[src_t]          GX = X·W_I + b_I      (gate columns r | z | n)
    GH_t = h_{t−1}·W_H + b_H            r_t = σ(GX_t[r] + GH_t[r])   z_t = σ(GX_t[z] + GH_t[z])
    n_t = tanh(GX_t[n] + r_t ⊙ GH_t[n]) h_t = (1 − z_t) ⊙ n_t + z_t ⊙ h_{t−1},  h_0 = 0
    s_0 = h_n;  decoder step k reads y_{k−1} (y_0 = SOS; the target id with teacher forcing):
    e = DEC_EMBEDDING[y_{k−1}]   α = softmax_j(v·tanh(W_a·s_{k−1} + b_W + U_a·h_j + b_U) + b_v)
    c = α·ENC_OUTPUTS (--no-attention: c = h_n, the bottleneck)   s_k = GRU([e; c], s_{k−1})
    LOG_PROBS = log_softmax(s_k·W_out + b_out)   y_k = argmax (the smallest id among maxima)
    --bidirectional: ←h_t = GRU_REV(x_t, ←h_{t+1}) up the rows, ←h_{n+1} = 0;
    ENC_OUTPUTS = →h_t + ←h_t, s_0 = →h_n (PyTorch's chatbot tutorial)

Every step of the recurrences is its own one-row block (`_T1`, `_T2`, … per time step), each
reading the blocks of the step before: a gate row reads h_{t−1} and h_t reads the gates, so
the two cannot be two blocks running down the rows (each would read the other's rows). The
stacked blocks ENC_OUTPUTS, ATTN_WEIGHTS, DEC_HIDDEN, LOG_PROBS and GENERATED gather the
steps, one row each.
"""

from dataclasses import dataclass, field, replace

from reference.seq2seq import seq2seq_ref
from sheets._blocks.additive import additive_scores, alignment_pairs, side_projection
from sheets._blocks.attention import weighted_values
from sheets._blocks.costs import Cost, cost_section
from sheets._blocks.embedding import ids_from_0, token_lookup
from sheets._blocks.labels import TwoSequenceKind
from sheets._blocks.softmax import softmax_steps
from workbook_builder.errors import UserError
from workbook_builder.sheet import (
    BROADCAST,
    ByRow,
    Cell,
    Custom,
    Input,
    Map,
    MatMul,
    Rows,
    Scan,
    Step,
    WholeNumbers,
    section,
)
from workbook_builder.sheet.limits import EXCEL_ROWS


@dataclass(frozen=True)
class Seq2seqParams:
    src_len: int = field(default=4, metadata={"help": "source tokens n (rows of SRC_IDS)"})
    hidden: int = field(default=3, metadata={
        "help": "hidden size H: embeddings, GRU states and attention (the tutorial's one "
                "hidden_size)"})
    src_vocab: int = field(default=5, metadata={
        "help": "source vocabulary (rows of ENC_EMBEDDING; the tutorial's input_size)"})
    tgt_vocab: int = field(default=6, metadata={
        "help": "target vocabulary (rows of DEC_EMBEDDING, columns of LOG_PROBS)"})
    decode: int = field(default=3, metadata={"help": "decoder steps K (rows of GENERATED)"})
    sos: int = field(default=0, metadata={"help": "start id the first decoder step reads"})
    eos: int = field(default=1, metadata={"help": "end id; its first appearance is marked"})
    no_attention: bool = field(default=False, metadata={
        "help": "the bottleneck model on the same weights: every step's context is h_n"})
    teacher_forcing: bool = field(default=False, metadata={
        "help": "add an input TGT_IDS: step k reads target id k − 1, not its own argmax"})
    bidirectional: bool = field(default=False, metadata={
        "help": "a second encoder GRU up the rows (its own _REV weights); ENC_OUTPUTS = "
                "→h_t + ←h_t, s_0 = the forward h_n (PyTorch's chatbot tutorial)"})

    @property
    def d_att(self) -> int:  # the attention's width: the tutorial's Wa, Ua are H × H
        return self.hidden


def gate_cols(p) -> list[str]:
    """r1 … rH, z1 … zH, n1 … nH: the gate columns of W_I, W_H and their rows GX, GH."""
    return [f"{gate}{j + 1}" for gate in "rzn" for j in range(p.hidden)]


def dec_in_rows(p) -> list[str]:
    """e1 … eH, c1 … cH: the decoder GRU's input [embedding; context]."""
    return [f"e{j + 1}" for j in range(p.hidden)] + [f"c{j + 1}" for j in range(p.hidden)]


def three_h(p) -> int:
    return 3 * p.hidden


def attention(p) -> bool:
    return not p.no_attention


SRC_IDS = Input("SRC_IDS", "src_len", 1, "source token ids", "src", ["id"],
                values=WholeNumbers(0, "src_vocab", "a source id"),
                note="Edit an id: the encoder, the attention and the translation follow.")
TGT_IDS = Input("TGT_IDS", "decode", 1, "target ids (teacher forcing)", "tgt", ["id"],
                values=WholeNumbers(0, "tgt_vocab", "a target id"), when="teacher_forcing",
                note="Step k reads target id k − 1 instead of its own argmax (the last is "
                     "the target of the last step and read by none).")
ENC_EMBEDDING = Input("ENC_EMBEDDING", "src_vocab", "hidden", "encoder embedding table",
                      ids_from_0("src_vocab"), "d")
ENC_W_I = Input("ENC_W_I", "hidden", three_h, "encoder GRU input weights W_I = weight_ih_l0ᵀ",
                "d", gate_cols)
ENC_B_I = Input("ENC_B_I", BROADCAST, three_h, "b_I = bias_ih_l0", ["b"], gate_cols)
ENC_W_H = Input("ENC_W_H", "hidden", three_h,
                "encoder GRU recurrent weights W_H = weight_hh_l0ᵀ", "h", gate_cols)
ENC_B_H = Input("ENC_B_H", BROADCAST, three_h, "b_H = bias_hh_l0", ["b"], gate_cols)
REVERSE_INPUTS = [
    Input("ENC_W_I_REV", "hidden", three_h, "backward GRU input weights = weight_ih_l0_reverseᵀ",
          "d", gate_cols, when="bidirectional"),
    Input("ENC_B_I_REV", BROADCAST, three_h, "bias_ih_l0_reverse", ["b"], gate_cols,
          when="bidirectional"),
    Input("ENC_W_H_REV", "hidden", three_h,
          "backward GRU recurrent weights = weight_hh_l0_reverseᵀ", "h", gate_cols,
          when="bidirectional"),
    Input("ENC_B_H_REV", BROADCAST, three_h, "bias_hh_l0_reverse", ["b"], gate_cols,
          when="bidirectional"),
]
DEC_EMBEDDING = Input("DEC_EMBEDDING", "tgt_vocab", "hidden", "decoder embedding table",
                      ids_from_0("tgt_vocab"), "d")
ATTENTION_INPUTS = [
    Input("W_A", "hidden", "hidden", "W_a (decoder side) = Wa.weightᵀ", "s", "a",
          when=attention),
    Input("B_W", BROADCAST, "hidden", "Wa.bias", ["b"], "a", when=attention),
    Input("U_A", "hidden", "hidden", "U_a (encoder side) = Ua.weightᵀ", "h", "a",
          when=attention),
    Input("B_U", BROADCAST, "hidden", "Ua.bias", ["b"], "a", when=attention),
    Input("V_A", "hidden", 1, "v_a = Va.weightᵀ", "a", ["v"], when=attention),
    Input("B_V", 1, 1, "Va.bias", ["b"], ["v"], when=attention,
          note="The same number in every score of a step: it cancels in the softmax."),
]
DEC_W_I = Input("DEC_W_I", lambda p: 2 * p.hidden, three_h,
                "decoder GRU input weights W_I = weight_ih_l0ᵀ", dec_in_rows, gate_cols)
DEC_B_I = Input("DEC_B_I", BROADCAST, three_h, "b_I = bias_ih_l0", ["b"], gate_cols)
DEC_W_H = Input("DEC_W_H", "hidden", three_h,
                "decoder GRU recurrent weights W_H = weight_hh_l0ᵀ", "h", gate_cols)
DEC_B_H = Input("DEC_B_H", BROADCAST, three_h, "b_H = bias_hh_l0", ["b"], gate_cols)
OUT_W = Input("OUT_W", "hidden", "tgt_vocab", "output layer W_out = out.weightᵀ", "h",
              ids_from_0("tgt_vocab"))
OUT_B = Input("OUT_B", BROADCAST, "tgt_vocab", "out.bias", ["b"], ids_from_0("tgt_vocab"))


# -- the GRU step -----------------------------------------------------------------------------
def gru_step(prefix: str, sfx: str, gx: str, gx_row: int, prev: tuple[str, int] | None,
             w_h: str, b_h: str, row_labels, before: str = "h_{t−1}") -> list[Step]:
    """One nn.GRU step as five one-row blocks: GH (the recurrent side), R, Z, N and H.
    `gx` row `gx_row` is the input side x·W_I + b_I; `prev` the block and row of the state
    before, written `before` in the equations (None: a zero state)."""
    names = {g: f"{prefix}_{g}{sfx}" for g in ("GH", "R", "Z", "N", "H")}

    def part(env, block: str, row: int, gate: int, j: int | None) -> str:
        """Column j of gate `gate` (0 r, 1 z, 2 n), or the gate's whole row."""
        size = env.params.hidden
        if j is None:
            return env[block].row(row, gate * size, gate * size + size - 1)
        return env[block].cell(row, gate * size + j)

    def previous(env, j: int | None) -> str:
        block, row = prev
        return env[block].row(row) if j is None else env[block].cell(row, j)

    def recurrent(i, j, env) -> str:
        # GH = h_{t−1}·W_H + b_H  (h_0 = 0: the bias alone)
        bias = env[b_h].whole() if j is None else env[b_h].cell(0, j)
        if prev is None:
            return f"={bias}"
        weights = env[w_h].whole() if j is None else env[w_h].col(j)
        return f"=MMULT({previous(env, None)},{weights})+{bias}"

    def sigmoid_of(gate: int):
        def row(i, j, env) -> str:
            # σ(GX[gate] + GH[gate]) = 1/(1 + exp(−(…)))
            return (f"=1/(1+EXP(-({part(env, gx, gx_row, gate, j)}"
                    f"+{part(env, names['GH'], 0, gate, j)})))")
        return row

    def candidate(i, j, env) -> str:
        # n = tanh(GX[n] + r ⊙ GH[n])
        r = env[names["R"]].row(0) if j is None else env[names["R"]].cell(0, j)
        return (f"=TANH({part(env, gx, gx_row, 2, j)}+{r}*"
                f"{part(env, names['GH'], 0, 2, j)})")

    def new_state(i, j, env) -> str:
        # h = (1 − z) ⊙ n + z ⊙ h_{t−1}
        z, n = (env[names[g]].row(0) if j is None else env[names[g]].cell(0, j)
                for g in ("Z", "N"))
        return f"=(1-{z})*{n}" if prev is None else f"=(1-{z})*{n}+{z}*{previous(env, j)}"

    first = "" if prev is None else f"{before}·W_H + "
    return [
        Step(names["GH"], f"GH = {first}b_H", ByRow(1, three_h, recurrent),
             "The recurrent side of all three gates: the state before times W_H, plus b_H "
             "(h_0 = 0 at the first step, so the bias alone).",
             row_labels=row_labels, col_labels=gate_cols),
        Step(names["R"], "r = σ(GX[r] + GH[r])", ByRow(1, "hidden", sigmoid_of(0)),
             "Reset gate: how much of the state before the candidate reads.",
             row_labels=row_labels, col_labels="r"),
        Step(names["Z"], "z = σ(GX[z] + GH[z])", ByRow(1, "hidden", sigmoid_of(1)),
             "Update gate: near 1 keeps the state before, near 0 takes the candidate.",
             row_labels=row_labels, col_labels="z"),
        Step(names["N"], "n = tanh(GX[n] + r ⊙ GH[n])", ByRow(1, "hidden", candidate),
             "Candidate state: the input, plus the reset share of the recurrent side.",
             row_labels=row_labels, col_labels="n"),
        Step(names["H"], "h = (1 − z) ⊙ n" + ("" if prev is None else f" + z ⊙ {before}"),
             ByRow(1, "hidden", new_state),
             "The new state: a per-column blend of the candidate and the state before.",
             row_labels=row_labels, col_labels="h"),
    ]


# -- the encoder --------------------------------------------------------------------------------
def encoder_sections(p) -> list:
    steps = []
    for t in range(p.src_len):
        prev = None if t == 0 else (f"ENC_H_T{t}", 0)
        steps.append(section(
            lambda labels, t=t: f"Encoder step {t + 1} — token {labels['src'][t]}: the GRU "
                                f"reads row {t + 1} of GX and the state before",
            gru_step("ENC", f"_T{t + 1}", "ENC_GX", t, prev, "ENC_W_H", "ENC_B_H",
                     f"src_{t + 1}")))
    if p.bidirectional:
        for t in reversed(range(p.src_len)):  # up the rows: ←h_t reads ←h_{t+1}
            after = None if t == p.src_len - 1 else (f"ENC_BACK_H_T{t + 2}", 0)
            steps.append(section(
                lambda labels, t=t: f"Encoder, backward step {p.src_len - t} — token "
                                    f"{labels['src'][t]}: the reverse GRU reads row {t + 1} "
                                    f"of GX_REV and the state after",
                gru_step("ENC_BACK", f"_T{t + 1}", "ENC_GX_REV", t, after, "ENC_W_H_REV",
                         "ENC_B_H_REV", f"src_{t + 1}", before="←h_{t+1}")))
    stacked = Step("ENC_OUTPUTS", "ENC_OUTPUTS = [h_1; …; h_n]",
                   Custom("src_len", "hidden", lambda i, j, env:
                          f"={env[f'ENC_H_T{i + 1}'].cell(0, j)}"),
                   "The encoder's outputs, one row per source token: what attention looks "
                   "at. The last row h_n is s_0, the decoder's first state.",
                   row_labels="src", col_labels="h")
    if p.bidirectional:
        stacked = Step("ENC_OUTPUTS", "ENC_OUTPUTS = →h_t + ←h_t",
                       Custom("src_len", "hidden", lambda i, j, env:
                              f"={env[f'ENC_H_T{i + 1}'].cell(0, j)}"
                              f"+{env[f'ENC_BACK_H_T{i + 1}'].cell(0, j)}"),
                       "The encoder's outputs, one row per source token: the forward and "
                       "the backward state summed, so each row has read the whole sentence. "
                       "The forward h_n is s_0, the decoder's first state.",
                       row_labels="src", col_labels="h")
    return steps + [section("The encoder's outputs: every state, stacked (h_n is the "
                            "decoder's first state s_0)", stacked)]


# -- the decoder --------------------------------------------------------------------------------
def _state_before(k: int, p) -> tuple[str, int]:
    """s_{k−1}: the encoder's last state for the first step, else the step before's."""
    return (f"ENC_H_T{p.src_len}", 0) if k == 0 else (f"DEC_H_T{k}", 0)


def _input_id(k: int):
    def each(i, j, env) -> str:
        p = env.params
        if k == 0:
            return f"={p.sos}"
        if p.teacher_forcing:
            return f"={env['TGT_IDS'].cell(k - 1, 0)}"
        return f"={env[f'GEN_T{k}'].cell(0, 0)}"
    return each


def _next_id(k: int):
    def each(i, j, env) -> Cell:
        # y_k = the smallest id among the maxima of LOG_PROBS_Tk, as argmax
        probs = env[f"LOG_PROBS_T{k + 1}"]
        return Cell(f"=MIN(IF({probs.whole()}=MAX({probs.whole()}),{probs.col_labels()}))",
                    array=True)
    return each


def _concat(k: int):
    def row(i, j, env) -> str:
        # [e; c]: the embedding's columns, then the context's
        size = env.params.hidden
        if j < size:
            return f"={env[f'DEC_EMB_T{k + 1}'].cell(0, j)}"
        return f"={env[f'CONTEXT_T{k + 1}'].cell(0, j - size)}"
    return row


def _bottleneck(i, j, env) -> str:
    # c = h_n, the encoder's last (forward) state, at every step
    last = env[f"ENC_H_T{env.params.src_len}"]
    return f"={last.row(0)}" if j is None else f"={last.cell(0, j)}"


def attention_steps(k: int, p) -> list:
    sfx, step = f"_T{k + 1}", f"step_{k + 1}"
    state, _ = _state_before(k, p)
    if p.no_attention:
        return [Step("CONTEXT" + sfx, "c = h_n  (no attention)", ByRow(1, "hidden", _bottleneck),
                     "The bottleneck: the encoder's last state, the same at every step, "
                     "whatever the sentence's length.", row_labels=step, col_labels="h")]
    return [
        side_projection("WS" + sfx, "W_a·s_{k−1}", state, "W_A", "B_W", 1, step,
                        "The decoder side of the score: the state before this step."),
        *alignment_pairs("PRE_j = WS + UH_j", 1, "src_len", ws="WS" + sfx, uh="UH",
                         suffix=sfx, pair_labels="src"),
        additive_scores("e_j = v_a·tanh(PRE_j) + b_v", 1, "src_len", b_v="B_V", suffix=sfx,
                        row_labels=step, col_labels="src"),
        *softmax_steps("SCORES" + sfx, suffix=sfx, over="source tokens", of="e",
                       corner="step\\source"),
        weighted_values("The context: the encoder states weighted by this step's attention.",
                        "CONTEXT" + sfx, "ENC_OUTPUTS", "c = α·ENC_OUTPUTS", "WEIGHTS" + sfx),
    ]


def decoder_step(k: int, p):
    sfx, step = f"_T{k + 1}", f"step_{k + 1}"
    ids = ids_from_0("tgt_vocab")
    if k == 0:
        reads = "the start id SOS"
    elif p.teacher_forcing:
        reads = f"target id {k}"
    else:
        reads = f"the id step {k} chose"
    return section(
        lambda labels: f"Decoder step {k + 1} — {labels['tgt'][k]}: reads {reads}, looks at "
                       f"the encoder, updates its state, scores every target id",
        [Step("DEC_IN" + sfx, "y_{k−1}", Custom(1, 1, _input_id(k)),
              "The id this step reads.", row_labels=step, col_labels=["id"],
              number_format="0"),
         replace(token_lookup("DEC_EMB" + sfx, "DEC_IN" + sfx, "DEC_EMBEDDING", 1, "hidden",
                              "e = DEC_EMBEDDING[y_{k−1}, ·]",
                              "The row of the decoder's embedding table for that id."),
                 row_labels=step),
         *attention_steps(k, p)],
        [Step("DEC_X" + sfx, "x = [e; c]", ByRow(1, lambda p: 2 * p.hidden, _concat(k),
                                                 per_cell=True),
              "The GRU's input: the embedding, then the context.", row_labels=step,
              col_labels=dec_in_rows),
         Step("DEC_GX" + sfx, "GX = x·W_I + b_I",
              MatMul("DEC_X" + sfx, "DEC_W_I", plus="DEC_B_I"),
              "The input side of the decoder GRU's three gates.", row_labels=step,
              col_labels=gate_cols),
         *gru_step("DEC", sfx, "DEC_GX" + sfx, 0, _state_before(k, p), "DEC_W_H", "DEC_B_H",
                   step, before="s_{k−1}")],
        [Step("LOGITS" + sfx, "s_k·W_out + b_out",
              MatMul("DEC_H" + sfx, "OUT_W", plus="OUT_B"),
              "A score for every target id.", row_labels=step, col_labels=ids),
         Step("OUT_MAX" + sfx, "m = max_v LOGITS_v", Rows("=MAX({S})", S="LOGITS" + sfx),
              "The largest score: subtracted before EXP.", row_labels=step,
              col_labels=["max"]),
         Step("OUT_EXP" + sfx, "P_v = exp(LOGITS_v − m)",
              Map("=EXP({S}-{M})", S="LOGITS" + sfx, M="OUT_MAX" + sfx),
              "Exponential of each shifted score.", row_labels=step, col_labels=ids),
         Step("OUT_SUM" + sfx, "ℓ = Σ_v P_v", Rows("=SUM({P})", P="OUT_EXP" + sfx),
              "The softmax denominator.", row_labels=step, col_labels=["sum"]),
         Step("LOG_PROBS" + sfx, "log p_v = LOGITS_v − m − ln ℓ",
              Map("={S}-{M}-LN({L})", S="LOGITS" + sfx, M="OUT_MAX" + sfx,
                  L="OUT_SUM" + sfx),
              "log_softmax: the log-probability of every target id.", row_labels=step,
              col_labels=ids),
         Step("GEN" + sfx, "y_k = argmax_v log p_v", Custom(1, 1, _next_id(k)),
              "The id with the largest log-probability (the smallest such id on a tie).",
              row_labels=step, col_labels=["id"], number_format="0")])


def _stack(block: str, cols) -> Custom:
    """Row k is the one-row block `block`_Tk: the decoder steps, one row each."""
    return Custom("decode", cols, lambda i, j, env: f"={env[f'{block}_T{i + 1}'].cell(0, j)}")


def first_eos(t: int, j: int | None, env) -> str:
    # 1 at the first step whose id is EOS: that id, and none of the rows above
    eos, generated = env.params.eos, env["GENERATED"].cell(t, 0)
    if t == 0:
        return f"=IF({generated}={eos},1,0)"
    return f"=IF(AND({generated}={eos},SUM({env.me.col(0, 0, t - 1)})=0),1,0)"


def stacked_sections(p) -> list:
    ids = ids_from_0("tgt_vocab")
    alignment = [Step("ATTN_WEIGHTS", "α: one row per decoder step",
                      _stack("WEIGHTS", "src_len"),
                      "The alignment: which source tokens each generated token looked at "
                      "(each row sums to 1).", row_labels="tgt", col_labels="src",
                      corner="target\\source", heatmap=True)] if attention(p) else []
    return [
        section("The translation: every step's results stacked, one row per generated token",
                [*alignment,
                 Step("DEC_HIDDEN", "s_k, k = 1 … K", _stack("DEC_H", "hidden"),
                      "The decoder's states.", row_labels="tgt", col_labels="s"),
                 Step("GENERATED", "y_k", _stack("GEN", 1),
                      "The generated ids, in order: the greedy translation.",
                      row_labels="tgt", col_labels=["id"], number_format="0"),
                 Step("FIRST_EOS", "1 at the first y_k = EOS ({eos})", Scan("decode", 1, first_eos),
                      "Where the translation ends: the tutorial's loop runs every step and "
                      "cuts the output at the first end id.", row_labels="tgt",
                      col_labels=["EOS"], number_format="0", heatmap=True)],
                Step("LOG_PROBS", "log p(y_k = v)", _stack("LOG_PROBS", "tgt_vocab"),
                     "Every step's log-probabilities, one row per step.", row_labels="tgt",
                     col_labels=ids)),
    ]


# -- the cost table -------------------------------------------------------------------------------
COST_SIZES = {"n": "src_len", "H": "hidden", "K": "decode"}


def cost_columns(p) -> list[Cost]:
    attention_cost = "={n}*{H}^2+{K}*({H}^2+2*{n}*{H})" if attention(p) else "=0*{n}"
    # X·W_I for every row; h_{t−1}·W_H from the second step on (h_0 = 0); both directions
    encoder = Cost("COST_ENCODER", "n·H·3H + (n−1)·H·3H", "={n}*3*{H}^2+({n}-1)*3*{H}^2",
                   "The encoder's multiply-adds: the input side of every row and the "
                   "recurrent side from the second step on. O(n·H²), and its n steps run one "
                   "after another.")
    if p.bidirectional:
        encoder = Cost("COST_ENCODER", "2·(n·H·3H + (n−1)·H·3H)",
                       "=2*({n}*3*{H}^2+({n}-1)*3*{H}^2)",
                       "The encoder's multiply-adds, both directions: the input side of "
                       "every row and the recurrent side from the second step on. O(n·H²); "
                       "the two directions may run side by side, each one step after "
                       "another.")
    return [
        encoder,
        # U_a·h_j once; each step W_a·s (H²), v·tanh over n pairs (n·H), the context (n·H)
        Cost("COST_ATTENTION", "n·H² + K·(H² + 2·n·H)", attention_cost,
             "Attention's multiply-adds: U_a·h_j once, then per decoder step W_a·s, v over "
             "every source token and the context. O(K·n·H); 0 without attention."),
        Cost("COST_STEPS", "n + K", "={n}+{K}",
             "Steps that must run in order: each GRU step needs the state before.",
             "steps"),
    ]


class Seq2seq(TwoSequenceKind):
    name = "seq2seq"
    summary = "GRU encoder-decoder with Bahdanau attention (the PyTorch tutorial), greedy"
    sheet_title = "Seq2seq"
    Params = Seq2seqParams
    repeated_by = ("decode", "src_len")  # one band per decoder step and per encoder step
    reference = staticmethod(seq2seq_ref)
    target = "decode"
    inputs = [SRC_IDS, TGT_IDS, ENC_EMBEDDING, ENC_W_I, ENC_B_I, ENC_W_H, ENC_B_H,
              *REVERSE_INPUTS, DEC_EMBEDDING, *ATTENTION_INPUTS, DEC_W_I, DEC_B_I, DEC_W_H,
              DEC_B_H, OUT_W, OUT_B]
    test_cases = [
        {"src_len": 3, "hidden": 2, "src_vocab": 4, "tgt_vocab": 4, "decode": 3},
        {"src_len": 2, "hidden": 3, "src_vocab": 3, "tgt_vocab": 5, "decode": 2,
         "no_attention": True},
        {"src_len": 4, "hidden": 2, "src_vocab": 5, "tgt_vocab": 3, "decode": 4,
         "teacher_forcing": True, "sos": 2, "eos": 0},
        {"src_len": 1, "hidden": 1, "src_vocab": 2, "tgt_vocab": 2, "decode": 2},
        {"src_len": 3, "hidden": 2, "src_vocab": 3, "tgt_vocab": 4, "decode": 2,
         "bidirectional": True},
        {"src_len": 2, "hidden": 2, "src_vocab": 3, "tgt_vocab": 3, "decode": 2,
         "bidirectional": True, "no_attention": True},
    ]
    demo_cases = [
        ("seq2seq", {"src_len": 4, "hidden": 3, "src_vocab": 6, "tgt_vocab": 6,
                     "decode": 4}),
        ("seq2seq_bottleneck", {"src_len": 4, "hidden": 3, "src_vocab": 6, "tgt_vocab": 6,
                                "decode": 4, "no_attention": True}),
    ]

    @classmethod
    def validate(cls, p):
        for name in ("src_len", "hidden", "src_vocab", "tgt_vocab", "decode"):
            if getattr(p, name) <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be a positive whole "
                                f"number, got {getattr(p, name)}")
        if p.decode > EXCEL_ROWS:  # refused before a label per step is made
            raise UserError(f"--decode {p.decode:,}: every decoder step takes a row of its "
                            f"own, and a sheet has {EXCEL_ROWS:,}; lower --decode")
        for name in ("sos", "eos"):  # ids count from 0
            if not 0 <= getattr(p, name) < p.tgt_vocab:
                raise UserError(f"--{name} must be a target id 0 … {p.tgt_vocab - 1}, "
                                f"got {getattr(p, name)}")

    @classmethod
    def label_sets(cls, p, labels):
        sets = super().label_sets(p, labels)
        return {**sets,
                **{f"src_{t + 1}": [sets["src"][t]] for t in range(p.src_len)},
                **{f"step_{k + 1}": [sets["tgt"][k]] for k in range(p.decode)}}

    @classmethod
    def sections(cls, p):
        reverse = REVERSE_INPUTS if p.bidirectional else []
        weights = [ENC_EMBEDDING, ENC_W_I, ENC_W_H, *reverse[0::2]]
        enc_bias = [ENC_B_I, ENC_B_H, *reverse[1::2]]
        dec = [i for i in ATTENTION_INPUTS if i.present(p) and i.rows != BROADCAST]
        dec_bias = [i for i in ATTENTION_INPUTS if i.present(p) and i.rows == BROADCAST]
        yield section("Step 1 — the source sentence as ids, and the encoder's weights "
                      "(gate columns r | z | n, as nn.GRU stores them)",
                      [SRC_IDS, *weights], enc_bias)
        # x_t = ENC_EMBEDDING[src_t];  GX = X·W_I + b_I
        yield section("Step 2 — embeddings, and the input side of every gate at once "
                      "(dropout is off in eval mode)",
                      [replace(token_lookup("SRC_EMB", "SRC_IDS", "ENC_EMBEDDING", "src_len",
                                            "hidden", "x_t = ENC_EMBEDDING[src_t, ·]",
                                            "Each source token's row of the encoder's "
                                            "embedding table."), row_labels="src"),
                       Step("ENC_GX", "GX = X·W_I + b_I",
                            MatMul("SRC_EMB", "ENC_W_I", plus="ENC_B_I"),
                            "What each token feeds the three gates; it does not depend on "
                            "the state, so every row is computed at once.",
                            row_labels="src", col_labels=gate_cols),
                       *([Step("ENC_GX_REV", "GX_REV = X·W_I_REV + b_I_REV",
                               MatMul("SRC_EMB", "ENC_W_I_REV", plus="ENC_B_I_REV"),
                               "The same for the backward GRU, from its own weights.",
                               row_labels="src", col_labels=gate_cols)]
                         if p.bidirectional else [])])
        yield from encoder_sections(p)
        tgt = [TGT_IDS] if p.teacher_forcing else []
        yield section("The decoder's weights" + ("" if p.no_attention else
                                                  " and Bahdanau attention's"),
                      [*tgt, DEC_EMBEDDING, *dec, DEC_W_I, DEC_W_H, OUT_W],
                      [*dec_bias, DEC_B_I, DEC_B_H, OUT_B])
        if attention(p):
            yield section("The encoder side of the score, once for every step",
                          side_projection("UH", "U_a·h_j", "ENC_OUTPUTS", "U_A", "B_U",
                                          "src_len", "src",
                                          "It does not depend on the decoder step, so it "
                                          "is computed once."))
        yield from (decoder_step(k, p) for k in range(p.decode))
        yield from stacked_sections(p)
        yield cost_section("Cost — the recurrences run n + K steps in order; attention "
                           "adds O(K·n·H); at this sheet's n and at n = 1k, 4k, 32k",
                           COST_SIZES, cost_columns(p))
