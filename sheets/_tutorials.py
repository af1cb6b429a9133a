"""The seed tutorials' worked examples as numbers: each example's kind, sizes and inputs, and
the matrices the tutorial prints. `reproduce` (workbook_builder/teaching/reproduce.py) sets
them beside live workbooks; the kinds' `--example wo-ai-ai` presets (sheets/_examples.py)
read their inputs here."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    file_stem: str
    kind: str
    params: dict
    inputs: dict[str, list]
    printed: dict[str, list]  # step name -> the matrix the tutorial prints
    note: str = ""


@dataclass(frozen=True)
class Tutorial:
    source: str
    tokens: list[str]
    examples: list[Example]


_X = [[1, 0], [0, 1], [1, 1]]
_I = [[1, 0], [0, 1]]

# ../shared/seeds/000_b638a7e16e22b681.txt, "Excel 手推自注意力" and "多头注意力".
TUTORIALS = {
    "wo-ai-ai": Tutorial(
        source="Transformer自注意力机制详解, Step 2a–2f (sentence “我爱 AI”)",
        tokens=["我", "爱", "AI"],
        examples=[
            Example("wo-ai-ai_attention", "attention", {"seq_len": 3, "d_model": 2, "d_k": 2},
                    {"X": _X, "W_Q": _I, "W_K": _I, "W_V": _I},
                    {"SCORES": [[1, 0, 1], [0, 1, 1], [1, 1, 2]],
                     "SCALED": [[0.707, 0, 0.707], [0, 0.707, 0.707], [0.707, 0.707, 1.414]],
                     "WEIGHTS": [[0.370, 0.260, 0.370], [0.260, 0.370, 0.370],
                                 [0.289, 0.289, 0.422]],
                     "OUTPUT": [[0.740, 0.630], [0.630, 0.740], [0.711, 0.711]]}),
            Example("wo-ai-ai_multihead", "multihead", {"seq_len": 3, "d_model": 2, "heads": 2},
                    {"X": _X, "W_Q": _I, "W_K": _I, "W_V": _I, "W_O": _I},
                    {"SCORES_H1": [[1, 0, 1], [0, 0, 0], [1, 0, 1]],
                     "WEIGHTS_H1": [[0.370, 0.260, 0.370], [0.333, 0.333, 0.333],
                                    [0.370, 0.260, 0.370]],
                     "HEAD_H1": [[0.740], [0.667], [0.740]],
                     "SCORES_H2": [[0, 0, 0], [0, 1, 1], [0, 1, 1]],
                     "WEIGHTS_H2": [[0.333, 0.333, 0.333], [0.212, 0.394, 0.394],
                                    [0.212, 0.394, 0.394]],
                     "HEAD_H2": [[0.667], [0.788], [0.788]],
                     "CONCAT": [[0.740, 0.667], [0.667, 0.788], [0.740, 0.788]]},
                    note="The tutorial gives no W_O; W_O = I here, so OUTPUT = CONCAT."),
        ]),
}
