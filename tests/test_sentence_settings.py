"""sentence-transformers' pipeline settings for the `encoder` kind: every key of modules.json,
the Pooling and Normalize config.json, sentence_bert_config.json and
config_sentence_transformers.json is reproduced, harmless or refused in one line naming the
key and its file. do_lower_case and a default prompt are reproduced: the token ids equal
SentenceTransformer.tokenize and the built workbook's EMBEDDING, computed by the formulas
engine, equals encode in float64 to 1e-12. Every path the folder names stays inside it: `..`,
rooted paths and links out are refused before anything outside is opened (the hostile cases
run the command line in a process of its own, within 1 GB and 60 s)."""

import inspect
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import capped, cli, one_line_error, requires_prlimit
from helpers.numpy_models import BERT_CONFIG, bert_weights, model_folder
from helpers.runs import once_per_run

from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.models import sentence_settings as settings

ST = "sentence_transformers.models."
HEAD = [("Transformer", ""), ("Pooling", "1_Pooling"), ("Normalize", "2_Normalize")]
MEAN = {"embedding_dimension": 4, "pooling_mode": "mean", "include_prompt": True}
IDS = ["--token-ids", "2,4,5"]
PREFIX = "attnsheets: error: "  # the CLI's start of every refusal


def said(line: str) -> str:
    """A refusal's line without the CLI's prefix."""
    assert line.startswith(PREFIX), line
    return line.removeprefix(PREFIX)


def head_folder(folder: Path, modules=HEAD, pooling=MEAN, files: dict | None = None) -> Path:
    """The NumPy BERT (helpers/numpy_models.py) with a sentence-transformers head written
    by hand: modules.json from (type, path) pairs, 1_Pooling/config.json, and `files`
    (name → JSON value) beside them."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    model_folder(folder, bert_weights(), BERT_CONFIG)
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": k, "name": str(k), "path": path, "type": ST + kind}
         for k, (kind, path) in enumerate(modules)]))
    if pooling is not None:
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    for name, value in (files or {}).items():
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text(json.dumps(value))
    return folder


def build_refused(folder: Path, tmp_path: Path, *flags: str) -> str:
    """`build encoder --checkpoint FOLDER FLAGS -o out.xlsx`: exit 2, one line, no file."""
    out = tmp_path / "out.xlsx"
    line = one_line_error(cli("build", "encoder", "--checkpoint", folder, *(flags or IDS),
                              "-o", out))
    assert not out.exists()
    return said(line)


# -- refused, naming the key and its file -----------------------------------------------------
PROMPTS = {"prompts": {"query": "a dog: ", "document": ""}, "default_prompt_name": "query"}
REFUSALS = {
    "pooling_mode two modes": (
        {"pooling": {**MEAN, "pooling_mode": ["mean", "max"]}}, "1_Pooling/config.json",
        'sets pooling_mode to ["mean", "max"]; the encoder sheet computes one mode'),
    "pooling_mode an object": (
        {"pooling": {**MEAN, "pooling_mode": {"mean": True}}}, "1_Pooling/config.json",
        'sets pooling_mode to {"mean": true}; it must be a mode\'s name'),
    "pooling_mode a number": (
        {"pooling": {**MEAN, "pooling_mode": 3}}, "1_Pooling/config.json",
        "sets pooling_mode to 3; it must be a mode's name"),
    "pooling_mode another mode": (
        {"pooling": {**MEAN, "pooling_mode": "weightedmean"}}, "1_Pooling/config.json",
        "sets pooling_mode to 'weightedmean'; the encoder sheet computes mean, cls, max"),
    "an old switch not true or false": (
        {"pooling": {"word_embedding_dimension": 4, "pooling_mode_mean_tokens": "yes"}},
        "1_Pooling/config.json",
        'sets pooling_mode_mean_tokens to "yes"; a pooling_mode_… switch must be true or '
        'false'),
    "no switch on": (
        {"pooling": {"word_embedding_dimension": 4, "pooling_mode_mean_tokens": False}},
        "1_Pooling/config.json", "turns on no pooling_mode_… switch"),
    "a Pooling key unknown": (
        {"pooling": {**MEAN, "pooling_temperature": 2}}, "1_Pooling/config.json",
        "unknown key 'pooling_temperature'; the encoder sheet cannot say what it changes"),
    "no embedding_dimension": (
        {"pooling": {"pooling_mode": "mean"}}, "1_Pooling/config.json",
        "no embedding_dimension; sentence-transformers cannot load a Pooling module"),
    "include_prompt false under a default prompt": (
        {"pooling": {**MEAN, "include_prompt": False},
         "files": {"config_sentence_transformers.json": PROMPTS}}, "1_Pooling/config.json",
        "sets include_prompt to false and the default prompt 'query' ('a dog: ') of"),
    "a Dense module": (
        {"modules": [*HEAD[:2], ("Dense", "2_Dense")]}, "modules.json",
        "lists Transformer → Pooling → Dense; the encoder sheet computes Transformer → "
        "Pooling (→ Normalize) (Dense is a linear layer after pooling"),
    "a module of another package": (
        {"types": {1: "my_models.Pooling"}}, "modules.json",
        "module 1 has type 'my_models.Pooling', not a sentence-transformers module"),
    "a modules.json key unknown": (
        {"entry": {"device": "cuda"}}, "modules.json", "unknown key 'device'"),
    "transformer_task": (
        {"files": {"sentence_bert_config.json": {"transformer_task": "fill-mask"}}},
        "sentence_bert_config.json", 'sets transformer_task to "fill-mask"; the encoder '
                                     'sheet computes the feature-extraction task only'),
    "an older Transformer file name": (
        {"files": {"sentence_roberta_config.json": {"transformer_task": "fill-mask"}}},
        "sentence_roberta_config.json", 'sets transformer_task to "fill-mask"'),
    "a sentence_bert_config key unknown": (
        {"files": {"sentence_bert_config.json": {"max_seq_len": 4}}},
        "sentence_bert_config.json", "unknown key 'max_seq_len'"),
    "do_lower_case not true or false": (
        {"files": {"sentence_bert_config.json": {"do_lower_case": "yes"}}},
        "sentence_bert_config.json", "do_lower_case must be true or false"),
    "max_seq_length not a count": (
        {"files": {"sentence_bert_config.json": {"max_seq_length": 0}}},
        "sentence_bert_config.json", "max_seq_length must be a whole number, 1 or more"),
    "model arguments": (
        {"files": {"sentence_bert_config.json": {"model_args": {"dtype": "float16"}}}},
        "sentence_bert_config.json", 'sets model_args to {"dtype": "float16"}; arguments '
                                     'to the model or its config'),
    "tokenizer arguments": (
        {"files": {"sentence_bert_config.json": {"tokenizer_args": {"do_lower_case": 1}}}},
        "sentence_bert_config.json", "arguments to the tokenizer other than "
                                     "model_max_length may change its ids"),
    "processing arguments": (
        {"files": {"sentence_bert_config.json": {
            "processing_kwargs": {"text": {"max_length": 3}}}}},
        "sentence_bert_config.json", "they change how the text is tokenized"),
    "a tokenizer from elsewhere": (
        {"files": {"sentence_bert_config.json": {"tokenizer_name_or_path": "other/model"}}},
        "sentence_bert_config.json", "tokenizes with the folder's own tokenizer.json"),
    "truncate_dim": (
        {"files": {"config_sentence_transformers.json": {"truncate_dim": 2}}},
        "config_sentence_transformers.json", "sets truncate_dim to 2; encode keeps only"),
    "another model type": (
        {"files": {"config_sentence_transformers.json": {"model_type": "SparseEncoder"}}},
        "config_sentence_transformers.json", 'sets model_type to "SparseEncoder"'),
    "a default prompt it does not hold": (
        {"files": {"config_sentence_transformers.json": {
            "prompts": {"query": "a "}, "default_prompt_name": "passage"}}},
        "config_sentence_transformers.json",
        "sets default_prompt_name to 'passage', which its prompts do not hold"),
    "a model key unknown": (
        {"files": {"config_sentence_transformers.json": {"pooling": "max"}}},
        "config_sentence_transformers.json", "unknown key 'pooling'"),
    "Normalize of another vector": (
        {"files": {"2_Normalize/config.json": {"module_input_name": "token_embeddings"}}},
        "2_Normalize/config.json", 'sets module_input_name to "token_embeddings"'),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_setting_the_sheet_does_not_compute_is_one_line(tmp_path, case):
    """Each refusal is the CLI's one line naming the file and the key, exit 2."""
    edit, file, says = REFUSALS[case]
    folder = head_folder(tmp_path / "st", edit.get("modules", HEAD),
                         edit.get("pooling", MEAN), edit.get("files"))
    if "types" in edit or "entry" in edit:
        modules = json.loads((folder / "modules.json").read_text())
        for number, kind in edit.get("types", {}).items():
            modules[number]["type"] = kind
        modules[0].update(edit.get("entry", {}))
        (folder / "modules.json").write_text(json.dumps(modules))
    line = build_refused(folder, tmp_path)
    assert str(folder / file) in line and says in line, line


def test_a_second_text_without_a_pooled_head_names_it(tmp_path):
    """A plain model folder (no modules.json) has no embedding to compare: the line names
    the flag typed and the missing Pooling module, not --normalize."""
    folder = model_folder(tmp_path / "plain", bert_weights(), BERT_CONFIG)
    why = f"needs a pooled embedding to compare, and {folder} has no sentence-transformers " \
          f"Pooling module (no modules.json): its answer is the last hidden state"
    line = build_refused(folder, tmp_path, *IDS, "--token-ids2", "2,5")
    assert line.startswith("--token-ids2 " + why), line
    line = build_refused(folder, tmp_path, *IDS, "--text2", "the cat")
    assert line.startswith("--text2 " + why) and "--normalize" not in line, line


def test_a_similarity_other_than_the_cosine_refuses_a_second_text_only(tmp_path):
    """SIMILARITY is the cosine: euclidean refuses a second text, one text builds; dot with
    Normalize is the cosine of unit vectors."""
    model = {"similarity_fn_name": "euclidean"}
    folder = head_folder(tmp_path / "st", files={"config_sentence_transformers.json": model})
    line = build_refused(folder, tmp_path, *IDS, "--token-ids2", "2,5")
    assert "--token-ids2: " in line and "sets similarity_fn_name to 'euclidean'; the " \
                                        "sheet's SIMILARITY is the cosine" in line, line
    assert api.checkpoint_inputs("encoder", {}, folder, token_ids=[2, 4, 5]).params[
        "pooling"] == "mean"
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"similarity_fn_name": "dot"}))
    both = api.checkpoint_inputs("encoder", {}, folder, token_ids=[2, 4], token_ids2=[2, 5])
    assert both.params["seq_len2"] == 2


HARMLESS_FILES = {
    "sentence_bert_config.json": {
        "max_seq_length": 8, "do_lower_case": False, "transformer_task": "feature-extraction",
        "modality_config": settings.TEXT_MODALITY, "module_output_name": "token_embeddings",
        "unpad_inputs": None, "query_length": 4, "document_length": 6, "backend": "onnx",
        "model_args": {"trust_remote_code": True}, "config_kwargs": {},
        "processor_kwargs": {"revision": "main"}, "query_expansion": None,
        "tokenizer_name_or_path": None, "processing_kwargs": {}},
    "config_sentence_transformers.json": {
        "__version__": {"sentence_transformers": "6.2.0"}, "model_type": "SentenceTransformer",
        "prompts": {"query": "", "document": ""}, "default_prompt_name": None,
        "similarity_fn_name": "cosine", "truncate_dim": None,
        "requirements": ["sentence-transformers>=2"]},
    "2_Normalize/config.json": {"module_input_name": "sentence_embedding",
                                "module_output_name": None, "dropped_by_the_library": 1},
}


def test_harmless_settings_build(tmp_path):
    """Every harmless key at a harmless value, the old pooling switches, and a list of one
    pooling mode (read as that mode, as sentence-transformers 6 reads it) are not refused."""
    old = {"word_embedding_dimension": 4, "pooling_mode_cls_token": True,
           "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False}
    folder = head_folder(tmp_path / "st", pooling=old, files=HARMLESS_FILES)
    modules = json.loads((folder / "modules.json").read_text())
    modules[1]["kwargs"] = ["task"]
    (folder / "modules.json").write_text(json.dumps(modules))
    model = api.checkpoint_inputs("encoder", {}, folder, token_ids=[2, 4, 5])
    assert (model.params["pooling"], model.params["normalize"]) == ("cls", True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {**MEAN, "pooling_mode": ["max"]}))
    assert api.checkpoint_inputs("encoder", {}, folder, token_ids=[2, 4, 5]).params[
        "pooling"] == "max"


def test_a_hugging_face_cache_snapshot_is_inside(tmp_path):
    """A cache snapshot keeps its files as links into the repository's blobs folder: they
    are read, not refused as leading out."""
    repo = tmp_path / "models--org--st"
    snapshot = head_folder(repo / "snapshots" / "0123abc", files={
        "sentence_bert_config.json": {"max_seq_length": 2}})
    (repo / "blobs").mkdir()
    for k, file in enumerate(sorted(p for p in snapshot.rglob("*") if p.is_file())):
        blob = repo / "blobs" / f"blob{k}"
        file.rename(blob)
        file.symlink_to(os.path.relpath(blob, file.parent))
    assert "the model's max_seq_length is 2" in build_refused(snapshot, tmp_path)


# -- paths the folder names stay inside it ----------------------------------------------------
def refused(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return said(lines[0])


def outside(tmp_path: Path, config: str) -> Path:
    """A folder beside the model's whose config.json is a valid max pooling (it would
    change the answer), a fifo (opening it would wait for ever) or missing."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if config == "max pooling":
        (elsewhere / "config.json").write_text(json.dumps({**MEAN, "pooling_mode": "max"}))
    elif config == "fifo":
        os.mkfifo(elsewhere / "config.json")
    return elsewhere


def with_module_path(folder: Path, number: int, path: str) -> None:
    modules = json.loads((folder / "modules.json").read_text())
    modules[number]["path"] = path
    (folder / "modules.json").write_text(json.dumps(modules))


@requires_prlimit
@pytest.mark.parametrize("config", ["max pooling", "fifo", "missing"])
@pytest.mark.parametrize("spelling", ["parent", "windows parent", "absolute", "link"])
def test_a_module_path_out_of_the_folder_is_refused(tmp_path, spelling, config):
    """`../../elsewhere`, `..\\..\\elsewhere`, an absolute path, or 1_Pooling a link to the
    folder beside: refused naming modules.json and the path, whatever lies outside (a
    pooling that would be used, a fifo, nothing): it is never opened."""
    elsewhere = outside(tmp_path, config)
    folder = head_folder(tmp_path / "models" / "st", pooling=None)
    path = {"parent": "../../elsewhere", "windows parent": "..\\..\\elsewhere",
            "absolute": str(elsewhere), "link": "1_Pooling"}[spelling]
    if spelling == "link":
        (folder / "1_Pooling").symlink_to(elsewhere, target_is_directory=True)
    with_module_path(folder, 1, path)
    line = refused(capped("build", "encoder", "--checkpoint", folder, *IDS, "-o",
                          tmp_path / "out.xlsx"))
    start = f"{folder / 'modules.json'}: module 1's path {path!r} "
    if spelling == "link":
        assert line.startswith(start + f"is a link to {elsewhere}, outside the model "
                                       f"folder"), line
    else:
        assert line.startswith(start + "leads out of the model folder"), line
    assert not (tmp_path / "out.xlsx").exists()


@requires_prlimit
@pytest.mark.parametrize("linked", ["1_Pooling/config.json", "modules.json",
                                    "sentence_bert_config.json"])
def test_a_file_linked_out_of_the_folder_is_refused(tmp_path, linked):
    """A file of the folder that is a link to a fifo outside: refused naming it."""
    elsewhere = outside(tmp_path, "fifo")
    folder = head_folder(tmp_path / "models" / "st")
    (folder / linked).unlink(missing_ok=True)
    (folder / linked).symlink_to(elsewhere / "config.json")
    line = refused(capped("build", "encoder", "--checkpoint", folder, *IDS, "-o",
                          tmp_path / "out.xlsx"))
    assert line.startswith(f"{folder / linked} is a link to {elsewhere / 'config.json'}, "
                           f"outside the model folder"), line


@requires_prlimit
def test_a_zip_s_module_path_out_of_its_folder_is_refused(tmp_path):
    """In a zip the model folder is where its weights lie: `../` leads out of it."""
    folder = head_folder(tmp_path / "st")
    with_module_path(folder, 1, "../other")
    archive = tmp_path / "st.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for file in folder.rglob("*"):
            zipped.write(file, "st/" + file.relative_to(folder).as_posix())
        zipped.writestr("other/config.json", json.dumps({**MEAN, "pooling_mode": "max"}))
    line = refused(capped("build", "encoder", "--checkpoint", archive, *IDS, "-o",
                          tmp_path / "out.xlsx"))
    assert line.startswith(f"{archive}!st/modules.json: module 1's path '../other' leads "
                           f"out of the model folder"), line


# -- against sentence-transformers itself -----------------------------------------------------
@pytest.fixture(scope="module")
def st_bert(tmp_path_factory) -> Path:
    """A random BERT sentence-transformers folder (mean pooling, Normalize), made once."""
    from helpers.models import save_sentence_encoder

    return once_per_run(tmp_path_factory, "st-settings-bert",
                        lambda folder: save_sentence_encoder(folder, "bert", "mean")) / \
        "sentence"


def copied(st_bert: Path, folder: Path, **files) -> Path:
    """A copy of the folder with JSON files merged into (name → keys)."""
    shutil.copytree(st_bert, folder)
    for name, keys in files.items():
        path = folder / name
        old = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**old, **keys}, ensure_ascii=False))
    return folder


def encoded(folder: Path, texts: list[str], **tokenize):
    """SentenceTransformer(folder) in float64: each text's ids and encode(texts)."""
    import warnings

    from sentence_transformers import SentenceTransformer

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    model = SentenceTransformer(str(folder), device="cpu").double()
    ids = [model.tokenize([text], **tokenize)["input_ids"][0].tolist() for text in texts]
    return model, ids, np.asarray(model.encode(texts, convert_to_numpy=True), float)


def sheet_embeddings(folder: Path, tmp_path: Path, texts: list[str]) -> dict:
    """The workbook built from the folder, its blocks as the formulas engine computes them."""
    path = tmp_path / "encoder.xlsx"
    api.build("encoder", path, checkpoint=folder, text=texts[0],
              text2=texts[1] if len(texts) > 1 else None, layout="blocks")
    names = ["TOKEN_IDS", "EMBEDDING"] + (["TOKEN_IDS_2", "EMBEDDING_2", "SIMILARITY"]
                                          if len(texts) > 1 else [])
    return evaluated_blocks(path, evaluate_with_formulas(path), names)


def relative(got, exp) -> float:
    return float(np.abs(np.asarray(got) - exp).max() / max(1.0, np.abs(exp).max()))


@pytest.mark.models
def test_do_lower_case_is_encodes(st_bert, tmp_path):
    """do_lower_case over a cased tokenizer: Lowercase goes first, as sentence-transformers
    puts it, character by character ("ΟΔΟΣ" → "οδοσ", where Python's str.lower gives
    "οδος"): the ids equal tokenize, EMBEDDING equals encode to 1e-12."""
    folder = copied(st_bert, tmp_path / "st", **{
        "sentence_bert_config.json": {"do_lower_case": True}})
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["normalizer"] = {"type": "BertNormalizer", "clean_text": True,
                               "handle_chinese_chars": True, "strip_accents": False,
                               "lowercase": False}
    vocab = tokenizer["model"]["vocab"]
    sigma, final_sigma = vocab.pop("quickly"), vocab.pop("park")
    vocab.update({"οδοσ": sigma, "οδος": final_sigma})
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    text = "The CAT sat on the ΟΔΟΣ."
    _, ids, embeddings = encoded(folder, [text])
    assert sigma in ids[0] and final_sigma not in ids[0] and 1 not in ids[0]  # 1: [UNK]
    got = sheet_embeddings(folder, tmp_path, [text])
    assert got["TOKEN_IDS"][:, 0].tolist() == ids[0]
    error = relative(got["EMBEDDING"][0], embeddings[0])
    print(f"do_lower_case: EMBEDDING against encode, largest relative difference {error:.1e}")
    assert error < 1e-12


@pytest.mark.models
def test_a_default_prompt_is_put_before_each_text(st_bert, tmp_path):
    """config_sentence_transformers.json's default prompt: both texts' ids equal tokenize
    with the prompt, EMBEDDING(_2) equal encode and SIMILARITY their cosine, to 1e-12."""
    prompt = "a dog in the park: "
    folder = copied(st_bert, tmp_path / "st", **{"config_sentence_transformers.json": {
        "prompts": {"query": prompt, "document": ""}, "default_prompt_name": "query"}})
    texts = ["The cat sat on the mat.", "A dog ran quickly."]
    model, ids, embeddings = encoded(folder, texts, prompt=prompt)
    assert model.default_prompt_name == "query"
    assert ids[0] == model.tokenize([prompt + texts[0]])["input_ids"][0].tolist()
    got = sheet_embeddings(folder, tmp_path, texts)
    errors = {}
    for k, sfx in enumerate(("", "_2")):
        assert got["TOKEN_IDS" + sfx][:, 0].tolist() == ids[k]
        errors["EMBEDDING" + sfx] = relative(got["EMBEDDING" + sfx][0], embeddings[k])
    a, b = embeddings
    errors["SIMILARITY"] = relative(got["SIMILARITY"][0, 0],
                                    a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    print(f"default prompt: largest relative difference {max(errors.values()):.1e}")
    assert max(errors.values()) < 1e-12, errors


@pytest.mark.models
def test_a_text_too_long_with_its_prompt_is_one_line(st_bert, tmp_path):
    """The prompt's tokens count against max_seq_length, and the line says so."""
    folder = copied(st_bert, tmp_path / "st", **{
        "config_sentence_transformers.json": {"prompts": {"query": "a dog: "},
                                              "default_prompt_name": "query"},
        "sentence_bert_config.json": {"max_seq_length": 6}})
    _, ids, _ = encoded(folder, ["the cat"], prompt="a dog: ")
    assert ids[0] == [2, 6, 8, 1, 5, 3]  # [CLS] a dog [UNK] the [SEP]: "cat" cut off
    line = build_refused(folder, tmp_path, "--text", "the cat")
    assert line.startswith("--text gives 7 tokens (with the default prompt 'query' "
                           "('a dog: ') of ") and line.endswith(
        "; the model's max_seq_length is 6 (sentence-transformers would cut it)"), line


@pytest.mark.models
def test_a_list_of_one_pooling_mode_is_what_sentence_transformers_reads(st_bert, tmp_path):
    folder = copied(st_bert, tmp_path / "st", **{"1_Pooling/config.json": {
        "pooling_mode": ["cls"]}})
    model, _, _ = encoded(folder, ["the cat"])
    assert model[1].pooling_mode == "cls"
    assert api.checkpoint_inputs("encoder", {}, folder, text="the cat").params[
        "pooling"] == "cls"


@pytest.mark.models
def test_the_tables_hold_every_key_sentence_transformers_reads(st_bert):
    """The key tables against the installed library's own lists: Pooling's config keys,
    renames, old switches and modes; Transformer's arguments and the old names its loader
    renames; Normalize's keys; what a saved model's config_sentence_transformers.json
    holds; the similarity functions."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    from sentence_transformers.sentence_transformer.modules import pooling

    assert {*Pooling.config_keys, *Pooling.config_key_renames,
            *pooling._LEGACY_POOLING_MODE_KWARGS} == set(settings.POOLING_KEYS)
    assert set(Pooling.POOLING_MODES) == {*settings.POOLING_MODES, *settings.OTHER_MODES}
    assert set(pooling._LEGACY_POOLING_MODE_KWARGS.items()) == set(
        settings.POOLING_SWITCHES.items())
    arguments = set(inspect.signature(Transformer.__init__).parameters) - {
        "self", "model_name_or_path"}
    assert {*arguments, "model_args", "tokenizer_args", "config_args"} == set(
        settings.TRANSFORMER_KEYS)
    assert set(Normalize.config_keys) == set(settings.NORMALIZE_KEYS)
    saved = json.loads((st_bert / "config_sentence_transformers.json").read_text())
    assert set(saved) | {"truncate_dim", "requirements"} == set(settings.MODEL_KEYS)
    assert set(SentenceTransformer.SUPPORTED_SIMILARITY_FN_NAMES) == set(
        settings.SIMILARITY_FUNCTIONS)
    saved_modules = json.loads((st_bert / "modules.json").read_text())
    assert {key for module in saved_modules for key in module} | {"kwargs"} == set(
        settings.MODULE_ENTRY_KEYS)
