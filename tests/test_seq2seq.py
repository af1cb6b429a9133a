"""`seq2seq`: the reference against the PyTorch translation tutorial's EncoderRNN and
AttnDecoderRNN (float64, eval mode, the same weights) in every encoder state, gate,
attention weight, decoder state, log-probability and generated id, with and without
attention and with teacher forcing; the sheet against the reference on sizes no other test
uses, in `formulas`, LibreOffice and Gnumeric."""

import re
from types import SimpleNamespace

import numpy as np
import openpyxl
import pytest
from helpers.books import (
    build,
    cell_of,
    check_built,
    evaluated_blocks,
    exercise_book,
    fill,
    self_check,
)
from helpers.cli import build_refused, cli, one_line_error
from helpers.requires import requires_gnumeric, requires_libreoffice, requires_torch
from helpers.sheets import cells_in
from helpers.tutorial import save_state_dicts, tutorial_modules

from reference.seq2seq import seq2seq_ref
from workbook_builder.checking.check import check_workbook
from workbook_builder.cli.printing import format_report
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.gnumeric import evaluate_with_gnumeric
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet.names import find_name

RTOL, ATOL = 1e-12, 1e-15


def inputs_from_modules(encoder, decoder) -> dict[str, np.ndarray]:
    """The sheet's inputs from the modules' weights: rows times (in × out) matrices, so
    every nn.Linear and nn.GRU weight is transposed; the GRU's gates stay r | z | n."""
    def array(tensor, transpose=False):
        value = tensor.detach().numpy().astype(float)
        return value.T.copy() if transpose else value.reshape(1, -1).copy() \
            if value.ndim == 1 else value.copy()

    att = decoder.attention
    reverse = {} if not encoder.gru.bidirectional else {
        "ENC_W_I_REV": array(encoder.gru.weight_ih_l0_reverse, True),
        "ENC_B_I_REV": array(encoder.gru.bias_ih_l0_reverse),
        "ENC_W_H_REV": array(encoder.gru.weight_hh_l0_reverse, True),
        "ENC_B_H_REV": array(encoder.gru.bias_hh_l0_reverse)}
    return {**reverse,
        "ENC_EMBEDDING": array(encoder.embedding.weight),
        "ENC_W_I": array(encoder.gru.weight_ih_l0, True), "ENC_B_I": array(encoder.gru.bias_ih_l0),
        "ENC_W_H": array(encoder.gru.weight_hh_l0, True), "ENC_B_H": array(encoder.gru.bias_hh_l0),
        "DEC_EMBEDDING": array(decoder.embedding.weight),
        "W_A": array(att.Wa.weight, True), "B_W": array(att.Wa.bias),
        "U_A": array(att.Ua.weight, True), "B_U": array(att.Ua.bias),
        "V_A": array(att.Va.weight, True), "B_V": array(att.Va.bias),
        "DEC_W_I": array(decoder.gru.weight_ih_l0, True), "DEC_B_I": array(decoder.gru.bias_ih_l0),
        "DEC_W_H": array(decoder.gru.weight_hh_l0, True), "DEC_B_H": array(decoder.gru.bias_hh_l0),
        "OUT_W": array(decoder.out.weight, True), "OUT_B": array(decoder.out.bias),
    }


def torch_gates(gru, x, h, suffix=""):
    """r, z, n and h' of one nn.GRU step, from the module's own weights (`suffix`
    "_reverse": the backward direction's) by the equations of PyTorch's nn.GRU
    documentation (the module gives only h')."""
    import torch

    weight = {name: getattr(gru, f"{name}_l0{suffix}")
              for name in ("weight_ih", "bias_ih", "weight_hh", "bias_hh")}
    gi = x @ weight["weight_ih"].T + weight["bias_ih"]
    gh = h @ weight["weight_hh"].T + weight["bias_hh"]
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return {"R": r, "Z": z, "N": n, "H": (1 - z) * n + z * h}


def run_tutorial(encoder, decoder, src_ids, decode, sos, attention, target=None):
    """The tutorial's forward passes, with every GRU step's gates recorded (checked to
    give nn.GRU's own next state) and each decoder step's state."""
    import torch

    steps = {"encoder": [], "decoder": [], "backward": {}}

    def record(which):
        def hook(module, args, output):
            x, h = args[0], (args[1] if len(args) > 1 else None)
            out, last = output
            size = module.hidden_size
            state = torch.zeros(1, size, dtype=torch.float64) if h is None else h[0]
            for t in range(x.shape[1]):
                gates = torch_gates(module, x[:, t], state)
                assert torch.allclose(gates["H"], out[:, t, :size], rtol=1e-14, atol=1e-15)
                steps[which].append({k: v.detach().numpy() for k, v in gates.items()})
                state = out[:, t, :size]
            if module.bidirectional:  # the backward direction, from the last token up
                state = torch.zeros(1, size, dtype=torch.float64)
                for t in reversed(range(x.shape[1])):
                    gates = torch_gates(module, x[:, t], state, "_reverse")
                    assert torch.allclose(gates["H"], out[:, t, size:], rtol=1e-14,
                                          atol=1e-15)
                    steps["backward"][t] = {k: v.detach().numpy() for k, v in gates.items()}
                    state = out[:, t, size:]
        return hook

    handles = [encoder.gru.register_forward_hook(record("encoder")),
               decoder.gru.register_forward_hook(record("decoder"))]
    with torch.no_grad():
        source = torch.tensor([src_ids], dtype=torch.long)
        outputs, hidden = encoder(source)
        tgt = None if target is None else torch.tensor([target], dtype=torch.long)
        log_probs, _, attentions = decoder(outputs, hidden, tgt, max_length=decode,
                                           sos_token=sos, attention=attention)
    for handle in handles:
        handle.remove()
    return {"ENC_OUTPUTS": outputs[0].numpy(), "LOG_PROBS": log_probs[0].numpy(),
            "ATTN_WEIGHTS": None if attentions is None else attentions[0].numpy(),
            "GENERATED": log_probs[0].argmax(-1).numpy().reshape(-1, 1).astype(float),
            **steps}


def params_of(src_len, hidden, src_vocab, tgt_vocab, decode, sos=0, eos=1, attention=True,
              teacher_forcing=False, bidirectional=False):
    """The reference's parameters (the sheet's are the same fields)."""
    return SimpleNamespace(src_len=src_len, hidden=hidden, src_vocab=src_vocab,
                           tgt_vocab=tgt_vocab, decode=decode, sos=sos, eos=eos,
                           no_attention=not attention, teacher_forcing=teacher_forcing,
                           bidirectional=bidirectional)


def close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


CASES = [  # src_len, hidden, src_vocab, tgt_vocab, decode, sos, attention, teacher forcing,
    # bidirectional
    (5, 4, 7, 6, 4, 0, True, False, False),
    (5, 4, 7, 6, 4, 0, False, False, False),
    (3, 2, 4, 5, 5, 2, True, False, False),
    (6, 3, 8, 9, 3, 0, True, True, False),
    (6, 3, 8, 9, 3, 0, False, True, False),
    (1, 1, 2, 3, 2, 1, True, False, False),
    (5, 4, 7, 6, 4, 0, True, False, True),
    (4, 3, 5, 6, 3, 0, False, True, True),
]


@requires_torch
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_reference_equals_the_pytorch_tutorials_encoder_and_attention_decoder(case):
    n, size, src_vocab, tgt_vocab, decode, sos, attention, forcing, both_ways = case
    encoder, decoder = tutorial_modules(src_vocab, tgt_vocab, size, seed=sum(case[:5]),
                                        bidirectional=both_ways)
    rng = np.random.default_rng(n * 100 + size)
    src = rng.integers(0, src_vocab, size=n).tolist()
    target = rng.integers(0, tgt_vocab, size=decode).tolist() if forcing else None
    inputs = {**inputs_from_modules(encoder, decoder),
              "SRC_IDS": np.array(src, dtype=float).reshape(-1, 1)}
    if forcing:
        inputs["TGT_IDS"] = np.array(target, dtype=float).reshape(-1, 1)
    want = run_tutorial(encoder, decoder, src, decode, sos, attention, target)
    got = seq2seq_ref(inputs, params_of(n, size, src_vocab, tgt_vocab, decode, sos,
                                        attention=attention, teacher_forcing=forcing,
                                        bidirectional=both_ways))
    close(got["ENC_OUTPUTS"], want["ENC_OUTPUTS"], "encoder states")
    for t, gates in enumerate(want["encoder"]):
        for gate, value in gates.items():
            close(got[f"ENC_{gate}_T{t + 1}"], value, f"encoder {gate} at step {t + 1}")
    assert len(want["backward"]) == (n if both_ways else 0)
    for t, gates in want["backward"].items():
        for gate, value in gates.items():
            close(got[f"ENC_BACK_{gate}_T{t + 1}"], value, f"backward {gate} at {t + 1}")
    assert len(want["decoder"]) == decode
    for k, gates in enumerate(want["decoder"]):
        for gate, value in gates.items():
            close(got[f"DEC_{gate}_T{k + 1}"], value, f"decoder {gate} at step {k + 1}")
    close(got["DEC_HIDDEN"], np.vstack([g["H"] for g in want["decoder"]]), "decoder states")
    close(got["LOG_PROBS"], want["LOG_PROBS"], "log-probabilities")
    assert np.array_equal(got["GENERATED"], want["GENERATED"])
    if attention:
        close(got["ATTN_WEIGHTS"], want["ATTN_WEIGHTS"], "attention weights")
    else:
        assert "ATTN_WEIGHTS" not in got
    if not forcing:  # greedy: each step read the id the step before chose
        fed = [sos] + want["GENERATED"][:-1, 0].astype(int).tolist()
    else:
        fed = [sos] + target[:-1]
    assert [int(got[f"DEC_IN_T{k + 1}"][0, 0]) for k in range(decode)] == fed


@requires_torch
def test_without_attention_the_same_weights_give_another_translation():
    """The bottleneck model on the same weights: every step's context is h_n, so the
    decoder states differ from the attention model's after the first step."""
    case = (5, 4, 7, 6, 4)
    encoder, decoder = tutorial_modules(7, 6, 4, seed=3)
    inputs = {**inputs_from_modules(encoder, decoder),
              "SRC_IDS": np.array([[1], [4], [2], [6], [0]], dtype=float)}
    with_attention = seq2seq_ref(inputs, params_of(*case))
    bottleneck = seq2seq_ref(inputs, params_of(*case, attention=False))
    for k in range(4):
        close(bottleneck[f"CONTEXT_T{k + 1}"], with_attention["ENC_OUTPUTS"][-1:], "h_n")
    assert not np.allclose(with_attention["DEC_HIDDEN"], bottleneck["DEC_HIDDEN"])


# -- the sheet against PyTorch, in every engine -------------------------------------------------

# sizes no other test builds: 5 source tokens, H = 3, 6 source and 7 target ids, 4 steps
SHEET_SIZES = {"src_len": 5, "hidden": 3, "src_vocab": 6, "tgt_vocab": 7, "decode": 4}
SOURCE = [3, 0, 5, 1, 4]


def tutorial_book(tmp_path, attention: bool, layout: str = "cells",
                  bidirectional: bool = False):
    """A sheet built from the tutorial modules' own weights, and what PyTorch computes."""
    encoder, decoder = tutorial_modules(6, 7, 3, seed=11, bidirectional=bidirectional)
    given = {**inputs_from_modules(encoder, decoder),
             "SRC_IDS": np.array(SOURCE, dtype=float).reshape(-1, 1)}
    if not attention:
        given = {k: v for k, v in given.items()
                 if k not in ("W_A", "B_W", "U_A", "B_U", "V_A", "B_V")}
    params = {**SHEET_SIZES, "no_attention": not attention, "bidirectional": bidirectional}
    path = build(tmp_path, "seq2seq", params, layout=layout, given=given,
                 name=f"tutorial_{attention}_{layout}_{bidirectional}.xlsx")
    return path, run_tutorial(encoder, decoder, SOURCE, 4, 0, attention)


def assert_sheet_equals_pytorch(path, values, want, attention: bool):
    gates = [f"ENC_{g}_T{t + 1}" for t in range(5) for g in "RZNH"] + \
            [f"ENC_BACK_{g}_T{t + 1}" for t in want["backward"] for g in "RZNH"] + \
            [f"DEC_{g}_T{k + 1}" for k in range(4) for g in "RZNH"]
    names = ["ENC_OUTPUTS", "DEC_HIDDEN", "LOG_PROBS", "GENERATED", *gates] + \
        (["ATTN_WEIGHTS"] if attention else [])
    got = evaluated_blocks(path, values, names)
    worst = 0.0
    for name in names:
        if name.startswith("ENC_BACK_"):
            _, _, gate, step = name.split("_")
            expected = want["backward"][int(step[1:]) - 1][gate]
        elif name.startswith(("ENC_", "DEC_")) and name[-3:-1] == "_T":
            side, gate, step = name.split("_")
            expected = want["encoder" if side == "ENC" else "decoder"][int(step[1:]) - 1][gate]
        elif name == "DEC_HIDDEN":
            expected = np.vstack([g["H"] for g in want["decoder"]])
        else:
            expected = want[name]
        close(got[name], expected, name)
        worst = max(worst, float(np.max(np.abs(got[name] - expected)
                                        / np.maximum(np.abs(expected), 1e-300))))
    print(path.name, "max relative difference from PyTorch:", worst)
    assert np.array_equal(got["GENERATED"], want["GENERATED"])


ENGINES = [pytest.param("formulas"),
           pytest.param("libreoffice", marks=requires_libreoffice),
           pytest.param("gnumeric", marks=requires_gnumeric)]


@requires_torch
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("attention,bidirectional", [(True, False), (False, False),
                                                     (True, True)],
                         ids=["attention", "bottleneck", "bidirectional"])
def test_the_sheet_equals_the_pytorch_tutorial_in_every_engine(tmp_path, engine, attention,
                                                                bidirectional):
    path, want = tutorial_book(tmp_path, attention, bidirectional=bidirectional)
    evaluate = {"formulas": evaluate_with_formulas, "libreoffice": evaluate_with_libreoffice,
                "gnumeric": evaluate_with_gnumeric}[engine]
    assert_sheet_equals_pytorch(path, evaluate(path), want, attention)
    report = check_workbook(path, engine)
    print(format_report(report))
    assert report.passed


@requires_torch
def test_the_blocks_layout_equals_the_pytorch_tutorial(tmp_path):
    path, want = tutorial_book(tmp_path, True, layout="blocks")
    assert_sheet_equals_pytorch(path, evaluate_with_formulas(path), want, True)


@pytest.mark.parametrize("case", [
    {"src_len": 6, "hidden": 2, "src_vocab": 3, "tgt_vocab": 8, "decode": 5, "sos": 3,
     "eos": 2, "teacher_forcing": True},
    {"src_len": 2, "hidden": 4, "src_vocab": 9, "tgt_vocab": 3, "decode": 6},
], ids=["forced", "long-decode"])
@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_the_sheet_equals_the_reference(tmp_path, case, layout):
    path = build(tmp_path, "seq2seq", case, layout=layout, seed=7)
    report = check_built(path)
    print(format_report(report))
    assert report.passed and {"GENERATED", "FIRST_EOS"} <= {s.name for s in report.steps}


def test_editing_a_source_id_changes_the_translation_live(tmp_path):
    """The sheet is live: a new source id moves every encoder state, the attention and
    the log-probabilities, and `check` recomputes the reference from the edited ids."""
    path = build(tmp_path, "seq2seq", SHEET_SIZES, seed=3)
    before = evaluated_blocks(path, evaluate_with_formulas(path), ["ATTN_WEIGHTS", "LOG_PROBS"])
    wb = openpyxl.load_workbook(path)
    cell = cell_of(wb, "SRC_IDS", 0, 0)
    cell.value = (cell.value + 1) % SHEET_SIZES["src_vocab"]
    wb.save(path)
    after = evaluated_blocks(path, evaluate_with_formulas(path), ["ATTN_WEIGHTS", "LOG_PROBS"])
    assert np.abs(after["ATTN_WEIGHTS"] - before["ATTN_WEIGHTS"]).max() > 1e-6
    assert np.abs(after["LOG_PROBS"] - before["LOG_PROBS"]).max() > 1e-6
    assert check_workbook(path).passed


def test_first_eos_marks_only_the_first_end_id(tmp_path):
    """FIRST_EOS is 1 at the first step whose id is EOS and 0 elsewhere: with teacher
    forcing the ids are still the argmax, so EOS is set to an id the sheet generates."""
    case = {"src_len": 3, "hidden": 2, "src_vocab": 4, "tgt_vocab": 3, "decode": 6}
    path = build(tmp_path, "seq2seq", case, seed=1)
    generated = evaluated_blocks(path, evaluate_with_formulas(path), ["GENERATED"])
    ids = generated["GENERATED"][:, 0].astype(int).tolist()
    eos = ids[1]  # the id of step 2: maybe also at later steps
    path = build(tmp_path, "seq2seq", {**case, "eos": eos}, seed=1, name="eos.xlsx")
    marks = evaluated_blocks(path, evaluate_with_formulas(path), ["FIRST_EOS", "GENERATED"])
    assert marks["GENERATED"][:, 0].astype(int).tolist() == ids  # EOS changes no number
    first = ids.index(eos)
    assert marks["FIRST_EOS"][:, 0].tolist() == [float(k == first) for k in range(6)]


def test_the_cost_table_counts_the_sheets_products(tmp_path):
    """COST_ENCODER and COST_ATTENTION at the sheet's n equal the multiplications of the
    matrix products the sheet writes (terms of each MMULT or SUMPRODUCT): X·W_I and
    h·W_H for the encoder; U_a·h_j, W_a·s, v·tanh and the context for attention."""
    path = build(tmp_path, "seq2seq", SHEET_SIZES, seed=2)
    wb = openpyxl.load_workbook(path)

    def terms(pattern: str) -> int:
        count = 0
        for name in (n for n in wb.defined_names if re.fullmatch(pattern, n)):
            where = find_name(wb, name, path)
            ws = wb[where.sheet]
            for i in range(where.shape[0]):
                for j in range(where.shape[1]):
                    for first in re.findall(r"(?:SUMPRODUCT|MMULT)\(([^,()]+),",
                                            str(ws.cell(where.top + i, where.left + j).value)):
                        count += cells_in(first)
        return count

    table = evaluated_blocks(path, evaluate_with_formulas(path),
                             ["COST_ENCODER", "COST_ATTENTION", "COST_STEPS"])
    assert table["COST_ENCODER"][0, 0] == terms(r"ENC_GX|ENC_GH_T\d+")
    assert table["COST_ATTENTION"][0, 0] == terms(r"UH|WS_T\d+|SCORES_T\d+|CONTEXT_T\d+")
    assert table["COST_STEPS"][0, 0] == 5 + 4
    assert terms(r"ENC_GH_T1") == 0  # h_0 = 0: the first step's recurrent side is its bias


@pytest.mark.parametrize("args,words", [
    (["--sos", "6"], "--sos must be a target id 0 … 5"),
    (["--eos", "-1"], "--eos must be a target id"),
    (["--decode", "0"], "--decode must be a positive whole number"),
    (["--tokens", "a,b|x,y,z", "--src-len", "3"], "2 source and 3 target"),
])
def test_cli_refuses_bad_parameters_in_one_line(tmp_path, args, words):
    assert words in build_refused("seq2seq", tmp_path, *args)


def test_cli_builds_a_labelled_translation_and_check_passes(tmp_path):
    path = tmp_path / "t.xlsx"
    built = cli("build", "seq2seq", "-o", path, "--tokens", "我,爱,AI|I,love,AI,<eos>")
    assert built.returncode == 0, built.stderr
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "ATTN_WEIGHTS", path)
    ws = wb[where.sheet]
    assert [ws.cell(where.top - 1, where.left + j).value for j in range(3)] == ["我", "爱", "AI"]
    assert ws.cell(where.top + 3, where.left - 1).value == "<eos>"
    assert check_workbook(path).passed


# -- the tutorial's trained model, from its state dicts ------------------------------------------

@requires_torch
@pytest.mark.parametrize("bidirectional", [False, True], ids=["gru", "bidirectional-gru"])
def test_a_checkpoint_of_the_tutorials_modules_gives_the_sheet_of_the_model(tmp_path,
                                                                           bidirectional):
    encoder, decoder = tutorial_modules(6, 7, 3, seed=11, bidirectional=bidirectional)
    model = save_state_dicts(tmp_path / "model.pt", encoder, decoder)
    path = tmp_path / "model.xlsx"
    built = cli("build", "seq2seq", "-o", path, "--checkpoint", model,
                "--token-ids", ",".join(map(str, SOURCE)), "--decode", "4")
    assert built.returncode == 0, built.stderr
    want = run_tutorial(encoder, decoder, SOURCE, 4, 0, True)
    assert_sheet_equals_pytorch(path, evaluate_with_formulas(path), want, True)
    assert check_workbook(path).passed


@requires_torch
@pytest.mark.parametrize("change,args,words", [
    ("extra", [], "tensor decoder.gru.weight_ih_l1: a GRU of more than one layer"),
    ("reverse", [], "no tensor encoder.gru.weight_ih_l0_reverse (9×3 expected)"),
    ("decoder-reverse", [], "tensor decoder.gru.weight_hh_l0_reverse: a bidirectional GRU"),
    (None, ["--bidirectional"], "--bidirectional True contradicts the checkpoint (its encoder "
                                "GRU's tensors (encoder.gru.weight_ih_l0_reverse absent) give "
                                "False)"),
    ("drop", [], "no tensor decoder.attention.Va.bias (1 expected)"),
    ("shape", [], "tensor decoder.out.weight has shape 7×4; 7×3 was expected"),
    (None, ["--no-attention"], "--no-attention True contradicts the checkpoint (its decoder's "
                               "attention tensors give False)"),
    (None, ["--hidden", "4"], "--hidden 4 contradicts the checkpoint (the shapes of its "
                              "tensors give 3)"),
    (None, ["--token-ids", "1,6"], "token id 6 is outside the source vocabulary (0 … 5)"),
    (None, ["--text", "je suis"], "give the source sentence as --token-ids"),
])
def test_a_checkpoint_is_read_exactly_or_refused_in_one_line(tmp_path, change, args, words):
    import torch

    encoder, decoder = tutorial_modules(6, 7, 3, seed=11)
    extra, drop = {}, ()
    if change == "extra":
        extra = {"decoder.gru.weight_ih_l1": torch.zeros(9, 3, dtype=torch.float64)}
    elif change == "reverse":
        extra = {"encoder.gru.weight_hh_l0_reverse": torch.zeros(9, 3, dtype=torch.float64)}
    elif change == "decoder-reverse":
        extra = {"decoder.gru.weight_hh_l0_reverse": torch.zeros(9, 3, dtype=torch.float64)}
    elif change == "drop":
        drop = ("decoder.attention.Va.bias",)
    elif change == "shape":
        extra = {"decoder.out.weight": torch.zeros(7, 4, dtype=torch.float64)}
    model = save_state_dicts(tmp_path / "model.pt", encoder, decoder, extra, drop)
    result = cli("build", "seq2seq", "-o", tmp_path / "a.xlsx", "--checkpoint", model, *args)
    assert words in one_line_error(result)


@pytest.mark.slow  # test_teaching.py grades exercises of every layout in small
def test_an_exercise_on_the_update_gate_and_the_attention_flows_into_the_translation(
        tmp_path):
    """The exercise blanks ENC_Z_T2 and WEIGHTS_T1; typed right, every self-check passes and
    the log-probabilities are the reference's; a wrong update gate moves every later
    step (they read the student's cells)."""
    steps = ["ENC_Z_T2", "WEIGHTS_T1"]
    path, answers = exercise_book(tmp_path, "seq2seq", SHEET_SIZES, steps)
    right = fill(path, answers, steps, tmp_path / "right.xlsx")
    values = evaluate_with_formulas(right)
    checks = self_check(right, values, steps)  # cells right, and a mark per row
    assert checks == {"ENC_Z_T2": (3.0, ["✓"]), "WEIGHTS_T1": (5.0, ["✓"])}, checks
    got = evaluated_blocks(right, values, ["LOG_PROBS", "ENC_OUTPUTS"])
    close(got["LOG_PROBS"], answers["LOG_PROBS"], "log-probabilities")
    wrong = fill(path, answers, steps, tmp_path / "wrong.xlsx",
                 lambda step, i, j, v: 1 - v if step == "ENC_Z_T2" else v)
    moved = evaluated_blocks(wrong, evaluate_with_formulas(wrong), ["ENC_OUTPUTS"])
    assert np.abs(moved["ENC_OUTPUTS"][1:] - got["ENC_OUTPUTS"][1:]).min() > 0
    np.testing.assert_array_equal(moved["ENC_OUTPUTS"][0], got["ENC_OUTPUTS"][0])
