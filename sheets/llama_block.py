"""Kind `llama-block`: one LLaMA decoder layer (transformers' `LlamaDecoderLayer`), every
step a formula, weights in `X @ W` orientation; bias rows as Qwen2 (--qkv-bias) and LLaMA's
attention_bias (--qkv-bias --o-bias) and mlp_bias (--mlp-bias), each + B on its product.

    RMS(r) = r/√(Σ_j r_j²/d + eps)·w                         (eps inside the root, as theirs)
    RMS1_OUT = RMS(X);  Q = RMS1_OUT·W_Q (H heads), K, V (G heads, --kv-heads)
    θ[p,i] = p·b^(−2i/d_k);  per head (x_i, x_i+d_k/2) → (a·cos θ − b·sin θ, b·cos θ + a·sin θ)
    head_h = softmax(causal(Q_ROT_h·K_ROT_gᵀ/√d_k))·V_g,  g = ⌊h·G/H⌋
    ATTN = [head_1 … head_H]·W_O;  RESID_1 = X + ATTN
    RMS2_OUT = RMS(RESID_1);  MLP_OUT = (SiLU(RMS2_OUT·W_GATE) ⊙ RMS2_OUT·W_UP)·W_DOWN
    OUTPUT = RESID_1 + MLP_OUT
"""

from dataclasses import dataclass, field

from reference.llama_block import llama_block_ref
from sheets._blocks import heads
from sheets._blocks.attention import CAUSAL_MASK, bias_of
from sheets._blocks.ffn import silu
from sheets._blocks.heads import GroupedHeads, GroupedHeadsKind, concat_heads, head_steps
from sheets._blocks.labels import position_label_sets
from sheets._blocks.layers import gamma_near_one, residual
from sheets._blocks.norms import rms_norm
from sheets._blocks.rotary import ROTATION, rope_angles, rotated
from workbook_builder.errors import UserError
from workbook_builder.sheet import BROADCAST, Input, Map, MatMul, Step, section
from workbook_builder.sheet.declare import Table


@dataclass(frozen=True)
class LlamaBlockParams(GroupedHeads):
    d_model: int = field(default=8, metadata={"help": "embedding width d; d_k = d/heads"})
    d_ff: int = field(default=8, metadata={"help": "MLP width (columns of W_GATE, W_UP)"})
    rms_eps: float = field(default=1e-6, metadata={
        "help": "RMSNorm's eps (the config's rms_norm_eps; LLaMA's default 1e-6)"})
    rope_theta: float = field(default=10000.0, metadata={
        "help": "RoPE frequency base b (the config's rope_theta)"})
    qkv_bias: bool = field(default=False, metadata={
        "help": "bias rows B_Q, B_K, B_V (Qwen2; LLaMA's attention_bias)"})
    o_bias: bool = field(default=False, metadata={
        "help": "bias row B_O after W_O (LLaMA's attention_bias)"})
    mlp_bias: bool = field(default=False, metadata={
        "help": "bias rows B_GATE, B_UP, B_DOWN (LLaMA's mlp_bias)"})


# the projection weights with the heads side by side, as multi-head attention's
W_Q, W_K, W_V, W_O = heads.W_Q, heads.W_K, heads.W_V, heads.W_O
X = Input("X", "seq_len", "d_model", "hidden states entering the layer",
          note="One row per token; row p sits at position p (from 0).")
RMS_WEIGHTS = {n: Input(f"RMS{n}_WEIGHT", BROADCAST, "d_model", "RMSNorm weight w", ["w"], "d")
               for n in (1, 2)}
W_GATE = Input("W_GATE", "d_model", "d_ff", "gate weights", "d", "f")
W_UP = Input("W_UP", "d_model", "d_ff", "up weights", "d", "f")
W_DOWN = Input("W_DOWN", "d_ff", "d_model", "down weights", "f", "d")
# bias rows, each added to every row of its product (nn.Linear with bias=True)
B_Q, B_K, B_V = (bias_of(w, f"{n} bias", "qkv_bias")
                 for w, n in ((W_Q, "query"), (W_K, "key"), (W_V, "value")))
B_O = bias_of(W_O, "output bias", "o_bias")
B_GATE, B_UP, B_DOWN = (bias_of(w, f"{n} bias", "mlp_bias")
                        for w, n in ((W_GATE, "gate"), (W_UP, "up"), (W_DOWN, "down")))


def _plus(p, bias: str) -> str | None:
    """The bias row added to a product, when the parameters give it one."""
    flag = {"B_Q": "qkv_bias", "B_K": "qkv_bias", "B_V": "qkv_bias", "B_O": "o_bias"}.get(
        bias, "mlp_bias")
    return bias if getattr(p, flag) else None


def _present(p, *inputs: Input) -> list[Input]:
    """The inputs these parameters place (a bias row only when the layer has it)."""
    return [item for item in inputs if item.present(p)]


def _product(p, name: str, a: str, w: str, bias: str) -> Step:
    """name = a·w (+ bias): its equation says which."""
    plus = _plus(p, bias)
    return Step(name, f"{a}·{w}" + (f" + {bias}" if plus else ""), MatMul(a, w, plus=plus))


# each head's half pairs (x_i, x_i+d_k/2) rotated, as transformers' rotate_half
Q_ROTATED = rotated("Q", cols=lambda p: p.heads * p.d_k, convention="half")
K_ROTATED = rotated("K", cols=lambda p: p.groups * p.d_k, convention="half")


class LlamaBlock(GroupedHeadsKind):
    name = "llama-block"
    summary = "a LLaMA decoder layer: RMSNorm, RoPE, grouped K/V heads, SwiGLU MLP"
    sheet_title = "LlamaBlock"
    Params = LlamaBlockParams
    reference = staticmethod(llama_block_ref)
    inputs = [X, RMS_WEIGHTS[1], W_Q, W_K, W_V, B_Q, B_K, B_V, W_O, B_O, RMS_WEIGHTS[2],
              W_GATE, W_UP, W_DOWN, B_GATE, B_UP, B_DOWN]
    label_sets = classmethod(position_label_sets)
    test_cases = [
        {"seq_len": 3, "d_model": 4, "heads": 2, "d_ff": 6},
        {"seq_len": 4, "d_model": 8, "heads": 4, "kv_heads": 2, "d_ff": 5, "rope_theta": 100},
        {"seq_len": 3, "d_model": 4, "heads": 2, "kv_heads": 1, "d_ff": 3, "rms_eps": 1e-5},
        {"seq_len": 3, "d_model": 4, "heads": 2, "kv_heads": 1, "d_ff": 3, "qkv_bias": True,
         "o_bias": True, "mlp_bias": True},
    ]
    demo_cases = [
        ("llama_block", {"seq_len": 4, "d_model": 8, "heads": 2, "d_ff": 8}),
        ("llama_block_gqa", {"seq_len": 5, "d_model": 8, "heads": 4, "kv_heads": 2,
                             "d_ff": 6, "rope_theta": 100}),
    ]

    @classmethod
    def validate(cls, p):
        super().validate(p)
        if p.d_k % 2:
            raise UserError(f"the head width d_model/heads = {p.d_k} must be even (RoPE "
                            f"rotates pairs)")
        if not 0 < p.rms_eps < 1:
            raise UserError(f"--rms-eps must be a small positive number, got {p.rms_eps}")
        if not p.rope_theta > 1:
            raise UserError(f"--rope-theta must be greater than 1, got {p.rope_theta}")

    @classmethod
    def random_input(cls, name, shape, params, rng):
        if name not in ("RMS1_WEIGHT", "RMS2_WEIGHT"):
            return super().random_input(name, shape, params, rng)
        return gamma_near_one(shape, rng)

    @classmethod
    def sections(cls, p):
        eps = p.rms_eps
        # Q = RMS1_OUT·W_Q (+ B_Q: Qwen2, attention_bias), likewise K and V
        qkv = [Step(n, f"{n} = RMS1_OUT·W_{n}" + (f" + B_{n}" if p.qkv_bias else ""),
                    MatMul("RMS1_OUT", f"W_{n}", plus=_plus(p, f"B_{n}"))) for n in "QKV"]
        heads = [section(f"Head {h + 1} — query columns q{h + 1}.*, key/value head {g + 1}",
                         head_steps(h, g, p.d_k, "MASK", q="Q_ROT", k="K_ROT"))
                 for h, g in ((h, h * p.groups // p.heads) for h in range(p.heads))]
        convention = Table((
            ("RoPE pairs (x_i, x_i+d_k/2) inside each head, as transformers' rotate_half", ""),
            ("Meta's own code pairs neighbours (x_2i, x_2i+1); its checkpoints are converted "
             "by permuting W_Q and W_K, so both give the same scores", ""),))
        return [
            section("Step 1 — inputs: the hidden states and the first RMSNorm's weight",
                    [X, RMS_WEIGHTS[1]]),
            section("RMSNorm 1 — each row divided by its root mean square, times w",
                    rms_norm("X", "RMS1_MS", "RMS1_OUT", "RMS1_WEIGHT", eps)),
            section("Step 2 — queries, keys, values ({heads} query heads, {groups} key/value "
                    "heads of d_k = {d_k})", _present(p, W_Q, W_K, W_V, B_Q, B_K, B_V), qkv),
            section("Step 3 — RoPE: rotate each head's half pairs of q and k by "
                    "pos·{rope_theta}^(−2i/{d_k})",
                    [*rope_angles("rope_theta"), convention],
                    [Step("Q_ROT", f"R_pos·q: {ROTATION}", Q_ROTATED,
                          "Each query head rotated by its token's position.",
                          row_labels="tokens", col_labels=W_Q.col_labels),
                     Step("K_ROT", f"R_pos·k: {ROTATION}", K_ROTATED,
                          "Each key head rotated by its token's position.",
                          row_labels="tokens", col_labels=W_K.col_labels),
                     CAUSAL_MASK]),
            *heads,
            # ATTN = CONCAT·W_O;  RESID_1 = X + ATTN
            section("Step 4 — concatenate the heads, project with W_O, add the residual",
                    [concat_heads(p.heads, p.d_k), *_present(p, W_O, B_O)],
                    [_product(p, "ATTN", "CONCAT", "W_O", "B_O"),
                     residual("RESID_1", "X", "ATTN",
                              "The residual connection: the layer adds to its input.")]),
            section("RMSNorm 2 — before the MLP", [RMS_WEIGHTS[2]],
                    rms_norm("RESID_1", "RMS2_MS", "RMS2_OUT", "RMS2_WEIGHT", eps)),
            # MLP_OUT = (SiLU(h·W_GATE) ⊙ h·W_UP)·W_DOWN
            section("Step 5 — SwiGLU MLP: SiLU(gate) times up, projected down",
                    _present(p, W_GATE, W_UP, W_DOWN, B_GATE, B_UP, B_DOWN),
                    [_product(p, "GATE", "RMS2_OUT", "W_GATE", "B_GATE"),
                     _product(p, "UP", "RMS2_OUT", "W_UP", "B_UP"),
                     silu("GATE_ACT", "GATE", "g", "branches"),
                     Step("GATED", "GATE_ACT ⊙ UP", Map("={A}*{U}", A="GATE_ACT", U="UP"),
                          "The gate scales the up projection elementwise."),
                     _product(p, "MLP_OUT", "GATED", "W_DOWN", "B_DOWN")]),
            section("Step 6 — second residual: the layer's output",
                    residual("OUTPUT", "RESID_1", "MLP_OUT",
                             "LLaMA normalises before each sub-layer, never the residual "
                             "stream itself.")),
        ]
