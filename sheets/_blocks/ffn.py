"""Activations and the position-wise feed-forward network.

    ReLU(x)  = max(x, 0)                                     written IF(x>0, x, 0)
    GELU(x)  = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))    tanh form (GPT-2's gelu_new)
             = 0.5·x·(1 + erf(x/√2))                         exact form (torch, BERT)
    SiLU(x)  = x·σ(x)                                        three overflow-free forms
    FFN(h)   = act(h·W_1 + B_1)·W_2 + B_2
"""

from workbook_builder.sheet import Map, MatMul, Step

# GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))   (torch approximate='tanh')
GELU_TANH = "0.5*{x}*(1+TANH(SQRT(2/PI())*({x}+0.044715*POWER({x},3))))"
# GELU, exact: 0.5·x·(1 + erf(x/√2))   (torch's default, BERT's "gelu")
GELU_EXACT = "0.5*{x}*(1+ERF({x}/SQRT(2)))"
GELU_FORMS = {"tanh": ("0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))", GELU_TANH),
              "exact": ("0.5·x·(1 + erf(x/√2))", GELU_EXACT)}
ACTIVATIONS = ("relu", "gelu")


def activation(kind: str, form: str = "tanh", src: str = "FFN_HIDDEN",
               name: str = "FFN_ACT") -> Step:
    """`name` = act(`src`), elementwise: ReLU as IF(x>0, x, 0) (MAX would reduce an array),
    GELU in its tanh or exact `form`, SiLU (x·σ(x), Marian's swish) in its overflow-free
    "abs" form."""
    if kind == "silu":
        return silu(name, src)
    if kind == "gelu":
        equation, template = GELU_FORMS[form]
        return Step(name, equation, Map("=" + template.format(x="{H}"), H=src))
    return Step(name, "max(x, 0)", Map("=IF({H}>0,{H},0)", H=src))


# SiLU(x) = x·σ(x) in the form each kind writes; none lets EXP overflow:
#   "abs":      x·IF(x≥0, 1, e^−|x|)/(1 + e^−|x|)   (EXP never sees a positive argument)
#   "tanh":     x·0.5·(1 + tanh(x/2))
#   "branches": x/(1 + e^−x) for x ≥ 0, x·e^x/(1 + e^x) below 0
SILU_FORMS = {
    "abs": "={S}*IF({S}>=0,1,EXP(-ABS({S})))/(1+EXP(-ABS({S})))",
    "tanh": "={S}*0.5*(1+TANH({S}/2))",
    "branches": "=IF({S}>=0,{S}/(1+EXP(-{S})),{S}*EXP({S})/(1+EXP({S})))",
}


def silu(name: str, src: str, x: str = "x", form: str = "abs") -> Step:
    """`name` = SiLU(`src`) = x·σ(x), elementwise, in one of SILU_FORMS; `x` is how the
    equation and explanation write the argument."""
    words = {
        "abs": (f"silu({x}) = {x}·σ({x})", "x·σ(x), written with EXP(−|x|) so that EXP never "
                                          "overflows, for either sign."),
        "tanh": (f"silu({x}) = {x}·0.5·(1 + tanh({x}/2))",
                 f"{x}·sigmoid({x}), written with TANH because {x}/(1+EXP(−{x})) overflows "
                 f"for {x} below −709."),
        "branches": (f"SiLU({x}) = {x}/(1 + e^−{x})",
                     f"SiLU written so EXP never overflows: {x}/(1 + e^−{x}) for {x} ≥ 0, "
                     f"{x}·e^{x}/(1 + e^{x}) below 0."),
    }[form]
    return Step(name, words[0], Map(SILU_FORMS[form], S=src), words[1])


def feed_forward(src: str, written: str = "h", act_written: str = "act",
                 kind: str = "relu", form: str = "tanh", bias: bool = True) -> list[Step]:
    """FFN(h) = act(h·W_1 + B_1)·W_2 + B_2 over each row of `src` (written `written` in
    the equations, the activation `act_written`): FFN_HIDDEN, FFN_ACT (`activation`) and
    FFN_OUT, reading W_1, W_2 and, with `bias`, B_1 and B_2."""
    plus = (" + B_1", " + B_2") if bias else ("", "")
    return [Step("FFN_HIDDEN", f"{written}·W_1{plus[0]}",
                 MatMul(src, "W_1", plus="B_1" if bias else None)),
            activation(kind, form),
            Step("FFN_OUT", f"{act_written}·W_2{plus[1]}",
                 MatMul("FFN_ACT", "W_2", plus="B_2" if bias else None))]
