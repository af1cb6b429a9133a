"""What a hostile user tries, refused as the user meets it: the command line in a process of
its own, its address space capped at 1 GB (`prlimit --as`) and its time at 60 s, exits 2
with one line on stderr and no traceback, and leaves no file behind nor replaces one. An
.npz whose arrays unpack to gigabytes or whose headers lie, config.json values of the wrong
type or beyond reason in every family, a step count no sheet holds, a class folder whose
manifest points outside it, and a size flag given by hand against a checkpoint's config."""

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers.books import whole_number_flags
from helpers.cli import (
    ADDRESS_SPACE,
    PRLIMIT,
    TIMEOUT_S,
    capped,
    refused,
    requires_prlimit,
    says_contradiction,
)
from helpers.numpy_models import (
    BERT_CONFIG,
    D_FF,
    HEADS,
    LLAMA_CONFIG,
    MAMBA_RANK,
    POSITIONS,
    VOCAB,
    D,
    bert_weights,
    distilbert_weights,
    gpt2_weights,
    mamba_weights,
    model_folder,
    qwen2_weights,
    unbiased_llama_weights,
)
from helpers.requires import requires_libreoffice

from workbook_builder.models.config_values import CONFIG_TYPES
from workbook_builder.models.families import DISTILBERT, FAMILIES, Family

pytestmark = requires_prlimit


def files_in(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused_build(tmp_path: Path, kind: str, *args) -> str:
    """`build KIND ARGS -o out.xlsx` refused, nothing written or changed under tmp_path."""
    before = files_in(tmp_path)
    line = refused(capped("build", kind, *args, "-o", tmp_path / "out.xlsx"))
    assert files_in(tmp_path) == before
    return line


# -- .npz: bounded before anything is unpacked ----------------------------------------------

def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


def bomb(path: Path) -> Path:
    """A few MB of .npz whose one array, zeros, unpacks to 1.2 GB (written in chunks: the
    test never holds it)."""
    shape = (12_000, 12_500)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open(DISTILBERT.anchor + ".npy", "w", force_zip64=True) as member:
            member.write(npy_header(shape))
            chunk, left = bytes(2**24), shape[0] * shape[1] * 8
            while left:
                part = chunk[:min(left, len(chunk))]
                member.write(part)
                left -= len(part)
    return path


def lying_header(path: Path) -> Path:
    """An .npy header claiming 20,000×15,000 float64 (2.4 GB) over 64 bytes."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(DISTILBERT.anchor + ".npy", npy_header((20_000, 15_000)) + bytes(64))
    return path


def not_an_array(path: Path) -> Path:
    """np.savez's arrays and one member that is not a .npy (np.load gives it as bytes)."""
    np.savez(path, **{DISTILBERT.anchor: np.zeros((D, D))})
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("notes.txt", b"not an array")
    return path


@pytest.mark.parametrize("make,says", [
    (bomb, "its arrays unpack to 1,144 MB from"),
    (lying_header, "needs 2,400,000,000 bytes, the member holds 64"),
    (not_an_array, "notes.txt: not a NumPy array (.npy)"),
], ids=["unpacks-to-1.2GB", "header-lies", "not-an-array"])
def test_an_npz_is_bounded_before_it_is_unpacked(tmp_path, make, says):
    path = make(tmp_path / "weights.npz")
    line = refused_build(tmp_path, "encoder-block", "--checkpoint", path, "--heads", HEADS)
    assert says in line, line


# -- config.json: every value a family reads, of every wrong type ----------------------------

# family -> (kind, its tiny weights, a config.json transformers would write, the keys it
# reads besides those its table names, the flags of a build)
FAMILY_CASES = {
    "BERT": ("encoder-block", bert_weights, BERT_CONFIG, (), ()),
    "RoBERTa": ("encoder-block", bert_weights,
                {**BERT_CONFIG, "model_type": "roberta", "pad_token_id": 1},
                ("pad_token_id",), ("--token-ids", "3,4")),
    "DistilBERT": ("encoder-block", distilbert_weights,
                   {"model_type": "distilbert", "dim": D, "n_heads": HEADS, "hidden_dim": D_FF,
                    "n_layers": 1, "activation": "gelu", "sinusoidal_pos_embds": False},
                   (), ()),
    "LLaMA": ("llama-block", unbiased_llama_weights, {**LLAMA_CONFIG, "rope_theta": 100.0},
              ("rope_parameters", "rope_scaling", "head_dim", "attention_bias", "mlp_bias"),
              ()),
    "Qwen2": ("llama-block", qwen2_weights,
              {**LLAMA_CONFIG, "model_type": "qwen2", "use_sliding_window": False,
               "layer_types": ["full_attention"]},
              ("rope_parameters", "rope_scaling", "head_dim", "layer_types"), ()),
    "GPT-2": ("decoder-block", gpt2_weights,
              {"model_type": "gpt2", "n_embd": D, "n_head": HEADS, "n_inner": D_FF,
               "n_layer": 1, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
               "vocab_size": VOCAB, "n_positions": POSITIONS}, (), ()),
    "Mamba": ("mamba-block", mamba_weights,
              {"model_type": "mamba", "hidden_size": D, "num_hidden_layers": 1,
               "layer_norm_epsilon": 1e-5, "use_conv_bias": True, "use_bias": False,
               "hidden_act": "silu", "time_step_rank": MAMBA_RANK},
              ("use_conv_bias", "time_step_rank"), ()),
}

# each type's wrong values: of other types, and of its type beyond reason (JSON's 1e300 is a
# float; 10**300 a whole number as long as JSON writes it)
WRONG = {"size": ["8", "abc", [2], {"a": 1}, True, 1e300, 10**300, 2.5, 0, -3],
         "number": ["8", [2], {"a": 1}, True, float("inf"), -3],  # inf: JSON's Infinity
         "text": [5, [2], ["gelu"], {"a": 1}, True, "8"],
         "flag": ["8", 5, [2], {"a": 1}],
         "object": ["8", 5, [2], True],
         "texts": [5, "full_attention", [2], {"a": 1}, True],
         "index": ["8", [2], True, 2.5, -3, 1e300]}
# keys of no type CONFIG_TYPES names: a row of a table, and Mamba's rank ("auto" or a size)
OWN_TYPES = {"pad_token_id": "index", "time_step_rank": "index"}


def family_keys(family: Family, extra: tuple[str, ...]) -> list[str]:
    """The config.json keys the family's loader reads."""
    keys = [*family.config, family.layers_key, *family.fixed, *extra, "model_type"]
    if family.activation_key:
        keys.append(family.activation_key)
    return list(dict.fromkeys(keys))


def type_of(key: str) -> str:
    kind = OWN_TYPES.get(key) or CONFIG_TYPES.get(key)
    assert kind is not None, f"config.json key {key} has no type in CONFIG_TYPES"
    return {"epsilon": "number", "base": "number"}.get(kind, kind)


_EVERY_CONFIG = """
import contextlib, io, json, sys
from pathlib import Path
from workbook_builder.cli.app import main
out, results = Path(sys.argv[1]), []
for folder, kind, flags, config in json.loads(Path(sys.argv[2]).read_text()):
    (Path(folder) / "config.json").write_text(config)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["build", kind, "--checkpoint", folder, *flags, "-o", str(out)])
    results.append([folder, config, code, err.getvalue().strip(), out.exists()])
    out.unlink(missing_ok=True)
print(json.dumps(results))
"""


def test_every_config_value_a_family_reads_of_a_wrong_type_names_its_key(tmp_path):
    """Each family's config.json as transformers writes it builds; each key the family reads
    set to each wrong value of its type is one line naming the key, nothing written. One
    capped process runs them all in turn."""
    cases, wrong = [], []
    for name, (kind, weights, config, extra, flags) in FAMILY_CASES.items():
        folder = model_folder(tmp_path / name, weights(), None)
        family = next(f for f in FAMILIES if f.name == name)
        cases.append([str(folder), kind, flags, json.dumps(config)])
        for key in family_keys(family, extra):
            for value in WRONG[type_of(key)]:
                wrong.append((name, key, value))
                cases.append([str(folder), kind, flags, json.dumps({**config, key: value})])
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    done = subprocess.run([PRLIMIT, f"--as={ADDRESS_SPACE}", sys.executable, "-c",
                           _EVERY_CONFIG, tmp_path / "out.xlsx", tmp_path / "cases.json"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    built = [r for r in results if r[2] == 0]
    assert [json.loads(r[1]) for r in built] == [c[2] for c in FAMILY_CASES.values()], \
        [r for r in built if json.loads(r[1]) not in [c[2] for c in FAMILY_CASES.values()]]
    refusals = [r for r in results if r[2] != 0]
    assert len(refusals) == len(wrong)
    bad = [(name, key, value, code, line) for (name, key, value), (_, _, code, line, left)
           in zip(wrong, refusals, strict=True)
           if code != 2 or len(line.splitlines()) != 1 or key not in line or left]
    assert not bad, bad


@pytest.mark.parametrize("family,key,value,says", [
    ("DistilBERT", "dim", "8", "dim must be a whole number, 1 or more, not '8'"),
    ("DistilBERT", "n_layers", "abc", "n_layers must be a whole number, 1 or more, not 'abc'"),
    ("DistilBERT", "n_layers", [2], "n_layers must be a whole number, 1 or more, not [2]"),
    ("DistilBERT", "n_layers", 1e300, "n_layers must be a whole number, 1 or more, not 1e+300"),
    ("DistilBERT", "activation", ["gelu"], "activation must be a text, not ['gelu']"),
    ("Qwen2", "layer_types", 5, "layer_types must be a list of texts, not 5"),
    ("RoBERTa", "pad_token_id", -3, "sets pad_token_id to -3"),
], ids=["dim-text", "layers-text", "layers-list", "layers-1e300", "activation-list",
        "layer-types-number", "pad-negative"])
def test_a_config_value_a_user_tried_is_one_line_naming_it(tmp_path, family, key, value, says):
    kind, weights, config, _, flags = FAMILY_CASES[family]
    folder = model_folder(tmp_path / "m", weights(), {**config, key: value})
    line = refused_build(tmp_path, kind, "--checkpoint", folder, *flags)
    assert says in line, line


# -- sizes: a count of repeats refused from the plan, naming its flag -------------------------

def test_a_trillion_training_steps_is_one_line_naming_steps(tmp_path):
    line = refused_build(tmp_path, "train", "--steps", 10**12)
    assert "lower --steps" in line and "--d-k" not in line, line


def test_a_trillion_training_steps_through_the_api_names_steps():
    from workbook_builder import api

    with pytest.raises(api.AttnsheetsError, match="lower --steps"):
        api.build("train", steps=10**12)




_EVERY_FLAG = """
import contextlib, io, json, sys
from workbook_builder.cli.app import main
out, results = sys.argv[1], []
for kind, flag in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["build", kind, flag, str(10**12), "-o", out, "--force"])
    results.append([kind, flag, code, err.getvalue().strip()])
print(json.dumps(results))
"""


def test_a_trillion_of_any_size_that_sets_cells_is_one_line_naming_its_flag(tmp_path):
    """Every whole-number flag of every kind at 10^12: refused in one line naming that
    flag, or built (a size that sets no cell, as a position's base); one capped process
    runs them all within the 60 s one case may take."""
    done = subprocess.run([PRLIMIT, f"--as={ADDRESS_SPACE}", sys.executable, "-c",
                           _EVERY_FLAG, tmp_path / "sized.xlsx",
                           json.dumps(whole_number_flags())],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    bad = [r for r in results if r[2] not in (0, 2) or
           r[2] == 2 and (len(r[3].splitlines()) != 1 or r[1] not in r[3])]
    assert not bad, bad


# -- pdf: a class folder prints its own exercises, each by its own name ------------------------

def test_a_class_manifest_listing_a_file_outside_the_folder_is_refused(tmp_path):
    (tmp_path / "class").mkdir()
    (tmp_path / "other").mkdir()
    for book in (tmp_path / "class" / "a.xlsx", tmp_path / "other" / "secret.xlsx"):
        assert capped("build", "attention", "-o", book).returncode == 0
    (tmp_path / "class" / "manifest.csv").write_text("file\na.xlsx\n../other/secret.xlsx\n")
    before = files_in(tmp_path)
    line = refused(capped("pdf", tmp_path / "class"))
    assert "lists '../other/secret.xlsx', which is not a file inside the class folder" in line
    assert files_in(tmp_path) == before  # no secret.pdf beside the secret


@requires_libreoffice
def test_a_workbook_whose_name_is_not_utf8_prints_with_the_rest_of_its_folder(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    assert capped("build", "attention", "-o", folder / "a.xlsx").returncode == 0
    odd = folder / os.fsdecode(b"\xff.xlsx")  # a Latin-1 name on a UTF-8 system
    shutil.copy(folder / "a.xlsx", odd)
    done = capped("pdf", folder)
    assert done.returncode == 0, done.stderr
    assert (folder / "a.pdf").is_file() and odd.with_suffix(".pdf").is_file()


# -- a flag given by hand against the checkpoint ----------------------------------------------

@pytest.mark.parametrize("family,flags,says", [
    ("BERT", ("--heads", "1"), "--heads 1 contradicts config.json: num_attention_heads"),
    ("BERT", ("--pre-ln",), "--pre-ln True contradicts the checkpoint"),
    ("BERT", ("--ln-eps", "1e-5"), "--ln-eps 1e-05 contradicts config.json: layer_norm_eps"),
    ("BERT", ("--gelu", "tanh"), "--gelu tanh contradicts config.json: hidden_act"),
    ("DistilBERT", ("--ln-eps", "1e-5"), "--ln-eps 1e-05 contradicts the checkpoint"),
    ("LLaMA", ("--rope-theta", "5"), "--rope-theta 5.0 contradicts config.json: rope_theta"),
    ("GPT-2", ("--layer-number", "3"), "--layer-number 3 contradicts the checkpoint (--layer 0"),
    ("GPT-2", ("--gelu", "exact"), "--gelu exact contradicts the checkpoint"),
    ("Mamba", ("--ln-eps", "1e-3"), "--ln-eps 0.001 contradicts config.json: "
                                    "layer_norm_epsilon"),
], ids=["heads", "pre-ln", "ln-eps", "gelu", "distilbert-eps", "rope-theta", "layer-number",
        "gpt2-gelu", "mamba-eps"])
def test_a_flag_that_contradicts_the_checkpoint_is_one_line(tmp_path, family, flags, says):
    kind, weights, config, _, family_flags = FAMILY_CASES[family]
    folder = model_folder(tmp_path / "m", weights(), config)
    line = refused_build(tmp_path, kind, "--checkpoint", folder, *family_flags, *flags)
    assert says_contradiction(says, line) and "leave" in line, line


def test_a_flag_that_agrees_with_the_checkpoint_builds(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG)
    done = capped("build", "encoder-block", "--checkpoint", folder, "--heads", HEADS,
                  "--ln-eps", BERT_CONFIG["layer_norm_eps"], "-o", tmp_path / "x.xlsx")
    assert done.returncode == 0, done.stderr
