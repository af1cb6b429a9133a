"""transformer: the reference against PyTorch's `nn.TransformerEncoderLayer` and
`nn.TransformerDecoderLayer` stacked with the same weights (post-LN and pre-LN), the
embedding, the sinusoid, the tied output layer and greedy decoding written in PyTorch; the
sheet against the reference in every engine at sizes no other test uses; editing a source
id re-translates; the end id gives the pad id after it; bad parameters are one line."""

import csv

import numpy as np
import openpyxl
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.requires import requires_gnumeric, requires_libreoffice, requires_torch

from reference.transformer import transformer_ref
from sheets.transformer import Transformer
from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.gnumeric import evaluate_with_gnumeric
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.names import find_name

# sizes no other test builds: 5 source tokens, d = 6 with 3 heads, 2 + 2 layers, 4 steps
SIZES = {"src_len": 5, "d_model": 6, "heads": 3, "d_ff": 7, "layers": 2, "dec_layers": 2,
         "vocab": 11, "decode": 4}
SEED = 20  # a source whose greedy translation is not one id repeated


def relative(got: np.ndarray, exp: np.ndarray) -> float:
    """The largest difference over the block's largest value."""
    return float(np.abs(got - exp).max() / max(np.abs(exp).max(), 1e-300))


def torch_model(inputs, params):
    """The encoder and decoder layers of PyTorch holding the same weights (torch stores W
    transposed), float64, dropout 0."""
    import torch
    import torch.nn.functional as F

    act = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[params.activation]
    t = {name: torch.tensor(value) for name, value in inputs.items()}
    common = {"d_model": params.d_model, "nhead": params.heads,
              "dim_feedforward": params.d_ff, "dropout": 0.0, "activation": act,
              "layer_norm_eps": params.ln_eps, "batch_first": True,
              "norm_first": params.pre_ln, "dtype": torch.float64}

    def attention(module, prefix, sfx):
        module.in_proj_weight.copy_(torch.cat([t[f"{prefix}W_{n}{sfx}"].T for n in "QKV"]))
        module.in_proj_bias.copy_(torch.cat([t[f"{prefix}B_{n}{sfx}"][0] for n in "QKV"]))
        module.out_proj.weight.copy_(t[f"{prefix}W_O{sfx}"].T)
        module.out_proj.bias.copy_(t[f"{prefix}B_O{sfx}"][0])

    def rest(layer, sfx, norms):
        for module, w, b in [(layer.linear1, "W_1", "B_1"), (layer.linear2, "W_2", "B_2")]:
            module.weight.copy_(t[w + sfx].T)
            module.bias.copy_(t[b + sfx][0])
        for module, ln in zip(norms, ("LN1", "LN2", "LN3"), strict=False):
            module.weight.copy_(t[f"{ln}_GAMMA{sfx}"][0])
            module.bias.copy_(t[f"{ln}_BETA{sfx}"][0])

    encoder, decoder = [], []
    with torch.no_grad():
        for layer in range(1, params.layers + 1):
            made = torch.nn.TransformerEncoderLayer(**common).eval()
            attention(made.self_attn, "", f"_E{layer}")
            rest(made, f"_E{layer}", (made.norm1, made.norm2))
            encoder.append(made)
        for layer in range(1, params.dec_layers + 1):
            made = torch.nn.TransformerDecoderLayer(**common).eval()
            attention(made.self_attn, "", f"_D{layer}")
            attention(made.multihead_attn, "CROSS_", f"_D{layer}")
            rest(made, f"_D{layer}", (made.norm1, made.norm2, made.norm3))
            decoder.append(made)
    return encoder, decoder


def torch_translation(inputs, params):
    """ENC_OUTPUT, each step's logits, the cross-attention weights of decoder layer 1 at
    each step (per head) and the greedy ids, all computed by PyTorch."""
    import torch
    import torch.nn.functional as F

    encoder, decoder = torch_model(inputs, params)
    t = {name: torch.tensor(value) for name, value in inputs.items()}
    d, wte = params.d_model, t["WTE"]
    positions = max(params.src_len, params.decode)
    if params.positions == "learned":
        pos = t["POS_EMB"]
    else:  # PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(…)
        p = torch.arange(positions, dtype=torch.float64)[:, None]
        i = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
        angle = p / torch.pow(torch.tensor(10000.0, dtype=torch.float64), i / d)
        pos = torch.zeros(positions, d, dtype=torch.float64)
        pos[:, 0::2], pos[:, 1::2] = torch.sin(angle), torch.cos(angle)
    scale = 1.0 if params.no_scale else d ** 0.5

    def embed(ids):
        return F.embedding(torch.tensor(ids), wte) * scale + pos[:len(ids)]

    def final_norm(x, which):
        if not params.pre_ln:
            return x
        return F.layer_norm(x, (d,), t[f"{which}_GAMMA"][0], t[f"{which}_BETA"][0],
                            params.ln_eps)

    with torch.no_grad():
        memory = embed(inputs["SRC_IDS"][:, 0].astype(int).tolist())[None]
        for layer in encoder:
            memory = layer(memory)
        memory = final_norm(memory, "ENC_LNF")
        chosen, logits_of, cross_of = [], [], []
        for _ in range(params.decode):
            x = embed([params.start_id, *chosen])[None]
            n = x.shape[1]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(
                n, dtype=torch.float64)
            first = decoder[0]  # its cross-attention's weights, from its own input
            h = first.norm1(x) if params.pre_ln else x
            sa = first.self_attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            h = x + sa if params.pre_ln else first.norm1(x + sa)
            q = first.norm2(h) if params.pre_ln else h
            cross_of.append(first.multihead_attn(q, memory, memory, need_weights=True,
                                                 average_attn_weights=False)[1][0].numpy())
            for layer in decoder:
                x = layer(x, memory, tgt_mask=mask, tgt_is_causal=True)
            last = final_norm(x, "DEC_LNF")[0, -1]
            logits = last @ wte.T
            if params.logits_bias:
                logits = logits + t["LOGITS_BIAS"][0]
            logits_of.append(logits.numpy())
            finished = params.end_id in chosen
            chosen.append(params.pad_id if finished else int(torch.argmax(logits)))
    return memory[0].numpy(), logits_of, cross_of, chosen


def seeded(values: dict, seed: int):
    params = make_params(Transformer, values)
    return params, complete_inputs(Transformer, params, {}, seed)


CASES = [
    pytest.param({}, id="post-ln-defaults"),
    pytest.param({"pre_ln": True, "activation": "gelu"}, id="pre-ln-gelu"),
    pytest.param({"activation": "silu", "positions": "learned", "logits_bias": True,
                  "no_scale": True}, id="post-ln-silu-learned-bias"),
    pytest.param({"pre_ln": True, "positions": "learned", "start_id": 0, "end_id": 3},
                 id="pre-ln-learned"),
]


@requires_torch
@pytest.mark.parametrize("values", CASES)
def test_reference_equals_torch_layers_stacked(values):
    """ENC_OUTPUT, every step's LOGITS, decoder layer 1's cross-attention weights per head
    and the greedy ids equal PyTorch's, float64, to 1e-12 relative."""
    params, inputs = seeded({**SIZES, **values}, seed=SEED)
    ref = transformer_ref(inputs, params)
    memory, logits, cross, chosen = torch_translation(inputs, params)
    worst = relative(ref["ENC_OUTPUT"], memory)
    for step in range(params.decode):
        worst = max(worst, relative(ref[f"LOGITS_T{step + 1}"][0], logits[step]))
        for h in range(params.heads):
            worst = max(worst, relative(ref[f"CROSS_WEIGHTS_H{h + 1}_D1_T{step + 1}"][-1],
                                        cross[step][h][-1]))
    print(f"{values}: largest relative |reference − torch| = {worst:.1e}; ids {chosen}")
    assert worst < 1e-12
    assert ref["GENERATED"][:, 0].astype(int).tolist() == chosen


def test_the_weights_are_not_uniform_and_the_ids_vary():
    """The seeded weights make attention peaked enough that steps choose different ids
    (the cross-checks would miss a wrong argmax among equal scores)."""
    params, inputs = seeded(SIZES, seed=SEED)
    ref = transformer_ref(inputs, params)
    assert min(np.std(value) for name, value in inputs.items() if name.startswith("W_")) > 0.3
    assert len(set(ref["GENERATED"][:, 0])) > 1
    peak = max(value.max() for name, value in ref.items() if name.startswith("CROSS_WEIGHTS"))
    assert peak > 1.5 / params.src_len  # uniform weights would be 1/n


def test_after_the_end_id_every_step_gives_the_pad_id():
    """With the end id set to what step 1 chooses, steps 2 … K give the pad id, though
    their own argmax differs from it."""
    params, inputs = seeded(SIZES, seed=SEED)
    first = int(transformer_ref(inputs, params)["ARGMAX_T1"][0, 0])
    pad = (first + 1) % params.vocab
    params, _ = seeded({**SIZES, "end_id": first, "pad_id": pad}, seed=SEED)
    ref = transformer_ref(inputs, params)
    assert ref["GENERATED"][:, 0].tolist() == [first] + [pad] * (params.decode - 1)
    assert [ref[f"FINISHED_T{t}"][0, 0] for t in range(2, params.decode + 1)] == \
        [1.0] * (params.decode - 1)


# the formulas engine's run of these six sheets is slow-tier too (about 30 s): every
# configuration of them is checked in small by tests/test_kinds.py's registered cases
ENGINES = [pytest.param(evaluate_with_formulas, marks=pytest.mark.slow, id="formulas"),
           pytest.param(evaluate_with_libreoffice, marks=requires_libreoffice,
                        id="libreoffice"),
           pytest.param(evaluate_with_gnumeric, marks=requires_gnumeric, id="gnumeric")]


@pytest.fixture(scope="module")
def sheets(tmp_path_factory):
    """The post-LN, the pre-LN and the BART-shaped sheet (a position table per stack, the
    embedding LayerNorm, forced first and last ids) at SIZES, in both layouts, with their
    reference."""
    folder = tmp_path_factory.mktemp("transformer")
    made = {}
    for label, values in (("post", {}), ("pre", {"pre_ln": True, "activation": "silu",
                                                  "logits_bias": True}),
                          ("bart", {"positions": "per_stack", "embed_ln": True,
                                    "no_scale": True, "logits_bias": True,
                                    "activation": "gelu", "forced_bos": True, "bos_id": 3,
                                    "forced_end": True})):
        for layout in ("cells", "blocks"):
            path = folder / f"{label}_{layout}.xlsx"
            book = api.build("transformer", path, seed=SEED, layout=layout, **SIZES, **values)
            params, inputs = seeded({**SIZES, **values}, seed=SEED)
            made[label, layout] = path, transformer_ref(inputs, params), book.steps()
    return made


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("label,layout", [("post", "cells"), ("post", "blocks"),
                                          ("pre", "cells"), ("pre", "blocks"),
                                          ("bart", "cells"), ("bart", "blocks")])
def test_the_sheet_equals_the_reference_in_every_engine(sheets, engine, label, layout):
    path, ref, names = sheets[label, layout]
    got = evaluated_blocks(path, engine(path), names)
    worst = max(relative(got[name], ref[name]) for name in names
                if np.abs(ref[name]).max() > 0)
    print(f"{label} {layout} {engine.__name__}: largest relative |sheet − reference| = "
          f"{worst:.1e}; GENERATED {got['GENERATED'][:, 0].tolist()}")
    assert worst < 1e-12
    assert np.array_equal(got["GENERATED"], ref["GENERATED"])


@pytest.mark.slow  # searches ids and rebuilds; test_encoder.py and test_seq2seq.py edit ids
def test_typing_another_source_id_re_translates(tmp_path):
    """A source id typed into the saved workbook: the formulas recompute the translation
    the reference gives for the new source, which differs from the old one, and check
    passes."""
    path = tmp_path / "t.xlsx"
    api.build("transformer", path, seed=SEED, layout="blocks", **SIZES)
    params, inputs = seeded(SIZES, seed=SEED)
    before = transformer_ref(inputs, params)["GENERATED"]
    for row in range(params.src_len):
        for token in range(params.vocab):
            edited = {**inputs, "SRC_IDS": inputs["SRC_IDS"].copy()}
            edited["SRC_IDS"][row, 0] = token
            after = transformer_ref(edited, params)["GENERATED"]
            if not np.array_equal(after, before):
                break
        else:
            continue
        break
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "SRC_IDS", path)
    wb[where.sheet].cell(where.top + row, where.left).value = token
    changed = tmp_path / "changed.xlsx"
    wb.save(changed)
    got = evaluated_blocks(changed, evaluate_with_formulas(changed), ["GENERATED"])
    assert np.array_equal(got["GENERATED"], after)
    ran = cli("check", changed)
    assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.mark.parametrize("args,message", [
    (["--d-model", "6", "--heads", "4"], "--heads 4 does not divide --d-model 6"),
    (["--d-model", "5", "--heads", "1"], "--d-model must be even"),
    (["--dec-layers", "13"], "--dec-layers must be 1 … 12"),
    (["--end-id", "16"], "--end-id must be a token id 0 … 15"),
    (["--decode", "0"], "--decode must be a positive whole number"),
])
def test_bad_parameters_are_one_line(tmp_path, args, message):
    ran = cli("build", "transformer", "-o", tmp_path / "t.xlsx", *args)
    assert ran.returncode == 2
    assert message in one_line_error(ran)


@pytest.mark.slow  # a class of transformer sheets; test_teaching.py grades classes in small
def test_a_class_on_the_cross_attention_weights_is_graded(tmp_path):
    """`class` hands each student a sheet whose step 2 cross-attention weights of decoder
    layer 1 are blanks; typed from the reference of that student's seed they grade full
    marks, and one wrong cell loses marks."""
    roster = tmp_path / "roster.csv"
    roster.write_text("Name,Student ID\nAnn,s01\nBo,s02\n", encoding="utf-8")
    out = tmp_path / "class"
    step = "CROSS_WEIGHTS_H2_D1_T2"
    small = {"src_len": 3, "d_model": 4, "heads": 2, "d_ff": 5, "layers": 1,
             "dec_layers": 1, "vocab": 7, "decode": 2}
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in small.items()]
    made = cli("class", "transformer", "--roster", roster, "--out", out, "--exercise", step,
               *flags)
    assert made.returncode == 0, made.stdout + made.stderr
    manifest = list(csv.DictReader((out / "manifest.csv").open(encoding="utf-8")))
    returned = tmp_path / "returned"
    returned.mkdir()
    for n, row in enumerate(manifest):
        params, inputs = seeded(small, int(row["seed"]))
        answers = transformer_ref(inputs, params)
        wb = openpyxl.load_workbook(out / row["file"])
        where = find_name(wb, step, out / row["file"])
        for (i, j), value in np.ndenumerate(answers[step]):
            typed = value + 0.5 if (n, i, j) == (1, 0, 0) else float(value)
            wb[where.sheet].cell(where.top + i, where.left + j).value = typed
        wb.save(returned / row["file"])
    graded = cli("grade", *sorted(returned.iterdir()))
    assert graded.returncode in (0, 1), graded.stdout + graded.stderr
    cells = 2 * small["src_len"]
    assert f"{cells}/{cells} (100.0%)" in graded.stdout
    assert f"{cells - 1}/{cells}" in graded.stdout


@pytest.mark.slow  # the demo (tests/test_cli.py) builds and checks the same example
def test_the_hand_example_starts_from_the_tutorials_rows_and_checks(tmp_path):
    """`--example hand`: the source rows are the tutorial's 我, 爱, AI embeddings, the
    weights whole numbers, ENC_X their rows times √2 plus the sinusoid; check passes."""
    path = tmp_path / "hand.xlsx"
    book = api.build("transformer", path, example="hand")
    got = evaluated_blocks(path, book.values, ["SRC_EMB", "ENC_X", "W_Q_E1", "CROSS_W_K_D1"])
    assert got["SRC_EMB"].tolist() == [[1, 0], [0, 1], [1, 1]]
    pe = np.array([[np.sin(p), np.cos(p)] for p in range(3)])
    assert np.allclose(got["ENC_X"], got["SRC_EMB"] * np.sqrt(2) + pe, rtol=0, atol=1e-15)
    assert all(float(v).is_integer() for v in got["W_Q_E1"].ravel())
    assert api.check(book).passed
    assert book.note.startswith("example hand: the tutorial's 我/爱/AI")
